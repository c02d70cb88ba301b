//! Billing (SPEC.md sections 2, 3 and 4, Billing; DECISIONS.md section 13): plans, the
//! prepaid operational balance as a journal of billing entries, fees when they are earned,
//! the monthly minimum, and the gate on live invoices.
//!
//! Every balance change goes through [`post`]: it writes the entry, moves the project's
//! running balance in [`BillingAccount`] and appends the entry's billing line to the
//! project's log (sharing the event `sequence`, DECISIONS.md section 7) in the caller's
//! transaction. A fee is written at most once per thing it is for (a unique key per kind and
//! reference), so a retried or replayed step never charges twice.
//!
//! Amounts are signed USD cents (`i64`): credits positive, charges negative. A fee is
//! charged whatever the balance (it was earned); a negative balance only stops new live
//! invoices ([`require_live`]).

use chrono::{DateTime, Datelike, NaiveDate};
use serde_json::{json, Value};
use uuid::Uuid;

use appliance_chains::{AccountKind, ChainStatus};
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    BillingAccount, BillingEntry, Deposit, DepositStatus, EntryKind, FundingAddress,
    FundingTransfer, Mode, Project, Wallet, BILLING_LINE, FUNDING_ROLE,
};
use appliance_storage::{ReadOps, WriteCtx};
use rust_decimal::Decimal;

use crate::config::{BillingConfig, PlanConfig};
use crate::registry::Registry;
use crate::services::chains::{self, EffChain};
use crate::services::error::{fault_from, Fault};
use crate::services::types::ProjectId;
use crate::services::{emit, Scope};
use crate::views::{
    ts, ActivationView, BillingView, LiveStatusView, OnboardingStepView, OnboardingView, OptTs,
    PlanFeesView, PlanView,
};

/// Why a billing request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum BillingError {
    /// `plan` names no plan on offer: 422 `unknown_plan`, `param: plan`.
    #[error("No plan {plan:?}; GET /v1/billing lists the plans on offer.")]
    UnknownPlan { plan: String },
    /// The plan is assigned by the operator only: 403 `plan_not_self_selectable`.
    #[error("Plan {plan:?} cannot be self-selected; it is arranged with the operator.")]
    NotSelfSelectable { plan: String },
    /// No active plan (live invoices, onboarding skip): 402 `plan_not_active`.
    #[error("The project has no active billing plan; choose one with POST /v1/billing/plan.")]
    PlanNotActive,
    /// A live project whose operational balance is below zero: 402 `plan_not_active`.
    #[error("The operational balance is {balance_cents} cents, below zero: fund it (GET /v1/billing/funding) to create live invoices again.")]
    BalanceNegative { balance_cents: i64 },
    /// A live project's funding address cannot be derived yet: 422
    /// `chain_deposits_disabled` (as for new deposit addresses).
    #[error(
        "No master key is unlocked: funding addresses are issued once `appliance init` has run."
    )]
    NoMasterKey,
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(BillingError);

/// Most entries one `appliance billing credit|debit` may move (USD 10 million).
pub const MAX_ADJUSTMENT_CENTS: u64 = 1_000_000_000;
/// Longest operator note.
pub const MAX_NOTE_CHARS: usize = 500;
/// Most months one settlement pass charges (a store left off for longer settles the rest
/// on the next pass).
const MAX_MONTHS_PER_PASS: u32 = 120;

/// What a new billing entry says; [`post`] fills in the id, balance, sequence and time.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub kind: EntryKind,
    pub amount_cents: i64,
    pub ref_type: Option<&'static str>,
    pub ref_id: Option<String>,
    pub chain: Option<String>,
    pub asset: Option<String>,
    pub amount_atomic: Option<u128>,
    pub rate: Option<String>,
    pub rate_source: Option<String>,
    pub note: Option<String>,
    pub transfer: Option<FundingTransfer>,
}

impl NewEntry {
    /// An entry of `kind` for `amount_cents` about (`ref_type`, `ref_id`), nothing else set.
    pub fn new(
        kind: EntryKind,
        amount_cents: i64,
        ref_type: Option<&'static str>,
        ref_id: Option<String>,
    ) -> Self {
        NewEntry {
            kind,
            amount_cents,
            ref_type,
            ref_id,
            chain: None,
            asset: None,
            amount_atomic: None,
            rate: None,
            rate_source: None,
            note: None,
            transfer: None,
        }
    }
}

/// The project's billing state (a default one before its first billing write).
pub fn account(r: &impl ReadOps, project: ProjectId) -> Result<BillingAccount, Fault> {
    let project = project.uuid();
    Ok(r.get::<BillingAccount>(project)?.unwrap_or(BillingAccount {
        project_id: project,
        ..BillingAccount::default()
    }))
}

/// The project's clock (Unix microseconds; a test project's follows `POST /v1/test/clock`).
/// Billing entries are dated by it and the monthly minimum settles the months it passed.
pub fn clock(ctx: &WriteCtx<'_>, project: &Project) -> i64 {
    crate::services::clock::now(ctx, project).unwrap_or_else(|_| ctx.now_us())
}

/// UTC month of a timestamp, counted from January 1970 as 0.
pub fn month_of(us: i64) -> u32 {
    let d = DateTime::from_timestamp_micros(us).unwrap_or_default();
    let m = (d.year() - 1970) * 12 + d.month0() as i32;
    m.max(0) as u32
}

/// Start of UTC month `m` (see [`month_of`]), Unix microseconds.
pub fn month_start(m: u32) -> i64 {
    let y = 1970 + (m / 12) as i32;
    let d = NaiveDate::from_ymd_opt(y, m % 12 + 1, 1).unwrap_or_default();
    d.and_hms_opt(0, 0, 0)
        .unwrap_or_default()
        .and_utc()
        .timestamp_micros()
}

/// `YYYY-MM` of month `m`.
pub fn month_label(m: u32) -> String {
    format!("{:04}-{:02}", 1970 + m / 12, m % 12 + 1)
}

/// Onboarding fee a switch to `plan` costs: what exceeds the onboarding already paid.
pub fn onboarding_due(acct: &BillingAccount, plan: &PlanConfig) -> i64 {
    (plan.onboarding_fee_cents as i64 - acct.onboarding_paid_cents).max(0)
}

/// Balance a switch to `plan` needs: the onboarding due plus the plan's operational balance
/// (SPEC.md section 3, Billing plan).
pub fn balance_required(acct: &BillingAccount, plan: &PlanConfig) -> i64 {
    onboarding_due(acct, plan) + plan.operational_balance_cents as i64
}

/// The fee terms frozen on an invoice at its creation (SPEC.md section 2, Invoice:
/// `fee_bps`, `fee_fixed_cents`, `fee_cap_cents`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeeTerms {
    pub rate_bps: u32,
    pub fixed_cents: u64,
    pub cap_cents: u64,
}

impl FeeTerms {
    /// No fee (a project without an active plan).
    pub const NONE: FeeTerms = FeeTerms {
        rate_bps: 0,
        fixed_cents: 0,
        cap_cents: 0,
    };

    /// The payment fee of an invoice priced `price_cents` (DECISIONS.md section 13):
    /// `min(cap, price x rate_bps / 10,000 + fixed)`, the rate part rounded half up to the
    /// cent.
    pub fn payment_fee_cents(&self, price_cents: u64) -> u64 {
        let rate = (u128::from(price_cents) * u128::from(self.rate_bps) + 5_000) / 10_000;
        let fee = rate.saturating_add(u128::from(self.fixed_cents));
        let fee = u64::try_from(fee).unwrap_or(u64::MAX);
        fee.min(self.cap_cents)
    }
}

/// The fee terms a new invoice of the project freezes: its active plan's, or
/// [`FeeTerms::NONE`] without one.
pub fn fee_terms(r: &impl ReadOps, s: &Scope) -> Result<FeeTerms, Fault> {
    let acct = account(r, s.project_id())?;
    Ok(active_plan(&s.reg.billing, &acct)
        .map(|p| FeeTerms {
            rate_bps: p.rate_bps,
            fixed_cents: p.fixed_cents,
            cap_cents: p.cap_cents,
        })
        .unwrap_or(FeeTerms::NONE))
}

/// The active plan's configuration (`None` without one, or when the operator removed the
/// plan from the configuration: it then charges nothing).
pub fn active_plan<'a>(cfg: &'a BillingConfig, acct: &BillingAccount) -> Option<&'a PlanConfig> {
    acct.plan.as_deref().and_then(|k| cfg.plan(k))
}

/// The gate on live invoices (SPEC.md section 4, Invoices rule 4; DECISIONS.md section 13):
/// a live project needs an active plan and a balance not below zero (402
/// `plan_not_active`); test projects are never gated.
pub fn require_live(r: &impl ReadOps, s: &Scope) -> Result<(), BillingError> {
    if s.project.mode == Mode::Test {
        return Ok(());
    }
    let acct = account(r, s.project_id())?;
    if active_plan(&s.reg.billing, &acct).is_none() {
        return Err(BillingError::PlanNotActive);
    }
    if acct.balance_cents < 0 {
        return Err(BillingError::BalanceNegative {
            balance_cents: acct.balance_cents,
        });
    }
    Ok(())
}

fn once_key(project: Uuid, kind: EntryKind, reference: &str) -> Vec<u8> {
    index::unique(
        IndexTag::UniqueBillingRef,
        project,
        &[kind.as_str().as_bytes(), reference.as_bytes()],
    )
}

/// Writes one billing entry: the row, the project's running balance, and its billing line
/// on the log. A credit then activates a requested plan whose gap it closes (SPEC.md
/// section 3). `once`: the entry is written only if no entry of its kind was written for
/// that reference before (`None` answers a repeat, nothing written).
pub fn post(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    entry: NewEntry,
    once: Option<&str>,
) -> Result<Option<BillingEntry>, Fault> {
    let p = s.project.id;
    let okey = once.map(|r| once_key(p, entry.kind, r));
    if let Some(k) = &okey {
        if ctx.unique_get(k)?.is_some() {
            return Ok(None);
        }
    }
    let now = clock(ctx, &s.project);
    settle_minimums(ctx, s, now)?;
    let credit = entry.amount_cents > 0;
    let e = write_entry(ctx, s, entry, now)?;
    if let Some(k) = okey {
        ctx.unique_put(&k, e.id)?;
    }
    if credit {
        activate_requested(ctx, s)?;
    }
    Ok(Some(e))
}

/// The entry itself, with no settlement or activation around it.
fn write_entry(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    entry: NewEntry,
    now: i64,
) -> Result<BillingEntry, Fault> {
    let p = s.project.id;
    let mut acct = account(ctx, s.project_id())?;
    let balance = acct
        .balance_cents
        .checked_add(entry.amount_cents)
        .ok_or_else(|| Fault::invariant("billing balance overflows"))?;
    let id = appliance_storage::sources::new_id();
    let line = json!({
        "id": id,
        "kind": entry.kind.as_str(),
        "amount_cents": entry.amount_cents.to_string(),
        "balance_cents": balance.to_string(),
        "note": entry.note,
        "chain": entry.chain,
        "asset": entry.asset,
        "created": ts(now),
    });
    let ev = ctx.append_event(p, s.livemode(), BILLING_LINE, &id.to_string(), line)?;
    let e = BillingEntry {
        id,
        project_id: p,
        kind: entry.kind,
        amount_cents: entry.amount_cents,
        balance_after_cents: balance,
        ref_type: entry.ref_type.map(str::to_string),
        ref_id: entry.ref_id,
        chain: entry.chain,
        asset: entry.asset,
        amount_atomic: entry.amount_atomic,
        rate: entry.rate,
        rate_source: entry.rate_source,
        note: entry.note,
        transfer: entry.transfer,
        sequence: ev.sequence,
        created_at: now,
    };
    ctx.put(&e)?;
    acct.balance_cents = balance;
    acct.entries += 1;
    if e.kind == EntryKind::OnboardingFee {
        acct.onboarding_paid_cents += -e.amount_cents;
    }
    ctx.put(&acct)?;
    Ok(e)
}

/// Activates the requested plan when the balance now covers it.
fn activate_requested(ctx: &mut WriteCtx<'_>, s: &Scope) -> Result<(), Fault> {
    let acct = account(ctx, s.project_id())?;
    let Some(key) = acct.requested_plan.clone() else {
        return Ok(());
    };
    let Some(plan) = s.reg.billing.plan(&key).cloned() else {
        return Ok(());
    };
    if acct.balance_cents >= balance_required(&acct, &plan) {
        activate(ctx, s, &plan)?;
    }
    Ok(())
}

/// Switches the project to `plan` now: charges the onboarding due (an `onboarding_fee`
/// line, written even when nothing is due, so every activation has its line), clears the
/// request, and emits `billing.plan_activated`.
fn activate(ctx: &mut WriteCtx<'_>, s: &Scope, plan: &PlanConfig) -> Result<(), Fault> {
    let p = s.project.id;
    let now = clock(ctx, &s.project);
    let acct = account(ctx, s.project_id())?;
    let due = onboarding_due(&acct, plan);
    let mut e = NewEntry::new(
        EntryKind::OnboardingFee,
        -due,
        Some("plan"),
        Some(plan.key.clone()),
    );
    e.note = Some(match &acct.plan {
        Some(old) => format!("plan {} activated (from {old})", plan.key),
        None => format!("plan {} activated", plan.key),
    });
    write_entry(ctx, s, e, now)?;
    let mut acct = account(ctx, s.project_id())?;
    if acct.plan.is_none() {
        // The activation month is the first whose minimum is settled (pro rata).
        acct.minimum_settled_month = Some(month_of(now).saturating_sub(1));
    }
    acct.plan = Some(plan.key.clone());
    acct.plan_activated_at = Some(now);
    acct.requested_plan = None;
    acct.requested_at = None;
    ctx.put(&acct)?;
    let view = billing_json(ctx, s, &acct)?;
    emit(ctx, s, "billing.plan_activated", p, view)?;
    Ok(())
}

/// `POST /v1/billing/plan` (SPEC.md sections 3 and 4): activates `key` at once when the
/// balance covers its onboarding due plus its operational balance, otherwise records it as
/// requested (activated later by the credit that closes the gap). Asking for the active
/// plan again withdraws a pending request.
pub fn request_plan(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    key: &str,
) -> Result<BillingAccount, BillingError> {
    let plan = s
        .reg
        .billing
        .plan(key)
        .cloned()
        .ok_or_else(|| BillingError::UnknownPlan { plan: key.into() })?;
    if !plan.self_selectable {
        return Err(BillingError::NotSelfSelectable { plan: key.into() });
    }
    assign_plan(ctx, s, &plan)?;
    Ok(account(ctx, s.project_id())?)
}

/// Puts the project on `plan` (any plan: the operator may assign one that is not
/// self-selectable), under the activation rule of [`request_plan`].
pub fn assign_plan(ctx: &mut WriteCtx<'_>, s: &Scope, plan: &PlanConfig) -> Result<(), Fault> {
    let now = clock(ctx, &s.project);
    settle_minimums(ctx, s, now)?;
    let mut acct = account(ctx, s.project_id())?;
    if acct.plan.as_deref() == Some(plan.key.as_str()) {
        if acct.requested_plan.is_some() {
            acct.requested_plan = None;
            acct.requested_at = None;
            ctx.put(&acct)?;
        }
        return Ok(());
    }
    if acct.balance_cents >= balance_required(&acct, plan) {
        return activate(ctx, s, plan);
    }
    if acct.requested_plan.as_deref() != Some(plan.key.as_str()) {
        acct.requested_plan = Some(plan.key.clone());
        acct.requested_at = Some(now);
        ctx.put(&acct)?;
    }
    Ok(())
}

/// `POST /v1/billing/onboarding/skip`: hides the onboarding panel (display only). Refused
/// with `plan_not_active` until a plan is active; the first timestamp stays.
pub fn skip_onboarding(ctx: &mut WriteCtx<'_>, s: &Scope) -> Result<BillingAccount, BillingError> {
    let mut acct = account(ctx, s.project_id())?;
    if active_plan(&s.reg.billing, &acct).is_none() {
        return Err(BillingError::PlanNotActive);
    }
    if acct.onboarding_skipped_at.is_none() {
        acct.onboarding_skipped_at = Some(clock(ctx, &s.project));
        ctx.put(&acct)?;
    }
    Ok(acct)
}

/// `GET /v1/billing` ([`billing_json`] of the project's account), read on the blocking
/// pool.
pub async fn read_billing(store: &appliance_storage::Store, s: Scope) -> Result<Value, Fault> {
    let v = store
        .read(move |r| {
            let acct = account(r, s.project_id()).map_err(store_of)?;
            billing_json(r, &s, &acct).map_err(store_of)
        })
        .await?;
    Ok(v)
}

/// The project's funding addresses when one exists on every chain that takes funding, or
/// `None` when one is still to be made (in a write: `ensure_funding_addresses`).
pub async fn complete_funding_addresses(
    store: &appliance_storage::Store,
    s: Scope,
) -> Result<Option<Vec<FundingAddress>>, Fault> {
    let list = store
        .read(move |r| {
            if !missing_funding_chains(r, &s).map_err(store_of)?.is_empty() {
                return Ok(None);
            }
            funding_addresses(r, &s).map(Some).map_err(store_of)
        })
        .await?;
    Ok(list)
}

/// A read's fault as the store error it wraps: a read closure returns `StoreError`.
fn store_of(f: Fault) -> appliance_storage::StoreError {
    match f {
        Fault::Store(e) => e,
        other => appliance_storage::StoreError::Corrupt(other.to_string()),
    }
}

mod fees;
pub use fees::*;

mod funding;
pub use funding::*;

/// An operator's correction (`appliance billing credit|debit`): an `adjustment` entry of
/// `cents` (signed). A credit may activate a requested plan.
pub fn adjust(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    cents: i64,
    note: String,
) -> Result<BillingEntry, Fault> {
    let mut e = NewEntry::new(EntryKind::Adjustment, cents, Some("operator"), None);
    e.note = Some(note);
    post(ctx, s, e, None)?.ok_or_else(|| Fault::invariant("adjustment not written"))
}

/// Charges the monthly minimum of every UTC month the project's clock has left behind and
/// that is not settled yet (DECISIONS.md section 13): for each, the plan's
/// `min_monthly_cents` (pro rata in the month the plan first activated) less the usage fees
/// charged in that month, when positive. Each month is settled once: the last settled month
/// is kept in the account row written in the same transaction. Returns the entries written.
pub fn settle_minimums(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    now: i64,
) -> Result<Vec<BillingEntry>, Fault> {
    let p = s.project.id;
    let current = month_of(now);
    let mut out = Vec::new();
    let mut acct = account(ctx, s.project_id())?;
    let Some(mut settled) = acct.minimum_settled_month else {
        return Ok(out);
    };
    let mut passes = 0;
    while settled + 1 < current && passes < MAX_MONTHS_PER_PASS {
        passes += 1;
        let m = settled + 1;
        let fees = usage_fees_in(ctx, p, m)?;
        let due = active_plan(&s.reg.billing, &acct)
            .map(|plan| minimum_due(plan, acct.plan_activated_at, m))
            .unwrap_or(0);
        let short = due - fees;
        acct.minimum_settled_month = Some(m);
        ctx.put(&acct)?;
        if short > 0 {
            let mut e = NewEntry::new(
                EntryKind::MonthlyMinimum,
                -short,
                Some("month"),
                Some(month_label(m)),
            );
            e.note = Some(format!(
                "minimum {due} cents for {}, fees charged {fees} cents",
                month_label(m)
            ));
            // Dated at the end of the month it settles.
            let at = month_start(m + 1).min(now);
            out.push(write_entry(ctx, s, e, at)?);
        }
        settled = m;
        acct = account(ctx, s.project_id())?;
    }
    Ok(out)
}

/// The minimum owed for month `m`: the whole of it, or the part after `activated_at` in the
/// month the plan activated.
fn minimum_due(plan: &PlanConfig, activated_at: Option<i64>, m: u32) -> i64 {
    let min = plan.min_monthly_cents as i64;
    let (start, end) = (month_start(m), month_start(m + 1));
    match activated_at {
        Some(a) if a > start && a < end => {
            let part = i128::from(min) * i128::from(end - a) / i128::from(end - start);
            part as i64
        }
        Some(a) if a >= end => 0,
        _ => min,
    }
}

/// Usage fees (positive cents) charged in month `m`: the project's usage-fee entries dated
/// in it.
fn usage_fees_in(r: &impl ReadOps, project: Uuid, m: u32) -> Result<i64, Fault> {
    let (start, end) = (month_start(m), month_start(m + 1));
    let mut total = 0i64;
    for kind in EntryKind::ALL.iter().filter(|k| k.is_usage_fee()) {
        let prefix = index::prefix(
            IndexTag::BillingEntriesByKind,
            project,
            &[kind.as_str().as_bytes()],
        );
        let mut before = None;
        loop {
            let page = r.list::<BillingEntry>(&prefix, before, 500, |_| true)?;
            let mut older = false;
            for e in &page.items {
                if e.created_at >= start && e.created_at < end {
                    total += -e.amount_cents;
                }
                if e.created_at < start {
                    older = true;
                }
            }
            if older || !page.has_more {
                break;
            }
            before = page.items.last().map(|e| e.id);
        }
    }
    Ok(total)
}

/// Onboarding facts `GET /v1/billing` shows besides the account.
fn onboarding_facts(r: &impl ReadOps, project: Uuid) -> Result<(bool, bool, bool), Fault> {
    let any = |tag: IndexTag, values: &[&[u8]]| -> Result<bool, Fault> {
        let first = r.scan_ids(&index::prefix(tag, project, values), None, 1, |_| Ok(true))?;
        Ok(!first.items.is_empty())
    };
    let funded = any(
        IndexTag::BillingEntriesByKind,
        &[EntryKind::Funding.as_str().as_bytes()],
    )?;
    let webhook = any(IndexTag::WebhookEndpoints, &[])?;
    let first_invoice = any(IndexTag::Invoices, &[])?;
    Ok((funded, webhook, first_invoice))
}

/// The Billing object (SPEC.md section 2, Billing) of the scope's project.
pub fn billing_view<'a>(
    r: &impl ReadOps,
    s: &'a Scope,
    acct: &'a BillingAccount,
) -> Result<BillingView<'a>, Fault> {
    let cfg = &s.reg.billing;
    let (funded, webhook, first_invoice) = onboarding_facts(r, s.project.id)?;
    let plan = active_plan(cfg, acct);
    let live_reason = if s.project.mode == Mode::Test {
        None
    } else if plan.is_none() {
        Some("plan_not_active")
    } else if acct.balance_cents < 0 {
        Some("balance_negative")
    } else {
        None
    };
    let skipped = acct.onboarding_skipped_at.is_some();
    let steps = [
        ("plan", plan.is_some()),
        ("funding", funded),
        ("webhook", webhook),
        ("first_invoice", first_invoice),
    ];
    let bypassed: Vec<&'static str> = steps
        .iter()
        .filter(|(_, done)| skipped && !done)
        .map(|(k, _)| *k)
        .collect();
    let remaining = steps.iter().filter(|(_, done)| !done).count() - bypassed.len();
    let steps = steps
        .iter()
        .map(|&(step, done)| {
            let by = bypassed.contains(&step);
            OnboardingStepView {
                step,
                done,
                bypassed: by,
                complete: done || by,
            }
        })
        .collect();
    let requested = acct.requested_plan.as_deref();
    let activation = requested.and_then(|k| cfg.plan(k)).map(|rp| {
        let required = balance_required(acct, rp);
        ActivationView {
            plan: &rp.key,
            plan_name: &rp.name,
            onboarding_due_cents: onboarding_due(acct, rp).to_string(),
            balance_required_cents: required.to_string(),
            shortfall_cents: (required - acct.balance_cents).max(0).to_string(),
        }
    });
    Ok(BillingView {
        object: "billing",
        plan: plan.map(|p| p.key.as_str()),
        plan_name: plan.map(|p| p.name.as_str()),
        plan_status: if plan.is_some() { "active" } else { "pending" },
        plan_activated_at: OptTs(acct.plan_activated_at.filter(|_| plan.is_some())),
        requested_plan: requested,
        requested_plan_name: requested.and_then(|k| cfg.plan(k)).map(|p| p.name.as_str()),
        balance_cents: acct.balance_cents.to_string(),
        onboarding_paid_cents: acct.onboarding_paid_cents.to_string(),
        live: LiveStatusView {
            ok: live_reason.is_none(),
            reason: live_reason,
        },
        onboarding: OnboardingView {
            steps,
            bypassed,
            skipped_at: OptTs(acct.onboarding_skipped_at),
            can_skip: plan.is_some() && !skipped,
            remaining,
        },
        activation,
        fees: plan.map(PlanFeesView::from),
        plans: cfg.plans.iter().map(PlanView::from).collect(),
    })
}

/// [`billing_view`] as a JSON value.
pub fn billing_json(r: &impl ReadOps, s: &Scope, acct: &BillingAccount) -> Result<Value, Fault> {
    Ok(crate::views::to_value(&billing_view(r, s, acct)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payment_fee_is_rate_plus_fixed_under_the_cap() {
        let t = FeeTerms {
            rate_bps: 50,
            fixed_cents: 10,
            cap_cents: 500,
        };
        // 0.5% of 100.00 is 50 cents, plus 10.
        assert_eq!(t.payment_fee_cents(10_000), 60);
        // 0.5% of 1.01 is 0.505 -> 1 cent (half up), plus 10.
        assert_eq!(t.payment_fee_cents(101), 11);
        // 0.5% of 10,000.00 is 50.00: capped at 5.00.
        assert_eq!(t.payment_fee_cents(1_000_000), 500);
        let uncapped = FeeTerms {
            cap_cents: u64::MAX,
            ..t
        };
        assert_eq!(uncapped.payment_fee_cents(1_000_000), 5_010);
        assert_eq!(FeeTerms::NONE.payment_fee_cents(1_000_000), 0);
        // The largest price never overflows.
        let most = (u128::from(u64::MAX) * 50 + 5_000) / 10_000 + 10;
        assert_eq!(u128::from(uncapped.payment_fee_cents(u64::MAX)), most);
    }

    #[test]
    fn months_count_from_1970_and_round_trip() {
        assert_eq!(month_of(0), 0);
        let m = month_of(
            DateTime::parse_from_rfc3339("2026-11-22T18:00:00Z")
                .unwrap()
                .timestamp_micros(),
        );
        assert_eq!(month_label(m), "2026-11");
        assert_eq!(month_of(month_start(m)), m);
        assert_eq!(month_of(month_start(m) - 1), m - 1);
        assert_eq!(month_label(m + 2), "2027-01");
    }

    #[test]
    fn the_first_month_minimum_is_pro_rata() {
        let plan = crate::config::BillingConfig::default().plans[0].clone();
        let m = 682; // 2026-11: 30 days
        let start = month_start(m);
        let day = 86_400_000_000i64;
        assert_eq!(minimum_due(&plan, None, m), 2_000);
        assert_eq!(minimum_due(&plan, Some(start - day), m), 2_000);
        assert_eq!(minimum_due(&plan, Some(start), m), 2_000);
        // Activated with 15 of 30 days left: half.
        assert_eq!(minimum_due(&plan, Some(start + 15 * day), m), 1_000);
        assert_eq!(minimum_due(&plan, Some(month_start(m + 1)), m), 0);
    }
}
