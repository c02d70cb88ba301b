//! Invoices (SPEC.md sections 2, 3 and 4, Invoices; DECISIONS.md sections 5 and 12):
//! creation with one payment address per accepted chain and a locked quote per
//! (chain, asset), cancel, expiry, and what each payment does to its invoice.
//!
//! Invoice money is the merchant's: a payment credits the project's own `available`
//! account (customer nil), is swept like a deposit and leaves with a payout without
//! `customer_id`. The chain side is the deposit machinery: an invoice address is a wallet
//! row with `invoice_id`, a payment is a deposit row with `invoice_id`, and
//! `services::deposits` hands each step of such a row to the `payment_*` functions here
//! (`deposits::Movement`, routed by `Wallet::owner`).
//!
//! Matching (DECISIONS.md section 12): payments are valued exactly at the locked rates
//! ([`value_scaled`]: integers, no rounding before the comparison); within 0.5% of the
//! price is `paid`, more than 0.5% short `underpaid`, more than 0.5% over `overpaid`.

use std::str::FromStr;

use base64::Engine;
use rust_decimal::Decimal;
use serde_json::{Map, Value};
use uuid::Uuid;

use appliance_chains::evm::U512;
use appliance_chains::{AccountKind as ChainAccountKind, ChainStatus};
use appliance_storage::codec::EventData;
use appliance_storage::index::{self, IndexTag};
use appliance_storage::ledger::{Account, AccountKind, JournalEntry, JournalKind, Posting};
use appliance_storage::records::{
    Deposit, Invoice, InvoiceAddress, InvoiceQuote, InvoiceRefund, InvoiceStatus,
    OverpaymentPolicy, Project, RefundStatus, Wallet,
};
use appliance_storage::{EncodedRow, ReadOps, StoreError, WriteCtx};

use crate::registry::Registry;
use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::metadata::{self, MetadataError};
use crate::services::types::{DepositId, InvoiceId};
use crate::services::{clock, conversions, emit_data, emit_view, wallets, Scope};
use crate::views;

/// Tolerance of a payment against the price, in tenths of a percent (SPEC.md section 8:
/// +/-0.5%).
pub const TOLERANCE_PER_MILLE: u64 = 5;
/// An underpaid invoice's window is extended this often at most (SPEC.md section 8).
pub const MAX_EXTENSIONS: u8 = 3;
/// Each extension: 30 minutes (DECISIONS.md section 5), in microseconds.
pub const EXTENSION_US: i64 = 30 * 60 * 1_000_000;
/// `expires_in` bounds and default, seconds (DECISIONS.md section 5).
pub const EXPIRES_IN_MIN_S: u64 = 300;

/// Longest `return_url` / `cancel_url`, bytes.
pub const MAX_REDIRECT_URL: usize = 2048;

mod create;
mod payments;
pub use create::*;
pub use payments::*;

/// A `return_url` or `cancel_url` as stored: an absolute `https://` URL with a
/// host (`http://` too in test mode, for a shop on localhost), at most
/// [`MAX_REDIRECT_URL`] bytes, no whitespace or control characters. The hosted page sends
/// the buyer there, so `javascript:`, `data:` and the like are 400 `invalid_request` with
/// `param`.
pub fn redirect_url(param: &'static str, v: &str, test_mode: bool) -> Result<String, Invalid> {
    let refuse = || {
        Invalid::new(
            param,
            if test_mode {
                format!("{param} must be an http:// or https:// URL with a host, at most {MAX_REDIRECT_URL} bytes.")
            } else {
                format!("{param} must be an https:// URL with a host, at most {MAX_REDIRECT_URL} bytes.")
            },
        )
    };
    if v.len() > MAX_REDIRECT_URL || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse());
    }
    let url = reqwest13::Url::parse(v).map_err(|_| refuse())?;
    let scheme_ok = url.scheme() == "https" || (test_mode && url.scheme() == "http");
    if !scheme_ok || url.host_str().is_none_or(str::is_empty) {
        return Err(refuse());
    }
    Ok(v.to_string())
}
pub const EXPIRES_IN_MAX_S: u64 = 604_800;
pub const EXPIRES_IN_DEFAULT_S: u64 = 3_600;
/// `price_amount` bounds, minor units (DECISIONS.md section 16).
pub const PRICE_MAX_CENTS: u64 = 1_000_000_000_000;

/// Most invoices `POST /v1/test/clock` expires in its own transaction (the expiry worker
/// does the rest within a second, in short transactions: `workers::invoices`). Kept small
/// so that the request's transaction holds the store writer for tens of milliseconds, not
/// a second (1,000 took 0.8 s under load, docs/performance.md).
pub const EXPIRE_INLINE: usize = 100;

/// Fixed-point exponent of exact valuations: a value is USD x 10^48 (see
/// [`value_scaled`]).
const SCALE_EXP: u32 = 48;

/// Why an invoice request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum InvoiceError {
    /// No such invoice in the project: 404 `not_found`.
    #[error("No such invoice.")]
    NotFound,
    /// A currency other than USD: 400 `unsupported_currency` on `price_currency`.
    #[error("Only USD is priced.")]
    UnsupportedCurrency,
    /// A field breaks a rule: 400 `invalid_request`.
    /// A live project without an active, funded plan: 402 `plan_not_active`.
    #[error(transparent)]
    Billing(#[from] crate::services::billing::BillingError),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// `metadata` out of bounds: 400 `invalid_request`.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// An `accepted_chains` entry is not a chain, or not listed for the project.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// An accepted chain cannot take payments now: 422 `chain_unavailable` on
    /// `accepted_chains`.
    #[error("{chain} cannot take invoice payments now: {why}")]
    ChainUnavailable { chain: String, why: String },
    /// No accepted (chain, asset) is live and priced: 422 `no_payment_options`.
    #[error("No accepted coin can be offered now (none is live and priced).")]
    NoPaymentOptions,
    /// A live project but no master key unlocked: 422 `chain_deposits_disabled`.
    #[error("No master key is unlocked: live invoice addresses are issued once `appliance init` has run.")]
    NoMasterKey,
    /// Cancel of an invoice that is not `open` or has received money: 409 `invalid_state`.
    #[error("Only an open invoice that has received nothing can be canceled; this one is {} .", .status.as_str())]
    NotCancelable { status: InvoiceStatus },
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(InvoiceError);

/// A (chain, asset) an invoice may offer, before its rate is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub chain: String,
    pub asset: String,
    /// Token contract; empty for a native coin.
    pub contract: String,
    pub decimals: u8,
}

/// A candidate with the rate the market gave for it (read outside the store transaction).
#[derive(Debug, Clone)]
pub struct Offer {
    pub candidate: Candidate,
    /// USD per whole coin.
    pub rate: Decimal,
    /// `par`, `test`, `kraken` or `chainlink`.
    pub rate_source: &'static str,
}

/// Fields of `POST /v1/invoices`, parsed.
pub struct NewInvoice {
    pub price_cents: u64,
    pub reference_id: Option<String>,
    pub title: Option<String>,
    pub description: Option<String>,
    pub metadata: Option<Map<String, Value>>,
    pub return_url: Option<String>,
    pub cancel_url: Option<String>,
    pub expires_in_s: u64,
    pub overpayment_policy: Option<OverpaymentPolicy>,
    /// What the invoice offers, with rates ([`candidates`], then the market).
    pub offers: Vec<Offer>,
}

/// The (chain, asset) pairs an invoice of `project` may offer (DECISIONS.md section 12):
/// every asset taking deposits on every chain that issues addresses now, narrowed to
/// `accepted_chains` / `accepted_assets` when given. An accepted chain that is unknown is
/// 400; one not listed 422 `chain_not_enabled`; one that issues no address now 422
/// `chain_unavailable`; an accepted asset no chain lists 400 `invalid_request`.
pub fn candidates(
    reg: &Registry,
    project: &Project,
    accepted_chains: Option<&[String]>,
    accepted_assets: Option<&[String]>,
) -> Result<Vec<Candidate>, InvoiceError> {
    let chain_ids: Vec<&str> = match accepted_chains {
        Some(list) => {
            let mut ids = Vec::new();
            for c in list {
                let eff = chains::resolve(reg, project, c, "accepted_chains")?;
                if !eff.issues_addresses() {
                    let why = match eff.status {
                        ChainStatus::Live if !eff.deposits_enabled => {
                            "deposits are switched off".to_string()
                        }
                        ChainStatus::Live => "it issues no addresses".to_string(),
                        ChainStatus::ComingSoon => "it is not live yet".to_string(),
                        ChainStatus::Paused => eff.status_note.clone(),
                    };
                    return Err(InvoiceError::ChainUnavailable {
                        chain: c.clone(),
                        why,
                    });
                }
                if !ids.contains(&eff.chain.id()) {
                    ids.push(eff.chain.id());
                }
            }
            ids
        }
        None => reg.chains.iter().map(|c| c.id()).collect(),
    };
    if let Some(assets) = accepted_assets {
        for a in assets {
            if !reg.chains.iter().any(|c| c.asset(a).is_some()) {
                return Err(Invalid::new(
                    "accepted_assets",
                    format!("{a:?} is not an asset of any chain."),
                )
                .into());
            }
        }
    }
    let mut out = Vec::new();
    for chain in reg.chains.iter().filter(|c| chain_ids.contains(&c.id())) {
        let eff = chains::effective(chain, project);
        if !eff.issues_addresses() || eff.chain.info.account_kind != ChainAccountKind::Contract {
            continue;
        }
        for a in &eff.assets {
            if !a.deposits_enabled || a.archived {
                continue;
            }
            if accepted_assets.is_some_and(|l| !l.iter().any(|s| s == &a.asset.symbol)) {
                continue;
            }
            out.push(Candidate {
                chain: chain.id().to_string(),
                asset: a.asset.symbol.clone(),
                contract: if a.asset.is_native {
                    String::new()
                } else {
                    a.asset.contract.clone()
                },
                decimals: a.asset.decimals,
            });
        }
    }
    Ok(out)
}

/// The fee terms frozen on a new invoice (SPEC.md section 4, Invoices rule 2): the plan's
/// `rate_bps`, `fixed_cents` and `cap_cents`. Billing is not built yet: every term is 0
/// until it is, and this is the one place it will read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeeTerms {
    pub bps: u32,
    pub fixed_cents: u64,
    pub cap_cents: u64,
}

/// The project's current fee terms (see [`FeeTerms`]).
pub fn fee_terms(r: &impl ReadOps, s: &Scope) -> Result<FeeTerms, StoreError> {
    let t = crate::services::billing::fee_terms(r, s).map_err(|e| match e {
        Fault::Store(e) => e,
        other => StoreError::Corrupt(other.to_string()),
    })?;
    Ok(FeeTerms {
        bps: t.rate_bps,
        fixed_cents: t.fixed_cents,
        cap_cents: t.cap_cents,
    })
}

/// A new checkout token: `ck_` + 43 base64url characters of 32 random bytes
/// (DECISIONS.md section 2).
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    appliance_storage::sources::fill_random(&mut b);
    format!(
        "ck_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    )
}

pub use crate::sealing::is_checkout_token as is_token;

/// `text` with every checkout token in it (`ck_` and its 43 characters, or the start of
/// one cut short by the end of `text`) written `ck_[redacted]`: what the store keeps of a
/// webhook receiver's answer, which may echo the event's `checkout_url` back.
pub fn redact_tokens(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("ck_") {
        return std::borrow::Cow::Borrowed(text);
    }
    let is_tok = crate::sealing::is_token_byte;
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    while let Some(at) = text[i..].find("ck_").map(|p| p + i) {
        let start = at + 3;
        let run = b[start..]
            .iter()
            .take(43)
            .take_while(|&&c| is_tok(c))
            .count();
        if run >= 16 || (run > 0 && start + run == b.len()) {
            out.push_str(&text[copied..start]);
            out.push_str("[redacted]");
            copied = start + run;
        }
        i = start + run;
    }
    out.push_str(&text[copied..]);
    std::borrow::Cow::Owned(out)
}

/// Unique key of a checkout token: SHA-256 of the token, so the index holds no credential.
pub fn token_key(token: &str) -> Vec<u8> {
    use sha2::Digest;
    let h = sha2::Sha256::digest(token.as_bytes());
    index::unique(IndexTag::UniqueCheckoutToken, Uuid::nil(), &[h.as_slice()])
}

fn reference_key(project: Uuid, reference: &str) -> Vec<u8> {
    index::unique(IndexTag::UniqueInvoiceRef, project, &[reference.as_bytes()])
}

/// The invoice a checkout token opens, in any project (`None` for a malformed or unknown
/// token). For the public checkout endpoints: every miss must answer alike.
pub fn by_token(r: &impl ReadOps, token: &str) -> Result<Option<Invoice>, StoreError> {
    if !is_token(token) {
        return Ok(None);
    }
    let Some(id) = r.unique_get(&token_key(token))? else {
        return Ok(None);
    };
    // The index key is the token's SHA-256: a hit is the token's own invoice.
    r.get::<Invoice>(id)
}

/// 10^n as a U512.
fn pow10(n: u32) -> U512 {
    U512::from(10u8).pow(U512::from(n))
}

fn decimal_parts(rate: Decimal) -> Option<(U512, u32)> {
    let m = rate.mantissa();
    if m <= 0 {
        return None;
    }
    Some((U512::from(m as u128), rate.scale()))
}

/// `amount_atomic` of a quote: ceil(price / rate x 10^decimals), exactly (DECISIONS.md
/// section 12). `None` when the rate is not positive or the amount does not fit 128 bits.
pub fn quote_amount(price_cents: u64, decimals: u8, rate: Decimal) -> Option<u128> {
    let (m, scale) = decimal_parts(rate)?;
    let num = U512::from(price_cents) * pow10(decimals as u32 + scale);
    let den = m * U512::from(100u8);
    let q = num.div_ceil(den);
    u128::try_from(q).ok()
}

/// The exact value of `amount` atomic units at `rate` (a stored quote's `rate` string),
/// in USD x 10^48. `None` for a rate that does not parse as a positive decimal.
pub fn value_scaled(amount: u128, decimals: u8, rate: &str) -> Option<U512> {
    let (m, scale) = decimal_parts(Decimal::from_str(rate).ok()?)?;
    let shift = decimals as u32 + scale;
    let v = U512::from(amount) * m;
    Some(if shift <= SCALE_EXP {
        v * pow10(SCALE_EXP - shift)
    } else {
        v / pow10(shift - SCALE_EXP)
    })
}

/// The price in USD x 10^48.
fn price_scaled(price_cents: u64) -> U512 {
    U512::from(price_cents) * pow10(SCALE_EXP - 2)
}

/// Whole cents of a USD x 10^48 value, rounded down (saturating).
fn cents_of(v: U512) -> u64 {
    u64::try_from(v / pow10(SCALE_EXP - 2)).unwrap_or(u64::MAX)
}

/// How a received value compares with the price (SPEC.md section 8 tolerance).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// More than 0.5% short.
    Under,
    /// Within +/-0.5%.
    Paid,
    /// More than 0.5% over.
    Over,
}

/// Judges a received value (USD x 10^48) against a price in cents, exactly.
pub fn judge(value: U512, price_cents: u64) -> Judgement {
    let p = price_scaled(price_cents);
    let v1000 = value * U512::from(1000u16);
    if v1000 < p * U512::from(1000 - TOLERANCE_PER_MILLE) {
        Judgement::Under
    } else if v1000 > p * U512::from(1000 + TOLERANCE_PER_MILLE) {
        Judgement::Over
    } else {
        Judgement::Paid
    }
}

/// Value of everything confirmed on `inv` (USD x 10^48). A coin without a quote (sent to an
/// invoice address but never offered) counts for nothing: it is credited to the merchant
/// but does not pay the invoice.
fn confirmed_value(inv: &Invoice) -> U512 {
    let mut v = U512::ZERO;
    for r in &inv.received {
        if let Some(q) = inv.quote(&r.chain, &r.asset) {
            v += value_scaled(r.confirmed, q.decimals, &q.rate).unwrap_or(U512::ZERO);
        }
    }
    v
}

/// Recomputes `received_cents` and `excess_cents` from what is confirmed.
fn refresh_amounts(inv: &mut Invoice) -> U512 {
    let v = confirmed_value(inv);
    inv.received_cents = cents_of(v);
    let p = price_scaled(inv.price_cents);
    inv.excess_cents = if judge(v, inv.price_cents) == Judgement::Over {
        cents_of(v - p)
    } else {
        0
    };
    v
}

/// An invoice built outside the store writer by [`prepare`] (quotes, the payment address,
/// the token, the wallet rows, its JSON and its event data) from the fee terms and the project's clock
/// offset of a recent read; [`create_prepared`] writes it. The writer thread commits every
/// request in turn, so what needs no store is done before (the view and the address
/// derivation would be about a third of its time per invoice).
pub struct Prepared {
    /// The invoice as it will be stored (fee terms and `expires_at` from the snapshot).
    pub inv: Invoice,
    /// `views::InvoiceView` of `inv` as JSON: the answer (and, sealed, its idempotency
    /// record: it carries the checkout token).
    pub body: String,
    /// The unique key of the checkout token ([`token_key`]).
    token_index: Vec<u8>,
    /// The same view encoded as the `invoice.created` event's data.
    data: EventData,
    /// Each payment address's unique key, wallet row and that row encoded.
    wallet_rows: Vec<WalletRow>,
    /// `inv` encoded (again in the writer if it is re-stamped).
    row: EncodedRow<Invoice>,
    fees: FeeTerms,
    offset_us: i64,
    expires_in_s: u64,
}

/// What [`prepare`] needs from the store: the fee terms to freeze and the project's test
/// clock offset (µs), read in one snapshot before the write; [`create_prepared`] checks
/// both again inside the transaction.
pub fn snapshot(r: &impl ReadOps, s: &Scope) -> Result<(FeeTerms, i64), StoreError> {
    Ok((fee_terms(r, s)?, clock::offset(r, &s.project)?))
}

/// Builds the invoice of `req` at wall-clock time `now_us` with `fees` and the project's
/// clock offset `offset_us` ([`snapshot`]), without the store: the refusals that need no
/// store (`metadata`, `no_payment_options`, no master key), the locked quotes, one payment
/// address for every accepted chain (the same on every EVM chain), the token and the view.
pub fn prepare(
    s: &Scope,
    req: NewInvoice,
    fees: FeeTerms,
    offset_us: i64,
    now_us: i64,
) -> Result<Prepared, InvoiceError> {
    let p = s.project.id;
    let md = metadata::for_create(req.metadata.unwrap_or_default())?;
    let quotes = quotes_of(req.price_cents, &req.offers);
    if quotes.is_empty() {
        return Err(InvoiceError::NoPaymentOptions);
    }
    let factory = s
        .reg
        .factory_for(&s.project)
        .ok_or(InvoiceError::NoMasterKey)?;
    let id = appliance_storage::sources::new_id();
    let address = appliance_chains::address::deposit_address_under(&factory, p, id);
    let (addresses, wallet_rows) = invoice_wallets(p, id, &address, &quotes, now_us);
    // The token in clear lives only here: the row holds it sealed, the lookup index its
    // digest, the answer its URL.
    let token = zeroize::Zeroizing::new(new_token());
    let sealed_token = s
        .reg
        .seal_checkout_token(id, &token)
        .ok_or_else(|| Fault::invariant("no data key to seal a checkout token with"))?;
    let token_index = token_key(&token);
    let inv = Invoice {
        id,
        project_id: p,
        checkout_token: sealed_token,
        reference_id: req.reference_id,
        title: req.title,
        description: req.description,
        price_cents: req.price_cents,
        price_currency: "USD".into(),
        status: InvoiceStatus::Open,
        fee_bps: fees.bps,
        fee_fixed_cents: fees.fixed_cents,
        fee_cap_cents: fees.cap_cents,
        metadata: Value::Object(md),
        return_url: req.return_url,
        cancel_url: req.cancel_url,
        overpayment_policy: req
            .overpayment_policy
            .unwrap_or(s.project.settings.overpayment_policy),
        addresses,
        quotes,
        received: Vec::new(),
        received_cents: 0,
        excess_cents: 0,
        pending_payments: 0,
        extensions: 0,
        refunds: Vec::new(),
        selected: None,
        expires_at: expires_at(now_us, offset_us, req.expires_in_s),
        paid_at: None,
        canceled_at: None,
        expired_at: None,
        created_at: now_us,
        updated_at: now_us,
    };
    let body = serde_json::to_string(&views::new_invoice_view(&s.reg, &inv, &token))
        .expect("an invoice view is JSON");
    let data = EventData::encode(&views::invoice_event_view(&s.reg, &inv));
    let row = EncodedRow::of(&inv);
    Ok(Prepared {
        inv,
        body,
        token_index,
        data,
        row,
        wallet_rows,
        fees,
        offset_us,
        expires_in_s: req.expires_in_s,
    })
}

/// A wallet row of an invoice with its address key, encoded off the store writer.
type WalletRow = (Vec<u8>, Wallet, EncodedRow<Wallet>);

/// The quotes of an invoice of `price_cents`: one per offer whose rate gives an amount.
fn quotes_of(price_cents: u64, offers: &[Offer]) -> Vec<InvoiceQuote> {
    offers
        .iter()
        .filter_map(|o| {
            let amount = quote_amount(price_cents, o.candidate.decimals, o.rate)?;
            Some(InvoiceQuote {
                chain: o.candidate.chain.clone(),
                asset: o.candidate.asset.clone(),
                contract: o.candidate.contract.clone(),
                decimals: o.candidate.decimals,
                amount_atomic: amount,
                rate: crate::market::format_usd(o.rate),
                rate_source: o.rate_source.to_string(),
            })
        })
        .collect()
}

/// Invoice `id`'s deposit `address` on each chain its quotes name, in quote order: the
/// invoice's addresses, and the wallet rows (with their address keys) that receive there.
fn invoice_wallets(
    project_id: Uuid,
    id: Uuid,
    address: &str,
    quotes: &[InvoiceQuote],
    now_us: i64,
) -> (Vec<InvoiceAddress>, Vec<WalletRow>) {
    let mut chains_seen: Vec<&str> = Vec::new();
    for q in quotes {
        if !chains_seen.contains(&q.chain.as_str()) {
            chains_seen.push(&q.chain);
        }
    }
    let mut addresses = Vec::new();
    let mut wallet_rows = Vec::new();
    for chain in chains_seen {
        let w = Wallet {
            id: appliance_storage::sources::new_id(),
            project_id,
            customer_id: Uuid::nil(),
            invoice_id: Some(id),
            chain: chain.to_string(),
            role: "invoice".into(),
            status: "active".into(),
            address: address.to_string(),
            memo: None,
            created_at: now_us,
        };
        addresses.push(InvoiceAddress {
            chain: chain.to_string(),
            address: address.to_string(),
            memo: None,
            wallet_id: w.id,
        });
        let encoded = EncodedRow::of(&w);
        wallet_rows.push((wallets::address_key(chain, address), w, encoded));
    }
    (addresses, wallet_rows)
}

/// `expires_in_s` after `now_us` on the project's clock (`offset_us` ahead of the wall).
fn expires_at(now_us: i64, offset_us: i64, expires_in_s: u64) -> i64 {
    now_us
        .saturating_add(offset_us)
        .saturating_add((expires_in_s as i64).saturating_mul(1_000_000))
}

/// How [`create_prepared`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The prepared invoice was written as it was: its view is the answer.
    AsPrepared,
    /// Written, with the fee terms or the clock offset changed since the snapshot (the
    /// invoice carries the current ones; render its view again).
    Restamped,
    /// The project's first invoice with this `reference_id`, returned again (200).
    Existing,
}

/// Creates the invoice [`prepare`]d, or returns the first one with the same
/// `reference_id` (SPEC.md section 4, Invoices rule 3). One transaction, no scan: the
/// reference and token lookups are point reads; one wallet row per accepted chain (not
/// metered against the daily address cap, DECISIONS.md section 12); emits
/// `invoice.created`. The fee terms and the project's clock are read again here: when they
/// changed since [`snapshot`], the invoice gets the current ones ([`Created::Restamped`]).
pub fn create_prepared(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    prepared: Prepared,
) -> Result<(Invoice, Created), InvoiceError> {
    let Prepared {
        mut inv,
        body: _,
        token_index,
        mut data,
        mut row,
        wallet_rows,
        fees: assumed_fees,
        offset_us: assumed_offset,
        expires_in_s,
    } = prepared;
    if let Some(existing) = existing_by_reference(ctx, s, inv.reference_id.as_deref())? {
        return Ok((existing, Created::Existing));
    }
    // SPEC.md section 4, Invoices rule 4: live invoices need an active, funded plan.
    crate::services::billing::require_live(ctx, s)?;
    let (fees, offset) = snapshot(ctx, s)?;
    let mut outcome = Created::AsPrepared;
    if fees != assumed_fees || offset != assumed_offset {
        inv.fee_bps = fees.bps;
        inv.fee_fixed_cents = fees.fixed_cents;
        inv.fee_cap_cents = fees.cap_cents;
        inv.expires_at = expires_at(inv.created_at, offset, expires_in_s);
        data = EventData::encode(&views::invoice_event_view(&s.reg, &inv));
        row = EncodedRow::of(&inv);
        outcome = Created::Restamped;
    }
    for (key, _, _) in &wallet_rows {
        if ctx.unique_get(key)?.is_some() {
            return Err(Fault::invariant("a new invoice address is already taken").into());
        }
    }
    // Every check is done: the writes.
    // New ids (UUID v7, made by `prepare`): nothing stored under them to read first.
    for (key, w, encoded) in &wallet_rows {
        ctx.unique_put(key, w.id)?;
        ctx.put_new_encoded(w, encoded)?;
    }
    ctx.unique_put(&token_index, inv.id)?;
    if let Some(r) = &inv.reference_id {
        ctx.unique_put(&reference_key(inv.project_id, r), inv.id)?;
    }
    ctx.put_new_encoded(&inv, &row)?;
    emit_data(ctx, s, "invoice.created", inv.id, &data)?;
    Ok((inv, outcome))
}

/// The project's first invoice with `reference_id` (SPEC.md section 4, Invoices rule 3).
pub fn existing_by_reference(
    ctx: &WriteCtx<'_>,
    s: &Scope,
    reference_id: Option<&str>,
) -> Result<Option<Invoice>, Fault> {
    let Some(r) = reference_id else {
        return Ok(None);
    };
    let Some(id) = ctx.unique_get(&reference_key(s.project.id, r))? else {
        return Ok(None);
    };
    let inv = ctx
        .get::<Invoice>(id)?
        .ok_or_else(|| Fault::invariant("invoice reference index points at nothing"))?;
    Ok(Some(inv))
}

/// Emits `event` about invoice `inv` as this transaction leaves it, its data the invoice's
/// event view ([`views::invoice_event_view`]).
pub fn emit_invoice(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    event: &str,
    inv: &Invoice,
) -> Result<(), StoreError> {
    emit_view(
        ctx,
        s,
        event,
        inv.id,
        &views::invoice_event_view(&s.reg, inv),
    )
}

/// `open` -> `canceled` (SPEC.md section 4, Invoices rule 5): refused (409 `invalid_state`)
/// once anything was received or seen, or from any other status; a canceled invoice is
/// answered again as it is. The payment addresses stay watched; emits `invoice.canceled`.
pub fn cancel(ctx: &mut WriteCtx<'_>, s: &Scope, id: InvoiceId) -> Result<Invoice, InvoiceError> {
    let mut inv = ctx
        .get_in::<Invoice>(s.project.id, id.uuid())?
        .ok_or(InvoiceError::NotFound)?;
    if inv.status == InvoiceStatus::Canceled {
        return Ok(inv);
    }
    let received = inv.pending_payments > 0
        || inv
            .received
            .iter()
            .any(|r| r.confirmed > 0 || r.pending > 0);
    if inv.status != InvoiceStatus::Open || received {
        return Err(InvoiceError::NotCancelable { status: inv.status });
    }
    let now = ctx.now_us();
    inv.status = InvoiceStatus::Canceled;
    inv.canceled_at = Some(now);
    inv.updated_at = now;
    ctx.put(&inv)?;
    emit_invoice(ctx, s, "invoice.canceled", &inv)?;
    Ok(inv)
}

/// `open` / `underpaid` -> `expired` when the project clock has passed `expires_at`
/// (emits `invoice.expired`). Returns whether it expired. Used by the expiry worker and
/// before a payment is judged on time or late.
pub fn expire_if_due(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    inv: &mut Invoice,
    project_now: i64,
) -> Result<bool, Fault> {
    if !inv.status.expires() || project_now < inv.expires_at {
        return Ok(false);
    }
    inv.status = InvoiceStatus::Expired;
    inv.expired_at = Some(ctx.now_us());
    inv.updated_at = ctx.now_us();
    ctx.put(inv)?;
    emit_invoice(ctx, s, "invoice.expired", inv)?;
    Ok(true)
}

/// Expires up to `limit` of the project's invoices whose deadline has passed on its clock
/// (the expiry worker's step; the `InvoicesDue` index holds only open and underpaid
/// invoices, oldest deadline first). Returns how many were due (expired or not).
pub fn expire_due(ctx: &mut WriteCtx<'_>, s: &Scope, limit: usize) -> Result<usize, Fault> {
    let p = s.project.id;
    let now_p = clock::now(ctx, &s.project)?;
    let from = index::prefix(IndexTag::InvoicesDue, p, &[]);
    let to = appliance_storage::records::invoice_due_key(p, now_p.saturating_add(1), Uuid::nil());
    let keys = ctx.index_range(&from, &to, limit, false)?;
    for k in &keys {
        let id = index::id_of(k);
        let Some(mut inv) = ctx.get::<Invoice>(id)? else {
            // A stale entry: nothing to expire; drop it so it is not met again.
            ctx.index_remove(k)?;
            continue;
        };
        if !expire_if_due(ctx, s, &mut inv, now_p)? {
            // Not due after all (status changed without its entry): re-put fixes the index.
            ctx.index_remove(k)?;
            ctx.put(&inv)?;
        }
    }
    Ok(keys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn quote_amounts_round_up_exactly() {
        // 40.00 USD of a 6-decimal stablecoin at par.
        assert_eq!(quote_amount(4000, 6, d("1.00")), Some(40_000_000));
        // 40.00 USD of ETH at 3000.00: 0.01333... ETH, rounded up to the wei.
        assert_eq!(
            quote_amount(4000, 18, d("3000.00")),
            Some(13_333_333_333_333_334)
        );
        // 18-decimal USDT on bsc.
        assert_eq!(
            quote_amount(100, 18, d("1")),
            Some(1_000_000_000_000_000_000)
        );
        assert_eq!(quote_amount(100, 6, Decimal::ZERO), None);
    }

    #[test]
    fn tolerance_is_half_a_percent_of_the_price_exactly() {
        let price = 10_000; // 100.00 USD
        let v = |atomic: u128| value_scaled(atomic, 6, "1.00").unwrap();
        assert_eq!(judge(v(100_000_000), price), Judgement::Paid);
        assert_eq!(judge(v(99_500_000), price), Judgement::Paid);
        assert_eq!(judge(v(99_499_999), price), Judgement::Under);
        assert_eq!(judge(v(100_500_000), price), Judgement::Paid);
        assert_eq!(judge(v(100_500_001), price), Judgement::Over);
        // The quoted ETH amount (rounded up) is paid; one wei under 99.5% is not.
        let q = quote_amount(4000, 18, d("3000.00")).unwrap();
        let eth = |a: u128| value_scaled(a, 18, "3000.00").unwrap();
        assert_eq!(judge(eth(q), 4000), Judgement::Paid);
        let floor = 13_266_666_666_666_667u128; // ceil(39.80 / 3000 x 10^18)
        assert_eq!(judge(eth(floor), 4000), Judgement::Paid);
        assert_eq!(judge(eth(floor - 1), 4000), Judgement::Under);
    }

    #[test]
    fn cents_round_down() {
        let v = value_scaled(12_345_678, 6, "1.00").unwrap();
        assert_eq!(cents_of(v), 1234);
    }

    #[test]
    fn tokens_have_the_checkout_shape() {
        let t = new_token();
        assert!(is_token(&t), "{t}");
        assert_ne!(t, new_token());
        assert!(!is_token("ck_short"));
        assert!(!is_token(&format!("ck_{}", "!".repeat(43))));
    }
}
