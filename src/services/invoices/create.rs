//! `POST /v1/invoices` from parsed fields to the stored invoice (SPEC.md section 4,
//! Invoices rules 1-4): the terms checked without the store, the offers priced by the
//! market, the invoice prepared off the store's single writer thread, then the one write
//! transaction.

use std::sync::Arc;

use rust_decimal::Decimal;

use appliance_storage::records::Invoice;
use appliance_storage::{Store, StoreError, WriteCtx};

use crate::market::Market;
use crate::services::error::Invalid;
use crate::services::Scope;

use super::{
    candidates, create_prepared, existing_by_reference, prepare, snapshot, Created, InvoiceError,
    NewInvoice, Offer, Prepared, EXPIRES_IN_DEFAULT_S, EXPIRES_IN_MAX_S, EXPIRES_IN_MIN_S,
};

/// `price_currency`: only USD prices an invoice (any letter case); absent means USD.
pub fn check_currency(currency: Option<&str>) -> Result<(), InvoiceError> {
    match currency {
        Some(c) if !c.eq_ignore_ascii_case("USD") => Err(InvoiceError::UnsupportedCurrency),
        _ => Ok(()),
    }
}

/// `expires_in` in seconds: [`EXPIRES_IN_DEFAULT_S`] when absent, otherwise from
/// [`EXPIRES_IN_MIN_S`] to [`EXPIRES_IN_MAX_S`] (DECISIONS.md section 5).
pub fn lifetime_s(expires_in: Option<u64>) -> Result<u64, Invalid> {
    let s = expires_in.unwrap_or(EXPIRES_IN_DEFAULT_S);
    if !(EXPIRES_IN_MIN_S..=EXPIRES_IN_MAX_S).contains(&s) {
        return Err(Invalid::new(
            "expires_in",
            format!("expires_in must be from {EXPIRES_IN_MIN_S} to {EXPIRES_IN_MAX_S} seconds."),
        ));
    }
    Ok(s)
}

/// What the request narrows the offers to: `accepted_chains` / `accepted_assets`.
pub struct Accepted {
    pub chains: Option<Vec<String>>,
    pub assets: Option<Vec<String>>,
}

/// A creation ready for the store transaction: the invoice [`prepare`]d, or the refusal,
/// which waits for the reference check (SPEC.md section 4, Invoices rule 3: a retry with
/// a known `reference_id` returns the first invoice whatever changed since).
pub struct Pending {
    prepared: Result<Prepared, Refusal>,
    reference_id: Option<String>,
}

struct Refusal {
    error: InvoiceError,
    /// The refusal came from [`prepare`], so the plan gate (rule 4) is checked first: a
    /// live project without a plan hears `plan_not_active`, not the preparation's error.
    gated: bool,
}

/// Prices the offers and prepares the invoice, outside any store transaction: the rates
/// are read from the market (which may wait for its source), and everything that needs no
/// store (the quotes, the address, the token, the view and its JSON) is built here, off
/// the single writer thread.
pub async fn pending(
    store: &Store,
    market: &Arc<Market>,
    s: &Scope,
    mut req: NewInvoice,
    accepted: Accepted,
) -> Result<Pending, StoreError> {
    let reference_id = req.reference_id.clone();
    let livemode = s.project.mode == appliance_storage::records::Mode::Live;
    let cands = candidates(
        &s.reg,
        &s.project,
        accepted.chains.as_deref(),
        accepted.assets.as_deref(),
    );
    let prepared = match cands {
        Ok(cands) => {
            req.offers = price_offers(market, livemode, cands).await;
            let (fees, offset) = store.read_now(|r| snapshot(r, s))?;
            prepare(s, req, fees, offset, appliance_storage::now_us())
                .map_err(|error| Refusal { error, gated: true })
        }
        Err(error) => Err(Refusal {
            error,
            gated: false,
        }),
    };
    Ok(Pending {
        prepared,
        reference_id,
    })
}

/// Each candidate with the market's usable rate; one without a rate is not offered. Each
/// asset's rate is read once.
async fn price_offers(
    market: &Arc<Market>,
    livemode: bool,
    cands: Vec<super::Candidate>,
) -> Vec<Offer> {
    let mut rates: Vec<(String, Option<(Decimal, &'static str)>)> = Vec::new();
    let mut offers = Vec::new();
    for c in cands {
        let rate = match rates.iter().find(|(s, _)| s == &c.asset) {
            Some((_, r)) => *r,
            None => {
                let r = market.usable_quote(&c.asset, livemode).await;
                rates.push((c.asset.clone(), r));
                r
            }
        };
        if let Some((rate, rate_source)) = rate {
            offers.push(Offer {
                candidate: c,
                rate,
                rate_source,
            });
        }
    }
    offers
}

/// How [`create`] answered.
pub enum Answer {
    /// Created as prepared: the prepared JSON of its view is the answer.
    Prepared(String),
    /// Created, with terms restamped since the preparation: render the invoice again.
    Created,
    /// The project's first invoice with this `reference_id` (200).
    Existing,
}

/// The write transaction of `POST /v1/invoices`: the invoice [`pending`] prepared is
/// stored (`create_prepared`), or the first invoice with its `reference_id` is returned,
/// or the refusal stands (after the plan gate, for a refusal of the preparation).
pub fn create(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    pending: Pending,
) -> Result<(Invoice, Answer), InvoiceError> {
    let Pending {
        prepared,
        reference_id,
    } = pending;
    let mut p = match prepared {
        Ok(p) => p,
        Err(Refusal { error, gated }) => {
            if let Some(inv) = existing_by_reference(ctx, s, reference_id.as_deref())? {
                return Ok((inv, Answer::Existing));
            }
            if gated {
                crate::services::billing::require_live(ctx, s)?;
            }
            return Err(error);
        }
    };
    let body = std::mem::take(&mut p.body);
    let (inv, outcome) = create_prepared(ctx, s, p)?;
    let answer = match outcome {
        Created::AsPrepared => Answer::Prepared(body),
        Created::Restamped => Answer::Created,
        Created::Existing => Answer::Existing,
    };
    Ok((inv, answer))
}
