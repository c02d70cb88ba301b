//! Background workers inside the binary.

pub mod evm;
pub mod maintenance;
pub mod sim_chain;
