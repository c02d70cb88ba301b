//! Invoice operations: new invoices, payments exact, short, over and late, cancels, refunds.

use super::*;
use crate::simulate::model::{InvoiceM, TransferM};
use crate::simulate::rng;
use crate::simulate::Sim;
use appliance_chains::evm::{Address, B256, U256};
use appliance_chains::sim::Inject;
use appliance_storage::sources;
use axum::http::Method;
use serde_json::json;
use std::collections::BTreeMap;
use uuid::Uuid;

impl Sim {
    /// An invoice of 1 to 500 USD, `keep` or `refund` on overpayment, expiring in 5 minutes
    /// to 2 hours.
    pub(in crate::simulate) async fn new_invoice(&mut self) -> anyhow::Result<String> {
        let t = self.model.tenants[self.pick_tenant()].clone();
        let cents = rng::between(100, 50_000);
        let policy = if rng::chance(500) { "refund" } else { "keep" };
        let expires_in = rng::between(300, 7_200);
        let order = self.model.next();
        let a = self
            .node()
            .call(
                Method::POST,
                "/v1/invoices",
                Some(&t.checkout_key),
                Some(
                    &json!({"price_amount": cents.to_string(), "price_currency": "USD",
                    "overpayment_policy": policy, "expires_in": expires_in,
                    "title": format!("order {order}")}),
                ),
                None,
            )
            .await?;
        if a.status != 201 {
            // Refused while a chain is not issuing (its node unreached since the start).
            if a.status != 422 {
                self.fail(format!(
                    "POST /v1/invoices answered {} {}",
                    a.status, a.body
                ));
            }
            return Ok(format!("invoice of {cents} cents: {}", a.status));
        }
        let id: Uuid = a.str("id").unwrap_or_default().parse()?;
        let token = a
            .str("checkout_url")
            .and_then(|u| u.rsplit('/').next().map(str::to_string))
            .unwrap_or_default();
        let mut addresses = BTreeMap::new();
        for x in a.body["addresses"].as_array().cloned().unwrap_or_default() {
            if let (Some(c), Some(ad)) = (x["chain"].as_str(), x["address"].as_str()) {
                if let Ok(ad) = ad.parse::<Address>() {
                    addresses.insert(c.to_string(), ad);
                }
            }
        }
        let mut quotes = Vec::new();
        for q in a.body["quotes"].as_array().cloned().unwrap_or_default() {
            let (Some(c), Some(asset), Some(amount)) = (
                q["chain"].as_str(),
                q["asset"].as_str(),
                q["amount_atomic"]
                    .as_str()
                    .and_then(|v| v.parse::<u128>().ok()),
            ) else {
                continue;
            };
            if let Some(ad) = addresses.get(c) {
                if self.world.chains.contains_key(c) {
                    quotes.push((c.to_string(), asset.to_string(), *ad, amount));
                }
            }
        }
        let expires_at = sources::now_us() + expires_in as i64 * 1_000_000;
        let n = quotes.len();
        self.model.invoices.insert(
            id,
            InvoiceM {
                id,
                project: t.id,
                token,
                quotes,
                policy: policy.into(),
                status: a.str("status").unwrap_or_default(),
                expires_at,
                overpaid: false,
                refund_asked: false,
            },
        );
        Ok(format!(
            "invoice {id} of {cents} cents ({policy}), {n} quotes"
        ))
    }

    /// A payer pays an invoice on one of its quotes: exactly, short, over, or after it
    /// expired. One time in four, when there is one, an invoice whose refund the harness
    /// asked for: its excess opens a new refund claim.
    pub(in crate::simulate) async fn pay_invoice(&mut self) -> String {
        let recent = self.model.invoices.values().rev().take(300);
        let asked: Vec<InvoiceM> = recent.clone().filter(|i| i.refund_asked).cloned().collect();
        let all: Vec<InvoiceM> = if !asked.is_empty() && rng::chance(250) {
            asked
        } else {
            recent.cloned().collect()
        };
        let Some(inv) = rng::pick(&all).cloned() else {
            return "no invoice yet".into();
        };
        let Some((chain, asset, to, quoted)) = rng::pick(&inv.quotes).cloned() else {
            return format!("invoice {} has no quote on a simulated chain", inv.id);
        };
        let (how, amount) = match rng::below(4) {
            0 | 1 => ("exactly", quoted),
            2 => (
                "short",
                quoted / 100 * u128::from(rng::between(30, 98) as u32),
            ),
            _ => (
                "over",
                quoted / 100 * u128::from(rng::between(102, 200) as u32),
            ),
        };
        let amount = amount.max(1);
        let Some(wc) = self.world.chains.get(chain.as_str()) else {
            return "unknown chain".into();
        };
        let token = if asset == wc.native_symbol {
            None
        } else {
            match wc.tokens.get(&asset) {
                Some(t) => Some(*t),
                None => return format!("{asset} is not on {chain}"),
            }
        };
        let hash = B256::from(rng::bytes32());
        wc.inject(Inject {
            hash,
            from: fresh_address(),
            to,
            token,
            value: U256::from(amount),
        })
        .await;
        let chain: &'static str = wc.id;
        if how == "over" {
            if let Some(m) = self.model.invoices.get_mut(&inv.id) {
                m.overpaid = true;
            }
        }
        self.model.add_transfer(TransferM {
            hash,
            chain,
            to,
            invoice: Some(inv.id),
            asset: asset.clone(),
            amount,
            step: self.step,
        });
        let late = if sources::now_us() > inv.expires_at {
            " (after expiry)"
        } else {
            ""
        };
        format!(
            "invoice {} paid {how}{late}: {amount} {asset} on {chain}",
            inv.id
        )
    }

    /// Cancels an invoice: refused once it has received money.
    pub(in crate::simulate) async fn cancel_invoice(&mut self) -> anyhow::Result<String> {
        let Some(inv) = rng::pick_cloned(self.model.invoices.values().rev().take(300)) else {
            return Ok("no invoice yet".into());
        };
        let path = format!("/v1/invoices/{}/cancel", inv.id);
        let a = self
            .post_as(inv.project, |t| &t.checkout_key, &path, None)
            .await?;
        if a.status >= 500 || !matches!(a.status, 200 | 409 | 422) {
            self.fail(format!(
                "cancel invoice {}: {} {}",
                inv.id, a.status, a.body
            ));
        }
        if let Some(st) = a.str("status") {
            if let Some(m) = self.model.invoices.get_mut(&inv.id) {
                m.status = st;
            }
        }
        Ok(format!("cancel invoice {}: {}", inv.id, a.status))
    }

    /// The payer of an overpaid `refund` invoice gives an address for the excess, on the
    /// public checkout: one time in four an address whose payouts revert (the simulated
    /// chain's `fa11` recipient), so that the claim returns to `awaiting_address` and is
    /// asked for again later (DECISIONS.md section 5). Every claim the document lists is
    /// checked: an address exactly when it is requested, no `failed` claim (this build
    /// returns a failed refund to `awaiting_address`), and `refund` is the open claim.
    pub(in crate::simulate) async fn refund(&mut self) -> anyhow::Result<String> {
        let recent: Vec<InvoiceM> = self
            .model
            .invoices
            .values()
            .rev()
            .take(300)
            .filter(|i| i.policy == "refund")
            .cloned()
            .collect();
        // The overpaid ones first (the others have nothing to refund).
        let over: Vec<InvoiceM> = recent.iter().filter(|i| i.overpaid).cloned().collect();
        let all = if over.is_empty() { recent } else { over };
        let Some(inv) = rng::pick(&all).cloned() else {
            return Ok("no refund invoice".into());
        };
        let path = format!("/v1/checkout/{}", inv.token);
        let doc = self
            .node()
            .call(Method::GET, &path, None, None, None)
            .await?;
        if doc.status != 200 {
            self.fail(format!(
                "GET the checkout of {}: {} {}",
                inv.id, doc.status, doc.body
            ));
            return Ok(String::new());
        }
        if let Some(bad) = claims_disagree(&doc.body) {
            self.fail(format!("the checkout of {}: {bad}: {}", inv.id, doc.body));
        }
        let status = doc.body["refund"]["status"]
            .as_str()
            .unwrap_or("none")
            .to_string();
        if status != "awaiting_address" || doc.body["refund"]["net"].is_null() {
            return Ok(format!("invoice {}: refund {status}", inv.id));
        }
        let to = if rng::chance(250) {
            let mut a = rng::bytes20();
            a[18] = 0xfa;
            a[19] = 0x11;
            Address::from(a)
        } else {
            fresh_address()
        };
        let a = self
            .node()
            .call(
                Method::POST,
                &format!("{path}/refund"),
                None,
                Some(&json!({"address": to.to_checksum(None)})),
                None,
            )
            .await?;
        if a.status >= 500 {
            self.fail(format!("refund of {}: {} {}", inv.id, a.status, a.body));
        }
        if a.status == 200 {
            if let Some(m) = self.model.invoices.get_mut(&inv.id) {
                m.refund_asked = true;
            }
        }
        Ok(format!(
            "invoice {}: refund to {to:#x}: {}",
            inv.id, a.status
        ))
    }
}

/// What is wrong with the refund claims of checkout document `d`, if anything: a claim
/// awaiting an address has none, a requested one has one, no claim is `failed`, and
/// `refund` is the open claim (the oldest awaiting an address, else the newest).
fn claims_disagree(d: &serde_json::Value) -> Option<String> {
    let Some(claims) = d["refunds"].as_array() else {
        return Some("no refunds list".into());
    };
    for (i, c) in claims.iter().enumerate() {
        let st = c["status"].as_str().unwrap_or("");
        let ok = match st {
            "awaiting_address" | "skipped" => c["to_address"].is_null(),
            "pending" | "sent" | "confirmed" => c["to_address"].is_string(),
            _ => false,
        };
        if !ok {
            return Some(format!(
                "claim {i} is {st} with to_address {}",
                c["to_address"]
            ));
        }
    }
    let open = claims
        .iter()
        .position(|c| c["status"] == "awaiting_address")
        .or_else(|| claims.len().checked_sub(1));
    let want = open.map_or(&serde_json::Value::Null, |i| &claims[i]);
    (d["refund"] != *want).then(|| "refund is not the open claim".to_string())
}
