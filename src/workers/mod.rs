//! Background workers inside the binary.

pub mod billing;
pub mod chain;
pub mod invoices;
pub mod maintenance;
pub mod sim_chain;
