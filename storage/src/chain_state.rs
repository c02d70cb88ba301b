//! Chain adapters' own state: the live EVM watcher's position and the deposits of recent
//! blocks, the live EVM sender's outgoing transactions, pending list and next nonce, and
//! test mode's simulated block heights. Each has its table in [`crate::schema`] (key
//! layouts documented there); until schema version 2 they lived in `meta` under keys built
//! with `format!`, and [`migrate_meta`] moves such rows on open.
//!
//! The values of [`EVM_OUT_TXS`] and [`EVM_WATCH`] are JSON documents whose shapes belong to
//! the binary's EVM worker (`OutTx`, `WatchState`); the store keeps their bytes.

use redb::{ReadableTable, WriteTransaction};
use uuid::Uuid;

use crate::ctx::{ReadCtx, ReadOps, Reader, WriteCtx};
use crate::records::Deposit;
use crate::schema::*;
use crate::table_reads::sim_last_seq_in;
use crate::StoreError;

/// What [`ChainStateOps::sim_ops_each`] calls with each row: (sequence number, bytes).
pub type SimRowFn<'a> = dyn FnMut(u64, &[u8]) -> Result<(), StoreError> + 'a;

/// Reads of chain-adapter state, for both contexts.
pub trait ChainStateOps: Reader {
    /// The recorded outgoing transaction `nonce` of `chain` (JSON), if any.
    fn evm_out_tx(&self, chain: &str, nonce: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let t = self.open(EVM_OUT_TXS)?;
        let v = t.get((chain, nonce))?.map(|v| v.value().to_vec());
        Ok(v)
    }

    /// The recorded outgoing transactions of `chain` at `nonces` (JSON), in the order given,
    /// leaving out the nonces with none: [`ChainStateOps::evm_out_tx`] of each, with the
    /// table opened once (opening it was most of the cost of reading one row, and the
    /// sender reads every followed row on each pass).
    fn evm_out_txs(&self, chain: &str, nonces: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let t = self.open(EVM_OUT_TXS)?;
        let mut out = Vec::with_capacity(nonces.len());
        for &n in nonces {
            if let Some(v) = t.get((chain, n))? {
                out.push((n, v.value().to_vec()));
            }
        }
        Ok(out)
    }

    /// Nonces of `chain`'s outgoing transactions not yet final, ascending.
    fn evm_pending(&self, chain: &str) -> Result<Vec<u64>, StoreError> {
        let t = self.open(EVM_PENDING)?;
        let mut out = Vec::new();
        for e in t.range((chain, 0u64)..=(chain, u64::MAX))? {
            let (k, _) = e?;
            out.push(k.value().1);
        }
        Ok(out)
    }

    /// The next nonce the sender hands out on `chain` (0 when never used).
    fn evm_next_nonce(&self, chain: &str) -> Result<u64, StoreError> {
        let t = self.open(EVM_NONCES)?;
        let v = t.get(chain)?.map(|v| v.value()).unwrap_or(0);
        Ok(v)
    }

    /// The watcher's state of `chain` (JSON), if it ever ran.
    fn evm_watch(&self, chain: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let t = self.open(EVM_WATCH)?;
        let v = t.get(chain)?.map(|v| v.value().to_vec());
        Ok(v)
    }

    /// Deposits the watcher found in block `block` of `chain`, in id order.
    fn evm_block_deposits(&self, chain: &str, block: u64) -> Result<Vec<Uuid>, StoreError> {
        let t = self.open(EVM_BLOCK_DEPOSITS)?;
        let mut out = Vec::new();
        for e in t.range((chain, block, 0u128)..=(chain, block, u128::MAX))? {
            let (k, _) = e?;
            out.push(Uuid::from_u128(k.value().2));
        }
        Ok(out)
    }

    /// Rows of test project `project`'s simulated chain `chain` with their sequence
    /// numbers, in order: its snapshot first if it has one, then operations (see
    /// [`SIM_OPS`]).
    fn sim_ops_from(&self, project: Uuid, chain: &str) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let t = self.open(SIM_OPS)?;
        let p = project.as_u128();
        let mut out = Vec::new();
        for e in t.range((p, chain, 0u64)..=(p, chain, u64::MAX))? {
            let (k, v) = e?;
            let seq = k.value().2;
            out.push((seq, self.sim_row(project, chain, seq, v.value())?));
        }
        Ok(out)
    }

    /// A `sim_ops` row's bytes as written: for the reference a snapshot leaves in the log
    /// ([`SIM_SNAPSHOT_REF`]), the snapshot itself from its chunks in
    /// [`SIM_SNAPSHOT_CHUNKS`] (the reference as it is when they are missing or have a
    /// gap: it reads as unreadable).
    fn sim_row(
        &self,
        project: Uuid,
        chain: &str,
        seq: u64,
        bytes: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        if bytes != SIM_SNAPSHOT_REF {
            return Ok(bytes.to_vec());
        }
        let t = self.open(SIM_SNAPSHOT_CHUNKS)?;
        let v = sim_snapshot_in(&t, project.as_u128(), chain, seq)?;
        Ok(v.unwrap_or_else(|| bytes.to_vec()))
    }

    /// Calls `f` with each row of test project `project`'s simulated chain `chain` in
    /// order (sequence number, bytes), without holding them all: a long log (written
    /// before snapshots) replays in the memory of one row. Stops at `f`'s first error.
    fn sim_ops_each(
        &self,
        project: Uuid,
        chain: &str,
        f: &mut SimRowFn<'_>,
    ) -> Result<(), StoreError> {
        let t = self.open(SIM_OPS)?;
        let p = project.as_u128();
        for e in t.range((p, chain, 0u64)..=(p, chain, u64::MAX))? {
            let (k, v) = e?;
            let seq = k.value().2;
            if v.value() == SIM_SNAPSHOT_REF {
                f(seq, &self.sim_row(project, chain, seq, v.value())?)?;
            } else {
                f(seq, v.value())?;
            }
        }
        Ok(())
    }

    /// Sequence number of the last stored operation of test project `project`'s simulated
    /// chain `chain` (`None`: none stored). One B-tree descent.
    fn sim_last_seq(&self, project: Uuid, chain: &str) -> Result<Option<u64>, StoreError> {
        sim_last_seq_in(&self.open(SIM_OPS)?, project, chain)
    }

    /// Every (project, chain) that has simulated chain operations.
    fn sim_chains(&self) -> Result<Vec<(Uuid, String)>, StoreError> {
        let t = self.open(SIM_OPS)?;
        let mut out: Vec<(Uuid, String)> = Vec::new();
        for e in t.iter()? {
            let (k, _) = e?;
            let (p, c, _) = k.value();
            let p = Uuid::from_u128(p);
            if out.last().is_none_or(|(lp, lc)| *lp != p || lc != c) {
                out.push((p, c.to_string()));
            }
        }
        Ok(out)
    }

    /// Simulated block height of `chain` (test mode; 0 before the first block).
    fn sim_height(&self, chain: &str) -> Result<u64, StoreError> {
        let t = self.open(SIM_HEIGHTS)?;
        let v = t.get(chain)?.map(|v| v.value()).unwrap_or(0);
        Ok(v)
    }
}

impl<T: Reader> ChainStateOps for T {}

impl WriteCtx<'_> {
    /// Records (or replaces) outgoing transaction `nonce` of `chain`.
    pub fn evm_out_tx_put(
        &mut self,
        chain: &str,
        nonce: u64,
        json: &[u8],
    ) -> Result<(), StoreError> {
        self.insert_tracked(EVM_OUT_TXS, (chain, nonce), json)
    }

    /// Marks outgoing transaction `nonce` of `chain` pending (`true`) or final (`false`).
    pub fn evm_pending_set(
        &mut self,
        chain: &str,
        nonce: u64,
        pending: bool,
    ) -> Result<(), StoreError> {
        let r = (|| {
            let mut t = self.table(EVM_PENDING)?;
            if pending {
                t.insert((chain, nonce), ())?;
            } else {
                t.remove((chain, nonce))?;
            }
            Ok(())
        })();
        self.track(r)
    }

    /// Sets the next nonce the sender hands out on `chain`.
    pub fn evm_next_nonce_put(&mut self, chain: &str, next: u64) -> Result<(), StoreError> {
        self.insert_tracked(EVM_NONCES, chain, next)
    }

    /// Sets the watcher's state of `chain`.
    pub fn evm_watch_put(&mut self, chain: &str, json: &[u8]) -> Result<(), StoreError> {
        self.insert_tracked(EVM_WATCH, chain, json)
    }

    /// Remembers that deposit `id` was found in block `block` of `chain`.
    pub fn evm_block_deposit_add(
        &mut self,
        chain: &str,
        block: u64,
        id: Uuid,
    ) -> Result<(), StoreError> {
        let r = self.with_block_deposits(|t| {
            t.insert((chain, block, id.as_u128()), ())?;
            Ok(())
        });
        self.track(r)
    }

    /// Forgets the deposits of block `block` of `chain` (after a reorg unwound them).
    pub fn evm_block_deposits_clear(&mut self, chain: &str, block: u64) -> Result<(), StoreError> {
        let r = (|| {
            let mut t = self.table(EVM_BLOCK_DEPOSITS)?;
            t.retain_in((chain, block, 0u128)..=(chain, block, u128::MAX), |_, _| {
                false
            })?;
            Ok(())
        })();
        self.track(r)
    }

    /// Forgets the deposits remembered for `chain`'s blocks up to `through` (inclusive), at
    /// most `limit` rows (the oldest first): the watcher keeps a block's deposits only while
    /// a reorg it can still detect may remove the block (the table otherwise grows
    /// by a row per deposit for ever). Returns the rows removed; a later call takes the rest.
    pub fn evm_block_deposits_forget_through(
        &mut self,
        chain: &str,
        through: u64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let r = (|| {
            let mut t = self.table(EVM_BLOCK_DEPOSITS)?;
            let mut removed = 0;
            for e in t
                .extract_from_if(
                    (chain, 0u64, 0u128)..=(chain, through, u128::MAX),
                    |_, _| true,
                )?
                .take(limit)
            {
                e?;
                removed += 1;
            }
            Ok(removed)
        })();
        self.track(r)
    }

    /// Appends operation `seq` of test project `project`'s simulated chain `chain`, already
    /// encoded (`services::sim_chain::encode_op` in the binary: a [`crate::codec`] value; see [`SIM_OPS`]).
    pub fn sim_op_put(
        &mut self,
        project: Uuid,
        chain: &str,
        seq: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let r = self.with_sim_ops(|t| {
            t.insert((project.as_u128(), chain, seq), bytes)?;
            Ok(())
        });
        if r.is_ok() {
            self.sim_op_wrote(project, chain, seq);
        }
        self.track(r)
    }

    /// Writes the snapshot `bytes` of test project `project`'s simulated chain `chain` in
    /// place of its operation `seq` (the last one it covers): the snapshot in chunks of
    /// [`SIM_SNAPSHOT_CHUNKS`] (the chain's other snapshots removed) and
    /// [`SIM_SNAPSHOT_REF`] in [`SIM_OPS`]. Readers of the log get the snapshot at `seq`.
    /// A snapshot is megabytes: in the log itself it would share the rightmost leaf with
    /// the operations appended after it, and every commit that appends one would write
    /// that leaf again; in one row, replacing it would make every later commit write more
    /// (see [`SIM_SNAPSHOT_CHUNKS`]).
    pub fn sim_snapshot_put(
        &mut self,
        project: Uuid,
        chain: &str,
        seq: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let p = project.as_u128();
        let r = (|| {
            let mut t = self.table(SIM_SNAPSHOT_CHUNKS)?;
            sim_snapshot_replace(&mut t, p, chain, seq, bytes)
        })();
        self.track(r)?;
        self.sim_op_put(project, chain, seq, SIM_SNAPSHOT_REF)
    }

    /// Deletes the operations of test project `project`'s simulated chain `chain` below
    /// sequence number `seq` (the operations a snapshot stored at `seq` covers; see
    /// [`SIM_OPS`]). Returns how many were deleted.
    pub fn sim_ops_delete_below(
        &mut self,
        project: Uuid,
        chain: &str,
        seq: u64,
    ) -> Result<u64, StoreError> {
        if seq == 0 {
            return Ok(0);
        }
        let p = project.as_u128();
        let r = self.with_sim_ops(|t| {
            let mut n = 0u64;
            t.retain_in((p, chain, 0u64)..(p, chain, seq), |_, _| {
                n += 1;
                false
            })?;
            Ok(n)
        });
        self.track(r)
    }

    /// Sets the simulated block height of `chain`.
    pub fn sim_height_put(&mut self, chain: &str, height: u64) -> Result<(), StoreError> {
        self.insert_tracked(SIM_HEIGHTS, chain, height)
    }
}

/// `verify`'s checks of the chain-adapter tables: each outgoing transaction is recorded
/// under its own nonce, below the chain's next nonce; each pending nonce has its
/// transaction, not marked done; each remembered block deposit exists on that chain; no
/// legacy `meta` row is left unmigrated. Returns (rows checked, violations).
pub fn check(ctx: &ReadCtx) -> Result<(u64, Vec<String>), StoreError> {
    let mut rows = 0u64;
    let mut bad = Vec::new();
    let txs = ctx.open(EVM_OUT_TXS)?;
    for e in txs.iter()? {
        let (k, v) = e?;
        let (chain, nonce) = k.value();
        rows += 1;
        let doc: Option<serde_json::Value> =
            crate::codec::stored_doc(v.value()).and_then(|j| serde_json::from_slice(&j).ok());
        if doc.as_ref().and_then(|d| d["nonce"].as_u64()) != Some(nonce) {
            bad.push(format!(
                "outgoing transaction {chain}/{nonce} is unreadable or filed under another nonce"
            ));
        }
        if nonce >= ctx.evm_next_nonce(chain)? {
            bad.push(format!(
                "outgoing transaction {chain}/{nonce} is at or above the chain's next nonce"
            ));
        }
    }
    let pending = ctx.open(EVM_PENDING)?;
    for e in pending.iter()? {
        let (k, _) = e?;
        let (chain, nonce) = k.value();
        rows += 1;
        match ctx.evm_out_tx(chain, nonce)? {
            None => bad.push(format!("pending nonce {chain}/{nonce} has no transaction")),
            Some(b) => {
                let done = crate::codec::stored_doc(&b)
                    .and_then(|j| serde_json::from_slice::<serde_json::Value>(&j).ok())
                    .and_then(|d| d["done"].as_bool());
                if done != Some(false) {
                    bad.push(format!(
                        "pending nonce {chain}/{nonce} belongs to a transaction marked done"
                    ));
                }
            }
        }
    }
    let blocks = ctx.open(EVM_BLOCK_DEPOSITS)?;
    for e in blocks.iter()? {
        let (k, _) = e?;
        let (chain, n, id) = k.value();
        rows += 1;
        let id = Uuid::from_u128(id);
        // Keys are the chain id, or `chain/project` for a test project's own chain.
        let chain_id = chain.split('/').next().unwrap_or(chain);
        match ctx.get::<Deposit>(id)? {
            Some(d) if d.chain == chain_id => {}
            _ => bad.push(format!(
                "block {chain}/{n} remembers deposit {id}, which is not a deposit on {chain}"
            )),
        }
    }
    let ops = ctx.open(SIM_OPS)?;
    let mut last: Option<(u128, String, u64)> = None;
    for e in ops.iter()? {
        let (k, v) = e?;
        let (p, chain, seq) = k.value();
        rows += 1;
        let first = !matches!(&last, Some((lp, lc, _)) if *lp == p && lc == chain);
        let expected = match &last {
            Some((_, _, ls)) if !first => ls + 1,
            // A chain's log begins at 0, or at its snapshot (the operations it covers are
            // deleted with its write).
            _ if sim_row_is_snapshot(v.value()) => seq,
            _ => 0,
        };
        if !first && sim_row_is_snapshot(v.value()) {
            bad.push(format!(
                "simulated chain {chain} of project {} has a snapshot after its first operation ({seq})",
                Uuid::from_u128(p)
            ));
        }
        if seq != expected {
            bad.push(format!(
                "simulated chain {chain} of project {} has operation {seq} where {expected} was expected",
                Uuid::from_u128(p)
            ));
        }
        let readable = if v.value() == SIM_SNAPSHOT_REF {
            let chunks = ctx.open(SIM_SNAPSHOT_CHUNKS)?;
            sim_snapshot_in(&chunks, p, chain, seq)?.is_some_and(|b| sim_op_readable(&b))
        } else {
            sim_op_readable(v.value())
        };
        if !readable {
            bad.push(format!(
                "simulated chain {chain} of project {} has an unreadable operation {seq}",
                Uuid::from_u128(p)
            ));
        }
        last = Some((p, chain.to_string(), seq));
    }
    let meta = ctx.open(META)?;
    for p in LEGACY_PREFIXES {
        let end = legacy_end(p);
        for e in meta.range(p..end.as_str())? {
            let (k, _) = e?;
            bad.push(format!(
                "meta key {:?} is chain state of schema version 1 that did not migrate",
                k.value()
            ));
        }
    }
    Ok((rows, bad))
}

/// Whether a stored simulated chain operation parses as a self-describing value: bare JSON
/// (rows written before operations went through the codec, first byte `{`) or a
/// [`crate::codec`] value. Its shape is the binary's (`appliance_chains::sim::Op`), checked
/// when the chain is replayed.
pub fn sim_op_readable(bytes: &[u8]) -> bool {
    decode_sim_op::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// Whether a `sim_ops` row is a snapshot of the chain (the binary's
/// `services::sim_chain::encode_snapshot`: a [`crate::codec`] value, a one-entry map
/// `snapshot` -> the snapshot) rather than one operation. A snapshot is the first row of
/// its chain's log: the state after every operation up to its own sequence number.
pub fn sim_row_is_snapshot(bytes: &[u8]) -> bool {
    if bytes == SIM_SNAPSHOT_REF {
        return true;
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Probe {
        Snapshot(serde::de::IgnoredAny),
    }
    bytes.first() != Some(&b'{') && crate::codec::decode::<Probe>(bytes).is_ok()
}

/// Reads a stored simulated chain operation as `T`: bare JSON when it begins with `{` (rows
/// written before operations went through the codec, read as they are and never
/// rewritten), else a [`crate::codec`] value. Either failing is [`StoreError::Corrupt`].
pub fn decode_sim_op<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    if bytes.first() == Some(&b'{') {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
    } else {
        crate::codec::decode(bytes)
    }
}

/// What [`migrate_meta`] moved.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    pub rows: u64,
    /// Legacy keys whose value did not parse; left in `meta` for the operator (reported by
    /// `verify`).
    pub left: u64,
}

/// Legacy `meta` key prefixes of chain-adapter and sweep-request state (schema versions 1
/// and 2).
pub const LEGACY_PREFIXES: [&str; 7] = [
    "evm_tx:",
    "evm_txs:",
    "evm_nonce:",
    "evm_watch:",
    "evm_block:",
    "sim_height:",
    "sweep_requested:",
];

/// Exclusive end of the `meta` key range of legacy prefix `p` (which ends in `:`): keys of
/// one prefix sort together, and `;` is the character after `:`.
fn legacy_end(p: &str) -> String {
    format!("{};", &p[..p.len() - 1])
}

/// The snapshot of chain (`project`, `chain`) written at `seq`, its chunks of `t`
/// ([`SIM_SNAPSHOT_CHUNKS`]) joined; `None` when it has none, or its chunks are not
/// numbered 0, 1, 2 ... (one missing).
pub(crate) fn sim_snapshot_in(
    t: &impl ReadableTable<(u128, &'static str, u64, u32), &'static [u8]>,
    project: u128,
    chain: &str,
    seq: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for e in t.range((project, chain, seq, 0u32)..=(project, chain, seq, u32::MAX))? {
        let (k, v) = e?;
        if k.value().3 != next {
            return Ok(None);
        }
        next += 1;
        out.extend_from_slice(v.value());
    }
    Ok((next > 0).then_some(out))
}

/// Replaces the snapshots of chain (`project`, `chain`) in `t` ([`SIM_SNAPSHOT_CHUNKS`])
/// with `bytes` written at `seq`, in chunks of at most [`SIM_SNAPSHOT_CHUNK`] bytes.
fn sim_snapshot_replace(
    t: &mut redb::Table<(u128, &'static str, u64, u32), &'static [u8]>,
    project: u128,
    chain: &str,
    seq: u64,
    bytes: &[u8],
) -> Result<(), StoreError> {
    t.retain_in(
        (project, chain, 0u64, 0u32)..=(project, chain, u64::MAX, u32::MAX),
        |_, _| false,
    )?;
    for (i, chunk) in bytes.chunks(SIM_SNAPSHOT_CHUNK).enumerate() {
        let i = u32::try_from(i)
            .map_err(|_| StoreError::Corrupt("a snapshot of more than 2^32 chunks".into()))?;
        t.insert((project, chain, seq, i), chunk)?;
    }
    Ok(())
}

/// Schema 10 -> 11: every simulated chain snapshot of [`SIM_SNAPSHOTS`] (one row each) is
/// written in chunks to [`SIM_SNAPSHOT_CHUNKS`], and `sim_snapshots` is deleted. In the
/// opening transaction, so a crash leaves schema 10 whole. Returns the snapshots moved.
pub fn migrate_sim_snapshots(txn: &WriteTransaction) -> Result<u64, StoreError> {
    let rows: Vec<((u128, String, u64), Vec<u8>)> = {
        let old = txn.open_table(SIM_SNAPSHOTS)?;
        let mut rows = Vec::new();
        for e in old.iter()? {
            let (k, v) = e?;
            let (p, chain, seq) = k.value();
            rows.push(((p, chain.to_string(), seq), v.value().to_vec()));
        }
        rows
    };
    {
        let mut t = txn.open_table(SIM_SNAPSHOT_CHUNKS)?;
        for ((p, chain, seq), bytes) in &rows {
            sim_snapshot_replace(&mut t, *p, chain, *seq, bytes)?;
        }
    }
    txn.delete_table(SIM_SNAPSHOTS)?;
    Ok(rows.len() as u64)
}

fn be_u64(b: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(b).ok().map(u64::from_be_bytes)
}

/// A legacy chain-state row of `meta` (see [`migrate_meta`]), parsed from its key and
/// value; the row's value is kept as it is where its table stores it whole.
enum LegacyRow<'k> {
    OutTx(&'k str, u64),
    Pending(&'k str, Vec<u64>),
    Nonce(&'k str, u64),
    Watch(&'k str),
    Block(&'k str, u64, Vec<Uuid>),
    SweepRequest(Uuid),
    SimHeight(&'k str, u64),
}

impl<'k> LegacyRow<'k> {
    /// The row of key `k` and value `v`; `None` when either does not parse.
    fn parse(k: &'k str, v: &[u8]) -> Option<Self> {
        let (prefix, rest) = k.split_once(':')?;
        let chain_and_number = || {
            let (c, n) = rest.rsplit_once(':')?;
            Some((c, n.parse::<u64>().ok()?))
        };
        Some(match prefix {
            "evm_tx" => {
                let (chain, nonce) = chain_and_number()?;
                LegacyRow::OutTx(chain, nonce)
            }
            "evm_txs" => LegacyRow::Pending(rest, serde_json::from_slice(v).ok()?),
            "evm_nonce" => LegacyRow::Nonce(rest, be_u64(v)?),
            "evm_watch" => LegacyRow::Watch(rest),
            "evm_block" => {
                let (chain, n) = chain_and_number()?;
                LegacyRow::Block(chain, n, serde_json::from_slice(v).ok()?)
            }
            "sweep_requested" => LegacyRow::SweepRequest(Uuid::parse_str(rest).ok()?),
            "sim_height" => LegacyRow::SimHeight(rest, be_u64(v)?),
            _ => return None,
        })
    }
}

/// Schema 1 or 2 -> 3: moves the chain-adapter rows (and the sweep request flags) of `meta`
/// into their tables, in the opening transaction. Legacy layouts:
///
/// ```text
/// evm_tx:<chain>:<nonce, 20 digits>   OutTx JSON            -> evm_out_txs
/// evm_txs:<chain>                     JSON array of nonces  -> evm_pending
/// evm_nonce:<chain>                   u64 big-endian        -> evm_nonces
/// evm_watch:<chain>                   WatchState JSON       -> evm_watch
/// evm_block:<chain>:<n, 20 digits>    JSON array of UUIDs   -> evm_block_deposits
/// sim_height:<chain>                  u64 big-endian        -> sim_heights
/// sweep_requested:<sweep uuid>        b"1"                  -> sweep_requests
/// ```
pub fn migrate_meta(txn: &WriteTransaction) -> Result<Migrated, StoreError> {
    let mut legacy: Vec<(String, Vec<u8>)> = Vec::new();
    {
        let meta = txn.open_table(META)?;
        for p in LEGACY_PREFIXES {
            let end = legacy_end(p);
            for e in meta.range(p..end.as_str())? {
                let (k, v) = e?;
                legacy.push((k.value().to_string(), v.value().to_vec()));
            }
        }
    }
    let mut out = Migrated::default();
    let mut meta = txn.open_table(META)?;
    let mut txs = txn.open_table(EVM_OUT_TXS)?;
    let mut pending = txn.open_table(EVM_PENDING)?;
    let mut nonces = txn.open_table(EVM_NONCES)?;
    let mut watch = txn.open_table(EVM_WATCH)?;
    let mut blocks = txn.open_table(EVM_BLOCK_DEPOSITS)?;
    let mut heights = txn.open_table(SIM_HEIGHTS)?;
    let mut requests = txn.open_table(SWEEP_REQUESTS)?;
    for (k, v) in legacy {
        let Some(row) = LegacyRow::parse(&k, &v) else {
            tracing::warn!(key = %k, "a legacy chain-state row does not parse; left in meta");
            out.left += 1;
            continue;
        };
        match row {
            LegacyRow::OutTx(chain, nonce) => _ = txs.insert((chain, nonce), v.as_slice())?,
            LegacyRow::Pending(chain, list) => {
                for n in list {
                    pending.insert((chain, n), ())?;
                }
            }
            LegacyRow::Nonce(chain, n) => _ = nonces.insert(chain, n)?,
            LegacyRow::Watch(chain) => _ = watch.insert(chain, v.as_slice())?,
            LegacyRow::Block(chain, n, ids) => {
                for id in ids {
                    blocks.insert((chain, n, id.as_u128()), ())?;
                }
            }
            LegacyRow::SweepRequest(id) => _ = requests.insert(id.as_u128(), ())?,
            LegacyRow::SimHeight(chain, h) => _ = heights.insert(chain, h)?,
        }
        meta.remove(k.as_str())?;
        out.rows += 1;
    }
    Ok(out)
}

/// Rows of a simulated chain's log for tests, in the binary's codec shape (a one-entry map
/// naming the variant, positional MessagePack) without depending on the binary.
#[cfg(test)]
pub(crate) mod test_rows {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Row {
        Snapshot((u64, Vec<u8>)),
        Empty((u64, u64, u64)),
    }

    /// An operation (an empty block).
    pub(crate) fn op() -> Vec<u8> {
        crate::codec::encode_positional(&Row::Empty((1, 2, 3)))
    }

    /// A snapshot whose body is `body` (its encoding grows with `body`'s length).
    pub(crate) fn snapshot(seq: u64, body: Vec<u8>) -> Vec<u8> {
        crate::codec::encode_positional(&Row::Snapshot((seq, body)))
    }
}

#[cfg(test)]
mod tests;
