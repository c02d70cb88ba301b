use std::collections::HashSet;

use appliance_signer::utxo::{UtxoNetwork, CUSTOMER_ACCOUNT, MASTER_ACCOUNT};
use appliance_signer::utxo_tx::{UtxoInput, UtxoOutput};
use appliance_signer::{Signer, SigningPolicy};

use super::*;
use crate::utxo::follow::{MempoolWatch, UtxoFollower};
use crate::utxo::scan::ScriptWatch;

const ON: SigningPolicy = SigningPolicy {
    service: true,
    project: true,
    key: true,
};

struct World {
    chain: std::sync::Arc<SimUtxoChain>,
    signer: Signer,
    net: UtxoNetwork,
}

impl World {
    fn new(net: UtxoNetwork) -> World {
        World {
            chain: std::sync::Arc::new(SimUtxoChain::new()),
            signer: Signer::test_mode(),
            net,
        }
    }

    fn script(&self, account: u32, index: u32) -> Vec<u8> {
        let a = self.signer.utxo_account(&self.net, account).unwrap();
        self.net
            .script_of(&a.public_key(index).unwrap())
            .into_bytes()
    }

    /// Signs a spend of `inputs` (outpoint, value, key) into `outputs`.
    fn spend(
        &self,
        inputs: &[(OutPoint, u64, (u32, u32))],
        outputs: &[(Vec<u8>, u64)],
        rbf: bool,
    ) -> Vec<u8> {
        let inputs: Vec<UtxoInput> = inputs
            .iter()
            .map(|(o, value, key)| UtxoInput {
                txid: o.txid.clone(),
                vout: o.vout,
                value: *value,
                key: *key,
            })
            .collect();
        let outputs: Vec<UtxoOutput> = outputs
            .iter()
            .map(|(s, v)| UtxoOutput {
                script: ScriptBuf::from_bytes(s.clone()),
                value: *v,
            })
            .collect();
        self.signer
            .sign_utxo_tx(ON, &self.net, &inputs, &outputs, rbf)
            .unwrap()
            .raw
    }

    async fn send(&self, raw: &[u8]) -> Result<String, ClientError> {
        self.chain.broadcast(raw).await
    }
}

fn networks() -> [UtxoNetwork; 2] {
    [
        UtxoNetwork::bitcoin("bitcoin").unwrap(),
        UtxoNetwork::dogecoin("dogecoin").unwrap(),
    ]
}

#[tokio::test]
async fn a_deposit_is_seen_swept_and_mined_for_both_script_forms() {
    for net in networks() {
        let w = World::new(net);
        let deposit = w.script(CUSTOMER_ACCOUNT, 3);
        let master = w.script(MASTER_ACCOUNT, 0);
        let wallet = uuid::Uuid::from_u128(9);
        let mut watch = ScriptWatch::default();
        watch.insert(deposit.clone(), wallet);
        let none = HashSet::new();

        let funding = w
            .chain
            .fund(&[(deposit.clone(), 50_000_000), (vec![0x51], 7)]);
        let mut pool = MempoolWatch::default();
        let seen = pool.poll(&w.chain, &watch, &none).await.unwrap();
        assert_eq!(seen.received.len(), 1, "detected in the mempool");
        w.chain.mine(3);
        let follower = UtxoFollower::new(w.chain.clone());
        assert_eq!(follower.head().await.unwrap(), 3);
        let range = follower.scan(1, 3, &watch, &none).await.unwrap();
        assert!(range
            .blocks
            .windows(2)
            .all(|p| p[1].parent_hash == p[0].hash));
        assert_eq!(range.changes.len(), 1);
        let coin = range.changes[0].1.received[0].outpoint.clone();
        assert_eq!(
            coin,
            OutPoint {
                txid: funding,
                vout: 0
            }
        );

        let sweep = w.spend(
            &[(coin.clone(), 50_000_000, (CUSTOMER_ACCOUNT, 3))],
            &[(master.clone(), 49_990_000)],
            true,
        );
        let txid = w.send(&sweep).await.unwrap();
        assert_eq!(
            w.send(&sweep).await.unwrap(),
            txid,
            "a known transaction answers its txid"
        );
        assert_eq!(w.chain.mempool().await.unwrap(), vec![txid.clone()]);
        w.chain.mine(1);
        assert_eq!(
            w.chain.unspent(&master),
            vec![(
                OutPoint {
                    txid: txid.clone(),
                    vout: 0
                },
                49_990_000
            )]
        );
        assert!(w.chain.unspent(&deposit).is_empty());
        let held: HashSet<OutPoint> = [coin.clone()].into();
        let range = follower.scan(4, 4, &watch, &held).await.unwrap();
        assert_eq!(range.changes[0].1.spent[0].outpoint, coin);
        assert_eq!(range.changes[0].1.spent[0].by, txid);
        // Spent: a second spend of the same coin is refused.
        let again = w.spend(
            &[(coin, 50_000_000, (CUSTOMER_ACCOUNT, 3))],
            &[(master.clone(), 49_980_000)],
            true,
        );
        assert!(matches!(
            w.send(&again).await,
            Err(ClientError::Refused { .. })
        ));
    }
}

#[tokio::test]
async fn broadcasts_a_node_would_refuse_are_refused() {
    for net in networks() {
        let w = World::new(net);
        let deposit = w.script(CUSTOMER_ACCOUNT, 1);
        let master = w.script(MASTER_ACCOUNT, 0);
        let funding = w.chain.fund(&[(deposit.clone(), 1_000_000)]);
        w.chain.mine(1);
        let coin = OutPoint {
            txid: funding,
            vout: 0,
        };
        let cases = [
            // Signed by another key than the script's.
            w.spend(
                &[(coin.clone(), 1_000_000, (CUSTOMER_ACCOUNT, 2))],
                &[(master.clone(), 990_000)],
                true,
            ),
            // A value the output does not hold (the signature commits to it for P2WPKH;
            // for P2PKH the outputs exceed the inputs).
            w.spend(
                &[(coin.clone(), 2_000_000, (CUSTOMER_ACCOUNT, 1))],
                &[(master.clone(), 1_990_000)],
                true,
            ),
            // No fee at all.
            w.spend(
                &[(coin.clone(), 1_000_000, (CUSTOMER_ACCOUNT, 1))],
                &[(master.clone(), 1_000_000)],
                true,
            ),
            // An output that does not exist.
            w.spend(
                &[(
                    OutPoint {
                        txid: "11".repeat(32),
                        vout: 0,
                    },
                    1_000_000,
                    (CUSTOMER_ACCOUNT, 1),
                )],
                &[(master.clone(), 990_000)],
                true,
            ),
        ];
        for raw in cases {
            assert!(matches!(
                w.send(&raw).await,
                Err(ClientError::Refused { .. })
            ));
        }
        assert!(matches!(
            w.send(&[0, 1, 2]).await,
            Err(ClientError::Refused { .. })
        ));
        // A signed transaction whose output is changed after signing: its signature no
        // longer verifies.
        let good = w.spend(
            &[(coin.clone(), 1_000_000, (CUSTOMER_ACCOUNT, 1))],
            &[(master.clone(), 990_000)],
            true,
        );
        // Outputs whose total passes u64::MAX are refused, not wrapped.
        let wrap = w.spend(
            &[(coin.clone(), 1_000_000, (CUSTOMER_ACCOUNT, 1))],
            &[(master.clone(), u64::MAX), (master.clone(), 2)],
            true,
        );
        match w.send(&wrap).await {
            Err(ClientError::Refused { detail, .. }) => {
                assert!(detail.contains("toolarge"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        // An unlock in the wrong place (a script_sig on a witness input, a witness on a
        // legacy one) is refused.
        let mut tx: Transaction = deserialize(&good).unwrap();
        if tx.input[0].witness.is_empty() {
            tx.input[0].witness.push([1u8]);
        } else {
            tx.input[0].script_sig = ScriptBuf::from_bytes(vec![0x51]);
        }
        assert!(matches!(
            w.send(&bitcoin::consensus::serialize(&tx)).await,
            Err(ClientError::Refused { .. })
        ));
        let mut tx: Transaction = deserialize(&good).unwrap();
        tx.output[0].value = Amount::from_sat(989_999);
        let forged = bitcoin::consensus::serialize(&tx);
        match w.send(&forged).await {
            Err(ClientError::Refused { detail, .. }) => {
                assert!(detail.contains("signature"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        assert!(
            w.chain.mempool().await.unwrap().is_empty(),
            "nothing accepted"
        );
    }
}

#[tokio::test]
async fn replacement_follows_bip125() {
    let w = World::new(networks()[0].clone());
    let deposit = w.script(CUSTOMER_ACCOUNT, 1);
    let master = w.script(MASTER_ACCOUNT, 0);
    let funding = w
        .chain
        .fund(&[(deposit.clone(), 1_000_000), (deposit.clone(), 500_000)]);
    w.chain.mine(1);
    let a = OutPoint {
        txid: funding.clone(),
        vout: 0,
    };
    let b = OutPoint {
        txid: funding,
        vout: 1,
    };
    let key = (CUSTOMER_ACCOUNT, 1);
    let first = w
        .send(&w.spend(
            &[(a.clone(), 1_000_000, key)],
            &[(master.clone(), 999_000)],
            true,
        ))
        .await
        .unwrap();
    // Too little more: refused; enough: the first is replaced.
    let cheap = w.spend(
        &[(a.clone(), 1_000_000, key)],
        &[(master.clone(), 998_990)],
        true,
    );
    assert!(w.send(&cheap).await.is_err());
    let better = w
        .send(&w.spend(
            &[(a.clone(), 1_000_000, key)],
            &[(master.clone(), 998_000)],
            true,
        ))
        .await
        .unwrap();
    assert_eq!(w.chain.mempool().await.unwrap(), vec![better.clone()]);
    assert_ne!(better, first);
    // A send that does not signal replacement cannot be replaced.
    w.send(&w.spend(
        &[(b.clone(), 500_000, key)],
        &[(master.clone(), 499_000)],
        false,
    ))
    .await
    .unwrap();
    let over = w.spend(&[(b, 500_000, key)], &[(master.clone(), 400_000)], true);
    assert!(w.send(&over).await.is_err());
    // Dropping a transaction drops what spends it.
    let child = w.spend(
        &[(
            OutPoint {
                txid: better.clone(),
                vout: 0,
            },
            998_000,
            (MASTER_ACCOUNT, 0),
        )],
        &[(deposit, 990_000)],
        true,
    );
    let child = w.send(&child).await.unwrap();
    assert!(w.chain.drop_tx(&better));
    let pool = w.chain.mempool().await.unwrap();
    assert!(!pool.contains(&better) && !pool.contains(&child));
    assert!(!w.chain.drop_tx(&better));
}

#[tokio::test]
async fn a_reorg_re_mines_or_double_spends_away() {
    let w = World::new(networks()[0].clone());
    let deposit = w.script(CUSTOMER_ACCOUNT, 1);
    let master = w.script(MASTER_ACCOUNT, 0);
    let kept = w.chain.fund(&[(deposit.clone(), 1_000_000)]);
    let gone = w.chain.fund(&[(deposit.clone(), 2_000_000)]);
    w.chain.mine(1);
    let spend = w.spend(
        &[(
            OutPoint {
                txid: gone.clone(),
                vout: 0,
            },
            2_000_000,
            (CUSTOMER_ACCOUNT, 1),
        )],
        &[(master.clone(), 1_990_000)],
        true,
    );
    let spend = w.send(&spend).await.unwrap();
    w.chain.mine(1);
    let old_tip = w.chain.block_ref(2).await.unwrap().unwrap();
    // Two blocks replaced by three; `gone` never happened, so neither did its spend.
    w.chain.reorg(2, std::slice::from_ref(&gone));
    assert_eq!(w.chain.head().await.unwrap(), 3);
    let new = w.chain.block_ref(2).await.unwrap().unwrap();
    assert_ne!(new.hash, old_tip.hash);
    let block = w
        .chain
        .block(&w.chain.block_hash(1).await.unwrap().unwrap())
        .await
        .unwrap();
    let ids: Vec<&str> = block.txs.iter().map(|t| t.txid.as_str()).collect();
    assert_eq!(ids, vec![kept.as_str()], "re-mined: the kept deposit only");
    assert!(
        w.chain.unspent(&master).is_empty(),
        "{spend} was double-spent away"
    );
    assert_eq!(w.chain.unspent(&deposit).len(), 1);
    // A reorg never removes the genesis block.
    w.chain.reorg(100, &[]);
    assert_eq!(w.chain.block_ref(0).await.unwrap().unwrap().number, 0);
    assert_eq!(w.chain.unspent(&deposit).len(), 1, "re-mined again");
}
