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
mod tests {
    use super::*;
    use crate::records::DepositStatus;
    use crate::{ReadOps, Store, StoreOptions};

    /// A deposit on `chain` seen in block 7 and not yet confirmed.
    fn deposit(chain: &str) -> Deposit {
        Deposit {
            chain: chain.into(),
            block_number: 7,
            confirmations: 0,
            status: DepositStatus::Detected,
            ledger_tx_id: None,
            ..crate::codec::tests::deposit()
        }
    }

    fn reopen(store: Store, path: &std::path::Path) -> Store {
        let h = store.shutdown();
        drop(store);
        if let Some(h) = h {
            h.join().unwrap();
        }
        Store::open(path, StoreOptions::default()).unwrap()
    }

    /// A snapshot row of a simulated chain written over its last operation with the rows
    /// below it deleted: the log then begins at the snapshot, `sim_last_seq` still names
    /// the last row, and `verify` accepts it; a snapshot after a chain's first row, or a
    /// log that begins elsewhere without one, is reported.
    #[test]
    fn a_snapshot_row_cuts_the_simulated_chain_log_and_verifies() {
        let op = test_rows::op();
        let snap = test_rows::snapshot(9, vec![1, 2, 3]);
        assert!(sim_row_is_snapshot(&snap) && sim_op_readable(&snap));
        assert!(!sim_row_is_snapshot(&op) && !sim_row_is_snapshot(b"{\"op\":\"empty\"}"));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
        let (op2, snap2) = (op.clone(), snap.clone());
        let deleted = store
            .write_blocking(move |ctx| {
                for seq in 0..12 {
                    ctx.sim_op_put(p, "ethereum", seq, &op2)?;
                }
                ctx.sim_op_put(q, "ethereum", 0, &op2)?;
                ctx.sim_snapshot_put(p, "ethereum", 9, &snap2)?;
                ctx.sim_ops_delete_below(p, "ethereum", 9)
            })
            .unwrap();
        assert_eq!(deleted, 9);
        let (rows, last, other) = store
            .read_blocking(move |r| {
                Ok((
                    r.sim_ops_from(p, "ethereum")?,
                    r.sim_last_seq(p, "ethereum")?,
                    r.sim_ops_from(q, "ethereum")?.len(),
                ))
            })
            .unwrap();
        let seqs: Vec<u64> = rows.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![9, 10, 11]);
        assert_eq!(
            rows[0].1, snap,
            "the snapshot reads back from its own table"
        );
        assert!(sim_row_is_snapshot(&rows[0].1));
        assert_eq!(last, Some(11));
        // The log holds a reference where the snapshot is; the snapshot its own row.
        let (in_log, kept) = store
            .read_blocking(move |r| {
                let log = r.open(SIM_OPS)?;
                let in_log = log
                    .get((p.as_u128(), "ethereum", 9u64))?
                    .map(|v| v.value().to_vec());
                let chunks = r.open(SIM_SNAPSHOT_CHUNKS)?;
                let kept: Vec<(u64, u32)> = chunks
                    .iter()?
                    .map(|e| e.map(|(k, _)| (k.value().2, k.value().3)))
                    .collect::<Result<_, _>>()?;
                Ok((in_log, kept))
            })
            .unwrap();
        assert_eq!(in_log.as_deref(), Some(SIM_SNAPSHOT_REF));
        assert_eq!(kept, vec![(9, 0)], "one chunk of the one snapshot");
        assert_eq!(other, 1, "another chain's rows stay");
        let v = store.read_blocking(crate::verify::verify).unwrap();
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        // A snapshot after the first row, and a log beginning at 10 without one.
        store
            .write_blocking(move |ctx| {
                ctx.sim_op_put(p, "ethereum", 11, &snap)?;
                ctx.sim_op_put(q, "ethereum", 0, &op)?;
                ctx.sim_op_put(q, "ethereum", 1, &op)?;
                ctx.sim_ops_delete_below(q, "ethereum", 1)?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let v = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
        assert!(v
            .violations
            .iter()
            .any(|m| m.contains("snapshot after its first")));
        assert!(v
            .violations
            .iter()
            .any(|m| m.contains("operation 1 where 0")));
    }

    /// A snapshot of many pages is stored in chunks of at most `SIM_SNAPSHOT_CHUNK` bytes
    /// and reads back whole; the next snapshot of the chain replaces every chunk of the
    /// last (another chain's stay); a snapshot with a chunk missing reads as unreadable and
    /// `verify` names it.
    #[test]
    fn a_large_snapshot_is_stored_in_chunks_under_a_page() {
        let op = test_rows::op();
        let big: Vec<u8> = (0..10_000u32).map(|i| (i % 100) as u8).collect();
        let snap = test_rows::snapshot(5, big);
        let snap2 = test_rows::snapshot(8, vec![9; 4_000]);
        assert!(snap.len() > 3 * SIM_SNAPSHOT_CHUNK && snap.len() < 4 * SIM_SNAPSHOT_CHUNK);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
        let chunks = |store: &Store| -> Vec<(u128, u64, u32, usize)> {
            store
                .read_blocking(|r| {
                    let t = r.open(SIM_SNAPSHOT_CHUNKS)?;
                    let mut out = Vec::new();
                    for e in t.iter()? {
                        let (k, v) = e?;
                        let (kp, _, seq, n) = k.value();
                        out.push((kp, seq, n, v.value().len()));
                    }
                    Ok(out)
                })
                .unwrap()
        };
        let (o, s1) = (op.clone(), snap.clone());
        store
            .write_blocking(move |ctx| {
                for seq in 0..8 {
                    ctx.sim_op_put(p, "ethereum", seq, &o)?;
                    ctx.sim_op_put(q, "ethereum", seq, &o)?;
                }
                ctx.sim_snapshot_put(p, "ethereum", 5, &s1)?;
                ctx.sim_ops_delete_below(p, "ethereum", 5)?;
                ctx.sim_snapshot_put(q, "ethereum", 3, &s1)?;
                ctx.sim_ops_delete_below(q, "ethereum", 3)
            })
            .unwrap();
        // (sequence number, chunk number) of `id`'s chunks.
        let of = |got: &[(u128, u64, u32, usize)], id: Uuid| -> Vec<(u64, u32)> {
            got.iter()
                .filter(|c| c.0 == id.as_u128())
                .map(|c| (c.1, c.2))
                .collect()
        };
        let got = chunks(&store);
        assert_eq!(of(&got, p), vec![(5, 0), (5, 1), (5, 2), (5, 3)]);
        assert!(got.iter().all(|c| c.3 <= SIM_SNAPSHOT_CHUNK), "{got:?}");
        let rows = store
            .read_blocking(move |r| r.sim_ops_from(p, "ethereum"))
            .unwrap();
        assert_eq!(
            rows[0],
            (5, snap.clone()),
            "the chunks join to the snapshot"
        );
        assert_eq!(rows.len(), 3);
        let v = store.read_blocking(crate::verify::verify).unwrap();
        assert!(v.violations.is_empty(), "{:?}", v.violations);

        // The next snapshot of p replaces its four chunks with two; q's stay.
        let s2 = snap2.clone();
        store
            .write_blocking(move |ctx| {
                ctx.sim_snapshot_put(p, "ethereum", 7, &s2)?;
                ctx.sim_ops_delete_below(p, "ethereum", 7)
            })
            .unwrap();
        let got = chunks(&store);
        assert_eq!(of(&got, p), vec![(7, 0), (7, 1)]);
        assert_eq!(of(&got, q).len(), 4);
        let rows = store
            .read_blocking(move |r| r.sim_ops_from(p, "ethereum"))
            .unwrap();
        assert_eq!(rows, vec![(7, snap2)]);

        // A chunk of q's snapshot lost: its row reads as the bare reference, which
        // `verify` reports as unreadable.
        store
            .write_blocking(move |ctx| {
                let mut t = ctx.table(SIM_SNAPSHOT_CHUNKS)?;
                t.remove((q.as_u128(), "ethereum", 3u64, 1u32))?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let rows = store
            .read_blocking(move |r| r.sim_ops_from(q, "ethereum"))
            .unwrap();
        assert_eq!(rows[0], (3, SIM_SNAPSHOT_REF.to_vec()));
        let v = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert!(
            v.violations[0].contains("unreadable operation 3"),
            "{:?}",
            v.violations
        );
    }

    /// A store of schema version 1 (chain state under `format!` keys of `meta`, exactly as
    /// schema 1 wrote it) opens, migrates every row to its table and verifies.
    #[test]
    fn a_version_1_store_migrates_its_chain_state_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let d = deposit("base-sepolia");
        let did = d.id;
        let rid = Uuid::now_v7();
        let tx = |nonce: u64, done: bool| {
            serde_json::json!({
                "nonce": nonce, "kind": "payout", "ref_id": Uuid::now_v7(),
                "project_id": Uuid::now_v7(),
                "to": "0x0000000000000000000000000000000000000003", "value": "0",
                "data": "", "gas_limit": 21000, "max_fee_per_gas": "2",
                "max_priority_fee_per_gas": "1", "raws": ["02"], "hashes": ["0x01"],
                "sent_at": 0, "done": done
            })
            .to_string()
        };
        let (t0, t1) = (tx(0, true), tx(1, false));
        let (t0c, t1c) = (t0.clone(), t1.clone());
        let watch =
            r#"{"cursor":{"height":9,"recent":[[8,"0x08"],[9,"0x09"]]},"chain_id_checked":true}"#;
        store
            .write_blocking(move |ctx| {
                ctx.put(&d)?;
                ctx.meta_put("schema_version", &1u32.to_be_bytes())?;
                ctx.meta_put(&format!("evm_tx:base-sepolia:{:020}", 0), t0.as_bytes())?;
                ctx.meta_put(&format!("evm_tx:base-sepolia:{:020}", 1), t1.as_bytes())?;
                ctx.meta_put("evm_txs:base-sepolia", b"[1]")?;
                ctx.meta_put("evm_nonce:base-sepolia", &2u64.to_be_bytes())?;
                ctx.meta_put("evm_watch:base-sepolia", watch.as_bytes())?;
                let ids = serde_json::to_vec(&[did]).unwrap();
                ctx.meta_put(&format!("evm_block:base-sepolia:{:020}", 7), &ids)?;
                ctx.meta_put(&format!("evm_block:base-sepolia:{:020}", 8), b"[]")?;
                ctx.meta_put("sim_height:ethereum", &41u64.to_be_bytes())?;
                ctx.meta_put(&format!("sweep_requested:{rid}"), b"1")?;
                ctx.meta_put("unrelated", b"1")?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
        // Before the migration, verify names every legacy row.
        let before = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(before.violations.len(), 9, "{:?}", before.violations);

        let store = reopen(store, &path);
        let (version, left) = store
            .read_blocking(|r| {
                let v = r.meta_get("schema_version")?.unwrap();
                let mut left = Vec::new();
                for p in LEGACY_PREFIXES {
                    let t = r.open(META)?;
                    let end = legacy_end(p);
                    for e in t.range(p..end.as_str())? {
                        left.push(e?.0.value().to_string());
                    }
                }
                Ok((v, left))
            })
            .unwrap();
        assert_eq!(version, crate::schema::SCHEMA_VERSION.to_be_bytes());
        assert!(left.is_empty(), "{left:?}");
        let batch = store
            .read_blocking(|r| r.evm_out_txs("base-sepolia", &[1, 5, 0]))
            .unwrap();
        assert_eq!(
            batch,
            vec![(1, t1c.as_bytes().to_vec()), (0, t0c.as_bytes().to_vec())],
            "rows in the order asked, absent nonces left out"
        );
        let (tx0, tx1, pending, next, w, b7, b8, h) = store
            .read_blocking(|r| {
                Ok((
                    r.evm_out_tx("base-sepolia", 0)?,
                    r.evm_out_tx("base-sepolia", 1)?,
                    r.evm_pending("base-sepolia")?,
                    r.evm_next_nonce("base-sepolia")?,
                    r.evm_watch("base-sepolia")?,
                    r.evm_block_deposits("base-sepolia", 7)?,
                    r.evm_block_deposits("base-sepolia", 8)?,
                    r.sim_height("ethereum")?,
                ))
            })
            .unwrap();
        assert_eq!(tx0.as_deref(), Some(t0c.as_bytes()));
        assert_eq!(tx1.as_deref(), Some(t1c.as_bytes()));
        assert_eq!(pending, vec![1]);
        assert_eq!(next, 2);
        assert_eq!(w.unwrap(), watch.as_bytes());
        assert_eq!(b7, vec![did]);
        assert!(b8.is_empty());
        assert_eq!(h, 41);
        assert!(store
            .read_blocking(move |r| r.sweep_requested(rid))
            .unwrap());
        assert!(!store
            .read_blocking(|r| r.sweep_requested(Uuid::now_v7()))
            .unwrap());
        // Other meta rows stay where they are.
        let other = store.read_blocking(|r| r.meta_get("unrelated")).unwrap();
        assert_eq!(other.as_deref(), Some(&b"1"[..]));
        let v = store.read_blocking(crate::verify::verify).unwrap();
        assert!(v.violations.is_empty(), "{:?}", v.violations);

        // Opening again migrates nothing twice and the tables are written through the
        // typed accessors from then on.
        let store = reopen(store, &path);
        store
            .write_blocking(|ctx| {
                ctx.evm_pending_set("base-sepolia", 1, false)?;
                ctx.evm_block_deposits_clear("base-sepolia", 7)?;
                ctx.sim_height_put("ethereum", 42)?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let (pending, b7, h) = store
            .read_blocking(|r| {
                Ok((
                    r.evm_pending("base-sepolia")?,
                    r.evm_block_deposits("base-sepolia", 7)?,
                    r.sim_height("ethereum")?,
                ))
            })
            .unwrap();
        assert!(pending.is_empty());
        assert!(b7.is_empty());
        assert_eq!(h, 42);
    }

    /// The deposits of blocks a reorg can no longer reach are forgotten oldest first, at
    /// most `limit` per call, and only on the chain named; later blocks stay.
    #[test]
    fn old_blocks_deposits_are_forgotten_in_steps() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let ids: Vec<Uuid> = (0..10).map(|_| Uuid::now_v7()).collect();
        let ids2 = ids.clone();
        store
            .write_blocking(move |ctx| {
                for (i, id) in ids2.iter().enumerate() {
                    ctx.evm_block_deposit_add("ethereum", i as u64 / 2, *id)?;
                    ctx.evm_block_deposit_add("bsc", i as u64 / 2, *id)?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        // Blocks 0..=3 hold 8 rows: 5, then the 3 left, then none.
        for want in [5, 3, 0] {
            let n = store
                .write_blocking(|ctx| ctx.evm_block_deposits_forget_through("ethereum", 3, 5))
                .unwrap();
            assert_eq!(n, want);
        }
        let (b3, b4, other) = store
            .read_blocking(|r| {
                Ok((
                    r.evm_block_deposits("ethereum", 3)?,
                    r.evm_block_deposits("ethereum", 4)?,
                    r.evm_block_deposits("bsc", 0)?,
                ))
            })
            .unwrap();
        assert!(b3.is_empty());
        assert_eq!(b4.len(), 2, "a later block stays");
        assert_eq!(other.len(), 2, "another chain stays");
    }
}
