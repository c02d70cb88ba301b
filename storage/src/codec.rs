//! Value encoding: one version byte, then the record as JSON.
//!
//! JSON keeps records self-describing, so a later release can add an optional field
//! (`#[serde(default)]`) without a migration; the version byte marks a layout change that
//! needs one. Metadata objects are stored as they came.

use serde::{de::DeserializeOwned, Serialize};

use crate::StoreError;

/// Encoding version of every value written by this build.
pub const VALUE_VERSION: u8 = 1;

/// Encodes a record as `[VALUE_VERSION] ‖ json`.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(VALUE_VERSION);
    // Serializing our own plain structs into a Vec cannot fail.
    serde_json::to_writer(&mut out, value).expect("record serializes");
    out
}

/// Decodes a value written by [`encode`]; an unknown version or bad JSON is corruption.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&VALUE_VERSION, body)) => {
            serde_json::from_slice(body).map_err(|e| StoreError::Corrupt(e.to_string()))
        }
        Some((v, _)) => Err(StoreError::Corrupt(format!("unknown value version {v}"))),
        None => Err(StoreError::Corrupt("empty value".into())),
    }
}
