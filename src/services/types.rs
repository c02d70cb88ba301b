//! Values parsed once at the API boundary and handed to the services typed: a resource id,
//! a chain identifier, an asset symbol and an atomic amount. Each parser names the request
//! field at fault (400 `invalid_request` + `param`, SPEC.md section 7); the services never
//! re-check their shape.

use std::fmt;
use std::ops::Deref;

use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::services::error::Invalid;

/// Typed resource ids (`crate::ids`, below the key model, which names a project by one);
/// the services take and return them, converting to the store's bare `Uuid`s at their edge.
pub use crate::ids::*;

/// A chain identifier from a request (`ethereum`, `bsc`, ...). A label, not a check:
/// whether the server knows the chain and the project lists it is the service's answer
/// (`services::chains::resolve`: 400 `invalid_request` / 422 `chain_not_enabled`), so the
/// order in which a request's faults are reported stays the service's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChainId(String);

/// An asset symbol from a request (`USDT`, `ETH`, ...), case-sensitive as listed by
/// `GET /v1/chains`. Whether the chain has it is `services::chains::resolve_asset`
/// (400 `unknown_asset`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AssetSymbol(String);

macro_rules! str_newtype {
    ($($t:ident),*) => {$(
        impl $t {
            pub fn new(s: impl Into<String>) -> Self {
                $t(s.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
        }
        impl Deref for $t {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }
        impl From<&str> for $t {
            fn from(s: &str) -> Self {
                $t(s.to_string())
            }
        }
        impl From<String> for $t {
            fn from(s: String) -> Self {
                $t(s)
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )*};
}
str_newtype!(ChainId, AssetSymbol);

/// A positive atomic amount (smallest unit of an asset) from a request: SPEC.md section 1
/// convention 3. The string form is canonical: ASCII digits only, no sign, no fraction, no
/// leading zero, not empty, at most `u128::MAX`, and not zero. `"0001"`, `""`, `"+1"`,
/// `"1.0"` and `"0"` are all 400 `invalid_request` naming the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(u128);

impl Amount {
    pub fn parse(param: &'static str, s: &str) -> Result<Self, Invalid> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Invalid::new(
                param,
                format!(
                    "{param} must be a non-negative integer string in atomic units, got {s:?}."
                ),
            ));
        }
        if s.len() > 1 && s.starts_with('0') {
            return Err(Invalid::new(
                param,
                format!("{param} must be written without leading zeros, got {s:?}."),
            ));
        }
        let v: u128 = s.parse().map_err(|_| {
            Invalid::new(
                param,
                format!("{param} exceeds the largest supported amount."),
            )
        })?;
        if v == 0 {
            return Err(Invalid::new(
                param,
                format!("{param} must be greater than zero."),
            ));
        }
        Ok(Amount(v))
    }

    /// A positive amount; `None` for zero.
    pub fn new(v: u128) -> Option<Self> {
        (v > 0).then_some(Amount(v))
    }

    /// The amount in atomic units.
    pub fn get(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

// ---------------------------------------------------------------------------------------
// How a request names these, for the OpenAPI document (the service request structs that
// are also request bodies describe their fields with them).

/// A schema written as JSON (those built from the server's tables and rules: chains,
/// symbols, scopes, metadata, URLs, allow-list entries), for the OpenAPI document.
pub fn schema_from_json(v: serde_json::Value) -> RefOr<Schema> {
    RefOr::T(serde_json::from_value(v).expect("a valid schema"))
}

/// A chain identifier a request may name (SPEC.md section 2: the enumerated chains). Whether
/// the project may use it now is answered with 422 (`chain_not_enabled`, ...).
pub struct ChainIdIn;

impl PartialSchema for ChainIdIn {
    fn schema() -> RefOr<Schema> {
        let ids: Vec<&str> = appliance_chains::registry::CHAINS
            .iter()
            .map(|c| c.id)
            .collect();
        schema_from_json(
            serde_json::json!({"type": "string", "enum": ids, "description": "A chain identifier."}),
        )
    }
}
impl ToSchema for ChainIdIn {}

/// A chain the test mode simulates (the EVM chains).
pub struct EvmChainIn;

impl PartialSchema for EvmChainIn {
    fn schema() -> RefOr<Schema> {
        let ids: Vec<&str> = appliance_chains::registry::CHAINS
            .iter()
            .filter(|c| c.account_kind == appliance_chains::AccountKind::Contract)
            .map(|c| c.id)
            .collect();
        schema_from_json(
            serde_json::json!({"type": "string", "enum": ids, "description": "A simulated (EVM) chain."}),
        )
    }
}
impl ToSchema for EvmChainIn {}

/// An asset symbol a request names: never empty (whether the chain lists it is a rule of
/// the operation).
pub struct SymbolIn;

impl PartialSchema for SymbolIn {
    fn schema() -> RefOr<Schema> {
        schema_from_json(serde_json::json!({"type": "string", "minLength": 1}))
    }
}
impl ToSchema for SymbolIn {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_canonical_decimal_strings() {
        assert_eq!(Amount::parse("amount", "1").unwrap().get(), 1);
        assert_eq!(Amount::parse("amount", "1000000").unwrap().get(), 1_000_000);
        let max = u128::MAX.to_string();
        assert_eq!(Amount::parse("amount", &max).unwrap().get(), u128::MAX);
        for bad in [
            "", "0", "00", "0001", "01", "+1", "-1", "1.0", "1e6", " 1", "1 ", "0x10", "١",
        ] {
            let e = Amount::parse("amount", bad).unwrap_err();
            assert_eq!(e.param, "amount", "{bad:?}");
        }
        // One past u128::MAX.
        let e = Amount::parse("amount", "340282366920938463463374607431768211456").unwrap_err();
        assert!(e.message.contains("largest"), "{}", e.message);
    }
}
