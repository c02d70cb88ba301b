//! [`SimChain`]: one simulated EVM chain's state machine. See the module docs of
//! [`crate::sim`] for what it runs; every rule that decides whether a transaction is
//! accepted, mined or reverts lives here.

use std::collections::{BTreeMap, HashMap};

use alloy::consensus::{TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Decodable2718;
use alloy::primitives::{keccak256, Address, Bytes, TxKind, B256, U256};
use serde::{Deserialize, Serialize};

use super::{BASE_FEE, BLOCK_GAS_LIMIT, HOLD_LIMIT, MEMPOOL_LIMIT, PRIORITY_FEE, RETAIN_BLOCKS};
use crate::address::{
    create2, factory_init_code, forwarder_init_code_hash, DEPLOYMENT_PROXY, FACTORY_SALT,
};
use crate::client::{BlockRef, CallRequest, Fees, RangeScan, Receipt, Transfer, WatchSet};

#[path = "changes.rs"]
mod changes;
#[path = "execution.rs"]
mod execution;
#[path = "snapshot.rs"]
pub mod snapshot;
pub use snapshot::Snapshot;

/// What the chain starts with. Everything in it is fixed for the chain's life; the binary
/// derives it from the project, the chain and the registry, so a replay starts from the
/// same genesis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Genesis {
    /// Registry id (`"ethereum"`).
    pub chain: String,
    /// EIP-155 chain id that signed transactions must carry.
    pub chain_id: u64,
    /// Makes this chain's block hashes its own (e.g. keccak of project id ‖ chain id), so
    /// two projects' chains never share a block hash.
    pub seed: B256,
    /// Timestamp of block 0, Unix milliseconds.
    pub time_ms: u64,
    /// Funded with `treasury_native` wei for gas.
    pub treasury: Address,
    pub treasury_native: U256,
    /// The treasury's genesis balance of each token (a float: payouts need not wait for
    /// the sweeps that refill it).
    pub treasury_tokens: U256,
    /// The chain's ERC-20 tokens (registry contracts): each has code and a balance table.
    pub tokens: Vec<Address>,
}

/// An external transfer into the simulated chain (a test deposit or test transfer): an
/// unsigned transaction from a synthetic sender, mined like any other. The hash is the
/// caller's (unique per transfer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inject {
    pub hash: B256,
    pub from: Address,
    pub to: Address,
    /// Token contract; `None` for the native coin.
    pub token: Option<Address>,
    /// Atomic units.
    pub value: U256,
}

/// One transaction of a mined block as the operation log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockTx {
    /// EIP-2718 bytes of a signed EIP-1559 transaction.
    Signed {
        raw: Bytes,
    },
    Injected(Inject),
}

/// A durable change of the chain. Replaying a chain's operations in order with
/// [`SimChain::apply`] from the same [`Genesis`] gives the same blocks, hashes, timestamps,
/// balances and receipts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// `count` empty blocks; block `i` of them (from 0) has timestamp `t0_ms + i * step_ms`.
    Empty {
        count: u64,
        t0_ms: u64,
        step_ms: u64,
    },
    /// One block holding `txs` in this order.
    Block { t_ms: u64, txs: Vec<BlockTx> },
    /// The last `depth` blocks are replaced by as many empty blocks (the head's number
    /// stays). Their transactions are dropped (`drop`) or return to the mempool.
    Reorg { depth: u64, drop: bool, t_ms: u64 },
}

/// Why a chain operation was refused. The client maps these to
/// [`crate::client::ClientError::Refused`] with the message of a geth-like node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A broadcast transaction was refused (message as a node words it).
    #[error("{0}")]
    Rejected(String),
    /// A call or gas estimate reverted.
    #[error("execution reverted: {0}")]
    Reverted(String),
    /// A scripted fault or read asked for something the chain cannot do (reorg deeper than
    /// the chain, range past the head).
    #[error("{0}")]
    Invalid(String),
    /// An operation of the log does not fit the chain (a corrupt or foreign log).
    #[error("operation does not apply: {0}")]
    Replay(String),
}

/// Contracts the simulated chain knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// The deterministic deployment proxy (present from genesis).
    Proxy,
    /// The forwarder factory, with the treasury it flushes to.
    Factory { treasury: Address },
    /// A deployed forwarder (accepts native coin).
    Forwarder,
    /// A registry ERC-20 token.
    Token,
}

/// A decoded, sender-recovered signed transaction.
#[derive(Debug, Clone)]
struct SignedTx {
    hash: B256,
    sender: Address,
    tx: TxEip1559,
    raw: Bytes,
}

#[derive(Debug, Clone)]
enum PoolTx {
    Signed(SignedTx),
    Injected(Inject),
}

impl PoolTx {
    fn hash(&self) -> B256 {
        match self {
            PoolTx::Signed(s) => s.hash,
            PoolTx::Injected(i) => i.hash,
        }
    }

    fn to_block_tx(&self) -> BlockTx {
        match self {
            PoolTx::Signed(s) => BlockTx::Signed { raw: s.raw.clone() },
            PoolTx::Injected(i) => BlockTx::Injected(i.clone()),
        }
    }
}

/// An ERC-20 `Transfer` log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Log {
    token: Address,
    from: Address,
    to: Address,
    value: U256,
    /// Index in the block.
    index: u32,
}

/// What executing one transaction did.
#[derive(Debug, Clone)]
struct TxResult {
    hash: B256,
    success: bool,
    gas_used: u64,
    /// A successful top-level native transfer: (from, to, value), value > 0.
    native: Option<(Address, Address, U256)>,
    logs: Vec<Log>,
}

#[derive(Debug, Clone)]
struct MinedBlock {
    t_ms: u64,
    txs: Vec<PoolTx>,
    results: Vec<TxResult>,
    /// The block's hash ([`SimChain::hash`], over the keccak of its transaction hashes in
    /// order), computed once when the block is mined: a
    /// receipt carries it, and the sender asks for the receipt of every followed
    /// transaction on each pass (hashing it again was most of a receipt's cost).
    /// A reorg removes the blocks whose epoch it changes; the others keep their hash.
    hash: B256,
    /// What the block changed in the state, in order: a reorg applies it backwards to
    /// take the block out ([`Undo`]).
    undo: Vec<Undo>,
}

/// One state change of a mined block, as the value it replaced (`None`: the entry did not
/// exist). A reorg reverts the removed blocks' changes newest first instead of
/// re-executing the chain from genesis, which a pruned history could not do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undo {
    Nonce(Address, Option<u64>),
    Native(Address, Option<U256>),
    Token(Address, Address, Option<U256>),
    Code(Address, Option<Code>),
}

/// A run of consecutive empty blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    count: u64,
    t0_ms: u64,
    step_ms: u64,
}

/// Accounts, token balances and code.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    pub(crate) nonces: HashMap<Address, u64>,
    pub(crate) native: HashMap<Address, U256>,
    /// (token, owner) -> balance.
    pub(crate) tokens: HashMap<(Address, Address), U256>,
    pub(crate) code: HashMap<Address, Code>,
    /// Changes of the block being mined, for its [`MinedBlock::undo`].
    undo: Vec<Undo>,
}

impl State {
    fn genesis(g: &Genesis) -> State {
        let mut s = State::default();
        s.native.insert(g.treasury, g.treasury_native);
        s.code.insert(Address::from(DEPLOYMENT_PROXY), Code::Proxy);
        for t in &g.tokens {
            s.code.insert(*t, Code::Token);
            if !g.treasury_tokens.is_zero() {
                s.tokens.insert((*t, g.treasury), g.treasury_tokens);
            }
        }
        s
    }

    fn nonce(&self, a: Address) -> u64 {
        self.nonces.get(&a).copied().unwrap_or(0)
    }

    fn native(&self, a: Address) -> U256 {
        self.native.get(&a).copied().unwrap_or(U256::ZERO)
    }

    fn token(&self, token: Address, owner: Address) -> U256 {
        self.tokens
            .get(&(token, owner))
            .copied()
            .unwrap_or(U256::ZERO)
    }

    fn set_nonce(&mut self, a: Address, n: u64) {
        let old = self.nonces.insert(a, n);
        self.undo.push(Undo::Nonce(a, old));
    }

    fn set_native(&mut self, a: Address, v: U256) {
        let old = self.native.insert(a, v);
        self.undo.push(Undo::Native(a, old));
    }

    fn set_token(&mut self, token: Address, owner: Address, v: U256) {
        let old = self.tokens.insert((token, owner), v);
        self.undo.push(Undo::Token(token, owner, old));
    }

    fn set_code(&mut self, a: Address, c: Code) {
        let old = self.code.insert(a, c);
        self.undo.push(Undo::Code(a, old));
    }

    /// Puts back the value `u` replaced.
    fn revert(&mut self, u: &Undo) {
        fn put<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>, k: K, v: Option<V>) {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
        match u {
            Undo::Nonce(a, v) => put(&mut self.nonces, *a, *v),
            Undo::Native(a, v) => put(&mut self.native, *a, *v),
            Undo::Token(t, a, v) => put(&mut self.tokens, (*t, *a), *v),
            Undo::Code(a, v) => put(&mut self.code, *a, *v),
        }
    }
}

/// A change a successful call makes, applied in order after the call was evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Effect {
    Native {
        from: Address,
        to: Address,
        value: U256,
    },
    Token {
        token: Address,
        from: Address,
        to: Address,
        value: U256,
    },
    Deploy {
        at: Address,
        code: Code,
    },
}

/// One simulated EVM chain: canonical blocks from 0 to the head, state at the head, the
/// mempool, and the operations applied in memory but not yet written
/// ([`SimChain::take_unflushed`]).
#[derive(Debug, Clone)]
pub struct SimChain {
    genesis: Genesis,
    head: u64,
    /// Blocks holding transactions; every other block up to the head is empty.
    blocks: BTreeMap<u64, MinedBlock>,
    /// Runs of empty blocks by first number (timestamps of empty blocks).
    runs: BTreeMap<u64, Run>,
    /// First block number of each reorg's replacement, in order: block `n`'s hash commits
    /// to how many of them reach `n`, so a replaced block never keeps its hash.
    forks: Vec<u64>,
    state: State,
    /// Canonical transaction hash -> (block, index in block).
    located: HashMap<B256, (u64, usize)>,
    /// Pending transactions in arrival order.
    pool: Vec<PoolTx>,
    /// Empty-block operations applied but not yet written (see [`SimChain::defer`]).
    unflushed: Vec<Op>,
    /// The newest block dropped from memory (number 0: none); see [`SimChain::prune`].
    floor: Floor,
    /// Blocks held below the head beyond what a reader still needs ([`RETAIN_BLOCKS`]
    /// unless set, [`SimChain::set_retain_blocks`]); not part of a snapshot.
    retain: u64,
    /// The oldest block a reader of the chain still needs (`None`: no reader); see
    /// [`SimChain::hold_from`]. Not part of a snapshot.
    hold: Option<u64>,
}

/// The newest pruned block: blocks `1..=number` are no longer held (their transactions,
/// receipts and timestamps are gone); its hash and timestamp are kept so block
/// `number + 1` still links to it and a reorg down to it keeps its timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Floor {
    pub(crate) number: u64,
    pub(crate) hash: B256,
    pub(crate) t_ms: u64,
}

/// Intrinsic gas of a transaction: 21,000 plus 16 per non-zero and 4 per zero byte of
/// calldata (EIP-2028).
pub fn intrinsic_gas(data: &[u8]) -> u64 {
    let nz = data.iter().filter(|b| **b != 0).count() as u64;
    21_000 + nz * 16 + (data.len() as u64 - nz) * 4
}

const SEL_TRANSFER: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];

fn selector(sig: &str) -> [u8; 4] {
    let h = keccak256(sig.as_bytes());
    [h[0], h[1], h[2], h[3]]
}

fn word_to_address(w: &[u8]) -> Option<Address> {
    if w.len() != 32 || w[..12].iter().any(|b| *b != 0) {
        return None;
    }
    Some(Address::from_slice(&w[12..]))
}

fn address_word(a: Address) -> Bytes {
    let mut w = [0u8; 32];
    w[12..].copy_from_slice(a.as_slice());
    Bytes::copy_from_slice(&w)
}

/// A scripted fault: an address whose last two bytes are `fa11` stands for a recipient that
/// rejects transfers (a contract whose `receive` reverts, an address the token blacklists).
/// Every native or token transfer to it reverts, so tests can exercise a payout that fails
/// when mined.
pub fn rejects_transfers(a: &Address) -> bool {
    a.as_slice()[18..] == [0xfa, 0x11]
}

fn revert(msg: &str) -> SimError {
    SimError::Reverted(msg.to_string())
}

fn reject(msg: impl Into<String>) -> SimError {
    SimError::Rejected(msg.into())
}

/// Decodes an EIP-2718 signed EIP-1559 transaction and recovers its sender.
fn decode_signed(raw: &[u8]) -> Result<SignedTx, SimError> {
    decode_signed_by(raw, None)
}

/// Decodes an EIP-2718 signed EIP-1559 transaction; its sender is `vouched` when the
/// caller signed it itself (see [`SimChain::submit_vouched`]), else recovered from the
/// signature. Debug builds (every test) recover a vouched sender too and refuse the
/// transaction when the signature does not recover to it.
fn decode_signed_by(raw: &[u8], vouched: Option<Address>) -> Result<SignedTx, SimError> {
    let env = TxEnvelope::decode_2718(&mut &raw[..]).map_err(|e| reject(format!("rlp: {e}")))?;
    let TxEnvelope::Eip1559(signed) = env else {
        return Err(reject("transaction type not supported"));
    };
    let recover = || {
        signed
            .signature()
            .recover_address_from_prehash(&signed.signature_hash())
            .map_err(|_| reject("invalid sender"))
    };
    let sender = match vouched {
        Some(a) if cfg!(debug_assertions) => match recover()? {
            r if r == a => a,
            _ => return Err(reject("invalid sender: not the vouched signer")),
        },
        Some(a) => a,
        None => recover()?,
    };
    Ok(SignedTx {
        hash: *signed.hash(),
        sender,
        tx: signed.tx().clone(),
        raw: Bytes::copy_from_slice(raw),
    })
}

impl SimChain {
    /// The chain at block 0.
    pub fn new(genesis: Genesis) -> SimChain {
        let state = State::genesis(&genesis);
        SimChain {
            genesis,
            head: 0,
            blocks: BTreeMap::new(),
            runs: BTreeMap::new(),
            forks: Vec::new(),
            state,
            located: HashMap::new(),
            pool: Vec::new(),
            unflushed: Vec::new(),
            floor: Floor::default(),
            retain: RETAIN_BLOCKS,
            hold: None,
        }
    }

    /// Sets how many blocks below the head are held when no reader needs older ones
    /// (clamped to 1..=[`HOLD_LIMIT`]; the default is [`RETAIN_BLOCKS`]). Takes effect at
    /// the next block.
    pub fn set_retain_blocks(&mut self, blocks: u64) {
        self.retain = blocks.clamp(1, HOLD_LIMIT);
    }

    /// Blocks held below the head when no reader needs older ones.
    pub fn retain_blocks(&self) -> u64 {
        self.retain
    }

    /// Declares the oldest block the chain's reader (the appliance's chain worker: its
    /// watcher's next block, and the receipts its sender still follows) needs: blocks from
    /// `from` on are not pruned, even more than [`SimChain::retain_blocks`] below the head,
    /// but never more than [`HOLD_LIMIT`] below it. `Some(0)`: a reader that has not said
    /// yet (a chain just loaded: nothing is pruned within [`HOLD_LIMIT`]). `None`: no reader
    /// (pruned at [`SimChain::retain_blocks`]). Without it, a worker that fell more than the
    /// held history behind (a start that loads many addresses while test deposits mine) found
    /// its next block pruned and its own mined sends without receipts, and stayed stuck.
    /// Pruning less never changes what a block or receipt says, only whether it is still
    /// answered, so a replay that holds more than the run that logged it reads the same.
    pub fn hold_from(&mut self, from: Option<u64>) {
        self.hold = from;
    }

    /// Number of the newest block dropped from memory (0: none); blocks above it are held.
    pub fn pruned_to(&self) -> u64 {
        self.floor.number
    }

    /// Blocks holding transactions held in memory (at most [`RETAIN_BLOCKS`]).
    pub fn blocks_held(&self) -> usize {
        self.blocks.len()
    }

    /// Transactions located in memory (receipts that can still be answered).
    pub fn transactions_held(&self) -> usize {
        self.located.len()
    }

    /// Entries of the state: accounts with a nonce or a native balance, token balances,
    /// contracts (what a snapshot's size grows with).
    pub fn state_entries(&self) -> usize {
        self.state.nonces.len()
            + self.state.native.len()
            + self.state.tokens.len()
            + self.state.code.len()
    }

    /// The genesis this chain started from.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// Number of the newest block.
    pub fn head(&self) -> u64 {
        self.head
    }

    fn epoch(&self, n: u64) -> u64 {
        self.forks
            .iter()
            .rposition(|f| *f <= n)
            .map(|i| i as u64 + 1)
            .unwrap_or(0)
    }

    fn hash(&self, n: u64) -> B256 {
        match self.blocks.get(&n) {
            Some(b) => b.hash,
            None if n > 0 && n == self.floor.number => self.floor.hash,
            None => self.compute_hash(n, None),
        }
    }

    /// keccak256 of `sim-block` ‖ the seed ‖ `n` ‖ its epoch ‖ the transaction root of a
    /// block with transactions (none for an empty block).
    fn compute_hash(&self, n: u64, tx_root: Option<&B256>) -> B256 {
        let mut buf = Vec::with_capacity(9 + 32 + 8 + 8 + 32);
        buf.extend_from_slice(b"sim-block");
        buf.extend_from_slice(self.genesis.seed.as_slice());
        buf.extend_from_slice(&n.to_be_bytes());
        buf.extend_from_slice(&self.epoch(n).to_be_bytes());
        if let Some(r) = tx_root {
            buf.extend_from_slice(r.as_slice());
        }
        keccak256(&buf)
    }

    /// Timestamp of block `n` (at most the head), Unix milliseconds.
    fn time_ms(&self, n: u64) -> u64 {
        if let Some(b) = self.blocks.get(&n) {
            return b.t_ms;
        }
        if n > 0 && n == self.floor.number {
            return self.floor.t_ms;
        }
        match self.runs.range(..=n).next_back() {
            Some((first, r)) if n < first + r.count => r.t0_ms + (n - first) * r.step_ms,
            _ => self.genesis.time_ms,
        }
    }

    /// Block `n` of the canonical chain; `None` past the head, and for a block older than
    /// the history held ([`SimChain::prune`]: blocks `1..` [`SimChain::pruned_to`]), as a
    /// node that expired its history answers (block 0 still answers).
    pub fn block(&self, n: u64) -> Option<BlockRef> {
        let gone = n > 0 && n <= self.floor.number;
        (n <= self.head && !gone).then(|| BlockRef {
            number: n,
            hash: self.hash(n),
            parent_hash: if n == 0 { B256::ZERO } else { self.hash(n - 1) },
            timestamp: self.time_ms(n) / 1000,
        })
    }

    /// Balance of `owner` in the native coin (`token` `None`) or a token, at the head.
    pub fn balance(&self, owner: Address, token: Option<Address>) -> U256 {
        match token {
            None => self.state.native(owner),
            Some(t) => self.state.token(t, owner),
        }
    }

    /// Mined transactions of `a` (`pending`: plus its consecutive pending ones).
    pub fn nonce(&self, a: Address, pending: bool) -> u64 {
        let mut n = self.state.nonce(a);
        if pending {
            while self
                .pool
                .iter()
                .any(|p| matches!(p, PoolTx::Signed(s) if s.sender == a && s.tx.nonce == n))
            {
                n += 1;
            }
        }
        n
    }

    /// Fee offer for inclusion in the next block.
    pub fn fees(&self) -> Fees {
        Fees {
            max_fee_per_gas: 2 * BASE_FEE + PRIORITY_FEE,
            max_priority_fee_per_gas: PRIORITY_FEE,
        }
    }

    /// Whether the chain has code at `a`.
    pub fn has_code(&self, a: Address) -> bool {
        self.state.code.contains_key(&a)
    }

    /// Code at `a`: one byte `0xfe` standing for the runtime of a contract the simulation
    /// runs natively (the proxy, the factory, forwarders, tokens); empty for an account.
    pub fn code(&self, a: Address) -> Bytes {
        if self.has_code(a) {
            Bytes::from_static(&[0xfe])
        } else {
            Bytes::new()
        }
    }

    /// Hashes of the pending transactions, in arrival order.
    pub fn pending(&self) -> Vec<B256> {
        self.pool.iter().map(PoolTx::hash).collect()
    }

    /// Whether the transaction is pending or mined on the canonical chain.
    pub fn knows_tx(&self, hash: B256) -> bool {
        self.located.contains_key(&hash) || self.pool.iter().any(|p| p.hash() == hash)
    }

    /// Receipt of a transaction mined on the canonical chain.
    pub fn receipt(&self, hash: B256) -> Option<Receipt> {
        let (n, i) = *self.located.get(&hash)?;
        let r = &self.blocks.get(&n)?.results[i];
        Some(Receipt {
            success: r.success,
            block_number: n,
            block_hash: self.hash(n),
            gas_used: r.gas_used,
        })
    }

    /// The token transfers (`Transfer` logs: token, from, to, value) a transaction mined on
    /// the canonical chain made, in order; `None` while it is not mined. `appliance
    /// simulate` reads what a sweep or payout really moved from them.
    pub fn token_transfers_of(&self, hash: B256) -> Option<Vec<(Address, Address, Address, U256)>> {
        let (n, i) = *self.located.get(&hash)?;
        let r = &self.blocks.get(&n)?.results[i];
        Some(
            r.logs
                .iter()
                .map(|l| (l.token, l.from, l.to, l.value))
                .collect(),
        )
    }

    /// Blocks `from..=to` and the successful transfers in them to a watched address.
    pub fn transfers(&self, from: u64, to: u64, watch: &WatchSet) -> Result<RangeScan, SimError> {
        if from > to {
            return Err(SimError::Invalid(format!("empty range {from}..={to}")));
        }
        if to > self.head {
            return Err(SimError::Invalid(format!(
                "block {to} is past the head {}",
                self.head
            )));
        }
        if self.floor.number > 0 && from <= self.floor.number {
            return Err(SimError::Invalid(format!(
                "history before block {} is pruned (asked from {from})",
                self.floor.number + 1
            )));
        }
        let mut out = RangeScan {
            blocks: (from..=to).filter_map(|n| self.block(n)).collect(),
            transfers: Vec::new(),
        };
        for (n, b) in self.blocks.range(from..=to) {
            let (hash, time) = (self.hash(*n), b.t_ms / 1000);
            for r in b.results.iter().filter(|r| r.success) {
                if let Some((f, t, v)) = r.native {
                    if watch.watches(&t) {
                        out.transfers.push(Transfer {
                            block_number: *n,
                            block_hash: hash,
                            block_time: time,
                            tx_hash: r.hash,
                            log_index: None,
                            token: None,
                            from: f,
                            to: t,
                            value: v,
                        });
                    }
                }
                for l in &r.logs {
                    if watch.tokens.contains(&l.token) && watch.watches(&l.to) {
                        out.transfers.push(Transfer {
                            block_number: *n,
                            block_hash: hash,
                            block_time: time,
                            tx_hash: r.hash,
                            log_index: Some(l.index),
                            token: Some(l.token),
                            from: l.from,
                            to: l.to,
                            value: l.value,
                        });
                    }
                }
            }
        }
        Ok(out)
    }
}

/// `gas_limit * max_fee_per_gas + value`, the most a transaction can cost its sender.
fn max_cost(tx: &TxEip1559) -> Option<U256> {
    U256::from(tx.gas_limit)
        .checked_mul(U256::from(tx.max_fee_per_gas))?
        .checked_add(tx.value)
}

/// Price per gas paid: base fee plus the tip, capped by the max fee.
fn effective_price(tx: &TxEip1559) -> u128 {
    BASE_FEE
        + tx.max_priority_fee_per_gas
            .min(tx.max_fee_per_gas.saturating_sub(BASE_FEE))
}
