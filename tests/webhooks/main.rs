//! Black-box tests of webhooks and the event stream: the real `appliance --test`
//! binary, a real HTTP receiver started by each test (`webhooks.allow_private_targets = true`,
//! since it listens on 127.0.0.1), and real clients: our own signature check, Stripe's Python
//! library, an SSE reader.

mod helpers;

mod delivery;
mod endpoints;
mod guard;
mod hostile;
mod ordered;
mod replay;
mod restart;
mod retries;
mod secrets;
mod stream;
