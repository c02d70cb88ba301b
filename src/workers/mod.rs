//! Background workers inside the binary.

pub mod chain;
pub mod invoices;
pub mod maintenance;
pub mod sim_chain;
