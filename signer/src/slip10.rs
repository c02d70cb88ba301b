//! SLIP-0010 key derivation for ed25519 (solana, ton): the master key is HMAC-SHA512 of the
//! seed under the key `"ed25519 seed"`; each child is HMAC-SHA512 under the parent's chain
//! code of `0x00 || parent key || index`, hardened only (ed25519 has no public derivation:
//! SLIP-0010, "Private parent key → private child key"). The left half of each HMAC is the
//! key, the right half the chain code. Held to the official test vectors in the tests.
//!
//! Paths (DECISIONS.md section 17): solana `m/44'/501'/i'/0'`, ton `m/44'/607'/0'`.

use ed25519_dalek::SigningKey;
use hmac::{Hmac, Mac};
use sha2::Sha512;
use zeroize::Zeroizing;

/// The hardened bit of a path index.
pub const HARDENED: u32 = 0x8000_0000;

/// A node of the tree: its private key (the ed25519 seed of the key pair) and chain code.
pub struct Ed25519Node {
    key: Zeroizing<[u8; 32]>,
    chain_code: Zeroizing<[u8; 32]>,
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not of the form `m/a'/b'/...`.
    #[error("malformed derivation path {0:?}")]
    Malformed(String),
    /// A component without `'`: ed25519 derives hardened children only.
    #[error("ed25519 derivation is hardened only: {0:?}")]
    NotHardened(String),
}

fn hmac_halves(key: &[u8], parts: &[&[u8]]) -> Ed25519Node {
    let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    let out = Zeroizing::new(<[u8; 64]>::from(mac.finalize().into_bytes()));
    let mut node = Ed25519Node {
        key: Zeroizing::new([0; 32]),
        chain_code: Zeroizing::new([0; 32]),
    };
    node.key.copy_from_slice(&out[..32]);
    node.chain_code.copy_from_slice(&out[32..]);
    node
}

impl Ed25519Node {
    /// The master node of `seed` (16 to 64 bytes; a BIP39 seed is 64).
    pub fn master(seed: &[u8]) -> Ed25519Node {
        hmac_halves(b"ed25519 seed", &[seed])
    }

    /// The hardened child `index` (the hardened bit is set whatever `index` holds).
    pub fn child(&self, index: u32) -> Ed25519Node {
        let i = (index | HARDENED).to_be_bytes();
        hmac_halves(&self.chain_code[..], &[&[0u8], &self.key[..], &i])
    }

    /// The node at `path` (indices, each taken as hardened) below the master of `seed`.
    pub fn derive(seed: &[u8], path: &[u32]) -> Ed25519Node {
        path.iter()
            .fold(Ed25519Node::master(seed), |node, i| node.child(*i))
    }

    /// The private key: the 32-byte ed25519 seed of the key pair.
    pub fn private_key(&self) -> &[u8; 32] {
        &self.key
    }

    pub fn chain_code(&self) -> &[u8; 32] {
        &self.chain_code
    }

    /// The ed25519 key pair, for signing.
    pub fn signing_key(&self) -> SigningKey {
        SigningKey::from_bytes(&self.key)
    }

    /// The 32-byte ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.signing_key().verifying_key().to_bytes()
    }
}

/// Parses `m/44'/501'/0'/0'` (or with `h` for `'`) into indices without the hardened bit.
pub fn parse_path(path: &str) -> Result<Vec<u32>, PathError> {
    let mut parts = path.split('/');
    if parts.next() != Some("m") {
        return Err(PathError::Malformed(path.into()));
    }
    parts
        .map(|p| {
            let n = p
                .strip_suffix('\'')
                .or_else(|| p.strip_suffix('h'))
                .ok_or_else(|| PathError::NotHardened(path.into()))?;
            n.parse::<u32>()
                .ok()
                .filter(|i| *i < HARDENED && (n == "0" || !n.starts_with('0')))
                .ok_or_else(|| PathError::Malformed(path.into()))
        })
        .collect()
}

/// A solana address: the base58 of the public key.
pub fn solana_address(public_key: &[u8; 32]) -> String {
    bs58::encode(public_key).into_string()
}

#[cfg(test)]
mod tests;
