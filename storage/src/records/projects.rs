//! Projects (tenants): their mode and the operator's per-chain and per-asset switches
//! (DECISIONS.md section 8).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::IndexTag;

str_enum! {
    /// Project (tenant) mode: the key's environment follows it (SPEC.md section 4, API keys).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Mode {
        Live => "live",
        Test => "test",
    }
}

/// Per-chain switches the operator sets on a project (`appliance project set`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainOverride {
    pub chain: String,
    /// `live`, `paused` or `coming_soon`; `None` keeps the registry/mode default.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub status_note: Option<String>,
    #[serde(default)]
    pub deposits_enabled: Option<bool>,
    #[serde(default)]
    pub payouts_enabled: Option<bool>,
    /// Keypair chains are listed only when switched on (SPEC.md section 2, Chain).
    #[serde(default)]
    pub listed: Option<bool>,
}

/// Per-asset switches on a project.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetOverride {
    pub chain: String,
    pub symbol: String,
    #[serde(default)]
    pub deposits_enabled: Option<bool>,
    #[serde(default)]
    pub payouts_enabled: Option<bool>,
    /// An archived coin (compromised contract) is never credited (SPEC.md section 3, Deposit).
    #[serde(default)]
    pub archived: Option<bool>,
}

/// Project settings; limits default per DECISIONS.md section 8.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectSettings {
    pub signing_enabled: bool,
    /// Payouts valued above this many US cents wait for approval; `None` auto-approves all
    /// (DECISIONS.md section 5).
    #[serde(default)]
    pub auto_approve_threshold_cents: Option<u64>,
    pub requests_per_minute: u32,
    pub addresses_per_day: u32,
    pub max_pending_payouts: u32,
    #[serde(default)]
    pub chains: Vec<ChainOverride>,
    #[serde(default)]
    pub assets: Vec<AssetOverride>,
    /// The merchant's name on the hosted checkout page (`merchant.name` of the checkout
    /// document, DECISIONS.md section 12); `None` shows no name.
    #[serde(default)]
    pub merchant_name: Option<String>,
    /// An https URL of the merchant's logo (`merchant.logo_url`, DECISIONS.md section 12).
    #[serde(default)]
    pub merchant_logo_url: Option<String>,
    /// The overpayment policy of an invoice created without one (DECISIONS.md section 5).
    #[serde(default)]
    pub overpayment_policy: super::OverpaymentPolicy,
}

impl Default for ProjectSettings {
    fn default() -> Self {
        ProjectSettings {
            signing_enabled: true,
            auto_approve_threshold_cents: None,
            requests_per_minute: 1200,
            addresses_per_day: 10_000,
            max_pending_payouts: 1000,
            chains: Vec::new(),
            assets: Vec::new(),
            merchant_name: None,
            merchant_logo_url: None,
            overpayment_policy: Default::default(),
        }
    }
}

/// A project (tenant): its name, mode and settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    pub id: Uuid,
    pub name: String,
    pub mode: Mode,
    pub settings: ProjectSettings,
    pub created_at: i64,
}

// A project is its own project; every project is in the one global list.
row!(Project, PROJECTS, key = id, project = id, |_, k| {
    k.global(IndexTag::Projects);
});
