//! Signing whole UTXO transactions: every input spends an output the appliance's keys own
//! (bitcoin P2WPKH: BIP143 signature hash and a witness; dogecoin P2PKH: the legacy
//! signature hash and a script signature), all with `SIGHASH_ALL`.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use bitcoin::absolute::LockTime;
use bitcoin::consensus::encode::serialize;
use bitcoin::hashes::Hash;
use bitcoin::script::PushBytesBuf;
use bitcoin::sighash::{EcdsaSighashType, SighashCache};
use bitcoin::transaction::Version;
use bitcoin::{Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Txid, Witness};

use crate::utxo::{SigningAccount, UtxoCoin, UtxoNetwork};
use crate::{SignError, Signer, SigningPolicy};

/// An output of the appliance's to spend: where it is, what it holds, and which key owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UtxoInput {
    /// The txid as nodes print it (byte-reversed hex).
    pub txid: String,
    pub vout: u32,
    /// Atomic units (satoshis) the output holds.
    pub value: u64,
    /// The owning key: (account, receive index) of [`crate::utxo`].
    pub key: (u32, u32),
}

/// An output to create: its locking script (`UtxoNetwork::script_for` of an address) and
/// value in atomic units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UtxoOutput {
    pub script: ScriptBuf,
    pub value: u64,
}

/// A signed transaction, ready to broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedUtxoTx {
    /// The serialized transaction (with witnesses when it has any).
    pub raw: Vec<u8>,
    /// Its txid as nodes print it.
    pub txid: String,
    /// Its virtual size in vbytes (the unit fees are quoted in).
    pub vsize: u64,
}

impl Signer {
    /// Builds and signs a version-2 transaction spending `inputs` into `outputs` on
    /// `network`; with `replaceable`, every input signals BIP125 replacement (sequence
    /// `0xfffffffd`), so a stuck send can be replaced with a higher fee. Refused while a
    /// switch is off, for an input txid that does not parse, or with no input or output.
    pub fn sign_utxo_tx(
        &self,
        policy: SigningPolicy,
        network: &UtxoNetwork,
        inputs: &[UtxoInput],
        outputs: &[UtxoOutput],
        replaceable: bool,
    ) -> Result<SignedUtxoTx, SignError> {
        let blocked = policy.blocked_by();
        if !blocked.is_empty() {
            return Err(SignError::Disabled(blocked));
        }
        if inputs.is_empty() || outputs.is_empty() {
            return Err(SignError::Key(
                "a transaction needs inputs and outputs".into(),
            ));
        }
        let sequence = if replaceable {
            Sequence::ENABLE_RBF_NO_LOCKTIME
        } else {
            Sequence::MAX
        };
        let mut tx = Transaction {
            version: Version::TWO,
            lock_time: LockTime::ZERO,
            input: inputs
                .iter()
                .map(|i| {
                    let txid: Txid = i
                        .txid
                        .parse()
                        .map_err(|_| SignError::Key(format!("txid {:?} does not parse", i.txid)))?;
                    Ok(TxIn {
                        previous_output: OutPoint::new(txid, i.vout),
                        script_sig: ScriptBuf::new(),
                        sequence,
                        witness: Witness::new(),
                    })
                })
                .collect::<Result<_, SignError>>()?,
            output: outputs
                .iter()
                .map(|o| TxOut {
                    value: Amount::from_sat(o.value),
                    script_pubkey: o.script.clone(),
                })
                .collect(),
        };
        // Each account's hardened derivation once, however many of its outputs are spent.
        let mut accounts: BTreeMap<u32, SigningAccount> = BTreeMap::new();
        let mut unlocks = Vec::with_capacity(inputs.len());
        {
            let mut cache = SighashCache::new(&tx);
            for (n, input) in inputs.iter().enumerate() {
                let (account, index) = input.key;
                let signing = match accounts.entry(account) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => e.insert(
                        self.utxo
                            .signing_account(network, account)
                            .map_err(|e| SignError::Key(e.to_string()))?,
                    ),
                };
                let (key, public) = signing
                    .key(index)
                    .map_err(|e| SignError::Key(e.to_string()))?;
                let script = network.script_of(&public);
                let digest: [u8; 32] = match network.coin() {
                    UtxoCoin::Bitcoin => cache
                        .p2wpkh_signature_hash(
                            n,
                            &script,
                            Amount::from_sat(input.value),
                            EcdsaSighashType::All,
                        )
                        .map_err(|e| SignError::Key(e.to_string()))?
                        .to_byte_array(),
                    UtxoCoin::Dogecoin => cache
                        .legacy_signature_hash(n, &script, EcdsaSighashType::All.to_u32())
                        .map_err(|e| SignError::Key(e.to_string()))?
                        .to_byte_array(),
                };
                let sig = signing.sign(&key, digest);
                let mut with_type = sig.serialize_der().to_vec();
                with_type.push(EcdsaSighashType::All.to_u32() as u8);
                unlocks.push((with_type, public.serialize()));
            }
        }
        for (input, (sig, public)) in tx.input.iter_mut().zip(unlocks) {
            match network.coin() {
                UtxoCoin::Bitcoin => input.witness = Witness::from_slice(&[sig, public.to_vec()]),
                UtxoCoin::Dogecoin => {
                    let sig = PushBytesBuf::try_from(sig).expect("a signature is 73 bytes at most");
                    input.script_sig = bitcoin::script::Builder::new()
                        .push_slice(sig)
                        .push_slice(public)
                        .into_script();
                }
            }
        }
        Ok(SignedUtxoTx {
            raw: serialize(&tx),
            txid: tx.compute_txid().to_string(),
            vsize: tx.vsize() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> UtxoInput {
        UtxoInput {
            txid: "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b".into(),
            vout: 0,
            value: 10_000,
            key: (0, 0),
        }
    }

    #[test]
    fn refusals_and_replaceability() {
        let signer = Signer::test_mode();
        let net = UtxoNetwork::bitcoin("regtest").unwrap();
        let on = SigningPolicy {
            service: true,
            project: true,
            key: true,
        };
        let out = UtxoOutput {
            script: net.script_of(&signer.utxo_account(&net, 1).unwrap().public_key(0).unwrap()),
            value: 9_000,
        };
        let off = SigningPolicy {
            service: false,
            ..on
        };
        assert!(matches!(
            signer.sign_utxo_tx(off, &net, &[input()], std::slice::from_ref(&out), true),
            Err(SignError::Disabled(_))
        ));
        assert!(signer
            .sign_utxo_tx(on, &net, &[], std::slice::from_ref(&out), true)
            .is_err());
        assert!(signer
            .sign_utxo_tx(on, &net, &[input()], &[], true)
            .is_err());
        let bad = UtxoInput {
            txid: "zz".into(),
            ..input()
        };
        assert!(signer
            .sign_utxo_tx(on, &net, &[bad], std::slice::from_ref(&out), true)
            .is_err());
        // Replaceable inputs signal BIP125; the txid is the serialized transaction's.
        for (rbf, sequence) in [
            (true, Sequence::ENABLE_RBF_NO_LOCKTIME),
            (false, Sequence::MAX),
        ] {
            let s = signer
                .sign_utxo_tx(on, &net, &[input()], std::slice::from_ref(&out), rbf)
                .unwrap();
            let tx: Transaction = bitcoin::consensus::deserialize(&s.raw).unwrap();
            assert_eq!(tx.input[0].sequence, sequence);
            assert_eq!(tx.compute_txid().to_string(), s.txid);
            assert_eq!(tx.input[0].witness.len(), 2, "signature and public key");
            assert!(
                s.vsize > 100 && s.vsize < 120,
                "one P2WPKH in, one out: {}",
                s.vsize
            );
        }
    }
}
