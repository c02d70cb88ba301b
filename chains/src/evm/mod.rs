//! The EVM adapter: JSON-RPC over HTTP with alloy.
//!
//! * [`client`]: [`client::EvmClient`], the chain seam over one node.
//! * [`rpc`]: the node client (blocks, logs, balances, fees, receipts, raw broadcast), every
//!   call bounded by a timeout; several nodes per chain with failover ([`nodes`]: the rules).
//! * [`watcher`]: turns a block range into the transfers that reach watched addresses
//!   (native coin from the block's transactions, tokens from one `eth_getLogs` per range
//!   matched against a set), and keeps the recent block hashes that detect a reorg.
//! * [`sender`]: EIP-1559 transaction building, nonce choice and fee bumping rules.
//! * [`sweeper`]: calldata of the forwarder factory (deploy-and-flush in one transaction).
//! * [`dex`]: quotes, swaps and approvals on a Uniswap V2 or V3 DEX (conversions).
//! * [`factory`]: whether the forwarder factory is deployed and the transaction deploying it.
//!
//! Storage and the ledger stay in the binary (`src/workers/chain/`); this module knows the
//! chain only.

pub mod client;
pub mod dex;
pub mod factory;
pub mod nodes;
pub mod rpc;
pub mod sender;
pub mod sweeper;
pub mod watcher;

pub use alloy::primitives::{Address, Bytes, B256, U256, U512};
