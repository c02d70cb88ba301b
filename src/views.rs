//! JSON shapes of every resource (SPEC.md section 2). The REST reads and the event `data`
//! both come from here, so an event's data is identical to the REST read at that moment.

use chrono::{SecondsFormat, TimeZone, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use appliance_chains::format_decimal;
use appliance_storage::records::{
    ApiKey, BillingEntry, Customer, Deposit, Event, Invoice, Payout, Sweep, Wallet,
    WebhookDelivery, WebhookEndpoint,
};
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

fn opt_ts(us: Option<i64>) -> Value {
    us.map(|u| Value::String(ts(u))).unwrap_or(Value::Null)
}

/// A stable id for a (chain, asset) pair, for the payout's `asset_id`.
pub fn asset_id(chain: &str, symbol: &str) -> Uuid {
    let h = sha2::Sha256::digest(format!("asset:{chain}:{symbol}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    uuid::Builder::from_custom_bytes(b).into_uuid()
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

/// `checkout_url` of an invoice: `{public_base_url}/checkout/{token}` (DECISIONS.md
/// section 12; a path from the root when `public_base_url` is not set).
pub fn checkout_url(reg: &Registry, inv: &Invoice) -> String {
    format!("{}/checkout/{}", reg.public_base_url, inv.checkout_token)
}

/// An invoice, full form (SPEC.md section 2, Invoice). Money: `price_amount`,
/// `received_amount`, `excess_amount` and the `fee_*_cents` are integer cents as strings;
/// each quote's `amount_atomic` is what the payer sends. Beyond SPEC.md:
/// `overpayment_policy`, `extensions`, `paid_at`, `canceled_at`, `expired_at`.
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

/// An invoice as an item of `GET /v1/invoices` (SPEC.md section 2, Invoice).
pub fn invoice_item(inv: &Invoice) -> Value {
    json!({
        "object": "invoice",
        "id": inv.id,
        "reference_id": inv.reference_id,
        "title": inv.title,
        "price_amount": inv.price_cents.to_string(),
        "price_currency": inv.price_currency,
        "status": inv.status.as_str(),
        "received_amount": inv.received_cents.to_string(),
        "fee_bps": inv.fee_bps,
        "fee_fixed_cents": inv.fee_fixed_cents.to_string(),
        "fee_cap_cents": inv.fee_cap_cents.to_string(),
        "expires_at": ts(inv.expires_at),
        "paid_at": opt_ts(inv.paid_at),
        "created_at": ts(inv.created_at),
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
        // Stablecoins are valued at par, so the dollar value is the token amount, exactly;
        // other coins at the market price when the payout was accepted, in whole cents
        // (null when no usable price existed then).
        "amount_usd": match reg.asset(&p.chain, &p.asset).is_some_and(|a| a.is_stable()) {
            true => Some(format_decimal(p.amount, decimals)),
            false => p.amount_usd_cents.map(|c| format_decimal(c as u128, 2)),
        },
        "created_at": ts(p.created_at),
        "updated_at": ts(p.updated_at),
    })
}

pub fn sweep(reg: &Registry, s: &Sweep) -> Value {
    let asset = reg.asset(&s.chain, &s.asset);
    let decimals = asset.map(|a| a.decimals).unwrap_or(0);
    json!({
        "id": s.id,
        "object": "sweep",
        "wallet_id": s.wallet_id,
        "chain": s.chain,
        "status": s.status.as_str(),
        "amount": s.amount.to_string(),
        "amount_decimal": format_decimal(s.amount, decimals),
        "asset": {
            "symbol": s.asset,
            "decimals": decimals,
            "contract": asset.map(|a| a.contract.as_str()).unwrap_or(""),
        },
        "skip_reason": s.skip_reason,
        "tx_hash": s.tx_hash,
        "created_at": ts(s.created_at),
        "updated_at": ts(s.updated_at),
    })
}

/// An API key; `pending` adds uses counted in memory but not yet flushed.
pub fn api_key(k: &ApiKey, env: &str, pending: Option<(i64, u64)>) -> Value {
    let (last_used, count) = match pending {
        Some((at, n)) => (Some(at), k.use_count + n),
        None => (k.last_used_at, k.use_count),
    };
    json!({
        "id": k.id,
        "object": "api_key",
        "key_id": k.key_id,
        "env": env,
        "kind": k.kind.as_str(),
        "name": k.name,
        "last4": k.last4,
        "scopes": k.scopes,
        "ip_allowlist": k.ip_allowlist,
        "signing_enabled": k.signing_enabled,
        "created_by": k.created_by,
        "rotated_from": k.rotated_from,
        "expires_at": opt_ts(k.expires_at),
        "revoked_at": opt_ts(k.revoked_at),
        "last_used_at": opt_ts(last_used),
        "use_count": count.to_string(),
        "created_at": ts(k.created_at),
    })
}

pub fn event(e: &Event) -> Value {
    json!({
        "id": e.id,
        "object": "event",
        "type": e.event_type,
        "api_version": API_VERSION,
        "created": ts(e.created_at),
        "livemode": e.livemode,
        "tenant": e.project_id,
        "sequence": e.sequence,
        "resource_id": e.resource_id,
        "data": e.data,
    })
}

/// `whd_` + ULID of a delivery id (SPEC.md section 2, Webhook delivery).
pub fn delivery_ref(id: Uuid) -> String {
    format!("whd_{}", ulid::Ulid::from(id.as_u128()))
}

/// The delivery id in a `whd_...` reference; `None` when malformed.
pub fn parse_delivery_ref(s: &str) -> Option<Uuid> {
    let u = ulid::Ulid::from_string(s.strip_prefix("whd_")?).ok()?;
    Some(Uuid::from_u128(u.0))
}

/// `object: webhook_endpoint` (SPEC.md section 2), without secrets; `now` decides whether a
/// rotation overlap is running.
pub fn endpoint_json(e: &WebhookEndpoint, now: i64) -> Value {
    json!({
        "id": e.id,
        "object": "webhook_endpoint",
        "tenant_id": e.project_id,
        "url": e.url,
        "description": e.description,
        "event_types": e.event_types,
        "status": e.status.as_str(),
        "delivery_mode": e.delivery_mode.as_str(),
        "consecutive_failures": e.consecutive_failures,
        "disabled_reason": e.disabled_reason,
        "disabled_at": opt_ts(e.disabled_at),
        "secret_overlap_until": opt_ts(e.overlap_until(now)),
        "last_success_at": opt_ts(e.last_success_at),
        "last_failure_at": opt_ts(e.last_failure_at),
        "created_at": ts(e.created_at),
    })
}

/// `object: webhook_delivery` (SPEC.md section 2); the single read adds `response_body`.
pub fn delivery_json(d: &WebhookDelivery, with_body: bool) -> Value {
    let mut v = json!({
        "id": delivery_ref(d.id),
        "object": "webhook_delivery",
        "tenant_id": d.project_id,
        "event_id": d.event_id,
        "endpoint_id": d.endpoint_id,
        "event_type": d.event_type,
        "endpoint_url": d.endpoint_url,
        "status": d.status.as_str(),
        "attempt": d.attempt,
        "max_attempts": d.max_attempts,
        "next_attempt_at": opt_ts(d.next_attempt_at.filter(|_| d.status.is_open())),
        "response_status": d.response_status,
        "resolved_ip": d.resolved_ip,
        "duration_ms": d.duration_ms,
        "error_detail": d.error_detail,
        "replay_of": d.replay_of.map(delivery_ref),
        "delivered_at": opt_ts(d.delivered_at),
        "created_at": ts(d.created_at),
    });
    if with_body {
        v["response_body"] = json!(d.response_body);
    }
    v
}

/// A billing entry (SPEC.md section 2, Billing entry). `amount_cents` is signed (credits
/// positive, charges negative); `balance_after_cents` is the balance right after it.
pub fn billing_entry(reg: &Registry, e: &BillingEntry) -> Value {
    let chain = e.chain.as_deref().and_then(|c| reg.chain(c));
    let transfer = e.transfer.as_ref().map(|t| {
        json!({
            "amount_decimal": t.amount_decimal,
            "tx_hash": t.tx_hash,
            "explorer_url": chain.map(|c| c.info.tx_url(&t.tx_hash)),
            "from_address": t.from_address,
            "confirmations": t.confirmations,
            "required_confirmations": t.required_confirmations,
            // Entries written before the status was kept are all credits of confirmed
            // transfers.
            "status": t.status.as_deref().unwrap_or("confirmed"),
            "block_time": t.block_time.map(ts),
        })
    });
    json!({
        "id": e.id,
        "object": "billing_entry",
        "kind": e.kind.as_str(),
        "amount_cents": e.amount_cents.to_string(),
        "balance_after_cents": e.balance_after_cents.to_string(),
        "ref_type": e.ref_type,
        "ref_id": e.ref_id,
        "chain": e.chain,
        "asset": e.asset,
        "amount_atomic": e.amount_atomic.map(|a| a.to_string()),
        "rate": e.rate,
        "rate_source": e.rate_source,
        "note": e.note,
        "created_at": ts(e.created_at),
        "transfer": transfer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_refs_round_trip() {
        let id = crate::services::webhook_deliveries::new_delivery_id(appliance_storage::now_us());
        let r = delivery_ref(id);
        assert!(r.starts_with("whd_") && r.len() == 30, "{r}");
        assert_eq!(parse_delivery_ref(&r), Some(id));
        assert_eq!(parse_delivery_ref("whd_nope"), None);
        assert_eq!(parse_delivery_ref(&id.to_string()), None);
    }
}
