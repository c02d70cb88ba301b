//! Black-box integration tests: each test starts the real `appliance --test` binary on an
//! ephemeral port with a temporary data dir and talks to it over HTTP like a merchant's
//! client (and over the operator CLI like an operator).

mod helpers;

mod api_keys;
mod auth;
mod backup;
mod balances;
mod billing;
mod chains;
mod checkout;
mod cli;
mod coins;
mod connections;
mod conventions;
mod conversions;
mod customers;
mod deposits;
mod events;
mod file_modes;
mod fuzz;
mod http_errors;
mod idempotency;
mod invoices;
mod key_escalation;
mod market;
mod metadata;
mod openapi;
mod payouts;
mod refund_claims;
mod restart;
mod security_two;
mod selfhost;
mod sim_chain;
mod sweeps;
mod wallets;
