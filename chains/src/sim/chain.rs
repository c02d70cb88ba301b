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
    /// transaction on each pass (issue 16: hashing it again was most of a receipt's cost).
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
    /// the canonical chain made, in order; `None` while it is not mined. The simulation of
    /// issue 40 reads what a sweep or payout really moved from them.
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

    // ----------------------------------------------------------------------------------
    // Execution

    /// Gas and effects of a call at the head, or why it reverts. Reads only.
    fn evaluate(
        &self,
        from: Address,
        to: Address,
        value: U256,
        data: &[u8],
    ) -> Result<(u64, Vec<Effect>), SimError> {
        let base = intrinsic_gas(data);
        if self.state.native(from) < value {
            return Err(revert("insufficient balance for transfer"));
        }
        let native = |v: U256| (!v.is_zero()).then_some(Effect::Native { from, to, value: v });
        if !value.is_zero() && rejects_transfers(&to) {
            return Err(revert("recipient rejects transfers"));
        }
        match self.state.code.get(&to).copied() {
            None => Ok((base, native(value).into_iter().collect())),
            Some(Code::Forwarder) => {
                if !data.is_empty() {
                    return Err(revert("forwarder: unknown function"));
                }
                Ok((base + 100, native(value).into_iter().collect()))
            }
            Some(Code::Token) => {
                if !value.is_zero() {
                    return Err(revert("token: not payable"));
                }
                if data.len() != 68 || data[..4] != SEL_TRANSFER {
                    return Err(revert("token: unknown function"));
                }
                let dest = word_to_address(&data[4..36]).ok_or_else(|| revert("bad address"))?;
                let amount = U256::from_be_slice(&data[36..68]);
                if rejects_transfers(&dest) {
                    return Err(revert("token: recipient rejects transfers"));
                }
                let have = self.state.token(to, from);
                if have < amount {
                    return Err(revert("ERC20: transfer amount exceeds balance"));
                }
                if dest != from && self.state.token(to, dest).checked_add(amount).is_none() {
                    return Err(revert("ERC20: balance overflow"));
                }
                Ok((
                    base + 30_000,
                    vec![Effect::Token {
                        token: to,
                        from,
                        to: dest,
                        value: amount,
                    }],
                ))
            }
            Some(Code::Factory { treasury }) => {
                if !value.is_zero() {
                    return Err(revert("factory: not payable"));
                }
                self.evaluate_sweep(to, treasury, data, base)
            }
            Some(Code::Proxy) => {
                if !value.is_zero() {
                    return Err(revert("proxy: value not supported"));
                }
                let (salt, init) = (data.get(..32), data.get(32..));
                let (Some(salt), Some(init)) = (salt, init) else {
                    return Err(revert("proxy: no salt"));
                };
                // Only the pinned factory runs here: its creation code for some treasury.
                let treasury = (init.len() >= 32)
                    .then(|| word_to_address(&init[init.len() - 32..]))
                    .flatten()
                    .filter(|t| init == factory_init_code(&t.0 .0).as_slice())
                    .ok_or_else(|| revert("proxy: unknown creation code"))?;
                if salt != FACTORY_SALT {
                    return Err(revert("proxy: unexpected salt for the factory"));
                }
                if treasury.is_zero() {
                    return Err(revert("zero treasury"));
                }
                let mut s = [0u8; 32];
                s.copy_from_slice(salt);
                let at = Address::from(create2(&DEPLOYMENT_PROXY, &s, &keccak256(init).0));
                if self.has_code(at) {
                    return Err(revert("proxy: create2 collision"));
                }
                Ok((
                    base + 32_000 + 200 * init.len() as u64 / 2,
                    vec![Effect::Deploy {
                        at,
                        code: Code::Factory { treasury },
                    }],
                ))
            }
        }
    }

    /// `sweep(bytes32 salt, address[] tokens)` of the factory at `factory`.
    fn evaluate_sweep(
        &self,
        factory: Address,
        treasury: Address,
        data: &[u8],
        base: u64,
    ) -> Result<(u64, Vec<Effect>), SimError> {
        let sel = selector("sweep(bytes32,address[])");
        if data.len() < 100 || data[..4] != sel {
            return Err(revert("factory: unknown function"));
        }
        let mut salt = [0u8; 32];
        salt.copy_from_slice(&data[4..36]);
        if U256::from_be_slice(&data[36..68]) != U256::from(0x40) {
            return Err(revert("factory: bad calldata"));
        }
        let len = U256::from_be_slice(&data[68..100]);
        let len = usize::try_from(len)
            .ok()
            .filter(|l| *l <= 64 && data.len() == 100 + 32 * l)
            .ok_or_else(|| revert("factory: bad calldata"))?;
        let fwd = Address::from(create2(&factory.0 .0, &salt, &forwarder_init_code_hash()));
        let mut gas = base + 5_000;
        let mut effects = Vec::new();
        if !self.has_code(fwd) {
            gas += 45_000;
            effects.push(Effect::Deploy {
                at: fwd,
                code: Code::Forwarder,
            });
        }
        let mut seen = Vec::new();
        for i in 0..len {
            let w = &data[100 + 32 * i..132 + 32 * i];
            let t = word_to_address(w).ok_or_else(|| revert("bad address"))?;
            gas += 10_000;
            if seen.contains(&t) {
                continue; // a second flush finds nothing left
            }
            seen.push(t);
            if t.is_zero() {
                let v = self.state.native(fwd);
                if !v.is_zero() {
                    gas += 9_000;
                    effects.push(Effect::Native {
                        from: fwd,
                        to: treasury,
                        value: v,
                    });
                }
            } else {
                if self.state.code.get(&t) != Some(&Code::Token) {
                    return Err(revert("forwarder: token call failed"));
                }
                let v = self.state.token(t, fwd);
                if !v.is_zero() {
                    gas += 30_000;
                    effects.push(Effect::Token {
                        token: t,
                        from: fwd,
                        to: treasury,
                        value: v,
                    });
                }
            }
        }
        Ok((gas, effects))
    }

    /// Applies effects in order; the token transfers become logs numbered from `log_index`.
    fn apply_effects(&mut self, effects: Vec<Effect>, log_index: &mut u32) -> Vec<Log> {
        let mut logs = Vec::new();
        for e in effects {
            match e {
                Effect::Native { from, to, value } => {
                    let f = self.state.native(from).saturating_sub(value);
                    self.state.set_native(from, f);
                    let t = self.state.native(to).saturating_add(value);
                    self.state.set_native(to, t);
                }
                Effect::Token {
                    token,
                    from,
                    to,
                    value,
                } => {
                    let f = self.state.token(token, from).saturating_sub(value);
                    self.state.set_token(token, from, f);
                    let t = self.state.token(token, to).saturating_add(value);
                    self.state.set_token(token, to, t);
                    logs.push(Log {
                        token,
                        from,
                        to,
                        value,
                        index: *log_index,
                    });
                    *log_index += 1;
                }
                Effect::Deploy { at, code } => {
                    self.state.set_code(at, code);
                }
            }
        }
        logs
    }

    /// Whether `s` can be mined now: next nonce of its sender, fee at least the base fee,
    /// and the sender can pay `gas_limit * max_fee + value`.
    fn includable(&self, s: &SignedTx) -> bool {
        s.tx.nonce == self.state.nonce(s.sender)
            && s.tx.max_fee_per_gas >= BASE_FEE
            && max_cost(&s.tx).is_some_and(|c| c <= self.state.native(s.sender))
    }

    /// Executes an includable signed transaction (nonce used, gas charged, effects applied
    /// unless it reverts or runs out of gas).
    fn execute_signed(&mut self, s: &SignedTx, log_index: &mut u32) -> TxResult {
        let tx = &s.tx;
        let to = match tx.to {
            TxKind::Call(a) => a,
            TxKind::Create => Address::ZERO, // refused at broadcast; never mined
        };
        let price = effective_price(tx);
        self.state.set_nonce(s.sender, tx.nonce + 1);
        let outcome = if tx.to.is_create() {
            Err(revert("contract creation is not simulated"))
        } else {
            self.evaluate(s.sender, to, tx.value, &tx.input)
        };
        let (success, gas_used, effects) = match outcome {
            Ok((gas, eff)) if gas <= tx.gas_limit => (true, gas, eff),
            Ok(_) => (false, tx.gas_limit, Vec::new()), // out of gas
            Err(_) => (
                false,
                intrinsic_gas(&tx.input).min(tx.gas_limit),
                Vec::new(),
            ),
        };
        let fee = U256::from(gas_used) * U256::from(price);
        let bal = self.state.native(s.sender).saturating_sub(fee);
        self.state.set_native(s.sender, bal);
        let native = (success && !tx.value.is_zero()).then_some((s.sender, to, tx.value));
        let logs = if success {
            self.apply_effects(effects, log_index)
        } else {
            Vec::new()
        };
        TxResult {
            hash: s.hash,
            success,
            gas_used,
            native,
            logs,
        }
    }

    fn execute_injected(&mut self, i: &Inject, log_index: &mut u32) -> TxResult {
        let fits = match i.token {
            None => self.state.native(i.to).checked_add(i.value).is_some(),
            Some(t) => {
                self.state.code.get(&t) == Some(&Code::Token)
                    && self.state.token(t, i.to).checked_add(i.value).is_some()
            }
        };
        let mut r = TxResult {
            hash: i.hash,
            success: fits,
            gas_used: if i.token.is_some() { 51_000 } else { 21_000 },
            native: None,
            logs: Vec::new(),
        };
        if !fits {
            return r;
        }
        match i.token {
            None => {
                let v = self.state.native(i.to) + i.value;
                self.state.set_native(i.to, v);
                r.native = (!i.value.is_zero()).then_some((i.from, i.to, i.value));
            }
            Some(t) => {
                let v = self.state.token(t, i.to) + i.value;
                self.state.set_token(t, i.to, v);
                r.logs.push(Log {
                    token: t,
                    from: i.from,
                    to: i.to,
                    value: i.value,
                    index: *log_index,
                });
                *log_index += 1;
            }
        }
        r
    }

    /// Mines block `head + 1` from `candidates` in order: injected transfers always, signed
    /// transactions when includable (repeated passes, so a later nonce of the same sender
    /// follows an earlier one). Returns the transactions not included; when none is
    /// included, nothing changes (no block).
    fn mine_block(&mut self, t_ms: u64, candidates: Vec<PoolTx>) -> Vec<PoolTx> {
        let n = self.head + 1;
        let mut left = candidates;
        let mut txs = Vec::new();
        let mut results = Vec::new();
        let mut log_index = 0u32;
        loop {
            let mut progress = false;
            let mut rest = Vec::new();
            for p in left {
                let r = match &p {
                    PoolTx::Injected(i) => Some(self.execute_injected(i, &mut log_index)),
                    PoolTx::Signed(s) if self.includable(s) => {
                        Some(self.execute_signed(s, &mut log_index))
                    }
                    PoolTx::Signed(_) => None,
                };
                match r {
                    Some(r) => {
                        progress = true;
                        txs.push(p);
                        results.push(r);
                    }
                    None => rest.push(p),
                }
            }
            left = rest;
            if !progress || left.is_empty() {
                break;
            }
        }
        if txs.is_empty() {
            return left;
        }
        let mut root = Vec::with_capacity(32 * txs.len());
        for t in &txs {
            root.extend_from_slice(t.hash().as_slice());
        }
        for (i, t) in txs.iter().enumerate() {
            self.located.insert(t.hash(), (n, i));
        }
        let tx_root = keccak256(&root);
        let hash = self.compute_hash(n, Some(&tx_root));
        let undo = std::mem::take(&mut self.state.undo);
        self.blocks.insert(
            n,
            MinedBlock {
                t_ms,
                txs,
                results,
                hash,
                undo,
            },
        );
        self.head = n;
        self.prune();
        left
    }

    /// Drops from memory the blocks more than [`SimChain::retain_blocks`] below the head
    /// and below the reader's hold ([`SimChain::hold_from`]), and any more than
    /// [`HOLD_LIMIT`] below it: their transactions, receipts, state changes and runs of
    /// empty blocks (the newest dropped block's hash and timestamp stay, [`Floor`]).
    /// Deterministic in the head, the retention and the hold; a replay loads with the hold
    /// `Some(0)` (only [`HOLD_LIMIT`] applies), so it holds at least what the run that wrote
    /// the log held, and every reorg that run accepted replays. A reorg deeper than what is
    /// held is refused ([`SimChain::check_reorg`]).
    fn prune(&mut self) {
        let by_age = self.head.saturating_sub(self.retain);
        let floor = match self.hold {
            None => by_age,
            Some(from) => by_age.min(from.saturating_sub(1)),
        }
        .max(self.head.saturating_sub(HOLD_LIMIT));
        if floor == 0 || floor <= self.floor.number {
            return;
        }
        let keep = Floor {
            number: floor,
            hash: self.hash(floor),
            t_ms: self.time_ms(floor),
        };
        while let Some(e) = self.blocks.first_entry() {
            if *e.key() > floor {
                break;
            }
            for t in &e.remove().txs {
                self.located.remove(&t.hash());
            }
        }
        while let Some(e) = self.runs.first_entry() {
            if e.key() + e.get().count > floor {
                break;
            }
            e.remove();
        }
        self.floor = keep;
    }

    /// Appends `count` empty blocks, extending the last run when the timestamps continue it.
    fn push_empty(&mut self, count: u64, t0_ms: u64, step_ms: u64) {
        if count == 0 {
            return;
        }
        let first = self.head + 1;
        if let Some((f, r)) = self.runs.iter_mut().next_back() {
            if *f + r.count == first
                && r.step_ms == step_ms
                && r.t0_ms + r.count * r.step_ms == t0_ms
            {
                r.count += count;
                self.head += count;
                self.prune();
                return;
            }
        }
        self.runs.insert(
            first,
            Run {
                count,
                t0_ms,
                step_ms,
            },
        );
        self.head += count;
        self.prune();
    }

    /// The timestamp of the next block at wall time `now_ms`: never before the head's, and
    /// on the run's grid when a timer block continues a run of empty blocks (so a replay of
    /// the coalesced run gives the same timestamps).
    fn next_time(&self, now_ms: u64, step_ms: u64) -> u64 {
        let last = self.time_ms(self.head);
        if step_ms > 0 {
            if let Some((f, r)) = self.runs.iter().next_back() {
                let expected = r.t0_ms + r.count * r.step_ms;
                if f + r.count == self.head + 1
                    && r.step_ms == step_ms
                    && now_ms.abs_diff(expected) < step_ms.max(1_000)
                {
                    return expected.max(last);
                }
            }
        }
        now_ms.max(last)
    }

    // ----------------------------------------------------------------------------------
    // Changes

    /// Mines `count` blocks at wall time `now_ms`, `step_ms` apart (0: same timestamp):
    /// the first takes what the mempool can mine, the rest are empty (the mempool's
    /// remaining transactions are not mineable yet: nonce gap or funds). Applied in memory;
    /// returns the operations to write (or to [`SimChain::defer`] when all are empty).
    pub fn mine(&mut self, count: u64, now_ms: u64, step_ms: u64) -> Vec<Op> {
        let mut ops = Vec::new();
        if count == 0 {
            return ops;
        }
        let t0 = self.next_time(now_ms, step_ms);
        let head = self.head;
        let pool = std::mem::take(&mut self.pool);
        self.pool = self.mine_block(t0, pool);
        if self.head > head {
            let b = &self.blocks[&self.head];
            ops.push(Op::Block {
                t_ms: t0,
                txs: b.txs.iter().map(PoolTx::to_block_tx).collect(),
            });
        }
        let empty_from = if ops.is_empty() { 0 } else { 1 };
        let n_empty = count - empty_from;
        if n_empty > 0 {
            let start = t0 + empty_from * step_ms;
            self.push_empty(n_empty, start, step_ms);
            ops.push(Op::Empty {
                count: n_empty,
                t0_ms: start,
                step_ms,
            });
        }
        ops
    }

    /// The operation that mines `t` alone in block `head + 1` at `now_ms`, and the log
    /// index the transfer gets (`None` for the native coin). Nothing changes until the
    /// operation is applied ([`SimChain::apply`]) once it is durable.
    pub fn inject_op(&self, t: Inject, now_ms: u64) -> (Op, u64, Option<u32>) {
        let li = t.token.map(|_| 0);
        let op = Op::Block {
            t_ms: self.next_time(now_ms, 0),
            txs: vec![BlockTx::Injected(t)],
        };
        (op, self.head + 1, li)
    }

    /// The deepest reorg the chain can do: the blocks held above the newest pruned one (the
    /// head when nothing is pruned; block 0 stays).
    pub fn reorg_depth_held(&self) -> u64 {
        self.head - self.floor.number
    }

    /// Checks a reorg of `depth` blocks: at least 1, at most
    /// [`SimChain::reorg_depth_held`].
    pub fn check_reorg(&self, depth: u64) -> Result<(), SimError> {
        let most = self.reorg_depth_held();
        if depth == 0 || depth > most {
            return Err(SimError::Invalid(format!(
                "depth must be from 1 to the chain's height ({most})"
            )));
        }
        Ok(())
    }

    /// Replaces the last `depth` blocks by empty ones (the head's number stays, as with
    /// `anvil_reorg`): their transactions are dropped (`drop`) or return to the front of
    /// the mempool, and their state changes are reverted, newest first ([`Undo`]).
    fn reorg(&mut self, depth: u64, drop: bool, t_ms: u64) -> Result<(), SimError> {
        self.check_reorg(depth)?;
        let cut = self.head - depth;
        let removed: Vec<MinedBlock> = self.blocks.split_off(&(cut + 1)).into_values().collect();
        for b in removed.iter().rev() {
            for u in b.undo.iter().rev() {
                self.state.revert(u);
            }
            for t in &b.txs {
                self.located.remove(&t.hash());
            }
        }
        let later: Vec<u64> = self.runs.range(cut + 1..).map(|(f, _)| *f).collect();
        for f in later {
            self.runs.remove(&f);
        }
        if let Some((f, r)) = self.runs.iter_mut().next_back() {
            r.count = r.count.min(cut + 1 - *f);
        }
        self.forks.push(cut + 1);
        let head = self.head;
        self.head = cut;
        self.runs.insert(
            cut + 1,
            Run {
                count: depth,
                t0_ms: t_ms.max(self.time_ms(cut)),
                step_ms: 0,
            },
        );
        self.head = head;
        if !drop {
            let mut back: Vec<PoolTx> = removed.into_iter().flat_map(|b| b.txs).collect();
            back.append(&mut self.pool);
            self.pool = back;
        }
        Ok(())
    }

    /// Applies a durable operation: a replay at start-up, or an operation built by
    /// [`SimChain::inject_op`] or for a reorg once it is written.
    pub fn apply(&mut self, op: &Op) -> Result<(), SimError> {
        match op {
            Op::Empty {
                count,
                t0_ms,
                step_ms,
            } => {
                self.push_empty(*count, *t0_ms, *step_ms);
                Ok(())
            }
            Op::Block { t_ms, txs } => {
                let mut candidates = Vec::with_capacity(txs.len());
                for t in txs {
                    candidates.push(match t {
                        BlockTx::Signed { raw } => PoolTx::Signed(decode_signed(raw)?),
                        BlockTx::Injected(i) => PoolTx::Injected(i.clone()),
                    });
                }
                let hashes: Vec<B256> = candidates.iter().map(PoolTx::hash).collect();
                let n = self.head + 1;
                let left = self.mine_block(*t_ms, candidates);
                if !left.is_empty() || !self.blocks.contains_key(&n) {
                    return Err(SimError::Replay(format!(
                        "block {n}: {} of its transactions do not execute",
                        left.len().max(1)
                    )));
                }
                self.pool.retain(|p| !hashes.contains(&p.hash()));
                Ok(())
            }
            Op::Reorg { depth, drop, t_ms } => self.reorg(*depth, *drop, *t_ms),
        }
    }

    /// Keeps operations of empty blocks (already applied) for the next write instead of
    /// writing them now; consecutive ones coalesce. Non-empty operations must be written
    /// at once and are refused here.
    pub fn defer(&mut self, ops: Vec<Op>) -> Result<(), Vec<Op>> {
        if ops.iter().any(|o| !matches!(o, Op::Empty { .. })) {
            return Err(ops);
        }
        for op in ops {
            let Op::Empty {
                count,
                t0_ms,
                step_ms,
            } = op
            else {
                continue;
            };
            if let Some(Op::Empty {
                count: c,
                t0_ms: t,
                step_ms: s,
            }) = self.unflushed.last_mut()
            {
                if *s == step_ms && *t + *c * *s == t0_ms {
                    *c += count;
                    continue;
                }
            }
            self.unflushed.push(Op::Empty {
                count,
                t0_ms,
                step_ms,
            });
        }
        Ok(())
    }

    /// The deferred operations, to be written before any new one (they are already
    /// applied in memory).
    pub fn take_unflushed(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.unflushed)
    }

    /// Whether deferred operations wait for a write.
    pub fn has_unflushed(&self) -> bool {
        !self.unflushed.is_empty()
    }

    /// Puts back deferred operations whose write failed (in front of newer ones).
    pub fn restore_unflushed(&mut self, mut ops: Vec<Op>) {
        ops.append(&mut self.unflushed);
        self.unflushed = ops;
    }

    /// Accepts a signed raw transaction into the mempool (the node's admission rules:
    /// type, chain id, signature, nonce not used, fee at least the base fee, intrinsic gas,
    /// funds for `gas_limit * max_fee + value`, replacement at +10% fees). A transaction
    /// already pending or mined answers its hash.
    pub fn submit(&mut self, raw: &[u8]) -> Result<B256, SimError> {
        self.admit(decode_signed(raw)?)
    }

    /// [`SimChain::submit`] of a transaction the caller has just signed with the key of
    /// `sender`: the sender is taken as vouched instead of recovered from the signature
    /// (two elliptic-curve multiplications, most of the chain's cost per send; issue 16).
    /// Every other admission rule applies as in `submit`. What keeps it honest: only the
    /// chain worker's sender vouches, for bytes its signer returned a moment before, with
    /// the signer's own address; bytes read back from the store go through `submit`; debug
    /// builds recover anyway and refuse a mismatch; and a restart replays every mined
    /// transaction with its sender recovered ([`SimChain::apply`]), so a signature that
    /// does not recover to the treasury would stop the chain from loading.
    pub fn submit_vouched(&mut self, raw: &[u8], sender: Address) -> Result<B256, SimError> {
        self.admit(decode_signed_by(raw, Some(sender))?)
    }

    /// The admission rules of [`SimChain::submit`] for a decoded transaction.
    fn admit(&mut self, s: SignedTx) -> Result<B256, SimError> {
        if self.knows_tx(s.hash) {
            return Ok(s.hash);
        }
        let tx = &s.tx;
        if tx.chain_id != self.genesis.chain_id {
            return Err(reject("invalid chain id"));
        }
        if tx.to.is_create() {
            return Err(reject(
                "contract creation is not supported by the simulated chain",
            ));
        }
        if tx.nonce < self.state.nonce(s.sender) {
            return Err(reject("nonce too low"));
        }
        if tx.max_priority_fee_per_gas > tx.max_fee_per_gas {
            return Err(reject(
                "max priority fee per gas higher than max fee per gas",
            ));
        }
        if tx.max_fee_per_gas < BASE_FEE {
            return Err(reject("max fee per gas less than block base fee"));
        }
        if tx.gas_limit < intrinsic_gas(&tx.input) {
            return Err(reject("intrinsic gas too low"));
        }
        if tx.gas_limit > BLOCK_GAS_LIMIT {
            return Err(reject("exceeds block gas limit"));
        }
        if max_cost(tx).is_none_or(|c| c > self.state.native(s.sender)) {
            return Err(reject("insufficient funds for gas * price + value"));
        }
        let same = self.pool.iter().position(
            |p| matches!(p, PoolTx::Signed(o) if o.sender == s.sender && o.tx.nonce == tx.nonce),
        );
        if let Some(i) = same {
            let PoolTx::Signed(old) = &self.pool[i] else {
                unreachable!("matched a signed transaction")
            };
            let bumped = |new: u128, old: u128| new.saturating_mul(10) >= old.saturating_mul(11);
            if !bumped(tx.max_fee_per_gas, old.tx.max_fee_per_gas)
                || !bumped(tx.max_priority_fee_per_gas, old.tx.max_priority_fee_per_gas)
            {
                return Err(reject("replacement transaction underpriced"));
            }
            let hash = s.hash;
            self.pool[i] = PoolTx::Signed(s);
            return Ok(hash);
        }
        if self.pool.len() >= MEMPOOL_LIMIT {
            return Err(reject("txpool is full"));
        }
        let hash = s.hash;
        self.pool.push(PoolTx::Signed(s));
        Ok(hash)
    }

    /// Drops a pending transaction from the mempool (as `anvil_dropTransaction`); false
    /// when it is not pending (unknown, or already mined).
    pub fn drop_pending(&mut self, hash: B256) -> bool {
        let before = self.pool.len();
        self.pool.retain(|p| p.hash() != hash);
        self.pool.len() != before
    }

    /// Puts an external transfer into the mempool, to be mined with the next block's other
    /// transactions (a payer's transfer as the node first sees it; the simulation of issue
    /// 40 injects its payers' transfers this way). A hash already pending or mined is
    /// ignored: `false`.
    pub fn inject_pending(&mut self, t: Inject) -> bool {
        if self.knows_tx(t.hash) {
            return false;
        }
        self.pool.push(PoolTx::Injected(t));
        true
    }

    /// Gas the call would use at the head, or why it reverts.
    pub fn estimate_gas(&self, call: &CallRequest) -> Result<u64, SimError> {
        self.evaluate(call.from, call.to, call.value, &call.data)
            .map(|(g, _)| g)
    }

    /// A read-only call at the head: `forwarderAddress(bytes32)` and `treasury()` of the
    /// factory, `balanceOf(address)` of a token; anything else reverts.
    pub fn call(&self, to: Address, data: &[u8]) -> Result<Bytes, SimError> {
        let sel = data.get(..4).ok_or_else(|| revert("no selector"))?;
        match self.state.code.get(&to) {
            Some(Code::Factory { treasury }) => {
                if sel == selector("treasury()") && data.len() == 4 {
                    return Ok(address_word(*treasury));
                }
                if sel == selector("forwarderAddress(bytes32)") && data.len() == 36 {
                    let mut salt = [0u8; 32];
                    salt.copy_from_slice(&data[4..36]);
                    let f = create2(&to.0 .0, &salt, &forwarder_init_code_hash());
                    return Ok(address_word(Address::from(f)));
                }
                Err(revert("factory: unknown function"))
            }
            Some(Code::Token) => {
                if sel == selector("balanceOf(address)") && data.len() == 36 {
                    let owner =
                        word_to_address(&data[4..36]).ok_or_else(|| revert("bad address"))?;
                    let v = self.state.token(to, owner);
                    return Ok(Bytes::copy_from_slice(&v.to_be_bytes::<32>()));
                }
                Err(revert("token: unknown function"))
            }
            _ => Err(revert("no such function")),
        }
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
