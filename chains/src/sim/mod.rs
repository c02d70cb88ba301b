//! The simulated EVM chain of test mode (DECISIONS.md section 15): a real
//! chain in miniature, one per (test project, chain).
//!
//! * [`chain`]: [`chain::SimChain`], the state machine: blocks (number, hash, parent hash,
//!   timestamp), a mempool, accounts (nonce, native balance), registry tokens, the pinned
//!   forwarder contracts, receipts, and scripted faults (reorg, dropped transaction).
//! * [`client`]: [`client::SimClient`], the [`crate::client::ChainClient`] over a shared
//!   [`chain::SimChain`], the same seam the live EVM adapter implements.
//!
//! What the chain runs: signed EIP-1559 transactions (decoded and sender-recovered with
//! alloy, checked for chain id, nonce, fee and balance at broadcast and again when mined)
//! of these shapes only: a native transfer (any value, any recipient, also the zero-value
//! self-transfer that fills a nonce gap), an ERC-20 `transfer(to, amount)` to a registry
//! token, the forwarder factory's deployment through the deterministic deployment proxy,
//! and the factory's `sweep(salt, tokens)` (deploys the forwarder if needed and moves its
//! whole balance of each listed token, `address(0)` for the native coin, to the factory's
//! treasury). Anything else reverts (gas is still charged, the nonce still used), as on a
//! chain whose contracts do not have the called function. One scripted fault is built
//! in: a transfer to an address ending in `fa11` reverts ([`chain::rejects_transfers`]).
//! External transfers into the
//! chain (test deposits, test transfers) are injected as unsigned transactions of a
//! synthetic sender ([`chain::Inject`]).
//!
//! Transactions broadcast are mined in a LATER block than the head at broadcast: they wait
//! in the mempool until the next block is produced ([`chain::SimChain::mine`]).
//!
//! Durability is the caller's: every change that must survive a restart is an
//! [`chain::Op`] (serde JSON), and [`chain::SimChain::apply`] replays them in order to the
//! same state, hashes and timestamps included. The mempool is not durable (a node restart
//! loses it too; the sender rebroadcasts). Empty blocks cost no write each: consecutive
//! empty blocks coalesce into one [`chain::Op::Empty`].

pub mod chain;
pub mod client;

#[cfg(test)]
mod tests;

pub use chain::{Genesis, Inject, Op, SimChain, SimError, Snapshot};
pub use client::SimClient;

/// Base fee of every simulated block, wei per gas (1 gwei).
pub const BASE_FEE: u128 = 1_000_000_000;

/// Priority fee the simulated chain suggests, wei per gas (0.1 gwei).
pub const PRIORITY_FEE: u128 = 100_000_000;

/// Native coin the genesis block gives the treasury for gas: 1,000 coins of 18 decimals.
pub const GENESIS_TREASURY_NATIVE: u128 = 1_000_000_000_000_000_000_000;

/// Each registry token the genesis block gives the treasury (10^30 atomic units): test
/// payouts are limited by the ledger, not by whether a sweep has landed yet.
pub const GENESIS_TREASURY_TOKENS: u128 = 1_000_000_000_000_000_000_000_000_000_000;

/// Gas limit of one simulated block; a transaction above it is refused at broadcast.
pub const BLOCK_GAS_LIMIT: u64 = 30_000_000;

/// Most transactions the mempool holds; further broadcasts are refused (`txpool is full`).
pub const MEMPOOL_LIMIT: usize = 10_000;

/// Blocks a simulated chain holds in memory below its head (blocks, transactions,
/// receipts, state changes); older ones are pruned ([`chain::SimChain::block`] answers
/// `None` for them, as a node that expired its history). At least the deepest test reorg
/// (`MAX_REORG_DEPTH`, 1,000 blocks, in the binary) plus the registry's confirmation
/// depths, with room for a chain worker that lags under load (DECISIONS: docs/decisions.md,
/// "Simulated chain snapshots and pruning").
pub const RETAIN_BLOCKS: u64 = 10_000;

/// Most blocks a simulated chain holds below its head for a reader that lags
/// ([`chain::SimChain::hold_from`]): a chain worker further behind finds its next block
/// pruned. Also the most a chain can be set to retain, and what a replay holds, so a
/// replay holds at least what the run that wrote the log held. 100,000 blocks with one
/// transaction each are about 30 MB of snapshot.
pub const HOLD_LIMIT: u64 = 100_000;
