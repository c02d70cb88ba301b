//! The live adapters' durable state, kept in their tables of the store
//! (`appliance_storage::schema`: `evm_watch`, `evm_block_deposits`, `evm_out_txs`,
//! `evm_pending`, `evm_nonces`): the watcher's position and the deposits of each recent
//! block, and the sender's outgoing transactions, pending set and next nonce. This module
//! owns the JSON shapes of the watcher state and of an outgoing transaction.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use appliance_chains::evm::watcher::Cursor;
use appliance_chains::evm::Address;
use appliance_storage::{ChainStateOps, StoreError, WriteCtx};

use crate::services::error::Fault;

/// The watcher's durable state (table `evm_watch`, JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WatchState {
    pub cursor: Cursor,
    /// Chain id verified against the node.
    #[serde(default)]
    pub chain_id_checked: bool,
}

/// The watcher's stored state of `chain` (the default before its first batch; a value
/// that does not parse reads as the default too).
pub fn load_watch(r: &impl ChainStateOps, chain: &str) -> Result<WatchState, StoreError> {
    Ok(r.evm_watch(chain)?
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default())
}

pub(crate) fn save_watch(ctx: &mut WriteCtx<'_>, chain: &str, w: &WatchState) -> Result<(), Fault> {
    let bytes = serde_json::to_vec(w).map_err(Fault::invariant)?;
    ctx.evm_watch_put(chain, &bytes)?;
    Ok(())
}

/// What an outgoing transaction is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutKind {
    Payout,
    Sweep,
    Factory,
    /// The ERC-20 approval of a conversion batch's DEX router (`ref_id`: the batch).
    Approve,
    /// The DEX swap of a conversion batch (`ref_id`: the batch).
    Swap,
    /// A zero-value self-transfer filling a nonce that had no transaction to send (a nonce
    /// gap with nothing stored at it).
    Filler,
}

/// Where the chain showed a transaction mined, as the sender last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MinedAt {
    /// Hash of the version that was mined (a fee bump or a filler has its own).
    pub hash: String,
    pub block: u64,
    /// The mined version is a filler (zero-value self-transfer), not the call.
    pub filler: bool,
}

/// An outgoing transaction of the master wallet, recorded before its first broadcast
/// (table `evm_out_txs`, JSON): one row per nonce, holding every version signed at it.
///
/// Its life: signed and stored, then broadcast; `mined` while the chain
/// shows a receipt (cleared again when a reorg removes it: the row is back to submitted
/// and its stored bytes are rebroadcast); `settled` once the receipt had the chain's
/// confirmations and the resource's ledger move was written; `done` once it is deeper than
/// the sender follows reorgs (or its resource was re-planned at another nonce).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutTx {
    pub nonce: u64,
    pub kind: OutKind,
    pub ref_id: Uuid,
    pub project_id: Uuid,
    pub to: Address,
    /// Decimal.
    pub value: String,
    /// Hex calldata.
    pub data: String,
    pub gas_limit: u64,
    /// Decimal wei.
    pub max_fee_per_gas: String,
    pub max_priority_fee_per_gas: String,
    /// Signed raw transactions, one per fee level (the last is the current one).
    pub raws: Vec<String>,
    pub hashes: Vec<String>,
    /// When the current version was signed (Unix microseconds).
    pub sent_at: i64,
    pub done: bool,
    /// The receipt the chain last showed; `None` while unmined or after it vanished.
    #[serde(default)]
    pub mined: Option<MinedAt>,
    /// The resource's outcome is written (`Some(success)` of the mined call); the row is
    /// still followed for reorgs until `done`.
    #[serde(default)]
    pub settled: Option<bool>,
    /// Zero-value self-transfers signed at this nonce in place of the call, because the
    /// call could no longer succeed or must not run again; newest last. Once one is final
    /// the resource is re-planned at a new nonce.
    #[serde(default)]
    pub filler_raws: Vec<String>,
    #[serde(default)]
    pub filler_hashes: Vec<String>,
}

impl OutTx {
    /// The version to (re)broadcast: the newest filler if any, else the newest call.
    pub fn current(&self) -> Option<(&str, &str)> {
        if let (Some(r), Some(h)) = (self.filler_raws.last(), self.filler_hashes.last()) {
            return Some((r.as_str(), h.as_str()));
        }
        match (self.raws.last(), self.hashes.last()) {
            (Some(r), Some(h)) => Some((r.as_str(), h.as_str())),
            _ => None,
        }
    }

    /// Every version's hash with whether it is a filler, newest first (fillers first).
    pub fn versions(&self) -> Vec<(&str, bool)> {
        let mut v: Vec<(&str, bool)> = self
            .filler_hashes
            .iter()
            .rev()
            .map(|h| (h.as_str(), true))
            .collect();
        v.extend(self.hashes.iter().rev().map(|h| (h.as_str(), false)));
        v
    }
}

/// Next nonce the store will hand out (0 when never used).
pub fn stored_nonce(r: &impl ChainStateOps, chain: &str) -> Result<u64, StoreError> {
    r.evm_next_nonce(chain)
}

/// Nonces of the transactions not yet final, ascending.
pub fn pending_nonces(r: &impl ChainStateOps, chain: &str) -> Result<Vec<u64>, StoreError> {
    r.evm_pending(chain)
}

/// The sender's rows on `chain` that `keep` accepts, by nonce (for a report: every nonce
/// the sender has used is read).
pub fn out_txs_where(
    r: &impl ChainStateOps,
    chain: &str,
    keep: impl Fn(&OutTx) -> bool,
) -> Result<Vec<OutTx>, StoreError> {
    let mut out = Vec::new();
    for n in 0..stored_nonce(r, chain)? {
        out.extend(out_tx(r, chain, n)?.filter(|t| keep(t)));
    }
    Ok(out)
}

/// A recorded outgoing transaction (`None` when absent or unreadable).
pub fn out_tx(
    r: &impl ChainStateOps,
    chain: &str,
    nonce: u64,
) -> Result<Option<OutTx>, StoreError> {
    Ok(r.evm_out_tx(chain, nonce)?.and_then(|b| decode_tx(&b)))
}

/// An outgoing transaction from its stored bytes, JSON or deflated JSON
/// (`appliance_storage::codec::stored_doc`); `None`: unreadable, and left out by every
/// reader, as [`out_tx`] leaves it out.
pub fn decode_tx(bytes: &[u8]) -> Option<OutTx> {
    let json = appliance_storage::codec::stored_doc(bytes)?;
    serde_json::from_slice(&json).ok()
}

/// An unreadable stored row as an operator can read it in a log: its JSON when it inflates
/// to text, else its bytes in hex; at most `max` bytes of either.
pub fn row_for_log(bytes: &[u8], max: usize) -> String {
    match appliance_storage::codec::stored_doc(bytes) {
        Some(j) => String::from_utf8_lossy(&j[..j.len().min(max)]).into_owned(),
        None => hex::encode(&bytes[..bytes.len().min(max / 2)]),
    }
}

/// The outgoing transactions of `chain` not yet final, by ascending nonce, read with one
/// open of the table ([`ChainStateOps::evm_out_txs`]); unreadable rows left out.
pub fn pending_txs(r: &impl ChainStateOps, chain: &str) -> Result<Vec<OutTx>, StoreError> {
    Ok(r.evm_out_txs(chain, &pending_nonces(r, chain)?)?
        .into_iter()
        .filter_map(|(_, b)| decode_tx(&b))
        .collect())
}

pub(super) fn put_tx(ctx: &mut WriteCtx<'_>, chain: &str, tx: &OutTx) -> Result<(), Fault> {
    ctx.evm_out_tx_put(chain, tx.nonce, &encode_tx(tx)?)?;
    Ok(())
}

/// The stored bytes of `tx`: its JSON deflated with the rows' preset dictionary
/// (`appliance_storage::codec::deflate_doc`, schema 12; well under half the
/// JSON, the signed transactions' hex included), or the JSON when that is not shorter.
pub fn encode_tx(tx: &OutTx) -> Result<Vec<u8>, Fault> {
    use appliance_storage::codec::{deflate_doc, OUT_TX_DEFLATE_1};
    let json = serde_json::to_vec(tx).map_err(Fault::invariant)?;
    Ok(deflate_doc(OUT_TX_DEFLATE_1, &json).unwrap_or(json))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> OutTx {
        serde_json::from_str(
            r#"{"nonce":3,"kind":"payout","ref_id":"00000000-0000-0000-0000-000000000000",
                "project_id":"00000000-0000-0000-0000-000000000000",
                "to":"0x0000000000000000000000000000000000000001","value":"5","data":"",
                "gas_limit":21000,"max_fee_per_gas":"1","max_priority_fee_per_gas":"1",
                "raws":["aa","bb"],"hashes":["0x01","0x02"],"sent_at":0,"done":false}"#,
        )
        .unwrap()
    }

    /// Schema 12: a row is stored deflated (a payout's signed transaction and calldata
    /// included: well under half its JSON) and reads back whole; a JSON row of an earlier
    /// schema reads; an unreadable row is logged as its JSON, or as hex when it is not.
    #[test]
    fn rows_are_stored_deflated_and_json_rows_still_read() {
        let mut t = row();
        t.kind = OutKind::Payout;
        t.ref_id = Uuid::now_v7();
        t.project_id = Uuid::now_v7();
        t.data = format!(
            "a9059cbb{:0>64}{:064x}",
            "70997970c51812dc3a010c7d01b50e0d17dc79c8", 2_500_000
        );
        // A signed transaction's body and signature look random: xorshift bytes.
        let raw = |seed: u64| {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let body: Vec<u8> = (0..150)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            format!(
                "02f8b1018084773594008477359400830186a094{}",
                hex::encode(body)
            )
        };
        t.raws = vec![raw(1), raw(2)];
        t.hashes = vec![
            format!("0x{}", "ab".repeat(32)),
            format!("0x{}", "cd".repeat(32)),
        ];
        t.mined = Some(MinedAt {
            hash: t.hashes[1].clone(),
            block: 12_345_678,
            filler: false,
        });
        let json = serde_json::to_vec(&t).unwrap();
        let stored = encode_tx(&t).unwrap();
        assert!(
            stored.len() * 2 < json.len(),
            "{} of {} bytes",
            stored.len(),
            json.len()
        );
        let back = decode_tx(&stored).unwrap();
        assert_eq!(serde_json::to_vec(&back).unwrap(), json);
        assert_eq!(
            serde_json::to_vec(&decode_tx(&json).unwrap()).unwrap(),
            json
        );

        let damaged = &stored[..stored.len() - 4];
        assert!(decode_tx(damaged).is_none());
        assert_eq!(row_for_log(damaged, 8), hex::encode(&damaged[..4]));
        assert_eq!(row_for_log(b"{\"damaged", 100), "{\"damaged");
    }

    #[test]
    fn a_row_of_schema_version_3_reads_as_unmined_and_unsettled() {
        let t = row();
        assert_eq!(t.mined, None);
        assert_eq!(t.settled, None);
        assert!(t.filler_hashes.is_empty());
    }

    #[test]
    fn the_newest_filler_is_current_and_versions_list_fillers_first() {
        let mut t = row();
        assert_eq!(t.current(), Some(("bb", "0x02")));
        assert_eq!(t.versions(), vec![("0x02", false), ("0x01", false)]);
        t.filler_raws.push("cc".into());
        t.filler_hashes.push("0x03".into());
        assert_eq!(t.current(), Some(("cc", "0x03")));
        assert_eq!(
            t.versions(),
            vec![("0x03", true), ("0x02", false), ("0x01", false)]
        );
    }
}
