//! The Billing object (SPEC.md section 2, Billing; DECISIONS.md section 13). Its fields are
//! declared in the order the OpenAPI document lists them; it reaches the wire through
//! [`Sorted`](super::Sorted) (or a `Value`), so the keys are in byte order like every other
//! answer. Amounts are USD cents as integer strings.

use serde::Serialize;
use utoipa::ToSchema;

use super::OptTs;
use crate::config::PlanConfig;

/// One onboarding step.
#[derive(Serialize, ToSchema)]
#[schema(as = OnboardingStep)]
pub struct OnboardingStepView {
    /// `plan`, `funding`, `webhook` or `first_invoice` (new values may appear).
    pub step: &'static str,
    pub done: bool,
    /// Hidden by the onboarding skip while not done.
    pub bypassed: bool,
    /// `done` or `bypassed`.
    pub complete: bool,
}

/// The onboarding panel.
#[derive(Serialize, ToSchema)]
#[schema(as = Onboarding)]
pub struct OnboardingView {
    pub steps: Vec<OnboardingStepView>,
    /// Steps bypassed by the skip.
    pub bypassed: Vec<&'static str>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub skipped_at: OptTs,
    pub can_skip: bool,
    /// Steps neither done nor bypassed.
    #[schema(value_type = u32)]
    pub remaining: usize,
}

/// Whether live invoices may be created.
#[derive(Serialize, ToSchema)]
#[schema(as = LiveStatus)]
pub struct LiveStatusView {
    pub ok: bool,
    /// `plan_not_active` or `balance_negative` when not ok (new values may appear).
    pub reason: Option<&'static str>,
}

/// What the requested plan still needs.
#[derive(Serialize, ToSchema)]
#[schema(as = Activation)]
pub struct ActivationView<'a> {
    pub plan: &'a str,
    pub plan_name: &'a str,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onboarding_due_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub balance_required_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub shortfall_cents: String,
}

/// The active plan's fees.
#[derive(Serialize, ToSchema)]
#[schema(as = PlanFees)]
pub struct PlanFeesView {
    pub rate_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fixed_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub cap_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub address_fee_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub payout_fee_cents: String,
    pub swap_rate_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub min_monthly_cents: String,
}

impl From<&PlanConfig> for PlanFeesView {
    fn from(p: &PlanConfig) -> Self {
        PlanFeesView {
            rate_bps: p.rate_bps,
            fixed_cents: p.fixed_cents.to_string(),
            cap_cents: p.cap_cents.to_string(),
            address_fee_cents: p.address_fee_cents.to_string(),
            payout_fee_cents: p.payout_fee_cents.to_string(),
            swap_rate_bps: p.swap_rate_bps,
            min_monthly_cents: p.min_monthly_cents.to_string(),
        }
    }
}

/// A plan on offer.
#[derive(Serialize, ToSchema)]
#[schema(as = Plan)]
pub struct PlanView<'a> {
    pub key: &'a str,
    pub name: &'a str,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onboarding_fee_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub min_monthly_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub operational_balance_cents: String,
    pub rate_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fixed_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub cap_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub address_fee_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub payout_fee_cents: String,
    pub swap_rate_bps: u32,
    pub negotiated: bool,
    pub self_selectable: bool,
}

// A plan's fees are those the Billing object's `fees` shows ([`PlanFeesView`]).
impl<'a> From<&'a PlanConfig> for PlanView<'a> {
    fn from(p: &'a PlanConfig) -> Self {
        let fees = PlanFeesView::from(p);
        PlanView {
            key: &p.key,
            name: &p.name,
            onboarding_fee_cents: p.onboarding_fee_cents.to_string(),
            min_monthly_cents: fees.min_monthly_cents,
            operational_balance_cents: p.operational_balance_cents.to_string(),
            rate_bps: fees.rate_bps,
            fixed_cents: fees.fixed_cents,
            cap_cents: fees.cap_cents,
            address_fee_cents: fees.address_fee_cents,
            payout_fee_cents: fees.payout_fee_cents,
            swap_rate_bps: fees.swap_rate_bps,
            negotiated: p.negotiated,
            self_selectable: p.self_selectable,
        }
    }
}

/// A project's billing (`object: billing`).
#[derive(Serialize, ToSchema)]
#[schema(as = Billing)]
pub struct BillingView<'a> {
    #[schema(pattern = "^billing$")]
    pub object: &'static str,
    /// The active plan's key.
    pub plan: Option<&'a str>,
    pub plan_name: Option<&'a str>,
    /// `pending` (no plan active yet) or `active` (new values may appear).
    pub plan_status: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub plan_activated_at: OptTs,
    pub requested_plan: Option<&'a str>,
    pub requested_plan_name: Option<&'a str>,
    /// The operational balance, USD cents (negative when fees exceeded it).
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub balance_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onboarding_paid_cents: String,
    pub live: LiveStatusView,
    pub onboarding: OnboardingView,
    /// Null when no plan is requested.
    pub activation: Option<ActivationView<'a>>,
    /// Null without an active plan.
    pub fees: Option<PlanFeesView>,
    pub plans: Vec<PlanView<'a>>,
}
