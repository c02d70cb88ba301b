//! What the OpenAPI document says about input that no parsing type states itself: the
//! closed enumerations a request or query may carry, the schemas built from the server's own
//! tables (scopes) and rules (metadata, webhook URLs, allow-list entries), the list
//! envelopes (written by `api::extract::ListPage`), and the invoice body, whose handler
//! fills the service's request field by field (its redirect URLs depend on the caller's
//! mode). Answers are described by the views that write them (`src/views/`), request bodies
//! read through `ReadBody` by the structs that take them, the services' request structs
//! included. Schemathesis (`scripts/schemathesis.sh`) checks every answer against the
//! document.
//!
//! Conventions (docs/decisions.md, "OpenAPI document"):
//! - amounts are strings with a digits pattern (atomic `^(0|[1-9][0-9]*)$`, signed
//!   `^-?(0|[1-9][0-9]*)$`, decimal `^-?[0-9]+(\.[0-9]+)?$`);
//! - enumerated values in ANSWERS are strings with the current values in the description,
//!   never a closed `enum` (SPEC.md section 1 rule 7: new values can appear); enumerations a
//!   REQUEST may carry are closed enums (the server refuses anything else);
//! - no schema forbids additional properties (SPEC.md section 9 rule 4);
//! - optional request fields are nullable: the server reads `null` as absent.

#![allow(dead_code)]

use serde_json::{json, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

// ---------------------------------------------------------------------------------------
// Lists

macro_rules! list_schema {
    ($($name:ident => $item:ty;)*) => {$(
        #[doc = concat!("A page of `", stringify!($item), "` (`object: list`), newest first.")]
        #[derive(ToSchema)]
        pub struct $name {
            /// Always `list`.
            #[schema(pattern = "^list$")]
            pub object: String,
            pub data: Vec<$item>,
            /// More items follow; pass `next_cursor` as `cursor`.
            pub has_more: bool,
            /// The cursor of the next page; null at the end.
            pub next_cursor: Option<String>,
        }
    )*};
}

list_schema! {
    CustomerList => Customer;
    WalletList => Wallet;
    DepositList => Deposit;
    PayoutList => Payout;
    SweepList => Sweep;
    ConversionList => Conversion;
    ConversionRuleList => ConversionRule;
    EventList => Event;
    DeliveryList => WebhookDelivery;
    ChainList => Chain;
    InvoiceList => InvoiceItem;
}

// ---------------------------------------------------------------------------------------
// Enumerations a request may carry (closed: anything else is 400 `invalid_request`).

/// Which balances `GET /v1/wallets/{id}/balances` reports.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum BalanceSource {
    Ledger,
    Chain,
    Both,
}

/// A deposit status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DepositStatusIn {
    Detected,
    Confirmed,
    Failed,
    Orphaned,
}

/// A sweep status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SweepStatusIn {
    Open,
    Submitted,
    Confirmed,
    Failed,
    Skipped,
}

/// A payout status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PayoutStatusIn {
    PendingApproval,
    Queued,
    Signing,
    Submitted,
    Confirmed,
    Failed,
    Canceled,
    Rejected,
}

/// A webhook delivery status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryStatusIn {
    Pending,
    Succeeded,
    Failed,
    Exhausted,
    Skipped,
    Canceled,
}

/// Order of `GET /v1/events`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum EventOrder {
    Asc,
    Desc,
}

/// `include_revoked` of `GET /v1/api_keys`.
#[derive(ToSchema)]
pub enum IncludeRevoked {
    #[schema(rename = "0")]
    No,
    #[schema(rename = "1")]
    Yes,
    #[schema(rename = "false")]
    False,
    #[schema(rename = "true")]
    True,
}

/// A page of webhook deliveries as `POST /v1/webhook_deliveries/replay` answers it: the new
/// deliveries, oldest first; `next_cursor` continues the replay.
#[derive(ToSchema)]
pub struct ReplayedList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<WebhookDelivery>,
    pub has_more: bool,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub next_cursor: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Schemas built from the server's own tables (chains, scopes) and rules (metadata).

pub use crate::services::types::{ChainIdIn, EvmChainIn, SymbolIn};

fn from_json(v: Value) -> RefOr<Schema> {
    RefOr::T(serde_json::from_value(v).expect("a valid schema"))
}

/// A scope a key may hold: a known scope, `*`, or `<group>:*`.
pub struct ScopeIn;

impl PartialSchema for ScopeIn {
    fn schema() -> RefOr<Schema> {
        let mut all: Vec<String> = vec!["*".into()];
        let mut groups: Vec<&str> = Vec::new();
        for s in crate::auth::ALL_SCOPES {
            all.push((*s).to_string());
            let g = s.split(':').next().unwrap_or(s);
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        all.extend(groups.iter().map(|g| format!("{g}:*")));
        from_json(
            json!({"type": "string", "enum": all, "description": "A scope (SPEC.md section 5 rule 6, DECISIONS.md section 4)."}),
        )
    }
}
impl ToSchema for ScopeIn {}

/// An `ip_allowlist` entry: an exact IP or a CIDR block ([`crate::auth::ALLOW_ENTRY_PATTERN`]).
pub struct AllowEntryIn;

impl PartialSchema for AllowEntryIn {
    fn schema() -> RefOr<Schema> {
        from_json(json!({
            "type": "string",
            "description": "An IPv4 or IPv6 address, or a CIDR block (`203.0.113.0/24`, `2001:db8::/32`).",
            "minLength": 1,
            "pattern": crate::auth::ALLOW_ENTRY_PATTERN,
        }))
    }
}
impl ToSchema for AllowEntryIn {}

/// A webhook target URL ([`crate::webhooks::guard::URL_PATTERN`]).
pub struct WebhookUrlIn;

impl PartialSchema for WebhookUrlIn {
    fn schema() -> RefOr<Schema> {
        from_json(json!({
            "type": "string",
            "minLength": 1,
            "maxLength": crate::webhooks::guard::MAX_URL_LEN,
            "pattern": crate::webhooks::guard::URL_PATTERN,
        }))
    }
}
impl ToSchema for WebhookUrlIn {}

fn metadata_schema(patch: bool) -> Value {
    let values = vec![
        json!({"type": "string", "maxLength": crate::services::metadata::MAX_VALUE_CHARS}),
        json!({"type": "number"}),
        json!({"type": "boolean"}),
        json!({"type": "null"}),
    ];
    let description = if patch {
        "Merged into the customer's metadata; a key set to null is removed; the result holds at most 50 keys."
    } else {
        "The merchant's key-value data; null values are left out."
    };
    json!({
        "type": "object",
        "description": format!("{description} At most {} keys of 1-{} characters; each value a string of at most {} characters, a number or a boolean.",
            crate::services::metadata::MAX_KEYS, crate::services::metadata::MAX_KEY_CHARS, crate::services::metadata::MAX_VALUE_CHARS),
        "maxProperties": crate::services::metadata::MAX_KEYS,
        "propertyNames": {"type": "string", "minLength": 1, "maxLength": crate::services::metadata::MAX_KEY_CHARS},
        "additionalProperties": {"anyOf": values},
    })
}

/// `metadata` of a request that sets it whole.
pub struct MetadataIn;

impl PartialSchema for MetadataIn {
    fn schema() -> RefOr<Schema> {
        from_json(metadata_schema(false))
    }
}
impl ToSchema for MetadataIn {}

/// `metadata` of a patch: merged, null removes a key.
pub struct MetadataPatchIn;

impl PartialSchema for MetadataPatchIn {
    fn schema() -> RefOr<Schema> {
        from_json(metadata_schema(true))
    }
}
impl ToSchema for MetadataPatchIn {}

/// The resources' views under their schema names, for the lists and answers described here.
pub type Customer = crate::views::CustomerView<'static>;
pub type Wallet = crate::views::WalletView<'static>;
pub type Deposit = crate::views::DepositView<'static>;
pub type Payout = crate::views::PayoutView<'static>;
pub type Sweep = crate::views::SweepView<'static>;
pub type Invoice = crate::views::InvoiceView<'static>;
pub type InvoiceItem = crate::views::InvoiceItemView<'static>;
pub type ApiKey = crate::views::ApiKeyView<'static>;
pub type WebhookEndpoint = crate::views::EndpointView<'static>;
pub type WebhookDelivery = crate::views::DeliveryView<'static>;
pub type Event = crate::views::EventView<'static>;
pub type BillingEntry = crate::views::BillingEntryView<'static>;
pub type Chain = crate::views::ChainView<'static>;
pub type Conversion = crate::views::ConversionView;
pub type ConversionRule = crate::views::ConversionRuleView;
pub type FundingAddress = crate::services::billing::FundingAddressView<'static>;

mod billing;
mod conversions;
mod requests;
pub use billing::*;
pub use conversions::*;
pub use requests::*;
