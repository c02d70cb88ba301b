//! Background workers inside the binary.

pub mod maintenance;
pub mod sim_chain;
