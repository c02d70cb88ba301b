//! Operations tests: logs, /healthz, /readyz, /metrics, reverse
//! proxies, the systemd unit's sandbox and the Debian package. Each drives the real binary.

#[path = "../api/helpers.rs"]
mod helpers;

mod common;
mod deb;
mod logs;
mod metrics;
mod proxy;
mod readiness;
mod systemd;
