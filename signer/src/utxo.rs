//! Keys and addresses of the UTXO chains, all from the one BIP39 seed (DECISIONS.md
//! section 17): bitcoin BIP84 `m/84'/0'/account'/0/i`, pay-to-witness-public-key-hash
//! (P2WPKH, bech32); dogecoin BIP44 `m/44'/3'/account'/0/i`, pay-to-public-key-hash
//! (P2PKH, base58check). Customers' addresses use account `0'`, the master (omnibus)
//! wallet account `1'`.
//!
//! The account level is hardened, so the seed is needed to reach it; below it, an
//! [`UtxoAccount`] (the account's extended public key) derives every receive address
//! without the seed.

use bitcoin::bip32::{ChildNumber, DerivationPath, Xpriv, Xpub};
use bitcoin::hashes::Hash;
use bitcoin::key::Secp256k1;
use bitcoin::secp256k1::{PublicKey, SecretKey};
use bitcoin::{base58, bech32, CompressedPublicKey, ScriptBuf, WitnessVersion};

/// The account of customers' deposit (and invoice, funding) addresses.
pub const CUSTOMER_ACCOUNT: u32 = 0;
/// The account of the master (omnibus) wallet.
pub const MASTER_ACCOUNT: u32 = 1;

/// Which UTXO coin a network belongs to: it fixes the derivation path and the form of
/// the addresses the appliance issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UtxoCoin {
    /// BIP84, P2WPKH.
    Bitcoin,
    /// BIP44, P2PKH.
    Dogecoin,
}

impl UtxoCoin {
    /// BIP43 purpose: 84 (native segwit) for bitcoin, 44 for dogecoin.
    pub fn purpose(self) -> u32 {
        match self {
            UtxoCoin::Bitcoin => 84,
            UtxoCoin::Dogecoin => 44,
        }
    }

    /// SLIP-0044 coin type: 0 for bitcoin, 3 for dogecoin, on every network (DECISIONS.md
    /// section 17 pins the paths).
    pub fn coin_type(self) -> u32 {
        match self {
            UtxoCoin::Bitcoin => 0,
            UtxoCoin::Dogecoin => 3,
        }
    }
}

/// How addresses are written on one network: the bech32 human-readable part (bitcoin)
/// and the base58check version bytes of P2PKH and P2SH addresses. Built by
/// [`UtxoNetwork::bitcoin`] or [`UtxoNetwork::dogecoin`], then
/// [`UtxoNetwork::with_overrides`]: a bitcoin network always has its hrp, a dogecoin one
/// never, so the address form and the script form cannot disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UtxoNetwork {
    coin: UtxoCoin,
    /// `bc`, `tb`, `bcrt` (`rltc` for Litecoin's regtest); `None` for dogecoin, which has
    /// no segwit addresses.
    bech32_hrp: Option<bech32::Hrp>,
    p2pkh_prefix: u8,
    p2sh_prefix: u8,
}

/// Why an address is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("not an address of this network")]
    WrongNetwork,
    #[error("not a valid address")]
    Invalid,
}

impl UtxoNetwork {
    /// Bitcoin's parameters for `network`: `bitcoin` (mainnet), `testnet`, `signet` or
    /// `regtest`; `None` for any other name.
    pub fn bitcoin(network: &str) -> Option<UtxoNetwork> {
        let (hrp, p2pkh, p2sh) = match network {
            "bitcoin" => ("bc", 0, 5),
            "testnet" | "signet" => ("tb", 111, 196),
            "regtest" => ("bcrt", 111, 196),
            _ => return None,
        };
        Some(UtxoNetwork {
            coin: UtxoCoin::Bitcoin,
            bech32_hrp: Some(bech32::Hrp::parse(hrp).expect("the networks' hrps are valid")),
            p2pkh_prefix: p2pkh,
            p2sh_prefix: p2sh,
        })
    }

    /// Dogecoin's parameters for `network`: `dogecoin` (mainnet), `testnet` or `regtest`;
    /// `None` for any other name.
    pub fn dogecoin(network: &str) -> Option<UtxoNetwork> {
        let (p2pkh, p2sh) = match network {
            "dogecoin" => (30, 22),
            "testnet" => (113, 196),
            "regtest" => (111, 196),
            _ => return None,
        };
        Some(UtxoNetwork {
            coin: UtxoCoin::Dogecoin,
            bech32_hrp: None,
            p2pkh_prefix: p2pkh,
            p2sh_prefix: p2sh,
        })
    }

    /// The network with a compatible node's encodings (DECISIONS.md section 17:
    /// `bech32_hrp`, `p2pkh_prefix`, `p2sh_prefix`); each `None` keeps the network's own.
    /// An hrp that is not a valid bech32 one, or one given for dogecoin, is refused.
    pub fn with_overrides(
        mut self,
        bech32_hrp: Option<&str>,
        p2pkh_prefix: Option<u8>,
        p2sh_prefix: Option<u8>,
    ) -> Result<UtxoNetwork, AddressError> {
        if let Some(hrp) = bech32_hrp {
            if self.coin != UtxoCoin::Bitcoin {
                return Err(AddressError::Invalid);
            }
            self.bech32_hrp = Some(bech32::Hrp::parse(hrp).map_err(|_| AddressError::Invalid)?);
        }
        self.p2pkh_prefix = p2pkh_prefix.unwrap_or(self.p2pkh_prefix);
        self.p2sh_prefix = p2sh_prefix.unwrap_or(self.p2sh_prefix);
        Ok(self)
    }

    /// The coin the network belongs to.
    pub fn coin(&self) -> UtxoCoin {
        self.coin
    }

    /// The address the appliance issues for `key`: P2WPKH in bech32 for bitcoin, P2PKH in
    /// base58check for dogecoin.
    pub fn address(&self, key: &PublicKey) -> String {
        let compressed = CompressedPublicKey(*key);
        match self.bech32_hrp {
            Some(hrp) => {
                let program = compressed.wpubkey_hash();
                bech32::segwit::encode(hrp, bech32::segwit::VERSION_0, program.as_byte_array())
                    .expect("a 20-byte v0 program encodes")
            }
            None => base58_address(self.p2pkh_prefix, &compressed.pubkey_hash().to_byte_array()),
        }
    }

    /// The output script that pays `key` as [`UtxoNetwork::address`] writes it.
    pub fn script_of(&self, key: &PublicKey) -> ScriptBuf {
        let compressed = CompressedPublicKey(*key);
        match self.bech32_hrp {
            Some(_) => ScriptBuf::new_p2wpkh(&compressed.wpubkey_hash()),
            None => ScriptBuf::new_p2pkh(&compressed.pubkey_hash()),
        }
    }

    /// The output script an address of this network pays: P2PKH or P2SH in base58check
    /// with this network's version bytes, or (with a bech32 hrp) any segwit address of
    /// this hrp. A checksum error, another network's address or an unknown form is
    /// refused.
    pub fn script_for(&self, address: &str) -> Result<ScriptBuf, AddressError> {
        if let Some(hrp) = &self.bech32_hrp {
            if let Ok((got, version, program)) = bech32::segwit::decode(address) {
                if !got.as_str().eq_ignore_ascii_case(hrp.as_str()) {
                    return Err(AddressError::WrongNetwork);
                }
                let version =
                    WitnessVersion::try_from(version).map_err(|_| AddressError::Invalid)?;
                let program = bitcoin::WitnessProgram::new(version, &program)
                    .map_err(|_| AddressError::Invalid)?;
                return Ok(ScriptBuf::new_witness_program(&program));
            }
        }
        let bytes = base58::decode_check(address).map_err(|_| AddressError::Invalid)?;
        let [prefix, hash @ ..] = bytes.as_slice() else {
            return Err(AddressError::Invalid);
        };
        let hash: [u8; 20] = hash.try_into().map_err(|_| AddressError::Invalid)?;
        if *prefix == self.p2pkh_prefix {
            Ok(ScriptBuf::new_p2pkh(&bitcoin::PubkeyHash::from_byte_array(
                hash,
            )))
        } else if *prefix == self.p2sh_prefix {
            Ok(ScriptBuf::new_p2sh(&bitcoin::ScriptHash::from_byte_array(
                hash,
            )))
        } else {
            Err(AddressError::WrongNetwork)
        }
    }

    /// `m/purpose'/coin'/account'`.
    fn account_path(&self, account: u32) -> DerivationPath {
        DerivationPath::from(vec![
            hardened(self.coin.purpose()),
            hardened(self.coin.coin_type()),
            hardened(account),
        ])
    }
}

fn hardened(i: u32) -> ChildNumber {
    ChildNumber::from_hardened_idx(i).expect("a path index below 2^31")
}

fn base58_address(prefix: u8, hash: &[u8; 20]) -> String {
    let mut payload = Vec::with_capacity(21);
    payload.push(prefix);
    payload.extend_from_slice(hash);
    base58::encode_check(&payload)
}

/// One account's extended public key on one network: it derives the account's receive
/// keys and addresses (`.../0/i`) without the seed.
#[derive(Clone, Debug)]
pub struct UtxoAccount {
    xpub: Xpub,
    network: UtxoNetwork,
}

impl UtxoAccount {
    /// The public key of receive index `index` (`.../0/index`, below 2^31).
    pub fn public_key(&self, index: u32) -> Result<PublicKey, DeriveError> {
        let path = [ChildNumber::Normal { index: 0 }, normal(index)?];
        let secp = Secp256k1::verification_only();
        let child = self
            .xpub
            .derive_pub(&secp, &path)
            .map_err(|e| DeriveError(e.to_string()))?;
        Ok(child.public_key)
    }

    /// The address of receive index `index` ([`UtxoNetwork::address`]).
    pub fn address(&self, index: u32) -> Result<String, DeriveError> {
        Ok(self.network.address(&self.public_key(index)?))
    }

    /// The network the account writes its addresses for.
    pub fn network(&self) -> &UtxoNetwork {
        &self.network
    }
}

fn normal(index: u32) -> Result<ChildNumber, DeriveError> {
    ChildNumber::from_normal_idx(index)
        .map_err(|_| DeriveError(format!("index {index} is 2^31 or more")))
}

/// A key could not be derived (an index out of range; the rest cannot happen but with
/// probability 2^-127).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key derivation failed: {0}")]
pub struct DeriveError(pub String);

/// The BIP32 root of the seed, from which [`crate::Signer`] derives UTXO keys.
pub(crate) struct UtxoRoot(Xpriv);

impl UtxoRoot {
    /// The root of a 64-byte BIP39 seed.
    pub(crate) fn from_seed(seed: &[u8]) -> Result<UtxoRoot, DeriveError> {
        Xpriv::new_master(bitcoin::NetworkKind::Main, seed)
            .map(UtxoRoot)
            .map_err(|e| DeriveError(e.to_string()))
    }

    /// The extended public key of `account` on `network`.
    pub(crate) fn account(
        &self,
        network: &UtxoNetwork,
        account: u32,
    ) -> Result<UtxoAccount, DeriveError> {
        let SigningAccount { xpriv, secp } = self.signing_account(network, account)?;
        Ok(UtxoAccount {
            xpub: Xpub::from_priv(&secp, &xpriv),
            network: network.clone(),
        })
    }

    /// The keys that sign for receive indices of `account` on `network`: the account's
    /// hardened derivation is done once, each index below it on demand.
    pub(crate) fn signing_account(
        &self,
        network: &UtxoNetwork,
        account: u32,
    ) -> Result<SigningAccount, DeriveError> {
        let secp = Secp256k1::new();
        let xpriv = self.account_xpriv(&secp, network, account)?;
        Ok(SigningAccount { xpriv, secp })
    }

    fn account_xpriv(
        &self,
        secp: &Secp256k1<bitcoin::secp256k1::All>,
        network: &UtxoNetwork,
        account: u32,
    ) -> Result<Xpriv, DeriveError> {
        if account >= 1 << 31 {
            return Err(DeriveError(format!("account {account} is 2^31 or more")));
        }
        self.0
            .derive_priv(secp, &network.account_path(account))
            .map_err(|e| DeriveError(e.to_string()))
    }
}

/// One account's private extended key, from which [`SigningAccount::key`] derives
/// the key of each receive index.
pub(crate) struct SigningAccount {
    xpriv: Xpriv,
    secp: Secp256k1<bitcoin::secp256k1::All>,
}

impl SigningAccount {
    /// The key pair of receive index `index` (`.../0/index`).
    pub(crate) fn key(&self, index: u32) -> Result<(SecretKey, PublicKey), DeriveError> {
        let child = self
            .xpriv
            .derive_priv(
                &self.secp,
                &[ChildNumber::Normal { index: 0 }, normal(index)?],
            )
            .map_err(|e| DeriveError(e.to_string()))?;
        Ok((child.private_key, child.private_key.public_key(&self.secp)))
    }

    /// Signs a 32-byte signature hash with `key`: ECDSA with a low S (BIP 146).
    pub(crate) fn sign(
        &self,
        key: &SecretKey,
        digest: [u8; 32],
    ) -> bitcoin::secp256k1::ecdsa::Signature {
        let msg = bitcoin::secp256k1::Message::from_digest(digest);
        let mut sig = self.secp.sign_ecdsa(&msg, key);
        sig.normalize_s();
        sig
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::bip32::Xpriv;
    use std::str::FromStr;

    /// BIP84's test vectors: the account-0 receive and change addresses of the mnemonic
    /// `abandon ... about`.
    #[test]
    fn bip84_vectors() {
        let seed = crate::seed_of("abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about")
            .expect("seed");
        let root = UtxoRoot::from_seed(seed.as_slice()).expect("root");
        let net = UtxoNetwork::bitcoin("bitcoin").expect("mainnet");
        let acct = root.account(&net, 0).expect("account");
        assert_eq!(
            acct.address(0).unwrap(),
            "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"
        );
        assert_eq!(
            acct.address(1).unwrap(),
            "bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g"
        );
        assert_eq!(
            hex::encode(acct.public_key(0).unwrap().serialize()),
            "0330d54fd0dd420a6e5f8d3624f5f3482cae350f79d5f0753bf5beef9c2d91af3c"
        );
        // The change chain (`.../1/0`) is derived from the account's key as BIP84 does.
        let secp = Secp256k1::new();
        let xpriv = root.account_xpriv(&secp, &net, 0).unwrap();
        let change = xpriv
            .derive_priv(
                &secp,
                &[
                    ChildNumber::Normal { index: 1 },
                    ChildNumber::Normal { index: 0 },
                ],
            )
            .unwrap();
        let change_key = change.private_key.public_key(&secp);
        assert_eq!(
            net.address(&change_key),
            "bc1q8c6fshw2dlwun7ekn9qwf37cu2rn755upcp6el"
        );
        // The receive key's secret matches its public key.
        let (sk, _) = root.signing_account(&net, 0).unwrap().key(0).unwrap();
        assert_eq!(sk.public_key(&secp), acct.public_key(0).unwrap());
        assert_eq!(
            bitcoin::PrivateKey::new(sk, bitcoin::NetworkKind::Main).to_wif(),
            "KyZpNDKnfs94vbrwhJneDi77V6jF64PWPF8x5cdJb8ifgg2DUc9d"
        );
    }

    /// BIP32's test vector 1: the master and `m/0'` and `m/0'/1` from seed 000102...0f.
    #[test]
    fn bip32_vector_1() {
        let seed = hex::decode("000102030405060708090a0b0c0d0e0f").unwrap();
        let root = UtxoRoot::from_seed(&seed).unwrap();
        let secp = Secp256k1::new();
        assert_eq!(
            root.0.to_string(),
            "xprv9s21ZrQH143K3QTDL4LXw2F7HEK3wJUD2nW2nRk4stbPy6cq3jPPqjiChkVvvNKmPGJxWUtg6LnF5kejMRNNU3TGtRBeJgk33yuGBxrMPHi"
        );
        assert_eq!(
            Xpub::from_priv(&secp, &root.0).to_string(),
            "xpub661MyMwAqRbcFtXgS5sYJABqqG9YLmC4Q1Rdap9gSE8NqtwybGhePY2gZ29ESFjqJoCu1Rupje8YtGqsefD265TMg7usUDFdp6W1EGMcet8"
        );
        let m0h = root.0.derive_priv(&secp, &[hardened(0)]).unwrap();
        assert_eq!(
            m0h.to_string(),
            "xprv9uHRZZhk6KAJC1avXpDAp4MDc3sQKNxDiPvvkX8Br5ngLNv1TxvUxt4cV1rGL5hj6KCesnDYUhd7oWgT11eZG7XnxHrnYeSvkzY7d2bhkJ7"
        );
        // `m/0'/1` from the public side equals the private side's public key.
        let m0h_pub = Xpub::from_priv(&secp, &m0h);
        assert_eq!(
            m0h_pub.to_string(),
            "xpub68Gmy5EdvgibQVfPdqkBBCHxA5htiqg55crXYuXoQRKfDBFA1WEjWgP6LHhwBZeNK1VTsfTFUHCdrfp1bgwQ9xv5ski8PX9rL2dZXvgGDnw"
        );
        let by_pub = m0h_pub
            .derive_pub(&secp, &[ChildNumber::Normal { index: 1 }])
            .unwrap();
        assert_eq!(
            by_pub.to_string(),
            "xpub6ASuArnXKPbfEwhqN6e3mwBcDTgzisQN1wXN9BJcM47sSikHjJf3UFHKkNAWbWMiGj7Wf5uMash7SyYq527Hqck2AxYysAA7xmALppuCkwQ"
        );
        let _ = Xpriv::from_str(&m0h.to_string()).unwrap();
    }

    #[test]
    fn addresses_parse_back_to_their_scripts_and_other_networks_are_refused() {
        let seed = hex::decode("000102030405060708090a0b0c0d0e0f").unwrap();
        let root = UtxoRoot::from_seed(&seed).unwrap();
        for net in [
            UtxoNetwork::bitcoin("bitcoin").unwrap(),
            UtxoNetwork::bitcoin("regtest").unwrap(),
            UtxoNetwork::dogecoin("dogecoin").unwrap(),
            UtxoNetwork::dogecoin("testnet").unwrap(),
        ] {
            let acct = root.account(&net, MASTER_ACCOUNT).unwrap();
            let key = acct.public_key(7).unwrap();
            let addr = acct.address(7).unwrap();
            assert_eq!(
                net.script_for(&addr).unwrap(),
                net.script_of(&key),
                "{addr}"
            );
        }
        let main = UtxoNetwork::bitcoin("bitcoin").unwrap();
        let reg = UtxoNetwork::bitcoin("regtest").unwrap();
        let a = root.account(&reg, 0).unwrap().address(0).unwrap();
        assert!(a.starts_with("bcrt1q"));
        assert_eq!(main.script_for(&a), Err(AddressError::WrongNetwork));
        let doge = UtxoNetwork::dogecoin("dogecoin").unwrap();
        let d = root.account(&doge, 0).unwrap().address(0).unwrap();
        assert!(d.starts_with('D'), "{d}");
        assert_eq!(main.script_for(&d), Err(AddressError::WrongNetwork));
        let mut bad = d.clone();
        bad.replace_range(5..6, if &d[5..6] == "a" { "b" } else { "a" });
        assert_eq!(doge.script_for(&bad), Err(AddressError::Invalid));
        // A P2SH address of the network is a valid destination.
        let p2sh = base58_address(doge.p2sh_prefix, &[7; 20]);
        assert!(doge.script_for(&p2sh).unwrap().is_p2sh());
        // Litecoin's regtest, as the tests run it: hrp `rltc`.
        let ltc = reg
            .clone()
            .with_overrides(Some("rltc"), None, None)
            .unwrap();
        assert_eq!(
            doge.clone().with_overrides(Some("rltc"), None, None),
            Err(AddressError::Invalid)
        );
        assert!(root
            .account(&ltc, 0)
            .unwrap()
            .address(0)
            .unwrap()
            .starts_with("rltc1q"));
    }
}
