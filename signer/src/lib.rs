//! Keys and signing. The master seed (a BIP39 mnemonic) lives in `seed.enc` in the data
//! dir, encrypted with a key derived from the operator's passphrase (argon2id) under
//! XChaCha20-Poly1305 with the file header as associated data. Keys never leave this crate:
//! the rest of the binary asks [`Signer`] to sign a transaction and gets bytes back.
//!
//! ```no_run
//! # fn demo() -> Result<(), appliance_signer::SignerError> {
//! let dir = std::path::Path::new("/var/lib/appliance");
//! let signer = appliance_signer::Signer::unlock(dir, "correct horse battery staple")?;
//! println!("EVM master wallet: {}", signer.evm_master_address());
//! # Ok(()) }
//! ```

pub mod slip10;
pub mod utxo;
pub mod utxo_tx;

use std::path::{Path, PathBuf};

use alloy::consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Encodable2718;
use alloy::network::TxSignerSync;
use alloy::primitives::Address;
use alloy_signer_local::coins_bip39::{English, Mnemonic};
use alloy_signer_local::{MnemonicBuilder, PrivateKeySigner};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use zeroize::Zeroizing;

/// Test mode's published mnemonic (see [`Signer::test_mode`]); the same text as
/// `appliance_chains::address::TEST_MODE_MNEMONIC`, checked by a test of the binary.
pub const TEST_MODE_MNEMONIC: &str = "test test test test test test test test test test test junk";

/// Name of the encrypted seed file inside the data dir.
pub const SEED_FILE: &str = "seed.enc";

/// BIP44 path of the EVM master wallet (one key for every EVM chain).
pub const EVM_MASTER_PATH: &str = "m/44'/60'/0'/0/0";

const MAGIC: &[u8; 8] = b"APPLSEED";
const VERSION: u8 = 1;
/// argon2id cost: 64 MiB, 3 passes, 1 lane (OWASP's second recommended setting).
const ARGON_M_KIB: u32 = 64 * 1024;
const ARGON_T: u32 = 3;
const ARGON_P: u32 = 1;
const HEADER_LEN: usize = 8 + 1 + 12 + 16 + 24;
/// Shortest passphrase `init` accepts.
pub const MIN_PASSPHRASE_CHARS: usize = 12;

/// Why the signer could not be created, unlocked or asked to sign.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignerError {
    #[error("no master seed in {0} (run `appliance init` first)")]
    NoSeed(PathBuf),
    #[error("a master seed already exists in {0}")]
    SeedExists(PathBuf),
    #[error("the seed file is not an appliance seed file or is damaged")]
    BadFile,
    #[error("wrong passphrase (or the seed file was altered)")]
    WrongPassphrase,
    #[error("the passphrase must have at least {MIN_PASSPHRASE_CHARS} characters")]
    WeakPassphrase,
    #[error("no passphrase: set {0}")]
    NoPassphrase(String),
    #[error("key derivation: {0}")]
    Derive(String),
    #[error("seed file i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a signature was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// Signing is off at these levels (`service`, `project`, `key`; SPEC.md section 2, Ping).
    #[error("signing is disabled at: {}", .0.join(", "))]
    Disabled(Vec<&'static str>),
    #[error("signing failed: {0}")]
    Signature(#[from] alloy::signers::Error),
    /// The signing key could not be derived.
    #[error("signing key: {0}")]
    Key(String),
}

/// The three signing switches; all must be on for a signature (SPEC.md section 5 rule 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigningPolicy {
    pub service: bool,
    pub project: bool,
    pub key: bool,
}

impl SigningPolicy {
    /// The levels that block signing (empty: allowed).
    pub fn blocked_by(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if !self.service {
            v.push("service");
        }
        if !self.project {
            v.push("project");
        }
        if !self.key {
            v.push("key");
        }
        v
    }
}

/// A signed EVM transaction ready to broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedEvmTx {
    /// EIP-2718 encoding (`eth_sendRawTransaction` payload).
    pub raw: Vec<u8>,
    /// Transaction hash.
    pub hash: [u8; 32],
}

/// The unlocked master seed and the keys derived from it.
pub struct Signer {
    /// Kept only so further chain families can derive their keys; never printed.
    _phrase: Zeroizing<String>,
    evm: PrivateKeySigner,
    /// The BIP32 root of the UTXO chains' keys ([`utxo`]).
    utxo: utxo::UtxoRoot,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("evm_master", &self.evm.address())
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// Creates a new random 24-word seed, writes it encrypted to `data_dir/seed.enc`
    /// (mode 0600) and returns the unlocked signer. Refuses to overwrite a seed.
    pub fn init(data_dir: &Path, passphrase: &str) -> Result<Signer, SignerError> {
        if passphrase.chars().count() < MIN_PASSPHRASE_CHARS {
            return Err(SignerError::WeakPassphrase);
        }
        let path = data_dir.join(SEED_FILE);
        if path.exists() {
            return Err(SignerError::SeedExists(path));
        }
        let mnemonic = Mnemonic::<English>::new_with_count(&mut rand::rngs::OsRng, 24)
            .map_err(|e| SignerError::Derive(e.to_string()))?;
        let phrase = Zeroizing::new(mnemonic.to_phrase());
        let file = seal(passphrase, phrase.as_bytes())?;
        std::fs::create_dir_all(data_dir)?;
        write_private(&path, &file)?;
        Signer::from_phrase(phrase)
    }

    /// Reads and decrypts `data_dir/seed.enc`.
    pub fn unlock(data_dir: &Path, passphrase: &str) -> Result<Signer, SignerError> {
        let path = data_dir.join(SEED_FILE);
        let file = match std::fs::read(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SignerError::NoSeed(data_dir.to_path_buf()))
            }
            Err(e) => return Err(e.into()),
        };
        let plain = open(passphrase, &file)?;
        let phrase =
            Zeroizing::new(String::from_utf8(plain.to_vec()).map_err(|_| SignerError::BadFile)?);
        Signer::from_phrase(phrase)
    }

    /// Test mode's signer: the published development mnemonic
    /// (`test test ... junk`, the key of Anvil's first account), whose EVM master address is
    /// test mode's treasury. It signs only for test mode's simulated chains; its key is
    /// public, so it must never be used for a live chain.
    pub fn test_mode() -> Signer {
        Signer::from_phrase(Zeroizing::new(TEST_MODE_MNEMONIC.to_string()))
            .expect("the test-mode mnemonic is a valid BIP39 phrase")
    }

    /// A new random 24-word seed drawn from `rng`, held in memory only (never written): the
    /// master seed of `appliance simulate`, whose seeded generator makes every
    /// run of a seed sign with the same keys. Nothing that serves a data dir uses it.
    pub fn in_memory(
        rng: &mut (impl rand::RngCore + rand::CryptoRng),
    ) -> Result<Signer, SignerError> {
        let mnemonic = Mnemonic::<English>::new_with_count(rng, 24)
            .map_err(|e| SignerError::Derive(e.to_string()))?;
        Signer::from_phrase(Zeroizing::new(mnemonic.to_phrase()))
    }

    /// Whether `data_dir` holds a seed file.
    pub fn exists(data_dir: &Path) -> bool {
        data_dir.join(SEED_FILE).exists()
    }

    fn from_phrase(phrase: Zeroizing<String>) -> Result<Signer, SignerError> {
        let evm = MnemonicBuilder::<English>::default()
            .phrase(phrase.as_str())
            .derivation_path(EVM_MASTER_PATH)
            .and_then(|b| b.build())
            .map_err(|e| SignerError::Derive(e.to_string()))?;
        let seed = seed_of(phrase.as_str())?;
        let utxo = utxo::UtxoRoot::from_seed(seed.as_slice())
            .map_err(|e| SignerError::Derive(e.to_string()))?;
        Ok(Signer {
            _phrase: phrase,
            evm,
            utxo,
        })
    }

    /// The extended public key of `account` ([`utxo::CUSTOMER_ACCOUNT`] or
    /// [`utxo::MASTER_ACCOUNT`]) of a UTXO chain on `network`: it derives that account's
    /// addresses without the seed (DECISIONS.md section 17).
    pub fn utxo_account(
        &self,
        network: &utxo::UtxoNetwork,
        account: u32,
    ) -> Result<utxo::UtxoAccount, SignerError> {
        self.utxo
            .account(network, account)
            .map_err(|e| SignerError::Derive(e.to_string()))
    }

    /// Signs the 32-byte signature hash `sighash` of a UTXO transaction input with the key
    /// of receive index `index` of `account` on `network`: an ECDSA signature with a low S,
    /// DER-encoded, without the sighash-type byte. Refused while a switch is off.
    pub fn sign_utxo_input(
        &self,
        policy: SigningPolicy,
        network: &utxo::UtxoNetwork,
        (account, index): (u32, u32),
        sighash: [u8; 32],
    ) -> Result<Vec<u8>, SignError> {
        let blocked = policy.blocked_by();
        if !blocked.is_empty() {
            return Err(SignError::Disabled(blocked));
        }
        let account = self
            .utxo
            .signing_account(network, account)
            .map_err(|e| SignError::Key(e.to_string()))?;
        let (key, _) = account
            .key(index)
            .map_err(|e| SignError::Key(e.to_string()))?;
        Ok(account.sign(&key, sighash).serialize_der().to_vec())
    }

    /// Address of the EVM master wallet (the treasury of every EVM chain).
    pub fn evm_master_address(&self) -> Address {
        self.evm.address()
    }

    /// Signs an EIP-1559 transaction with the EVM master key, unless a switch is off.
    pub fn sign_evm(
        &self,
        policy: SigningPolicy,
        mut tx: TxEip1559,
    ) -> Result<SignedEvmTx, SignError> {
        let blocked = policy.blocked_by();
        if !blocked.is_empty() {
            return Err(SignError::Disabled(blocked));
        }
        let sig = self.evm.sign_transaction_sync(&mut tx)?;
        let env = TxEnvelope::from(tx.into_signed(sig));
        Ok(SignedEvmTx {
            raw: env.encoded_2718(),
            hash: env.tx_hash().0,
        })
    }
}

/// The 64-byte BIP39 seed of `phrase` (no passphrase extension).
pub(crate) fn seed_of(phrase: &str) -> Result<Zeroizing<[u8; 64]>, SignerError> {
    let mnemonic = Mnemonic::<English>::new_from_phrase(phrase)
        .map_err(|e| SignerError::Derive(e.to_string()))?;
    let seed = mnemonic
        .to_seed(None)
        .map_err(|e| SignerError::Derive(e.to_string()))?;
    Ok(Zeroizing::new(seed))
}

/// Reads the passphrase from the environment variable `env` (default
/// `APPLIANCE_PASSPHRASE`), else from `file`, else from the systemd credential
/// `$CREDENTIALS_DIRECTORY/passphrase`. Never from a command-line argument. A trailing
/// newline of a file is dropped.
pub fn read_passphrase(
    env: Option<&str>,
    file: Option<&Path>,
) -> Result<Zeroizing<String>, SignerError> {
    let var = env.unwrap_or("APPLIANCE_PASSPHRASE");
    if let Ok(v) = std::env::var(var) {
        if !v.is_empty() {
            return Ok(Zeroizing::new(v));
        }
    }
    let cred =
        std::env::var_os("CREDENTIALS_DIRECTORY").map(|d| PathBuf::from(d).join("passphrase"));
    for path in file.map(Path::to_path_buf).into_iter().chain(cred) {
        if path.exists() {
            let text = Zeroizing::new(std::fs::read_to_string(&path)?);
            let trimmed = text.trim_end_matches(['\n', '\r']);
            return Ok(Zeroizing::new(trimmed.to_string()));
        }
    }
    Err(SignerError::NoPassphrase(match file {
        Some(f) => format!("{var} or the file {}", f.display()),
        None => var.to_string(),
    }))
}

fn derive_key(
    passphrase: &str,
    salt: &[u8],
    m: u32,
    t: u32,
    p: u32,
) -> Result<Zeroizing<[u8; 32]>, SignerError> {
    let params = argon2::Params::new(m, t, p, Some(32)).map_err(|_| SignerError::BadFile)?;
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Zeroizing::new([0u8; 32]);
    a.hash_password_into(passphrase.as_bytes(), salt, key.as_mut())
        .map_err(|e| SignerError::Derive(e.to_string()))?;
    Ok(key)
}

/// File layout: magic (8) ‖ version (1) ‖ argon2 m_KiB, t, p (u32 BE each) ‖ salt (16) ‖
/// nonce (24) ‖ ciphertext+tag. The header is the AEAD's associated data, so changing the
/// cost parameters breaks decryption.
fn seal(passphrase: &str, plain: &[u8]) -> Result<Vec<u8>, SignerError> {
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let mut out = Vec::with_capacity(HEADER_LEN + plain.len() + 16);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    for v in [ARGON_M_KIB, ARGON_T, ARGON_P] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&salt);
    out.extend_from_slice(&nonce);
    let key = derive_key(passphrase, &salt, ARGON_M_KIB, ARGON_T, ARGON_P)?;
    let cipher = XChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&key[..]));
    let ct = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: plain,
                aad: &out,
            },
        )
        .map_err(|_| SignerError::Derive("encryption failed".into()))?;
    out.extend_from_slice(&ct);
    Ok(out)
}

fn open(passphrase: &str, file: &[u8]) -> Result<Zeroizing<Vec<u8>>, SignerError> {
    if file.len() < HEADER_LEN + 16 || &file[..8] != MAGIC || file[8] != VERSION {
        return Err(SignerError::BadFile);
    }
    let u = |i: usize| u32::from_be_bytes(file[i..i + 4].try_into().expect("4 bytes"));
    let (m, t, p) = (u(9), u(13), u(17));
    // Refuse absurd costs from a tampered header before spending memory on them.
    if m > 4 * 1024 * 1024 || t > 64 || p > 64 {
        return Err(SignerError::BadFile);
    }
    let salt = &file[21..37];
    let nonce = &file[37..61];
    let key = derive_key(passphrase, salt, m, t, p)?;
    let cipher = XChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&key[..]));
    let plain = cipher
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: &file[HEADER_LEN..],
                aad: &file[..HEADER_LEN],
            },
        )
        .map_err(|_| SignerError::WrongPassphrase)?;
    Ok(Zeroizing::new(plain))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SignerError> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{TxKind, U256};

    const PASS: &str = "correct horse battery staple";

    #[test]
    fn test_mode_key_is_the_published_development_key() {
        let s = Signer::test_mode();
        assert_eq!(
            s.evm_master_address().to_checksum(None),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
    }

    #[test]
    fn init_then_unlock_gives_the_same_master_key() {
        let dir = tempfile::tempdir().unwrap();
        let a = Signer::init(dir.path(), PASS).unwrap();
        let b = Signer::unlock(dir.path(), PASS).unwrap();
        assert_eq!(a.evm_master_address(), b.evm_master_address());
        assert!(matches!(
            Signer::init(dir.path(), PASS),
            Err(SignerError::SeedExists(_))
        ));
        assert!(matches!(
            Signer::unlock(dir.path(), "wrong passphrase!!"),
            Err(SignerError::WrongPassphrase)
        ));
        // The file never contains the phrase in the clear.
        let file = std::fs::read(dir.path().join(SEED_FILE)).unwrap();
        assert!(!String::from_utf8_lossy(&file).contains("abandon"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(SEED_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_tampered_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        Signer::init(dir.path(), PASS).unwrap();
        let path = dir.path().join(SEED_FILE);
        let mut file = std::fs::read(&path).unwrap();
        file[30] ^= 1; // inside the salt: part of the associated data
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, &file).unwrap();
        assert!(Signer::unlock(dir.path(), PASS).is_err());
    }

    #[test]
    fn known_mnemonic_derives_the_known_address() {
        // The well-known test mnemonic (Hardhat/Anvil account 0 at m/44'/60'/0'/0/0).
        let s = Signer::from_phrase(Zeroizing::new(
            "test test test test test test test test test test test junk".into(),
        ))
        .unwrap();
        assert_eq!(
            s.evm_master_address().to_checksum(None),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
    }

    #[test]
    fn signing_refuses_when_any_switch_is_off() {
        let s = Signer::from_phrase(Zeroizing::new(
            "test test test test test test test test test test test junk".into(),
        ))
        .unwrap();
        let tx = TxEip1559 {
            chain_id: 31337,
            nonce: 0,
            gas_limit: 21_000,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(Address::ZERO),
            value: U256::from(1u64),
            ..Default::default()
        };
        let on = SigningPolicy {
            service: true,
            project: true,
            key: true,
        };
        let signed = s.sign_evm(on, tx.clone()).unwrap();
        assert_eq!(signed.raw[0], 2, "EIP-1559 envelope type");
        for (policy, who) in [
            (
                SigningPolicy {
                    service: false,
                    ..on
                },
                "service",
            ),
            (
                SigningPolicy {
                    project: false,
                    ..on
                },
                "project",
            ),
            (SigningPolicy { key: false, ..on }, "key"),
        ] {
            match s.sign_evm(policy, tx.clone()) {
                Err(SignError::Disabled(v)) => assert_eq!(v, vec![who]),
                other => panic!("expected refusal, got {other:?}"),
            }
        }
    }
}
