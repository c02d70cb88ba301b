//! JSON shapes of the resources (SPEC.md section 2), one type per shape: each view both
//! writes the answer (`Serialize`) and describes it in the OpenAPI document
//! (`utoipa::ToSchema`, under the resource's name through `#[schema(as = ...)]`), so the
//! document cannot drift from what is sent. The REST reads and the event `data` both come
//! from here, so an event's data is identical to the REST read at that moment.
//!
//! Fields are declared in byte order of their names: `serde_json` keeps a `Value` object's
//! keys sorted, so a view written straight to the wire and its `Value` form give the same
//! bytes. The views whose schema lists its properties in another order (chains, treasury,
//! billing, conversions, the test mode's answers) declare them in that order and are written
//! through [`Sorted`] or their `Value` form.

use chrono::{Datelike, SecondsFormat, TimeZone, Timelike, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use appliance_storage::records::{Customer, Deposit, Invoice, Payout, Wallet};
use sha2::Digest;

use crate::registry::Registry;

/// The API version carried by events (SPEC.md section 9).
pub const API_VERSION: &str = "2026-08-01";

/// RFC 3339 UTC with milliseconds, from Unix microseconds.
pub fn ts(us: i64) -> String {
    Utc.timestamp_micros(us)
        .single()
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A stable id for a (chain, asset) pair, for the payout's `asset_id`.
pub fn asset_id(chain: &str, symbol: &str) -> Uuid {
    let h = sha2::Sha256::digest(format!("asset:{chain}:{symbol}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    uuid::Builder::from_custom_bytes(b).into_uuid()
}

/// `object: customer` (SPEC.md section 2, Customer), for a response body.
pub fn customer_view(c: &Customer) -> CustomerView<'_> {
    CustomerView {
        created_at: Ts(c.created_at),
        email: &c.email,
        id: c.id,
        metadata: &c.metadata,
        object: "customer",
        reference_id: &c.reference_id,
        status: c.status.as_str(),
    }
}

/// [`customer_view`] as a JSON value (event data, idempotency records).
pub fn customer(c: &Customer) -> Value {
    to_value(&customer_view(c))
}

/// `object: wallet` (SPEC.md section 2, Wallet), for a response body.
pub fn wallet_view(w: &Wallet) -> WalletView<'_> {
    WalletView {
        address: &w.address,
        chain: &w.chain,
        created_at: Ts(w.created_at),
        customer_id: w.customer_id,
        id: w.id,
        memo: &w.memo,
        object: "wallet",
        role: &w.role,
        status: &w.status,
    }
}

/// [`wallet_view`] as a JSON value (event data, idempotency records).
pub fn wallet(w: &Wallet) -> Value {
    to_value(&wallet_view(w))
}

/// `object: deposit` (SPEC.md section 2, Deposit), for a response body. An asset the
/// registry does not know is shown with 0 decimals and no contract.
pub fn deposit_view<'a>(reg: &'a Registry, d: &'a Deposit) -> DepositView<'a> {
    let chain = reg.chain(&d.chain);
    let asset = chain.and_then(|c| c.asset(&d.asset));
    let decimals = asset.map(|a| a.decimals).unwrap_or(0);
    DepositView {
        amount: Atomic(d.amount),
        amount_decimal: Decimal(d.amount, decimals),
        asset: DepositAsset {
            chain: &d.chain,
            contract: asset.map(|a| a.contract.as_str()).unwrap_or(""),
            decimals,
            symbol: &d.asset,
        },
        block_number: d.block_number,
        block_time: Ts(d.block_time),
        chain: &d.chain,
        confirmations: d.confirmations,
        created_at: Ts(d.created_at),
        customer_id: d.customer_id,
        explorer_url: chain.map(|c| c.info.tx_url(&d.tx_hash)),
        failure_reason: &d.failure_reason,
        from_address: &d.from_address,
        id: d.id,
        ledger_tx_id: d.ledger_tx_id,
        log_index: d.log_index,
        object: "deposit",
        required_confirmations: d.required_confirmations,
        status: d.status.as_str(),
        to_address: &d.to_address,
        tx_hash: &d.tx_hash,
        wallet_id: d.wallet_id,
    }
}

/// [`deposit_view`] as a JSON value (event data, idempotency records).
pub fn deposit(reg: &Registry, d: &Deposit) -> Value {
    to_value(&deposit_view(reg, d))
}

/// `checkout_url` of an invoice: `{public_base_url}/checkout/{token}` (DECISIONS.md
/// section 12; a path from the root when `public_base_url` is not set), the token opened
/// from its sealed form in the row ([`Registry::checkout_url`]).
pub fn checkout_url(reg: &Registry, inv: &Invoice) -> String {
    reg.checkout_url(inv.id, &inv.checkout_token)
}

/// A UUID written as its hyphenated lower-case string in every format (serde writes a
/// `Uuid` as 16 raw bytes in binary ones, which would not read back as the view's string).
pub(crate) struct Hyphenated(pub(crate) Uuid);

impl Serialize for Hyphenated {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.hyphenated().encode_lower(&mut Uuid::encode_buffer()))
    }
}

/// An optional timestamp: [`Ts`], or null.
pub struct OptTs(pub Option<i64>);

impl Serialize for OptTs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(us) => Ts(us).serialize(s),
            None => s.serialize_none(),
        }
    }
}

/// `object: payout` (SPEC.md section 2, Payout), for a response body.
pub fn payout_view<'a>(reg: &'a Registry, p: &'a Payout) -> PayoutView<'a> {
    let asset = reg.asset(&p.chain, &p.asset);
    let decimals = asset.map(|a| a.decimals).unwrap_or(0);
    PayoutView {
        amount: Atomic(p.amount),
        amount_decimal: Decimal(p.amount, decimals),
        // Stablecoins are valued at par, so the dollar value is the token amount, exactly;
        // other coins at the market price when the payout was accepted, in whole cents
        // (null when no usable price existed then).
        amount_usd: match asset.is_some_and(|a| a.is_stable()) {
            true => Some(Decimal(p.amount, decimals)),
            false => p.amount_usd_cents.map(|c| Decimal(c as u128, 2)),
        },
        asset: &p.asset,
        asset_id: asset_id(&p.chain, &p.asset),
        chain: &p.chain,
        created_at: Ts(p.created_at),
        customer_id: p.customer_id,
        decimals,
        explorer_url: p
            .tx_hash
            .as_ref()
            .and_then(|h| reg.chain(&p.chain).map(|c| c.info.tx_url(h))),
        failure_reason: &p.failure_reason,
        fee_amount: Atomic(p.fee_amount),
        fee_amount_decimal: Decimal(p.fee_amount, decimals),
        id: p.id,
        memo: &p.memo,
        object: "payout",
        reference: &p.reference,
        status: p.status.as_str(),
        to_address: &p.to_address,
        tx_hash: &p.tx_hash,
        updated_at: Ts(p.updated_at),
    }
}

/// [`payout_view`] as a JSON value (event data, idempotency records).
pub fn payout(reg: &Registry, p: &Payout) -> Value {
    to_value(&payout_view(reg, p))
}

// Typed views. A response body is written straight from these (no `Value` tree in
// between); the `Value` forms above (event data, idempotency records) are made from the
// same structs, so an event's data and the REST read never differ. Fields are declared in
// byte order of their names: `serde_json` keeps a `Value` object's keys sorted, so the
// bytes written from a struct equal those of its `Value` (checked in the tests below).

/// A view as a JSON value (event data, idempotent answers).
pub fn to_value(v: &impl Serialize) -> Value {
    serde_json::to_value(v).expect("a view serializes")
}

/// A view whose fields are declared in the order its OpenAPI schema lists them, written
/// with its keys in byte order like every other answer (through a `Value`, which keeps an
/// object's keys sorted), so the wire bytes do not depend on the declaration order.
pub struct Sorted<T>(pub T);

impl<T: Serialize> Serialize for Sorted<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(&self.0)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// A timestamp field, Unix microseconds written as [`ts`] writes them (RFC 3339 UTC with
/// milliseconds), without a `String` in between.
#[derive(Clone, Copy, Debug)]
pub struct Ts(pub i64);

impl Ts {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` into `buf`; `None` outside years 0-9999 or the range
    /// chrono represents (then [`ts`] decides).
    fn format(self, buf: &mut [u8; 24]) -> Option<&str> {
        let t = Utc.timestamp_micros(self.0).single()?;
        let year = t.year();
        if !(0..=9999).contains(&year) {
            return None;
        }
        let millis = t.nanosecond() / 1_000_000;
        if millis > 999 {
            return None;
        }
        let mut put = |at: usize, v: u32, width: usize| {
            let mut v = v;
            for i in (0..width).rev() {
                buf[at + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, year as u32, 4);
        put(5, t.month(), 2);
        put(8, t.day(), 2);
        put(11, t.hour(), 2);
        put(14, t.minute(), 2);
        put(17, t.second(), 2);
        put(20, millis, 3);
        buf[4] = b'-';
        buf[7] = b'-';
        buf[10] = b'T';
        buf[13] = b':';
        buf[16] = b':';
        buf[19] = b'.';
        buf[23] = b'Z';
        std::str::from_utf8(buf).ok()
    }
}

impl Serialize for Ts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 24];
        match self.format(&mut buf) {
            Some(t) => s.serialize_str(t),
            None => s.serialize_str(&ts(self.0)),
        }
    }
}

/// An atomic amount as a decimal string of its integer (SPEC.md section 1, convention 3).
#[derive(Clone, Copy, Debug)]
pub struct Atomic(pub u128);

impl Serialize for Atomic {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(itoa::Buffer::new().format(self.0))
    }
}

/// An atomic amount shifted by its decimals, as [`format_decimal`] writes it (no trailing
/// zeros, no point for a whole number), without the `String`s in between.
#[derive(Clone, Copy, Debug)]
pub struct Decimal(pub u128, pub u8);

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(self.0).as_bytes();
        let d = usize::from(self.1);
        if d == 0 {
            return s.serialize_str(std::str::from_utf8(digits).unwrap_or("0"));
        }
        // At most 255 zeros of padding, "0." and 39 digits.
        let mut buf = [b'0'; 300];
        let (int, frac): (&[u8], &[u8]) = if digits.len() > d {
            digits.split_at(digits.len() - d)
        } else {
            // "0" and the fraction padded with zeros on its left.
            let pad = d - digits.len();
            buf[pad..d].copy_from_slice(digits);
            (b"0", &buf[..d])
        };
        let frac_len = frac.iter().rposition(|&b| b != b'0').map_or(0, |i| i + 1);
        let mut out = [0u8; 300];
        out[..int.len()].copy_from_slice(int);
        let mut n = int.len();
        if frac_len > 0 {
            out[n] = b'.';
            out[n + 1..n + 1 + frac_len].copy_from_slice(&frac[..frac_len]);
            n += 1 + frac_len;
        }
        s.serialize_str(std::str::from_utf8(&out[..n]).unwrap_or("0"))
    }
}

/// A customer (`object: customer`).
#[derive(Serialize, ToSchema)]
#[schema(as = Customer)]
pub struct CustomerView<'a> {
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    email: &'a Option<String>,
    id: Uuid,
    /// The merchant's key-value data.
    #[schema(value_type = Object)]
    metadata: &'a Value,
    #[schema(pattern = "^customer$")]
    object: &'static str,
    /// The merchant's own user id; unique in the project.
    reference_id: &'a Option<String>,
    /// `active` or `disabled` (new values may appear).
    status: &'a str,
}

/// A deposit address (`object: wallet`), one per (customer, chain).
#[derive(Serialize, ToSchema)]
#[schema(as = Wallet)]
pub struct WalletView<'a> {
    address: &'a str,
    /// Chain identifier (`ethereum`, `bsc`, ...).
    chain: &'a str,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    customer_id: Uuid,
    id: Uuid,
    /// On TON, when non-null the sender must include it.
    memo: &'a Option<String>,
    #[schema(pattern = "^wallet$")]
    object: &'static str,
    /// `customer` (new values may appear).
    role: &'a str,
    /// `active` (new values may appear).
    status: &'a str,
}

/// A deposit (`object: deposit`).
#[derive(Serialize, ToSchema)]
#[schema(as = Deposit)]
pub struct DepositView<'a> {
    /// Atomic units.
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    amount: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    amount_decimal: Decimal,
    asset: DepositAsset<'a>,
    block_number: u64,
    #[schema(value_type = String, format = DateTime)]
    block_time: Ts,
    chain: &'a str,
    confirmations: u32,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    customer_id: Uuid,
    explorer_url: Option<String>,
    /// Why a `failed` deposit was not money.
    failure_reason: &'a Option<String>,
    from_address: &'a str,
    id: Uuid,
    /// The ledger transaction of the credit, once confirmed.
    ledger_tx_id: Option<Uuid>,
    log_index: u32,
    #[schema(pattern = "^deposit$")]
    object: &'static str,
    required_confirmations: u32,
    /// `detected`, `confirmed`, `failed` or `orphaned` (new values may appear).
    status: &'static str,
    to_address: &'a str,
    tx_hash: &'a str,
    wallet_id: Uuid,
}

/// An asset embedded in a resource.
#[derive(Serialize, ToSchema)]
#[schema(as = Asset)]
struct DepositAsset<'a> {
    chain: &'a str,
    /// Token contract address; empty for a native coin.
    contract: &'a str,
    decimals: u8,
    symbol: &'a str,
}

/// A payout (`object: payout`).
#[derive(Serialize, ToSchema)]
#[schema(as = Payout)]
pub struct PayoutView<'a> {
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    amount: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    amount_decimal: Decimal,
    /// USD value at acceptance: stablecoins at par (exact), other coins at the market price
    /// then (whole cents); null when no usable price existed.
    #[schema(value_type = Option<String>, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    amount_usd: Option<Decimal>,
    /// Asset symbol, e.g. `USDT`.
    asset: &'a str,
    asset_id: Uuid,
    chain: &'a str,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    /// Null for a payout of the project's own funds.
    customer_id: Option<Uuid>,
    decimals: u8,
    explorer_url: Option<String>,
    failure_reason: &'a Option<String>,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    fee_amount: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    fee_amount_decimal: Decimal,
    id: Uuid,
    memo: &'a Option<String>,
    #[schema(pattern = "^payout$")]
    object: &'static str,
    reference: &'a Option<String>,
    /// `pending_approval`, `queued`, `signing`, `submitted`, `confirmed`, `failed`,
    /// `canceled` or `rejected` (new values may appear).
    status: &'static str,
    to_address: &'a str,
    tx_hash: &'a Option<String>,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Ts,
}

mod accounts;
mod billing;
mod conversions;
mod invoices;
mod meta;
mod webhooks;
pub use accounts::*;
pub use billing::*;
pub use conversions::*;
pub use invoices::*;
pub use meta::*;
pub use webhooks::*;

#[cfg(test)]
mod tests {
    use super::*;
    use appliance_chains::format_decimal;
    use appliance_storage::records::{InvoiceAddress, InvoiceQuote};
    use serde_json::json;

    /// [`InvoiceView`] as a `serde_json::Value`.
    fn invoice(reg: &Registry, inv: &Invoice) -> Value {
        serde_json::to_value(invoice_view(reg, inv)).expect("an invoice view is JSON")
    }

    fn sample(full: bool) -> Invoice {
        use appliance_storage::records::{AssetReceived, InvoiceStatus, OverpaymentPolicy};
        let id = uuid::Uuid::now_v7();
        let w = uuid::Uuid::now_v7();
        let some = |s: &str| full.then(|| s.to_string());
        Invoice {
            id,
            project_id: uuid::Uuid::now_v7(),
            checkout_token: format!("ck_{}", "a".repeat(43)),
            reference_id: some("order-\"7\" ü"),
            title: some("Two <socks>"),
            description: some("line\nbreak"),
            price_cents: 123_456_789,
            price_currency: "USD".into(),
            status: if full {
                InvoiceStatus::Overpaid
            } else {
                InvoiceStatus::Open
            },
            fee_bps: 150,
            fee_fixed_cents: 30,
            fee_cap_cents: 0,
            metadata: if full {
                json!({"order": 7, "vip": true, "note": "x", "neg": -3, "nested": null})
            } else {
                json!({})
            },
            return_url: some("https://shop.example/ok?a=1&b=2"),
            cancel_url: None,
            overpayment_policy: if full {
                OverpaymentPolicy::Refund
            } else {
                OverpaymentPolicy::Keep
            },
            addresses: ["ethereum", "bsc"]
                .iter()
                .map(|c| InvoiceAddress {
                    chain: c.to_string(),
                    address: "0x35503aB8094214FeD332D87630B21FaF4D79ea84".into(),
                    memo: full.then(|| "m".to_string()),
                    wallet_id: w,
                })
                .collect(),
            quotes: vec![
                InvoiceQuote {
                    chain: "ethereum".into(),
                    asset: "ETH".into(),
                    contract: String::new(),
                    decimals: 18,
                    amount_atomic: u128::MAX,
                    rate: "3000.12".into(),
                    rate_source: "kraken".into(),
                },
                InvoiceQuote {
                    chain: "bsc".into(),
                    asset: "USDT".into(),
                    contract: "0x55d398326f99059fF775485246999027B3197955".into(),
                    decimals: 0,
                    amount_atomic: 40,
                    rate: "1.00".into(),
                    rate_source: "par".into(),
                },
            ],
            received: vec![AssetReceived::default()],
            received_cents: 5,
            excess_cents: u64::MAX,
            pending_payments: 0,
            extensions: 3,
            refunds: Vec::new(),
            selected: None,
            expires_at: 1_800_000_000_123_456,
            paid_at: full.then_some(-1),
            canceled_at: full.then_some(0),
            expired_at: full.then_some(1_700_000_000_999_999),
            created_at: 1_700_000_000_000_001,
            updated_at: 1_700_000_000_000_002,
        }
    }

    /// The serializer writes the same JSON, byte for byte, as the `json!` tree did, and the
    /// event data it encodes reads back as that tree.
    #[test]
    fn the_invoice_view_is_the_json_tree_it_replaces() {
        let cfg = crate::config::Config {
            public_base_url: Some("https://pay.example".into()),
            ..Default::default()
        };
        for reg in [
            Registry::from_config(&crate::config::Config::default()),
            Registry::from_config(&cfg),
        ] {
            for full in [false, true] {
                let inv = sample(full);
                let tree = reference::invoice(&reg, &inv);
                let view = invoice_view(&reg, &inv);
                assert_eq!(
                    serde_json::to_string(&view).unwrap(),
                    serde_json::to_string(&tree).unwrap()
                );
                assert_eq!(invoice(&reg, &inv), tree);
                let data = appliance_storage::codec::EventData::encode(&view);
                let row = [&[appliance_storage::codec::VALUE_VERSION], data.as_bytes()].concat();
                let back: Value = appliance_storage::codec::decode(&row).unwrap();
                assert_eq!(back, tree);
                assert_eq!(
                    data.as_bytes(),
                    appliance_storage::codec::EventData::encode(&tree).as_bytes()
                );
            }
        }
    }

    #[test]
    fn delivery_refs_round_trip() {
        let id = crate::services::webhook_deliveries::new_delivery_id(appliance_storage::now_us());
        let r = delivery_ref(id);
        assert!(r.starts_with("whd_") && r.len() == 30, "{r}");
        assert_eq!(parse_delivery_ref(&r), Some(id));
        assert_eq!(parse_delivery_ref("whd_nope"), None);
        assert_eq!(parse_delivery_ref(&id.to_string()), None);
    }

    /// The views as they were built before the typed structs (`json!` trees), kept as the
    /// reference the typed views must match byte for byte.
    mod reference {
        use super::super::*;
        use appliance_chains::format_decimal;
        use serde_json::json;

        fn opt_ts(us: Option<i64>) -> Value {
            us.map(|u| Value::String(ts(u))).unwrap_or(Value::Null)
        }

        /// The invoice view as it was built before [`InvoiceView`]: the reference the
        /// serializer is held to.
        pub fn invoice(reg: &Registry, inv: &Invoice) -> Value {
            let addresses: Vec<Value> = inv
                .addresses
                .iter()
                .map(|a| json!({"chain": a.chain, "address": a.address, "memo": a.memo}))
                .collect();
            let quotes: Vec<Value> = inv
                .quotes
                .iter()
                .map(|q| {
                    json!({
                        "chain": q.chain,
                        "asset": q.asset,
                        "contract": q.contract,
                        "amount_atomic": q.amount_atomic.to_string(),
                        "amount": format_decimal(q.amount_atomic, q.decimals),
                        "decimals": q.decimals,
                        "rate": q.rate,
                        "rate_source": q.rate_source,
                    })
                })
                .collect();
            json!({
                "id": inv.id,
                "object": "invoice",
                "reference_id": inv.reference_id,
                "title": inv.title,
                "description": inv.description,
                "price_amount": inv.price_cents.to_string(),
                "price_currency": inv.price_currency,
                "status": inv.status.as_str(),
                "fee_bps": inv.fee_bps,
                "fee_fixed_cents": inv.fee_fixed_cents.to_string(),
                "fee_cap_cents": inv.fee_cap_cents.to_string(),
                "metadata": inv.metadata,
                "return_url": inv.return_url,
                "cancel_url": inv.cancel_url,
                "overpayment_policy": inv.overpayment_policy.as_str(),
                "expires_at": ts(inv.expires_at),
                "extensions": inv.extensions,
                "received_amount": inv.received_cents.to_string(),
                "excess_amount": inv.excess_cents.to_string(),
                "checkout_url": checkout_url(reg, inv),
                "addresses": addresses,
                "quotes": quotes,
                "paid_at": opt_ts(inv.paid_at),
                "canceled_at": opt_ts(inv.canceled_at),
                "expired_at": opt_ts(inv.expired_at),
                "created_at": ts(inv.created_at),
            })
        }

        pub fn customer(c: &Customer) -> Value {
            json!({
                "id": c.id,
                "object": "customer",
                "reference_id": c.reference_id,
                "email": c.email,
                "status": c.status,
                "metadata": c.metadata,
                "created_at": ts(c.created_at),
            })
        }

        pub fn wallet(w: &Wallet) -> Value {
            json!({
                "id": w.id,
                "object": "wallet",
                "customer_id": w.customer_id,
                "chain": w.chain,
                "role": w.role,
                "status": w.status,
                "address": w.address,
                "memo": w.memo,
                "created_at": ts(w.created_at),
            })
        }

        pub fn deposit(reg: &Registry, d: &Deposit) -> Value {
            let chain = reg.chain(&d.chain);
            let asset = chain.and_then(|c| c.asset(&d.asset));
            let decimals = asset.map(|a| a.decimals).unwrap_or(0);
            json!({
                "id": d.id,
                "object": "deposit",
                "customer_id": d.customer_id,
                "wallet_id": d.wallet_id,
                "chain": d.chain,
                "asset": {
                    "chain": d.chain,
                    "symbol": d.asset,
                    "decimals": decimals,
                    "contract": asset.map(|a| a.contract.as_str()).unwrap_or(""),
                },
                "amount": d.amount.to_string(),
                "amount_decimal": format_decimal(d.amount, decimals),
                "tx_hash": d.tx_hash,
                "log_index": d.log_index,
                "from_address": d.from_address,
                "to_address": d.to_address,
                "block_number": d.block_number,
                "confirmations": d.confirmations,
                "required_confirmations": d.required_confirmations,
                "status": d.status.as_str(),
                "failure_reason": d.failure_reason,
                "block_time": ts(d.block_time),
                "explorer_url": chain.map(|c| c.info.tx_url(&d.tx_hash)),
                "ledger_tx_id": d.ledger_tx_id,
                "created_at": ts(d.created_at),
            })
        }

        pub fn payout(reg: &Registry, p: &Payout) -> Value {
            let decimals = reg.decimals(&p.chain, &p.asset);
            json!({
                "id": p.id,
                "object": "payout",
                "customer_id": p.customer_id,
                "chain": p.chain,
                "asset": p.asset,
                "asset_id": asset_id(&p.chain, &p.asset),
                "decimals": decimals,
                "amount": p.amount.to_string(),
                "amount_decimal": format_decimal(p.amount, decimals),
                "fee_amount": p.fee_amount.to_string(),
                "fee_amount_decimal": format_decimal(p.fee_amount, decimals),
                "to_address": p.to_address,
                "memo": p.memo,
                "status": p.status.as_str(),
                "reference": p.reference,
                "tx_hash": p.tx_hash,
                "explorer_url": p.tx_hash.as_ref().and_then(|h| reg.chain(&p.chain).map(|c| c.info.tx_url(h))),
                "failure_reason": p.failure_reason,
                "amount_usd": match reg.asset(&p.chain, &p.asset).is_some_and(|a| a.is_stable()) {
                    true => Some(format_decimal(p.amount, decimals)),
                    false => p.amount_usd_cents.map(|c| format_decimal(c as u128, 2)),
                },
                "created_at": ts(p.created_at),
                "updated_at": ts(p.updated_at),
            })
        }
    }

    /// The typed view's bytes equal the reference tree's, and its `Value` equals the tree.
    fn same(typed: &impl Serialize, reference: Value) {
        assert_eq!(
            serde_json::to_string(typed).unwrap(),
            serde_json::to_string(&reference).unwrap()
        );
        assert_eq!(to_value(typed), reference);
    }

    fn reg() -> Registry {
        Registry::from_config(&crate::config::Config::default())
    }

    const TIMES: &[i64] = &[
        0,
        1,
        999,
        1_000,
        -1,
        -1_000_001,
        1_763_850_000_123_456,
        253_402_300_799_999_999, // 9999-12-31T23:59:59.999999
        253_402_300_800_000_000, // year 10000: chrono's own form
        -62_167_219_200_000_000, // 0000-01-01
        -62_167_219_200_000_001, // year -1
        i64::MAX,
        i64::MIN,
    ];

    #[test]
    fn timestamps_match_ts() {
        let mut all: Vec<i64> = TIMES.to_vec();
        let mut x: i64 = 0x1234_5678;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            all.push(x % 4_000_000_000_000_000);
        }
        for us in all {
            assert_eq!(
                serde_json::to_value(Ts(us)).unwrap(),
                Value::String(ts(us)),
                "{us}"
            );
        }
    }

    #[test]
    fn amounts_match_format_decimal() {
        let amounts = [
            0u128,
            1,
            9,
            10,
            100,
            123_456,
            1_000_000,
            1_000_001,
            10u128.pow(18),
            10u128.pow(18) + 1,
            123_456_789_012_345_678_901_234_567_890,
            u128::MAX,
        ];
        for a in amounts {
            for d in [0u8, 1, 2, 6, 8, 9, 18, 38, 39, 40, 77, 255] {
                assert_eq!(
                    serde_json::to_value(Decimal(a, d)).unwrap(),
                    Value::String(format_decimal(a, d)),
                    "{a} {d}"
                );
            }
            assert_eq!(
                serde_json::to_value(Atomic(a)).unwrap(),
                Value::String(a.to_string())
            );
        }
    }

    #[test]
    fn customer_and_wallet_views_match_the_reference() {
        for (email, reference_id, metadata) in [
            (None, None, json!({})),
            (
                Some("a@b.example".to_string()),
                Some("r-\"1\"\n".to_string()),
                json!({"z": 1, "a": {"y": [1, "x"], "b": null}, "é": "\u{1}"}),
            ),
        ] {
            let c = Customer {
                id: Uuid::now_v7(),
                project_id: Uuid::now_v7(),
                reference_id,
                email,
                status: appliance_storage::records::CustomerStatus::Active,
                metadata,
                created_at: 1_763_850_000_123_456,
            };
            same(&customer_view(&c), reference::customer(&c));
            assert_eq!(customer(&c), reference::customer(&c));
        }
        for memo in [None, Some("memo 7".to_string())] {
            let w = Wallet {
                id: Uuid::now_v7(),
                project_id: Uuid::now_v7(),
                customer_id: Uuid::now_v7(),
                invoice_id: None,
                chain: "ethereum".into(),
                role: "deposit".into(),
                status: "active".into(),
                address: "0x00000000000000000000000000000000000000aa".into(),
                memo,
                created_at: 5,
            };
            same(&wallet_view(&w), reference::wallet(&w));
            assert_eq!(wallet(&w), reference::wallet(&w));
        }
    }

    #[test]
    fn deposit_views_match_the_reference() {
        use appliance_storage::records::DepositStatus;
        let reg = reg();
        for (chain, asset, status, reason, ledger) in [
            (
                "ethereum",
                "USDT",
                DepositStatus::Confirmed,
                None,
                Some(Uuid::now_v7()),
            ),
            ("ethereum", "ETH", DepositStatus::Detected, None, None),
            (
                "nochain",
                "XYZ",
                DepositStatus::Failed,
                Some("reorg".to_string()),
                None,
            ),
            ("ethereum", "NOPE", DepositStatus::Orphaned, None, None),
        ] {
            for amount in [0u128, 1_000_000, 123_456_789_012_345_678_901, u128::MAX] {
                let d = Deposit {
                    id: Uuid::now_v7(),
                    project_id: Uuid::now_v7(),
                    customer_id: Uuid::now_v7(),
                    invoice_id: None,
                    late: false,
                    funding: false,
                    awaiting_price: false,
                    wallet_id: Uuid::now_v7(),
                    chain: chain.into(),
                    asset: asset.into(),
                    amount,
                    tx_hash: "0xabc".into(),
                    log_index: 7,
                    from_address: "0xfrom".into(),
                    to_address: "0xto".into(),
                    block_number: 12_345_678,
                    block_time: 1_763_850_000_000_000,
                    confirmations: 3,
                    required_confirmations: 12,
                    status,
                    failure_reason: reason.clone(),
                    ledger_tx_id: ledger,
                    reversal_tx_id: None,
                    manual: false,
                    created_at: 1_763_850_000_999_999,
                    updated_at: 1_763_850_001_000_000,
                };
                same(&deposit_view(&reg, &d), reference::deposit(&reg, &d));
                assert_eq!(deposit(&reg, &d), reference::deposit(&reg, &d));
            }
        }
    }

    #[test]
    fn payout_views_match_the_reference() {
        use appliance_storage::records::PayoutStatus;
        let reg = reg();
        for (chain, asset, usd, tx) in [
            ("ethereum", "USDT", None, Some("0xfeed".to_string())),
            ("ethereum", "ETH", Some(12_345_u64), None),
            ("ethereum", "ETH", None, Some("0x1".to_string())),
            ("nochain", "XYZ", Some(1), Some("0x2".to_string())),
        ] {
            for customer_id in [None, Some(Uuid::now_v7())] {
                let p = Payout {
                    id: Uuid::now_v7(),
                    project_id: Uuid::now_v7(),
                    customer_id,
                    chain: chain.into(),
                    asset: asset.into(),
                    amount: 1_500_000_000_000_000_001,
                    fee_amount: 21_000,
                    to_address: "0xdest".into(),
                    memo: customer_id.map(|_| "m".to_string()),
                    status: PayoutStatus::Submitted,
                    reference: Some("ref".into()),
                    tx_hash: tx.clone(),
                    failure_reason: None,
                    amount_usd_cents: usd,
                    created_by_key: Uuid::now_v7(),
                    approved_by_key: None,
                    queued_block: None,
                    submitted_block: None,
                    created_at: 1,
                    updated_at: 2,
                };
                same(&payout_view(&reg, &p), reference::payout(&reg, &p));
                assert_eq!(payout(&reg, &p), reference::payout(&reg, &p));
            }
        }
    }

    /// A store written before checkout tokens were sealed (the token in
    /// clear in the row, the URL in an `invoice.*` event, the URL in an idempotent answer)
    /// is sealed by the start-up migration once; every reader still renders the same URL.
    #[test]
    fn legacy_checkout_tokens_are_sealed_by_the_migration() {
        use appliance_storage::records::IdempotencyRecord;
        use appliance_storage::{ReadOps, Store, StoreOptions};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let plain_reg = reg();
        let inv = sample(true);
        let token = inv.checkout_token.clone();
        let url = checkout_url(&plain_reg, &inv);
        let legacy_data = serde_json::to_value(invoice_view(&plain_reg, &inv)).unwrap();
        assert_eq!(legacy_data["checkout_url"], url.as_str());
        let answer = serde_json::to_string(&legacy_data).unwrap();
        let (i2, d2, a2) = (inv.clone(), legacy_data.clone(), answer.clone());
        let (project, ev_id) = store
            .write_blocking(move |ctx| {
                ctx.put(&i2)?;
                let ev = ctx.append_event(
                    i2.project_id,
                    false,
                    "invoice.created",
                    &i2.id.to_string(),
                    d2,
                )?;
                ctx.idempotency_put(
                    b"rk",
                    &IdempotencyRecord {
                        request_hash: "00".repeat(32),
                        status: 201,
                        body: a2,
                        created_at: ctx.now_us(),
                    },
                )?;
                Ok::<_, appliance_storage::StoreError>((i2.project_id, ev.id))
            })
            .unwrap();

        let key = crate::sealing::DataKey::from_bytes([9; 32]);
        let n = crate::sealing::migrate_checkout_tokens(&store, &key).unwrap();
        assert_eq!((n.invoices, n.events, n.answers), (1, 1, 1));
        assert_eq!(
            crate::sealing::migrate_checkout_tokens(&store, &key).unwrap(),
            Default::default(),
            "the migration runs once"
        );

        let sealed_reg = reg();
        sealed_reg.set_data_key(key.clone());
        let id = inv.id;
        let (row, ev, rec) = store
            .read_blocking(move |r| {
                Ok::<_, appliance_storage::StoreError>((
                    r.get::<Invoice>(id)?.unwrap(),
                    r.event(project, &ev_id)?.unwrap(),
                    r.idempotency_get(b"rk")?.unwrap(),
                ))
            })
            .unwrap();
        assert!(crate::sealing::is_sealed(&row.checkout_token));
        assert!(!row.checkout_token.contains(&token[3..]));
        assert_eq!(checkout_url(&sealed_reg, &row), url);
        let stored = ev.data["checkout_url"].as_str().unwrap();
        assert!(crate::sealing::is_sealed(stored), "{stored}");
        assert_eq!(event_data(&sealed_reg, &ev)["checkout_url"], url.as_str());
        assert_eq!(event_data(&sealed_reg, &ev)["title"], legacy_data["title"]);
        assert!(crate::sealing::is_sealed(&rec.body));
        assert_eq!(key.open_answer(b"rk", &rec.body).unwrap(), answer);
        // A registry without the key renders no token rather than a wrong one.
        assert_eq!(
            event_data(&plain_reg, &ev)["checkout_url"],
            format!("{}/checkout/", plain_reg.public_base_url)
        );
    }

    #[test]
    fn receivers_answers_keep_no_checkout_token() {
        use crate::services::invoices::redact_tokens;
        let tok = format!("ck_{}", "aB3-_".repeat(8) + "xyz");
        assert_eq!(tok.len(), 46);
        let body = format!("{{\"checkout_url\":\"https://x/checkout/{tok}\"}} ck_ ck_short end");
        let r = redact_tokens(&body);
        assert!(!r.contains(&tok[3..]), "{r}");
        assert!(r.contains("/checkout/ck_[redacted]\""), "{r}");
        assert!(
            r.ends_with("ck_ ck_short end"),
            "short runs are not tokens: {r}"
        );
        // Cut short by the end of the kept answer.
        let cut = format!("x ck_{}", &tok[3..20]);
        assert_eq!(redact_tokens(&cut), "x ck_[redacted]");
        assert_eq!(redact_tokens("plain"), "plain");
    }
}
