//! Dogecoin addresses against an independent implementation: npm `bitcore-lib-doge`
//! (installed by scripts/install-test-deps.sh), deriving the same BIP44 paths from the
//! same seed. A missing Node.js or package fails the test.

use std::path::Path;
use std::process::Command;

use alloy_signer_local::coins_bip39::{English, Mnemonic};
use appliance_signer::utxo::{UtxoNetwork, CUSTOMER_ACCOUNT, MASTER_ACCOUNT};
use appliance_signer::Signer;

/// The test-mode mnemonic (`Signer::test_mode`).
const PHRASE: &str = "test test test test test test test test test test test junk";

/// bitcore-lib-doge's addresses of `m/44'/3'/{account}'/0/{i}` for i in 0..count, on
/// `network` (`livenet` or `testnet`).
fn bitcore_addresses(seed_hex: &str, network: &str, account: u32, count: u32) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = format!(
        "const d = require('bitcore-lib-doge');\
         const net = d.Networks.{network};\
         const k = d.HDPrivateKey.fromSeed('{seed_hex}', net);\
         for (let i = 0; i < {count}; i++) {{\
           console.log(k.deriveChild(\"m/44'/3'/{account}'/0/\" + i).privateKey.toAddress(net).toString());\
         }}"
    );
    let out = Command::new("node")
        .arg("-e")
        .arg(script)
        .current_dir(&root)
        .output()
        .expect("node runs (scripts/install-test-deps.sh installs it)");
    assert!(
        out.status.success(),
        "bitcore-lib-doge failed (run scripts/install-test-deps.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn dogecoin_addresses_match_bitcore_lib_doge() {
    let seed = Mnemonic::<English>::new_from_phrase(PHRASE)
        .unwrap()
        .to_seed(None)
        .unwrap();
    let seed_hex = hex::encode(seed);
    let signer = Signer::test_mode();
    for (network, bitcore_net) in [("dogecoin", "livenet"), ("testnet", "testnet")] {
        let net = UtxoNetwork::dogecoin(network).unwrap();
        for account in [CUSTOMER_ACCOUNT, MASTER_ACCOUNT] {
            let ours: Vec<String> = (0..5)
                .map(|i| {
                    signer
                        .utxo_account(&net, account)
                        .unwrap()
                        .address(i)
                        .unwrap()
                })
                .collect();
            let theirs = bitcore_addresses(&seed_hex, bitcore_net, account, 5);
            assert_eq!(ours, theirs, "{network} account {account}");
        }
    }
}

#[test]
fn a_utxo_input_signature_verifies_with_the_address_key() {
    use appliance_signer::SigningPolicy;
    use bitcoin::secp256k1::{ecdsa::Signature, Message, Secp256k1};
    let signer = Signer::test_mode();
    let net = UtxoNetwork::bitcoin("regtest").unwrap();
    let on = SigningPolicy {
        service: true,
        project: true,
        key: true,
    };
    let sighash = [0x42; 32];
    let der = signer
        .sign_utxo_input(on, &net, (CUSTOMER_ACCOUNT, 3), sighash)
        .unwrap();
    let sig = Signature::from_der(&der).unwrap();
    let key = signer
        .utxo_account(&net, CUSTOMER_ACCOUNT)
        .unwrap()
        .public_key(3)
        .unwrap();
    Secp256k1::verification_only()
        .verify_ecdsa(&Message::from_digest(sighash), &sig, &key)
        .expect("the signature verifies under index 3's key");
    // Low S (BIP 146): normalizing changes nothing.
    let mut normalized = sig;
    normalized.normalize_s();
    assert_eq!(normalized, sig);
    // Another index's key does not verify it.
    let other = signer
        .utxo_account(&net, CUSTOMER_ACCOUNT)
        .unwrap()
        .public_key(4)
        .unwrap();
    assert!(Secp256k1::verification_only()
        .verify_ecdsa(&Message::from_digest(sighash), &sig, &other)
        .is_err());
    let off = SigningPolicy { key: false, ..on };
    assert!(signer
        .sign_utxo_input(off, &net, (CUSTOMER_ACCOUNT, 3), sighash)
        .is_err());
}
