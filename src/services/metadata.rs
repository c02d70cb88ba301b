//! Bounds of `metadata`, the merchant's own key-value pairs on a resource (customers).
//!
//! Stripe's shape: at most [`MAX_KEYS`] keys, each key 1 to [`MAX_KEY_CHARS`] characters, each
//! value a string of at most [`MAX_VALUE_CHARS`] characters, a number or a boolean. No nesting:
//! an object or array value is refused, so a stored row stays far from any decoder's depth
//! limit. A null value removes the key (on create it is simply left out). Every refusal is
//! 400 `invalid_request` with `param` `metadata` (the whole object, or a key too long) or
//! `metadata[<key>]` (that key's value).

use serde_json::{Map, Value};

/// Most keys in one resource's metadata.
pub const MAX_KEYS: usize = 50;
/// Longest key, characters.
pub const MAX_KEY_CHARS: usize = 40;
/// Longest string value, characters.
pub const MAX_VALUE_CHARS: usize = 500;

/// Metadata out of bounds: 400 `invalid_request` naming `param` (`metadata`, or
/// `metadata[<key>]` for that key's value). The message is for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MetadataError {
    pub param: String,
    pub message: String,
}

fn invalid(param: impl Into<String>, message: impl Into<String>) -> MetadataError {
    MetadataError {
        param: param.into(),
        message: message.into(),
    }
}

/// Checks each pair of a metadata object as sent (create, or the changes of a patch).
pub fn check_pairs(m: &Map<String, Value>) -> Result<(), MetadataError> {
    if m.len() > MAX_KEYS {
        return Err(too_many());
    }
    for (k, v) in m {
        let n = k.chars().count();
        if n == 0 || n > MAX_KEY_CHARS {
            return Err(invalid(
                "metadata",
                format!("metadata keys must have 1 to {MAX_KEY_CHARS} characters."),
            ));
        }
        let param = format!("metadata[{k}]");
        match v {
            Value::String(s) if s.chars().count() > MAX_VALUE_CHARS => {
                return Err(invalid(
                    &param,
                    format!("metadata values must have at most {MAX_VALUE_CHARS} characters."),
                ))
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {}
            Value::Object(_) | Value::Array(_) => {
                return Err(invalid(
                    &param,
                    "metadata values must be strings, numbers or booleans (no nesting).",
                ))
            }
        }
    }
    Ok(())
}

/// The metadata of a new resource: the pairs checked, null values left out.
pub fn for_create(m: Map<String, Value>) -> Result<Map<String, Value>, MetadataError> {
    check_pairs(&m)?;
    Ok(m.into_iter().filter(|(_, v)| !v.is_null()).collect())
}

/// Merges a patch into the current metadata (Stripe-style: a null value removes the key) and
/// checks the result still holds at most [`MAX_KEYS`] keys.
pub fn merge(
    current: Map<String, Value>,
    patch: Map<String, Value>,
) -> Result<Map<String, Value>, MetadataError> {
    check_pairs(&patch)?;
    let mut cur = current;
    for (k, v) in patch {
        if v.is_null() {
            cur.remove(&k);
        } else {
            cur.insert(k, v);
        }
    }
    if cur.len() > MAX_KEYS {
        return Err(too_many());
    }
    Ok(cur)
}

fn too_many() -> MetadataError {
    invalid(
        "metadata",
        format!("metadata holds at most {MAX_KEYS} keys."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn param(r: Result<Map<String, Value>, MetadataError>) -> String {
        let e = crate::api::error::ApiError::from(r.expect_err("accepted"));
        assert_eq!((e.status.as_u16(), e.code), (400, "invalid_request"));
        e.param.unwrap()
    }

    #[test]
    fn bounds_hold_at_the_limit_and_refuse_beyond() {
        let at: Map<String, Value> = (0..MAX_KEYS)
            .map(|i| (format!("{i:0>40}"), json!("v".repeat(MAX_VALUE_CHARS))))
            .collect();
        assert_eq!(for_create(at.clone()).unwrap().len(), MAX_KEYS);
        let mut over = at.clone();
        over.insert("one more".into(), json!(1));
        assert_eq!(param(for_create(over)), "metadata");
        assert_eq!(
            param(for_create(obj(json!({ "k".repeat(41): 1 })))),
            "metadata"
        );
        assert_eq!(param(for_create(obj(json!({ "": 1 })))), "metadata");
        assert_eq!(
            param(for_create(obj(json!({ "k": "v".repeat(501) })))),
            "metadata[k]"
        );
        // Characters, not bytes.
        assert!(for_create(obj(json!({ "é".repeat(40): "é".repeat(500) }))).is_ok());
        assert_eq!(
            param(for_create(obj(json!({ "n": { "deep": 1 } })))),
            "metadata[n]"
        );
        assert_eq!(param(for_create(obj(json!({ "a": [1] })))), "metadata[a]");
        let ok = for_create(obj(json!({ "s": "x", "n": 3, "b": true, "gone": null }))).unwrap();
        assert_eq!(Value::Object(ok), json!({ "s": "x", "n": 3, "b": true }));
    }

    #[test]
    fn a_merge_may_not_grow_past_the_key_limit() {
        let cur: Map<String, Value> = (0..MAX_KEYS).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(
            param(merge(cur.clone(), obj(json!({ "new": 1 })))),
            "metadata"
        );
        // Removing one makes room for another in the same patch.
        let m = merge(cur.clone(), obj(json!({ "k0": null, "new": 1 }))).unwrap();
        assert_eq!(m.len(), MAX_KEYS);
        assert!(m.contains_key("new") && !m.contains_key("k0"));
    }
}
