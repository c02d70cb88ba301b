//! `[billing]`: the operator's plans (DECISIONS.md section 13).

use super::*;

/// `[billing]` (DECISIONS.md section 13): the operator's plans. A file that lists
/// `[[billing.plans]]` replaces the built-in list as a whole.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BillingConfig {
    /// Every plan on offer, in the order `GET /v1/billing` lists them.
    pub plans: Vec<PlanConfig>,
}

impl Default for BillingConfig {
    /// The plans `config.toml.example` ships: `drift` (self-selectable) and `enterprise`
    /// (set by the operator's sales process, not self-selectable).
    fn default() -> Self {
        BillingConfig {
            plans: vec![
                PlanConfig {
                    key: "drift".into(),
                    name: "Drift".into(),
                    onboarding_fee_cents: 5_000,
                    min_monthly_cents: 2_000,
                    operational_balance_cents: 2_000,
                    rate_bps: 50,
                    fixed_cents: 10,
                    cap_cents: 500,
                    address_fee_cents: 1,
                    payout_fee_cents: 25,
                    swap_rate_bps: 30,
                    negotiated: false,
                    self_selectable: true,
                },
                PlanConfig {
                    key: "enterprise".into(),
                    name: "Enterprise".into(),
                    onboarding_fee_cents: 100_000,
                    min_monthly_cents: 50_000,
                    operational_balance_cents: 50_000,
                    rate_bps: 25,
                    fixed_cents: 0,
                    cap_cents: 200,
                    address_fee_cents: 0,
                    payout_fee_cents: 10,
                    swap_rate_bps: 15,
                    negotiated: true,
                    self_selectable: false,
                },
            ],
        }
    }
}

/// Most plans `[billing]` may list.
pub const MAX_PLANS: usize = 32;
/// Largest fee or balance of a plan, in cents (USD 10 million): keeps every sum of them far
/// inside `i64`.
pub const MAX_PLAN_CENTS: u64 = 1_000_000_000;

/// One `[[billing.plans]]` entry (DECISIONS.md section 13). Every `*_cents` is USD cents.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// Stable identifier (`drift`): 1-32 of `a-z`, `0-9`, `_`, `-`.
    pub key: String,
    /// Display name (1-64 characters).
    pub name: String,
    /// One-off fee charged at activation; an upgrade pays only what exceeds the onboarding
    /// already paid.
    #[serde(default)]
    pub onboarding_fee_cents: u64,
    /// Least the fees of a UTC month add up to; the shortfall is charged at the start of the
    /// next month (`monthly_minimum`).
    #[serde(default)]
    pub min_monthly_cents: u64,
    /// Balance that must remain after the onboarding fee for the plan to activate.
    #[serde(default)]
    pub operational_balance_cents: u64,
    /// Payment fee rate, basis points of the invoice's price (0-10,000).
    #[serde(default)]
    pub rate_bps: u32,
    /// Payment fee fixed part per invoice.
    #[serde(default)]
    pub fixed_cents: u64,
    /// Most a payment fee can be (required: every plan caps its payment fee).
    pub cap_cents: u64,
    /// Fee per new customer deposit address.
    #[serde(default)]
    pub address_fee_cents: u64,
    /// Fee per confirmed payout.
    #[serde(default)]
    pub payout_fee_cents: u64,
    /// Conversion fee rate, basis points of a settled conversion's USD value (0-10,000).
    #[serde(default)]
    pub swap_rate_bps: u32,
    /// Terms agreed with the operator rather than list prices (shown to the merchant).
    #[serde(default)]
    pub negotiated: bool,
    /// Whether a merchant may pick the plan with `POST /v1/billing/plan` (otherwise 403
    /// `plan_not_self_selectable`; the operator assigns it).
    #[serde(default = "yes")]
    pub self_selectable: bool,
}

fn yes() -> bool {
    true
}

impl BillingConfig {
    /// The plan named `key`.
    pub fn plan(&self, key: &str) -> Option<&PlanConfig> {
        self.plans.iter().find(|p| p.key == key)
    }

    /// Refuses plans the billing rules cannot work with: duplicate or malformed keys,
    /// rates above 100%, amounts above [`MAX_PLAN_CENTS`].
    pub fn validate(&self) -> Result<(), String> {
        if self.plans.len() > MAX_PLANS {
            return Err(format!("billing.plans lists more than {MAX_PLANS} plans"));
        }
        for (i, p) in self.plans.iter().enumerate() {
            let ok_key = (1..=32).contains(&p.key.len())
                && p.key.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                });
            if !ok_key {
                return Err(format!(
                    "billing.plans: key {:?} must be 1-32 of a-z, 0-9, _ and -",
                    p.key
                ));
            }
            if self.plans[..i].iter().any(|q| q.key == p.key) {
                return Err(format!("billing.plans lists the key {:?} twice", p.key));
            }
            if p.name.trim().is_empty() || p.name.chars().count() > 64 {
                return Err(format!(
                    "billing.plans.{}: name must be 1-64 characters",
                    p.key
                ));
            }
            if p.rate_bps > 10_000 || p.swap_rate_bps > 10_000 {
                return Err(format!(
                    "billing.plans.{}: rate_bps and swap_rate_bps must be 0-10000",
                    p.key
                ));
            }
            let amounts = [
                p.onboarding_fee_cents,
                p.min_monthly_cents,
                p.operational_balance_cents,
                p.fixed_cents,
                p.cap_cents,
                p.address_fee_cents,
                p.payout_fee_cents,
            ];
            if amounts.iter().any(|a| *a > MAX_PLAN_CENTS) {
                return Err(format!(
                    "billing.plans.{}: amounts must be at most {MAX_PLAN_CENTS} cents",
                    p.key
                ));
            }
        }
        Ok(())
    }
}
