//! [`Snapshot`]: a simulated chain's durable state at one block, so a start loads it and
//! replays only the operations that follow instead of the whole log (the
//! binary's `services::sim_chain` stores it). A child of [`super`] (the chain module): it
//! reads and builds the chain's private parts.
//!
//! What it holds: the head, the newest pruned block ([`super::Floor`]), the reorg forks,
//! the runs of empty blocks and the mined blocks still held (their transactions, receipts
//! and state changes, so a reorg within the held history works after a start), and the
//! state at the head (nonces, native and token balances, contracts). Not the mempool (not
//! durable, as a node's) nor operations deferred and not written. Serde shape: plain
//! structs, tuples and externally tagged enums with byte-valued hashes, addresses and
//! amounts, for a positional MessagePack codec; fields are never reordered or removed, one
//! added goes at the end with `#[serde(default)]`. Entries are sorted, so the same chain
//! always gives the same snapshot.

use std::collections::{BTreeMap, HashMap};

use alloy::primitives::{Address, Bytes, B256, U256};
use serde::{Deserialize, Serialize};

use super::{
    decode_signed, decode_signed_by, Code, Floor, Inject, Log, MinedBlock, PoolTx, Run, SimChain,
    SimError, State, TxResult, Undo,
};

/// A `U256` stored as its big-endian bytes without leading zeros (0 to 32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(pub U256);

impl Serialize for Amount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let be = self.0.to_be_bytes::<32>();
        let start = be.iter().position(|&b| b != 0).unwrap_or(32);
        s.serialize_bytes(&be[start..])
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Amount, D::Error> {
        struct V;
        impl<'v> serde::de::Visitor<'v> for V {
            type Value = Amount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("at most 32 big-endian bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Amount, E> {
                U256::try_from_be_slice(b)
                    .map(Amount)
                    .ok_or_else(|| E::custom("more than 32 bytes"))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, b: Vec<u8>) -> Result<Amount, E> {
                self.visit_bytes(&b)
            }
            fn visit_seq<A: serde::de::SeqAccess<'v>>(self, mut a: A) -> Result<Amount, A::Error> {
                // Formats without a bytes type (JSON) write bytes as a sequence.
                let mut b = Vec::new();
                while let Some(x) = a.next_element::<u8>()? {
                    b.push(x);
                }
                self.visit_bytes(&b)
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A simulated chain's state at its head (see the module documentation). Build with
/// [`SimChain::snapshot`], load with [`SimChain::restore`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The genesis seed of the chain it was taken of (a snapshot never loads into another).
    pub seed: B256,
    /// Number of the newest block.
    pub head: u64,
    /// The newest pruned block: (number, hash, timestamp in Unix ms); number 0: none.
    pub floor: (u64, B256, u64),
    /// First block of each reorg's replacement, in order.
    pub forks: Vec<u64>,
    /// Runs of empty blocks held: (first block, count, first timestamp ms, step ms).
    pub runs: Vec<(u64, u64, u64, u64)>,
    /// Nonce of each account that sent.
    pub nonces: Vec<(Address, u64)>,
    /// Native balances.
    pub native: Vec<(Address, Amount)>,
    /// Token balances: (token, owner, balance).
    pub tokens: Vec<(Address, Address, Amount)>,
    /// Contracts.
    pub code: Vec<(Address, Code)>,
    /// Mined blocks held, ascending.
    pub blocks: Vec<SnapBlock>,
}

/// A mined block held in memory, with what a receipt, a range scan and a reorg need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapBlock {
    pub number: u64,
    pub t_ms: u64,
    pub hash: B256,
    pub txs: Vec<SnapTx>,
    /// One per transaction, in the same order.
    pub results: Vec<SnapResult>,
    /// The block's state changes, in order ([`Undo`]).
    pub undo: Vec<SnapUndo>,
}

/// A transaction of a held block: a signed EIP-2718 transaction, or an injected transfer
/// (hash, from, to, token, value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapTx {
    /// Read only (written before `SignedBy`): its sender is recovered on load.
    Signed(Bytes),
    Injected(B256, Address, Address, Option<Address>, Amount),
    /// A signed transaction and the sender the chain found when it admitted or replayed
    /// it. A load takes the sender as vouched ([`super::decode_signed_by`]: debug builds
    /// recover it anyway and refuse a mismatch): recovering every signed transaction of the
    /// held blocks (a sweep or a payout each, up to hundreds of thousands under load) cost
    /// about 75 us each, seconds per start.
    SignedBy(Bytes, Address),
}

/// What a transaction of a held block did: success, gas used, its top-level native
/// transfer (from, to, value) and its token transfer logs (token, from, to, value, index).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapResult {
    pub success: bool,
    pub gas_used: u64,
    pub native: Option<(Address, Address, Amount)>,
    pub logs: Vec<(Address, Address, Address, Amount, u32)>,
}

/// One state change of a held block, as the value it replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapUndo {
    Nonce(Address, Option<u64>),
    Native(Address, Option<Amount>),
    Token(Address, Address, Option<Amount>),
    Code(Address, Option<Code>),
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort_unstable();
    v
}

fn code_key(c: &Code) -> (u8, Address) {
    match c {
        Code::Proxy => (0, Address::ZERO),
        Code::Factory { treasury } => (1, *treasury),
        Code::Forwarder => (2, Address::ZERO),
        Code::Token => (3, Address::ZERO),
    }
}

impl SimChain {
    /// The chain's durable state now (see [`Snapshot`]). Deferred operations not yet
    /// written are in it (they are applied in memory): the caller takes the snapshot as of
    /// the operations it has written. O(state entries + held blocks).
    pub fn snapshot(&self) -> Snapshot {
        let st = &self.state;
        let mut code: Vec<(Address, Code)> = st.code.iter().map(|(a, c)| (*a, *c)).collect();
        code.sort_unstable_by_key(|(a, c)| (*a, code_key(c)));
        Snapshot {
            seed: self.genesis.seed,
            head: self.head,
            floor: (self.floor.number, self.floor.hash, self.floor.t_ms),
            forks: self.forks.clone(),
            runs: self
                .runs
                .iter()
                .map(|(f, r)| (*f, r.count, r.t0_ms, r.step_ms))
                .collect(),
            nonces: sorted(st.nonces.iter().map(|(a, n)| (*a, *n)).collect()),
            native: sorted(st.native.iter().map(|(a, v)| (*a, Amount(*v))).collect()),
            tokens: sorted(
                st.tokens
                    .iter()
                    .map(|((t, a), v)| (*t, *a, Amount(*v)))
                    .collect(),
            ),
            code,
            blocks: self.blocks.iter().map(|(n, b)| snap_block(*n, b)).collect(),
        }
    }

    /// The chain `s` describes, from `genesis` (the same one it was taken of), with the
    /// default retention and no reader's hold (neither is part of a snapshot). Signed
    /// transactions of held blocks are decoded with the sender the snapshot names (recovered
    /// again in debug builds).
    /// [`SimError::Replay`] when the snapshot is not of this chain or does not hold
    /// together (blocks out of order or past the head, results not matching transactions).
    pub fn restore(genesis: super::Genesis, s: Snapshot) -> Result<SimChain, SimError> {
        let bad = |m: String| SimError::Replay(format!("snapshot: {m}"));
        if s.seed != genesis.seed {
            return Err(bad("taken of another chain".into()));
        }
        if s.floor.0 > s.head {
            return Err(bad("pruned past its head".into()));
        }
        let mut state = State {
            nonces: s.nonces.into_iter().collect(),
            native: s.native.into_iter().map(|(a, v)| (a, v.0)).collect(),
            tokens: s
                .tokens
                .into_iter()
                .map(|(t, a, v)| ((t, a), v.0))
                .collect(),
            code: s.code.into_iter().collect(),
            undo: Vec::new(),
        };
        state.undo.shrink_to_fit();
        let mut runs = BTreeMap::new();
        for (first, count, t0_ms, step_ms) in s.runs {
            if count == 0
                || first == 0
                || first.saturating_add(count - 1) <= s.floor.0
                || first.saturating_add(count - 1) > s.head
            {
                return Err(bad(format!("run of empty blocks at {first} out of range")));
            }
            runs.insert(
                first,
                Run {
                    count,
                    t0_ms,
                    step_ms,
                },
            );
        }
        let mut blocks = BTreeMap::new();
        let mut located = HashMap::new();
        let mut last = s.floor.0;
        for b in s.blocks {
            if b.number <= last || b.number > s.head || b.txs.len() != b.results.len() {
                return Err(bad(format!("block {} out of order or malformed", b.number)));
            }
            last = b.number;
            let (n, mined) = held_block(b)?;
            for (i, t) in mined.txs.iter().enumerate() {
                located.insert(t.hash(), (n, i));
            }
            blocks.insert(n, mined);
        }
        Ok(SimChain {
            genesis,
            head: s.head,
            blocks,
            runs,
            forks: s.forks,
            state,
            located,
            pool: Vec::new(),
            unflushed: Vec::new(),
            floor: Floor {
                number: s.floor.0,
                hash: s.floor.1,
                t_ms: s.floor.2,
            },
            retain: super::RETAIN_BLOCKS,
            hold: None,
        })
    }
}

fn snap_block(n: u64, b: &MinedBlock) -> SnapBlock {
    SnapBlock {
        number: n,
        t_ms: b.t_ms,
        hash: b.hash,
        txs: b
            .txs
            .iter()
            .map(|t| match t {
                PoolTx::Signed(s) => SnapTx::SignedBy(s.raw.clone(), s.sender),
                PoolTx::Injected(i) => {
                    SnapTx::Injected(i.hash, i.from, i.to, i.token, Amount(i.value))
                }
            })
            .collect(),
        results: b
            .results
            .iter()
            .map(|r| SnapResult {
                success: r.success,
                gas_used: r.gas_used,
                native: r.native.map(|(f, t, v)| (f, t, Amount(v))),
                logs: r
                    .logs
                    .iter()
                    .map(|l| (l.token, l.from, l.to, Amount(l.value), l.index))
                    .collect(),
            })
            .collect(),
        undo: b
            .undo
            .iter()
            .map(|u| match u {
                Undo::Nonce(a, v) => SnapUndo::Nonce(*a, *v),
                Undo::Native(a, v) => SnapUndo::Native(*a, v.map(Amount)),
                Undo::Token(t, a, v) => SnapUndo::Token(*t, *a, v.map(Amount)),
                Undo::Code(a, v) => SnapUndo::Code(*a, *v),
            })
            .collect(),
    }
}

fn held_block(b: SnapBlock) -> Result<(u64, MinedBlock), SimError> {
    let mut txs = Vec::with_capacity(b.txs.len());
    for t in b.txs {
        txs.push(match t {
            SnapTx::Signed(raw) => PoolTx::Signed(decode_signed(&raw)?),
            SnapTx::SignedBy(raw, sender) => PoolTx::Signed(decode_signed_by(&raw, Some(sender))?),
            SnapTx::Injected(hash, from, to, token, value) => PoolTx::Injected(Inject {
                hash,
                from,
                to,
                token,
                value: value.0,
            }),
        });
    }
    let results = txs
        .iter()
        .zip(b.results)
        .map(|(t, r)| TxResult {
            hash: t.hash(),
            success: r.success,
            gas_used: r.gas_used,
            native: r.native.map(|(f, t, v)| (f, t, v.0)),
            logs: r
                .logs
                .into_iter()
                .map(|(token, from, to, value, index)| Log {
                    token,
                    from,
                    to,
                    value: value.0,
                    index,
                })
                .collect(),
        })
        .collect();
    let undo = b
        .undo
        .into_iter()
        .map(|u| match u {
            SnapUndo::Nonce(a, v) => Undo::Nonce(a, v),
            SnapUndo::Native(a, v) => Undo::Native(a, v.map(|x| x.0)),
            SnapUndo::Token(t, a, v) => Undo::Token(t, a, v.map(|x| x.0)),
            SnapUndo::Code(a, v) => Undo::Code(a, v),
        })
        .collect();
    Ok((
        b.number,
        MinedBlock {
            t_ms: b.t_ms,
            txs,
            results,
            hash: b.hash,
            undo,
        },
    ))
}
