//! The appliance: a self-hosted, multi-tenant custodial wallet and payments service.
//!
//! `main.rs` only parses the command line ([`cli`]); everything else lives here:
//! configuration ([`config`]), the HTTP API ([`api`]), business rules ([`services`]),
//! background workers ([`workers`]), the operator socket ([`operator`]) and the server
//! wiring ([`server`]). Storage, chains and signing are crates of their own.

/// `println!` that never panics: output to a closed stdout (`appliance project list |
/// head -0`, a server whose log pipe went away) is dropped quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod data_dir;
pub mod handles;
pub mod ids;
pub mod market;
pub mod operator;
pub mod ops;
pub mod registry;
pub mod sealing;
pub mod server;
pub mod services;
pub mod simulate;
pub mod slots;
pub mod state;
pub mod transport;
pub mod views;
pub mod webhooks;
pub mod workers;
