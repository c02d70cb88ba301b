//! What a block (or the mempool) does to the appliance's coins: outputs paying a watched
//! script are received (a deposit each, keyed by `(txid, vout)`: DECISIONS.md section 17),
//! and inputs spending a held output are spends.
//!
//! Scripts are matched as bytes, not by the address the node prints: a node prints no
//! address for some scripts, and forks print their own encodings.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::rpc::{OutPoint, UtxoTx};

/// The locking scripts of the addresses the appliance watches, each with its wallet.
#[derive(Clone, Debug, Default)]
pub struct ScriptWatch {
    scripts: HashMap<Vec<u8>, Uuid>,
}

impl ScriptWatch {
    /// Watches `script` for `wallet` (a watched script keeps its first wallet).
    pub fn insert(&mut self, script: Vec<u8>, wallet: Uuid) {
        self.scripts.entry(script).or_insert(wallet);
    }

    /// The wallet `script` is watched for.
    pub fn wallet(&self, script: &[u8]) -> Option<Uuid> {
        self.scripts.get(script).copied()
    }

    pub fn len(&self) -> usize {
        self.scripts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scripts.is_empty()
    }
}

/// An output paying a watched script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub outpoint: OutPoint,
    /// Atomic units.
    pub value: u64,
    pub wallet: Uuid,
    /// The locking script.
    pub script: Vec<u8>,
}

/// A held output spent by a transaction (ours, or one the key's owner did not send).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spent {
    pub outpoint: OutPoint,
    /// The spending transaction's txid.
    pub by: String,
}

/// What a list of transactions does to the appliance's coins, in their order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoinChanges {
    pub received: Vec<Received>,
    pub spent: Vec<Spent>,
}

/// Scans `txs` (a block's, in block order, or the mempool's) for outputs paying `watch`
/// and inputs spending an output of `held` or one received earlier in `txs` (a deposit
/// swept within the block it arrived in). An output whose script is not valid hex is
/// passed over: the node decoded it, so it is not one of ours.
pub fn scan(txs: &[UtxoTx], watch: &ScriptWatch, held: &HashSet<OutPoint>) -> CoinChanges {
    let mut changes = CoinChanges::default();
    let mut received_here: HashSet<OutPoint> = HashSet::new();
    for tx in txs {
        for input in &tx.inputs {
            if held.contains(input) || received_here.contains(input) {
                changes.spent.push(Spent {
                    outpoint: input.clone(),
                    by: tx.txid.clone(),
                });
            }
        }
        for out in &tx.outputs {
            let Ok(script) = hex::decode(&out.script_hex) else {
                continue;
            };
            let Some(wallet) = watch.wallet(&script) else {
                continue;
            };
            let outpoint = OutPoint {
                txid: tx.txid.clone(),
                vout: out.n,
            };
            received_here.insert(outpoint.clone());
            changes.received.push(Received {
                outpoint,
                value: out.value,
                wallet,
                script,
            });
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::utxo::rpc::TxOut;

    fn out(n: u32, value: u64, script: &[u8]) -> TxOut {
        TxOut {
            n,
            value,
            script_hex: hex::encode(script),
            address: None,
        }
    }

    fn op(txid: &str, vout: u32) -> OutPoint {
        OutPoint {
            txid: txid.into(),
            vout,
        }
    }

    #[test]
    fn outputs_to_watched_scripts_are_received_and_held_inputs_spent() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut watch = ScriptWatch::default();
        watch.insert(vec![0x00, 0x14, 1], a);
        watch.insert(vec![0x00, 0x14, 2], b);
        watch.insert(vec![0x00, 0x14, 2], a);
        assert_eq!(watch.len(), 2);
        assert_eq!(
            watch.wallet(&[0x00, 0x14, 2]),
            Some(b),
            "the first wallet stays"
        );
        let held: HashSet<OutPoint> = [op("old", 0)].into();
        let txs = vec![
            // One transaction paying two customers and a stranger.
            UtxoTx {
                txid: "t1".into(),
                inputs: vec![op("x", 0)],
                outputs: vec![
                    out(0, 5, &[0x00, 0x14, 1]),
                    out(1, 7, &[0x00, 0x14, 9]),
                    out(2, 9, &[0x00, 0x14, 2]),
                ],
            },
            // Spends a held coin and the first deposit in the same block.
            UtxoTx {
                txid: "t2".into(),
                inputs: vec![op("old", 0), op("t1", 0), op("old", 1)],
                outputs: vec![out(0, 3, &[0x6a])],
            },
            // A script the node could not give as hex is passed over.
            UtxoTx {
                txid: "t3".into(),
                inputs: vec![],
                outputs: vec![TxOut {
                    n: 0,
                    value: 1,
                    script_hex: "zz".into(),
                    address: None,
                }],
            },
        ];
        let c = scan(&txs, &watch, &held);
        assert_eq!(
            c.received
                .iter()
                .map(|r| (r.outpoint.clone(), r.value, r.wallet))
                .collect::<Vec<_>>(),
            vec![(op("t1", 0), 5, a), (op("t1", 2), 9, b)]
        );
        assert_eq!(
            c.spent,
            vec![
                Spent {
                    outpoint: op("old", 0),
                    by: "t2".into()
                },
                Spent {
                    outpoint: op("t1", 0),
                    by: "t2".into()
                },
            ]
        );
        assert_eq!(scan(&[], &watch, &held), CoinChanges::default());
    }
}
