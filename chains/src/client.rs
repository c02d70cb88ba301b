//! The chain seam: one client interface every chain adapter implements.
//!
//! Services and workers drive deposits, sweeps and payouts through [`ChainClient`] only, so
//! one lifecycle per resource serves every chain: the simulated chain of test mode
//! (a later `sim` module) and live EVM chains over alloy ([`crate::evm`]). Keypair chains will be
//! further implementations.
//!
//! Values are the EVM account model's (20-byte addresses, 32-byte hashes, 256-bit atomic
//! amounts), which the simulated chain shares: it simulates an EVM chain, with the same
//! CREATE2 deposit addresses (DECISIONS.md section 9). Amounts are atomic units, never
//! decimals; times are Unix seconds.

use std::collections::HashMap;
use std::fmt;

use alloy::primitives::{Address, Bytes, B256, U256};
use uuid::Uuid;

/// One block's identity: enough to follow the chain and detect a reorg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRef {
    pub number: u64,
    pub hash: B256,
    pub parent_hash: B256,
    /// Unix seconds.
    pub timestamp: u64,
}

/// A transfer into a watched address, native coin or token, in a block of the canonical
/// chain as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub block_number: u64,
    pub block_hash: B256,
    /// Unix seconds.
    pub block_time: u64,
    pub tx_hash: B256,
    /// Token transfers: the log's index in its block. Native transfers: `None`.
    pub log_index: Option<u32>,
    /// Token contract; `None` for the native coin.
    pub token: Option<Address>,
    pub from: Address,
    pub to: Address,
    /// Atomic units of the asset.
    pub value: U256,
}

/// What a range scan found: every block of the range, in order and linked by parent hash,
/// and every successful transfer in them that reaches a watched address.
#[derive(Debug, Clone, Default)]
pub struct RangeScan {
    pub blocks: Vec<BlockRef>,
    pub transfers: Vec<Transfer>,
}

/// The addresses a scan looks for, and the token contracts whose `Transfer`s count.
#[derive(Debug, Clone, Default)]
pub struct WatchSet {
    /// Each watched address, with the id of the wallet it belongs to. A client only asks
    /// whether an address is watched; the id is the caller's, kept in the same map so that
    /// the addresses are held once (a second set of 1M addresses is about 42 MiB).
    addresses: HashMap<Address, Uuid>,
    /// [`WatchSet::fingerprint`], kept up to date as addresses are added.
    fingerprint: (u64, u64),
    pub tokens: Vec<Address>,
}

impl WatchSet {
    /// A set watching `addresses` (each with its wallet's id) for native transfers and for
    /// `Transfer` logs of `tokens`.
    pub fn new(addresses: impl IntoIterator<Item = (Address, Uuid)>, tokens: Vec<Address>) -> Self {
        let mut s = WatchSet {
            tokens,
            ..WatchSet::default()
        };
        s.extend(addresses);
        s
    }

    /// Watches `address` for wallet `wallet` (a watched address keeps its first wallet).
    pub fn insert(&mut self, address: Address, wallet: Uuid) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.addresses.entry(address) {
            e.insert(wallet);
            let (x, y) = address_fingerprint(&address);
            self.fingerprint = (
                self.fingerprint.0.wrapping_add(x),
                self.fingerprint.1.wrapping_add(y),
            );
        }
    }

    /// [`WatchSet::insert`] for each pair.
    pub fn extend(&mut self, addresses: impl IntoIterator<Item = (Address, Uuid)>) {
        for (a, w) in addresses {
            self.insert(a, w);
        }
    }

    /// Whether `address` is watched.
    pub fn watches(&self, address: &Address) -> bool {
        self.addresses.contains_key(address)
    }

    /// The wallet `address` is watched for.
    pub fn wallet(&self, address: &Address) -> Option<Uuid> {
        self.addresses.get(address).copied()
    }

    /// The watched addresses, in no order.
    pub fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.addresses.keys()
    }

    /// How many addresses are watched.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether no address is watched.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// An order-independent fingerprint of the watched addresses: two sums of per-address
    /// hashes under different seeds, kept as addresses are added (a set only grows), so that a
    /// cache of something derived from the set (the EVM client's recipient chunks) knows
    /// it without reading the set. Two sets of one size with both sums equal are not met
    /// in practice: deposit addresses are derived by the appliance, never chosen by a
    /// caller.
    pub fn fingerprint(&self) -> (u64, u64) {
        self.fingerprint
    }
}

/// The two hashes of `a` that [`WatchSet::fingerprint`] sums (SipHash with fixed keys:
/// the same in every process).
fn address_fingerprint(a: &Address) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    a.hash(&mut h);
    let x = h.finish();
    a.hash(&mut h);
    (x, h.finish())
}

/// Which asset a balance read is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetRef {
    Native,
    /// An ERC-20 contract.
    Token(Address),
}

/// EIP-1559 fee estimate, wei per gas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fees {
    pub max_fee_per_gas: u128,
    pub max_priority_fee_per_gas: u128,
}

/// A mined transaction's receipt, reduced to what the sender needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub success: bool,
    pub block_number: u64,
    pub block_hash: B256,
    pub gas_used: u64,
}

/// One log of a mined transaction (what a DEX swap's output is read from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxLog {
    /// The contract that emitted it.
    pub address: Address,
    pub topics: Vec<B256>,
    pub data: Bytes,
}

/// A call to be estimated: who sends what to whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRequest {
    pub from: Address,
    pub to: Address,
    /// Native coin, atomic units.
    pub value: U256,
    pub data: Bytes,
}

/// Why a chain call failed. Workers back off and report it; they never panic on it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The node could not be reached, timed out or failed in transport. Retry later.
    /// `detail` never holds a node URL's secret part ([`crate::redact`]).
    #[error("chain node unavailable: {detail}")]
    Unavailable { detail: String },
    /// The node answered and refused the call (a JSON-RPC error: nonce too low, already
    /// known, underpriced, execution reverted, ...). `detail` is the node's message.
    #[error("chain node refused {method}: {detail}")]
    Refused {
        method: &'static str,
        detail: String,
    },
    /// The node's answer does not parse or contradicts itself.
    #[error("chain node answer to {method} is malformed: {detail}")]
    Malformed {
        method: &'static str,
        detail: String,
    },
    /// The chain changed while a multi-call read ran (a reorg): read again.
    #[error("the chain changed during the read: {0}")]
    Moving(&'static str),
}

impl ClientError {
    /// Whether the node answered and refused (as opposed to not answering).
    pub fn is_refusal(&self) -> bool {
        matches!(self, ClientError::Refused { .. })
    }
}

/// One chain, as every service and worker sees it. Implementations: the simulated chain
/// (a later `sim` module) and EVM over JSON-RPC ([`crate::evm`]). Every method is bounded in
/// time by the implementation; none panics on a node's answer.
#[async_trait::async_trait]
pub trait ChainClient: Send + Sync + fmt::Debug + 'static {
    /// The registry id of the chain (`"ethereum"`, `"bsc"`, ...).
    fn chain(&self) -> &str;

    /// The chain id the node reports (EIP-155), to refuse a node of another chain.
    /// `Ok(None)`: the client cannot be pointed at another chain (the simulated chain), so
    /// there is nothing to check.
    async fn chain_id(&self) -> Result<Option<u64>, ClientError> {
        Ok(None)
    }

    /// The number of the newest block.
    async fn head(&self) -> Result<u64, ClientError>;

    /// Block `n` of the canonical chain, `None` past the head.
    async fn block(&self, n: u64) -> Result<Option<BlockRef>, ClientError>;

    /// Blocks `from..=to` and every successful transfer in them to an address of
    /// `watch` (native coin from top-level transactions, tokens from `Transfer` logs of
    /// `watch.tokens`). [`ClientError::Moving`] when the range is not one linked chain.
    /// Any range length is accepted: the implementation splits it into requests its node
    /// accepts, so a worker catching up should ask for thousands of blocks per call.
    async fn transfers(
        &self,
        from: u64,
        to: u64,
        watch: &WatchSet,
    ) -> Result<RangeScan, ClientError>;

    /// Blocks `from..=to` and every successful `Transfer` log of `tokens` in them, to any
    /// recipient: the part of a range scan that needs no watched addresses, so a watcher
    /// can read it while it still learns them (the catch-up's start). The caller
    /// matches the recipients, and reads the native transfers with
    /// [`ChainClient::transfers`] and no tokens. [`ClientError::Moving`] as for
    /// `transfers`. `Ok(None)`: this client does not offer it (the caller scans by
    /// address once it knows them); the default.
    async fn token_transfers(
        &self,
        _from: u64,
        _to: u64,
        _tokens: &[Address],
    ) -> Result<Option<RangeScan>, ClientError> {
        Ok(None)
    }

    /// Balance of `owner` in `asset` at the head, atomic units.
    async fn balance(&self, owner: Address, asset: AssetRef) -> Result<U256, ClientError>;

    /// The account nonce of `a`: with `pending`, counting the node's pending pool
    /// (the next nonce the node expects); without, only mined transactions.
    async fn nonce(&self, a: Address, pending: bool) -> Result<u64, ClientError>;

    /// The fee to offer for a transaction included soon.
    async fn fees(&self) -> Result<Fees, ClientError>;

    /// Gas a call would use (without margin).
    async fn estimate_gas(&self, call: &CallRequest) -> Result<u64, ClientError>;

    /// Gas a call would use (without margin), simulated against the latest mined block
    /// (an explicit `latest` block tag), so the answer does not depend on whether the node
    /// defaults to its pending block. The default is [`ChainClient::estimate_gas`], for
    /// clients that only ever evaluate at the head (the simulated chain).
    async fn estimate_gas_latest(&self, call: &CallRequest) -> Result<u64, ClientError> {
        self.estimate_gas(call).await
    }

    /// Read-only call at the head (`eth_call`): the return data.
    async fn call(&self, to: Address, data: Bytes) -> Result<Bytes, ClientError>;

    /// Code at `a` (empty for an account without code).
    async fn code(&self, a: Address) -> Result<Bytes, ClientError>;

    /// Broadcasts a signed raw transaction; returns its hash. A node that already knows
    /// the transaction answers with its hash, not an error.
    async fn broadcast(&self, raw: &[u8]) -> Result<B256, ClientError>;

    /// Broadcasts a transaction this process has just signed with the key of `sender`
    /// (the master wallet's signer, right after signing). A node recovers the sender from
    /// the signature whatever it is told, and so does the default (plain
    /// [`ChainClient::broadcast`]); the simulated chain takes `sender` as vouched and skips
    /// the recovery (docs/decisions.md, "The simulated chain trusts the sender of the
    /// appliance's own fresh sends"). Bytes read back from the store are broadcast with
    /// [`ChainClient::broadcast`], never with this.
    async fn broadcast_signed_by(&self, raw: &[u8], sender: Address) -> Result<B256, ClientError> {
        let _ = sender;
        self.broadcast(raw).await
    }

    /// The receipt of a mined transaction on the canonical chain; `None` while it is not
    /// mined (pending, dropped, or removed by a reorg).
    async fn receipt(&self, hash: B256) -> Result<Option<Receipt>, ClientError>;

    /// Whether the node knows the transaction at all (pending pool or mined).
    async fn knows_tx(&self, hash: B256) -> Result<bool, ClientError>;

    /// The logs of a mined transaction on the canonical chain; `None` while it is not
    /// mined. A client that cannot report logs (the simulated chain, which runs no
    /// contracts) answers [`ClientError::Unavailable`].
    async fn receipt_logs(&self, _hash: B256) -> Result<Option<Vec<TxLog>>, ClientError> {
        Err(ClientError::Unavailable {
            detail: "this chain client reports no transaction logs".into(),
        })
    }

    /// One sentence for the chain's `status_note` while the client works but not as
    /// configured (DECISIONS.md section 16: a node skipped for failing or lagging, another
    /// serving); `None` when all is well. A worker whose pass succeeded reports it as the
    /// chain's health instead of plain healthy.
    fn health_note(&self) -> Option<String> {
        None
    }
}
