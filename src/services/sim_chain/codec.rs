//! How a simulated chain is stored: its operations (`sim_ops`, a positional MessagePack
//! of [`StoredOp`]) and its snapshots.

use super::*;

/// An operation as the `sim_ops` table stores it: codec version 3, a positional MessagePack
/// of [`StoredOp`], whose hashes, addresses, amounts and raw transactions are bytes (an
/// injected transfer about 110 B instead of 313 B of hex strings).
pub fn encode_op(op: &Op) -> Vec<u8> {
    appliance_storage::codec::encode_positional(&StoredOp::from(op))
}

/// Reads a stored operation, whichever way it was written: codec version 3 ([`encode_op`]),
/// a codec value of `Op` itself (version 2, MessagePack with named fields and hex strings,
/// `codec::encode_readable`), or bare JSON (rows written before operations went through
/// the codec begin with `{`). Older rows are read as they are and never rewritten.
pub fn decode_op(bytes: &[u8]) -> Result<Op, String> {
    if bytes.first() == Some(&appliance_storage::codec::POSITIONAL_VERSION) {
        return appliance_storage::codec::decode::<StoredOp>(bytes)
            .map_err(|e| e.to_string())
            .and_then(Op::try_from);
    }
    appliance_storage::chain_state::decode_sim_op(bytes).map_err(|e| e.to_string())
}

/// [`Op`] as `sim_ops` stores it from codec version 3. `Op` and its transactions are
/// internally tagged enums, which serde buffers before decoding while declaring the buffer
/// human-readable, so alloy's binary forms (raw bytes) do not read back through them. These
/// mirrors are externally tagged (rmp-serde: a one-entry map, variant name to the fields
/// as an array), which serde decodes without a buffer, so the values are written as bytes.
/// Positional: fields are never reordered or removed; one added goes at the end with
/// `#[serde(default)]` (`appliance_storage::codec`).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StoredOp {
    Empty {
        count: u64,
        t0_ms: u64,
        step_ms: u64,
    },
    Block {
        t_ms: u64,
        txs: Vec<StoredTx>,
    },
    Reorg {
        depth: u64,
        drop: bool,
        t_ms: u64,
    },
    /// A block of one test deposit's transfer (schema 15), the commonest operation of a
    /// test chain: [`StoredTx::Minted`]'s fields without the block's list around them, and
    /// the block's time as its distance in milliseconds from the seed's (a UUID v7 minted a
    /// moment before). Named `d` to keep the row short: 74 bytes instead of 96.
    #[serde(rename = "d")]
    DepositBlock {
        dt_ms: i64,
        seed: Uuid,
        to: Address,
        token: Option<Address>,
        #[serde(with = "u256_trimmed")]
        value: U256,
    },
}

/// [`BlockTx`] as [`StoredOp`] stores it; an injected transfer's fields are [`Inject`]'s.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StoredTx {
    Signed(appliance_chains::evm::Bytes),
    Injected {
        hash: B256,
        from: Address,
        to: Address,
        token: Option<Address>,
        #[serde(with = "u256_trimmed")]
        value: U256,
    },
    /// A test deposit's transfer (schema 14): its hash and sender derive from `seed`
    /// ([`minted_transfer`], `deposits::Minted`), so only the seed is stored, 40 bytes less
    /// than [`StoredTx::Injected`].
    Minted {
        seed: Uuid,
        to: Address,
        token: Option<Address>,
        #[serde(with = "u256_trimmed")]
        value: U256,
    },
}

/// The hash and sender of a test deposit's simulated transfer made from `seed`
/// ([`crate::services::deposits::Minted::fresh`]), as bytes.
pub(super) fn minted_transfer(seed: Uuid) -> (B256, Address) {
    use crate::services::{deposits::Minted, sim_sender_bytes, sim_transfer_hash_bytes};
    (
        B256::from(sim_transfer_hash_bytes(Minted::LABEL, seed)),
        Address::from(sim_sender_bytes(seed)),
    )
}

/// An injected transfer as stored: [`StoredTx::Minted`] when its hash and sender are a test
/// deposit's made from the hash's first 16 bytes, else whole.
fn stored_injected(i: &Inject) -> StoredTx {
    let seed = Uuid::from_slice(&i.hash[..16]).expect("16 bytes");
    if minted_transfer(seed) == (i.hash, i.from) {
        return StoredTx::Minted {
            seed,
            to: i.to,
            token: i.token,
            value: i.value,
        };
    }
    StoredTx::Injected {
        hash: i.hash,
        from: i.from,
        to: i.to,
        token: i.token,
        value: i.value,
    }
}

/// A block's transaction as stored ([`stored_injected`] for an injected transfer).
fn stored_tx(tx: &BlockTx) -> StoredTx {
    match tx {
        BlockTx::Signed { raw } => StoredTx::Signed(raw.clone()),
        BlockTx::Injected(i) => stored_injected(i),
    }
}

/// The test deposit's transfer a stored seed stands for ([`minted_transfer`]).
fn minted_tx(seed: Uuid, to: Address, token: Option<Address>, value: U256) -> BlockTx {
    let (hash, from) = minted_transfer(seed);
    BlockTx::Injected(Inject {
        hash,
        from,
        to,
        token,
        value,
    })
}

/// A `U256` as its big-endian bytes without leading zeros (a test deposit's amount in 4
/// bytes instead of 32); reads 0 to 32 bytes.
mod u256_trimmed {
    use appliance_chains::evm::U256;

    pub fn serialize<S: serde::Serializer>(v: &U256, s: S) -> Result<S::Ok, S::Error> {
        let be = v.to_be_bytes::<32>();
        let start = be.iter().position(|&b| b != 0).unwrap_or(32);
        s.serialize_bytes(&be[start..])
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<U256, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = U256;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("at most 32 big-endian bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<U256, E> {
                U256::try_from_be_slice(b).ok_or_else(|| E::custom("more than 32 bytes"))
            }
        }
        d.deserialize_bytes(V)
    }
}

impl From<&Op> for StoredOp {
    fn from(op: &Op) -> Self {
        match op {
            Op::Empty {
                count,
                t0_ms,
                step_ms,
            } => StoredOp::Empty {
                count: *count,
                t0_ms: *t0_ms,
                step_ms: *step_ms,
            },
            Op::Block { t_ms, txs } if txs.len() == 1 => {
                match stored_tx(&txs[0]) {
                    StoredTx::Minted {
                        seed,
                        to,
                        token,
                        value,
                    } if i64::try_from(*t_ms).is_ok() => StoredOp::DepositBlock {
                        // Both below 2^63 (a u64 of 48 bits, an i64): no overflow.
                        dt_ms: *t_ms as i64 - uuid_ms(seed) as i64,
                        seed,
                        to,
                        token,
                        value,
                    },
                    one => StoredOp::Block {
                        t_ms: *t_ms,
                        txs: vec![one],
                    },
                }
            }
            Op::Block { t_ms, txs } => StoredOp::Block {
                t_ms: *t_ms,
                txs: txs.iter().map(stored_tx).collect(),
            },
            Op::Reorg { depth, drop, t_ms } => StoredOp::Reorg {
                depth: *depth,
                drop: *drop,
                t_ms: *t_ms,
            },
        }
    }
}

impl TryFrom<StoredOp> for Op {
    type Error = String;

    /// `Err` for a [`StoredOp::DepositBlock`] whose time does not add up to a `u64`, which
    /// [`encode_op`] never writes.
    fn try_from(op: StoredOp) -> Result<Self, String> {
        Ok(match op {
            StoredOp::DepositBlock {
                dt_ms,
                seed,
                to,
                token,
                value,
            } => {
                let t_ms = uuid_ms(seed)
                    .checked_add_signed(dt_ms)
                    .ok_or("a test deposit's block time out of range")?;
                Op::Block {
                    t_ms,
                    txs: vec![minted_tx(seed, to, token, value)],
                }
            }
            StoredOp::Empty {
                count,
                t0_ms,
                step_ms,
            } => Op::Empty {
                count,
                t0_ms,
                step_ms,
            },
            StoredOp::Block { t_ms, txs } => Op::Block {
                t_ms,
                txs: txs
                    .into_iter()
                    .map(|tx| match tx {
                        StoredTx::Signed(raw) => BlockTx::Signed { raw },
                        StoredTx::Injected {
                            hash,
                            from,
                            to,
                            token,
                            value,
                        } => BlockTx::Injected(Inject {
                            hash,
                            from,
                            to,
                            token,
                            value,
                        }),
                        StoredTx::Minted {
                            seed,
                            to,
                            token,
                            value,
                        } => minted_tx(seed, to, token, value),
                    })
                    .collect(),
            },
            StoredOp::Reorg { depth, drop, t_ms } => Op::Reorg { depth, drop, t_ms },
        })
    }
}

/// A snapshot as the log stores it in place of the last operation it covers (in chunks
/// of table `sim_snapshot_chunks`, with a reference in `sim_ops`:
/// `WriteCtx::sim_snapshot_put`): codec
/// version 3, positional MessagePack of a one-entry map `snapshot` -> the snapshot (the
/// shape [`StoredOp`] gives its variants, so a row is an operation or a snapshot;
/// `appliance_storage::chain_state::sim_row_is_snapshot`).
pub fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Row<'a> {
        Snapshot(&'a Snapshot),
    }
    appliance_storage::codec::encode_positional(&Row::Snapshot(s))
}

/// A row of `sim_ops`: an operation, or a snapshot of the chain.
pub enum StoredRow {
    Op(Op),
    Snapshot(Box<Snapshot>),
}

/// Reads a row of `sim_ops` ([`encode_snapshot`], or an operation as [`decode_op`] reads
/// it).
pub fn decode_row(bytes: &[u8]) -> Result<StoredRow, String> {
    if appliance_storage::chain_state::sim_row_is_snapshot(bytes) {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Row {
            Snapshot(Box<Snapshot>),
        }
        return match appliance_storage::codec::decode::<Row>(bytes) {
            Ok(Row::Snapshot(s)) => Ok(StoredRow::Snapshot(s)),
            Err(e) => Err(format!("snapshot: {e}")),
        };
    }
    decode_op(bytes).map(StoredRow::Op)
}
