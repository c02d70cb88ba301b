//! The simulated UTXO chain of test mode: blocks, a mempool, the set of unspent outputs,
//! reorgs and dropped transactions, answering as a node does ([`UtxoNode`]).
//!
//! A broadcast transaction is checked as a node checks it: it decodes; every input spends
//! an unspent output (mined, or in the mempool); each signature verifies against the
//! output's P2WPKH or P2PKH script (BIP143 or legacy signature hash, `SIGHASH_ALL`); the
//! outputs do not exceed the inputs; the fee pays [`MIN_RELAY_KVB`]. A transaction
//! spending what a mempool transaction spends replaces it only as BIP125 allows (the old
//! one signals replacement, the new one pays its fee plus its own size at the minimum
//! rate). Money enters through [`SimUtxoChain::fund`] (test deposits and the genesis funds
//! of the master), a transaction with no inputs, as a coinbase is.
//!
//! Hashes are derived from a counter, so the same calls give the same chain.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use bitcoin::consensus::deserialize;
use bitcoin::hashes::{hash160, sha256d, Hash};
use bitcoin::secp256k1::{ecdsa, Message, PublicKey, Secp256k1, VerifyOnly};
use bitcoin::sighash::{EcdsaSighashType, SighashCache};
use bitcoin::{Amount, ScriptBuf, Transaction};

use super::follow::block_ref;
use super::rpc::{OutPoint, TxOut, UtxoBlock, UtxoTx};
use super::UtxoNode;
use crate::client::{BlockRef, ClientError};

/// The lowest fee rate relayed, atomic units per 1,000 vbytes (bitcoin's 1 sat/vB).
pub const MIN_RELAY_KVB: u64 = 1_000;
/// Seconds between simulated blocks.
const BLOCK_SECONDS: u64 = 600;

#[derive(Clone, Debug)]
struct SimTx {
    tx: UtxoTx,
    /// Whether any input signals BIP125 replacement.
    replaceable: bool,
    fee: u64,
}

#[derive(Clone, Debug)]
struct SimBlock {
    hash: String,
    prev: Option<String>,
    time: u64,
    txs: Vec<SimTx>,
}

/// An unspent output: value and script.
type Coin = (u64, Vec<u8>);

#[derive(Debug)]
struct State {
    blocks: Vec<SimBlock>,
    mempool: Vec<SimTx>,
    /// Unspent outputs of the mined chain.
    utxos: HashMap<OutPoint, Coin>,
    counter: u64,
}

/// Why a broadcast is refused (the node's `sendrawtransaction` refusal).
fn refused(detail: impl Into<String>) -> ClientError {
    ClientError::Refused {
        method: "sendrawtransaction",
        detail: detail.into(),
    }
}

/// A simulated UTXO chain behind a lock, shared by the test endpoints and the workers.
#[derive(Debug)]
pub struct SimUtxoChain {
    state: Mutex<State>,
    secp: Secp256k1<VerifyOnly>,
}

impl Default for SimUtxoChain {
    fn default() -> Self {
        SimUtxoChain::new()
    }
}

impl SimUtxoChain {
    /// A chain of its genesis block alone.
    pub fn new() -> SimUtxoChain {
        let mut s = State {
            blocks: Vec::new(),
            mempool: Vec::new(),
            utxos: HashMap::new(),
            counter: 0,
        };
        let genesis = s.next_block(None, 0, Vec::new());
        s.blocks.push(genesis);
        SimUtxoChain {
            state: Mutex::new(s),
            secp: Secp256k1::verification_only(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New money: a transaction with no inputs paying `outputs` (script, atomic units),
    /// waiting in the mempool until [`SimUtxoChain::mine`]. Answers its txid.
    pub fn fund(&self, outputs: &[(Vec<u8>, u64)]) -> String {
        let mut s = self.state();
        s.counter += 1;
        let mut seed = s.counter.to_be_bytes().to_vec();
        for (script, value) in outputs {
            seed.extend_from_slice(script);
            seed.extend_from_slice(&value.to_be_bytes());
        }
        let txid = printed(&seed);
        let tx = UtxoTx {
            txid: txid.clone(),
            inputs: Vec::new(),
            outputs: outputs
                .iter()
                .enumerate()
                .map(|(n, (script, value))| TxOut {
                    n: n as u32,
                    value: *value,
                    script_hex: hex::encode(script),
                    address: None,
                })
                .collect(),
        };
        s.mempool.push(SimTx {
            tx,
            replaceable: false,
            fee: 0,
        });
        txid
    }

    /// Mines `n` blocks, the first holding the whole mempool in arrival order.
    pub fn mine(&self, n: u64) {
        let mut s = self.state();
        for _ in 0..n {
            let txs = std::mem::take(&mut s.mempool);
            s.push_block(txs);
        }
    }

    /// Replaces the last `depth` blocks (never the genesis) with `depth + 1` new ones: the
    /// first holds their transactions again, but for those in `drop` and any that spend
    /// what a dropped one paid (double-spent away, as on a branch that never had them);
    /// the mempool's transactions follow as they can.
    pub fn reorg(&self, depth: u64, drop: &[String]) {
        let mut s = self.state();
        let keep = s.blocks.len() as u64 - 1;
        let depth = depth.min(keep);
        let removed: Vec<SimBlock> = (0..depth).filter_map(|_| s.blocks.pop()).collect();
        s.rebuild_utxos();
        let mut again: Vec<SimTx> = removed.into_iter().rev().flat_map(|b| b.txs).collect();
        again.append(&mut s.mempool);
        let dropped: HashSet<&String> = drop.iter().collect();
        let mut block = Vec::new();
        let mut paid: HashMap<OutPoint, Coin> = HashMap::new();
        for t in again {
            if dropped.contains(&t.tx.txid) {
                continue;
            }
            let spendable =
                t.tx.inputs
                    .iter()
                    .all(|i| s.utxos.contains_key(i) || paid.contains_key(i));
            if !spendable {
                continue;
            }
            for i in &t.tx.inputs {
                paid.remove(i);
            }
            for o in &t.tx.outputs {
                let script = hex::decode(&o.script_hex).unwrap_or_default();
                paid.insert(
                    OutPoint {
                        txid: t.tx.txid.clone(),
                        vout: o.n,
                    },
                    (o.value, script),
                );
            }
            block.push(t);
        }
        s.push_block(block);
        for _ in 0..depth {
            s.push_block(Vec::new());
        }
    }

    /// Removes a mempool transaction (and those spending its outputs), as a node that
    /// evicts it. `false` when it is not in the mempool.
    pub fn drop_tx(&self, txid: &str) -> bool {
        let mut s = self.state();
        let before = s.mempool.len();
        s.evict(txid);
        s.mempool.len() < before
    }

    /// The unspent mined outputs locked to `script`.
    pub fn unspent(&self, script: &[u8]) -> Vec<(OutPoint, u64)> {
        let s = self.state();
        let mut v: Vec<(OutPoint, u64)> = s
            .utxos
            .iter()
            .filter(|(_, (_, sc))| sc == script)
            .map(|(o, (value, _))| (o.clone(), *value))
            .collect();
        v.sort_by(|a, b| (&a.0.txid, a.0.vout).cmp(&(&b.0.txid, b.0.vout)));
        v
    }

    /// Checks a broadcast transaction and puts it in the mempool.
    fn accept(&self, raw: &[u8]) -> Result<String, ClientError> {
        let tx: Transaction =
            deserialize(raw).map_err(|e| refused(format!("TX decode failed: {e}")))?;
        let txid = tx.compute_txid().to_string();
        let mut s = self.state();
        if s.mempool.iter().any(|t| t.tx.txid == txid)
            || s.blocks
                .iter()
                .any(|b| b.txs.iter().any(|t| t.tx.txid == txid))
        {
            return Ok(txid);
        }
        if tx.input.is_empty() || tx.output.is_empty() {
            return Err(refused("bad-txns-vin-empty or vout-empty"));
        }
        let mempool_out = s.mempool_outputs();
        let mut prevouts = Vec::with_capacity(tx.input.len());
        let mut conflicts: HashSet<String> = HashSet::new();
        for input in &tx.input {
            let op = OutPoint {
                txid: input.previous_output.txid.to_string(),
                vout: input.previous_output.vout,
            };
            let coin = s
                .utxos
                .get(&op)
                .or_else(|| mempool_out.get(&op))
                .cloned()
                .ok_or_else(|| refused("bad-txns-inputs-missingorspent"))?;
            if let Some(t) = s.mempool.iter().find(|t| t.tx.inputs.contains(&op)) {
                conflicts.insert(t.tx.txid.clone());
            }
            prevouts.push(coin);
        }
        self.verify(&tx, &prevouts)?;
        let value_in: u64 = prevouts.iter().map(|(v, _)| *v).sum();
        // Output values come from the broadcast bytes: summed with a check, so a total past
        // `u64::MAX` is refused instead of wrapping into a small one.
        let value_out = tx
            .output
            .iter()
            .try_fold(0u64, |sum, o| sum.checked_add(o.value.to_sat()))
            .ok_or_else(|| refused("bad-txns-txouttotal-toolarge"))?;
        let fee = value_in
            .checked_sub(value_out)
            .ok_or_else(|| refused("bad-txns-in-belowout"))?;
        let vsize = tx.vsize() as u64;
        if fee < (vsize * MIN_RELAY_KVB).div_ceil(1000) {
            return Err(refused("min relay fee not met"));
        }
        // BIP125: every conflict signals replacement; the new fee pays the old fees and
        // the new size at the minimum rate.
        let old: Vec<&SimTx> = s
            .mempool
            .iter()
            .filter(|t| conflicts.contains(&t.tx.txid))
            .collect();
        if old.iter().any(|t| !t.replaceable) {
            return Err(refused("txn-mempool-conflict"));
        }
        let old_fees: u64 = old.iter().map(|t| t.fee).sum();
        if !old.is_empty() && fee < old_fees + (vsize * MIN_RELAY_KVB).div_ceil(1000) {
            return Err(refused("insufficient fee"));
        }
        for c in &conflicts {
            s.evict(c);
        }
        let replaceable = tx.input.iter().any(|i| i.sequence.is_rbf());
        let decoded = UtxoTx {
            txid: txid.clone(),
            inputs: tx
                .input
                .iter()
                .map(|i| OutPoint {
                    txid: i.previous_output.txid.to_string(),
                    vout: i.previous_output.vout,
                })
                .collect(),
            outputs: tx
                .output
                .iter()
                .enumerate()
                .map(|(n, o)| TxOut {
                    n: n as u32,
                    value: o.value.to_sat(),
                    script_hex: hex::encode(o.script_pubkey.as_bytes()),
                    address: None,
                })
                .collect(),
        };
        s.mempool.push(SimTx {
            tx: decoded,
            replaceable,
            fee,
        });
        Ok(txid)
    }

    /// Each input's signature against its output's script (P2WPKH or P2PKH only).
    fn verify(&self, tx: &Transaction, prevouts: &[Coin]) -> Result<(), ClientError> {
        let mut cache = SighashCache::new(tx);
        for (n, (input, (value, script))) in tx.input.iter().zip(prevouts).enumerate() {
            let script = ScriptBuf::from_bytes(script.clone());
            let (sig, key, digest) = if script.is_p2wpkh() {
                // A witness program is unlocked by its witness alone (BIP141).
                if !input.script_sig.is_empty() {
                    return Err(refused("non-empty script_sig for a witness program"));
                }
                let w: Vec<&[u8]> = input.witness.iter().collect();
                let [sig, key] = w[..] else {
                    return Err(refused("bad witness"));
                };
                let digest = cache
                    .p2wpkh_signature_hash(
                        n,
                        &script,
                        Amount::from_sat(*value),
                        EcdsaSighashType::All,
                    )
                    .map_err(|e| refused(e.to_string()))?
                    .to_byte_array();
                (sig.to_vec(), key.to_vec(), digest)
            } else if script.is_p2pkh() {
                if !input.witness.is_empty() {
                    return Err(refused("witness for a legacy input"));
                }
                let pushes: Vec<Vec<u8>> = input
                    .script_sig
                    .instructions()
                    .filter_map(|i| i.ok()?.push_bytes().map(|b| b.as_bytes().to_vec()))
                    .collect();
                let [sig, key] = &pushes[..] else {
                    return Err(refused("bad script_sig"));
                };
                let digest = cache
                    .legacy_signature_hash(n, &script, EcdsaSighashType::All.to_u32())
                    .map_err(|e| refused(e.to_string()))?
                    .to_byte_array();
                (sig.clone(), key.clone(), digest)
            } else {
                return Err(refused("the simulated chain spends P2WPKH and P2PKH only"));
            };
            let key_hash = hash160::Hash::hash(&key).to_byte_array();
            let expected: &[u8] = if script.is_p2wpkh() {
                &script.as_bytes()[2..22]
            } else {
                &script.as_bytes()[3..23]
            };
            if key_hash != expected {
                return Err(refused("key does not match the script"));
            }
            let (hash_type, der) = sig.split_last().ok_or_else(|| refused("empty signature"))?;
            if u32::from(*hash_type) != EcdsaSighashType::All.to_u32() {
                return Err(refused("only SIGHASH_ALL"));
            }
            let sig = ecdsa::Signature::from_der(der).map_err(|_| refused("bad signature"))?;
            let key = PublicKey::from_slice(&key).map_err(|_| refused("bad key"))?;
            self.secp
                .verify_ecdsa(&Message::from_digest(digest), &sig, &key)
                .map_err(|_| refused("mandatory-script-verify-flag-failed (signature)"))?;
        }
        Ok(())
    }
}

impl State {
    fn next_block(&mut self, prev: Option<String>, time: u64, txs: Vec<SimTx>) -> SimBlock {
        self.counter += 1;
        let mut seed = b"block".to_vec();
        seed.extend_from_slice(&self.counter.to_be_bytes());
        SimBlock {
            hash: printed(&seed),
            prev,
            time,
            txs,
        }
    }

    fn push_block(&mut self, txs: Vec<SimTx>) {
        let tip = self.blocks.last().expect("the genesis block");
        let (prev, time) = (tip.hash.clone(), tip.time + BLOCK_SECONDS);
        for t in &txs {
            apply(&mut self.utxos, &t.tx);
        }
        let b = self.next_block(Some(prev), time, txs);
        self.blocks.push(b);
    }

    fn rebuild_utxos(&mut self) {
        let mut utxos = HashMap::new();
        for b in &self.blocks {
            for t in &b.txs {
                apply(&mut utxos, &t.tx);
            }
        }
        self.utxos = utxos;
    }

    /// Outputs of mempool transactions not spent by another mempool transaction.
    fn mempool_outputs(&self) -> HashMap<OutPoint, Coin> {
        let mut outs = HashMap::new();
        for t in &self.mempool {
            apply(&mut outs, &t.tx);
        }
        outs
    }

    /// Removes a mempool transaction and its descendants.
    fn evict(&mut self, txid: &str) {
        let mut gone: HashSet<String> = [txid.to_string()].into();
        self.mempool.retain(|t| {
            let out =
                gone.contains(&t.tx.txid) || t.tx.inputs.iter().any(|i| gone.contains(&i.txid));
            if out {
                gone.insert(t.tx.txid.clone());
            }
            !out
        });
    }

    fn block_at(&self, height: u64) -> Option<&SimBlock> {
        self.blocks.get(usize::try_from(height).ok()?)
    }
}

/// Spends `tx`'s inputs out of `set` and adds its outputs.
fn apply(set: &mut HashMap<OutPoint, Coin>, tx: &UtxoTx) {
    for i in &tx.inputs {
        set.remove(i);
    }
    for o in &tx.outputs {
        let script = hex::decode(&o.script_hex).unwrap_or_default();
        set.insert(
            OutPoint {
                txid: tx.txid.clone(),
                vout: o.n,
            },
            (o.value, script),
        );
    }
}

/// A 32-byte hash of `seed` printed as nodes print hashes (byte-reversed hex).
fn printed(seed: &[u8]) -> String {
    bitcoin::Txid::from_raw_hash(sha256d::Hash::hash(seed)).to_string()
}

fn decoded(b: &SimBlock, height: u64) -> UtxoBlock {
    UtxoBlock {
        hash: b.hash.clone(),
        height,
        previous_hash: b.prev.clone(),
        time: b.time,
        txs: b.txs.iter().map(|t| t.tx.clone()).collect(),
    }
}

#[async_trait::async_trait]
impl UtxoNode for SimUtxoChain {
    async fn chain_name(&self) -> Result<String, ClientError> {
        Ok("main".into())
    }

    async fn head(&self) -> Result<u64, ClientError> {
        Ok(self.state().blocks.len() as u64 - 1)
    }

    async fn block_hash(&self, height: u64) -> Result<Option<String>, ClientError> {
        Ok(self.state().block_at(height).map(|b| b.hash.clone()))
    }

    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, ClientError> {
        let s = self.state();
        s.block_at(height)
            .map(|b| block_ref(&decoded(b, height)))
            .transpose()
    }

    async fn block(&self, hash: &str) -> Result<UtxoBlock, ClientError> {
        let s = self.state();
        s.blocks
            .iter()
            .enumerate()
            .find(|(_, b)| b.hash == hash)
            .map(|(h, b)| decoded(b, h as u64))
            .ok_or_else(|| ClientError::Refused {
                method: "getblock",
                detail: "Block not found".into(),
            })
    }

    async fn mempool(&self) -> Result<Vec<String>, ClientError> {
        Ok(self
            .state()
            .mempool
            .iter()
            .map(|t| t.tx.txid.clone())
            .collect())
    }

    async fn transaction(&self, txid: &str) -> Result<UtxoTx, ClientError> {
        let s = self.state();
        s.mempool
            .iter()
            .chain(s.blocks.iter().flat_map(|b| b.txs.iter()))
            .find(|t| t.tx.txid == txid)
            .map(|t| t.tx.clone())
            .ok_or_else(|| ClientError::Refused {
                method: "getrawtransaction",
                detail: "No such mempool or blockchain transaction".into(),
            })
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<String, ClientError> {
        self.accept(raw)
    }

    async fn fee_per_kvb(&self, _target: u16) -> Result<Option<u64>, ClientError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
