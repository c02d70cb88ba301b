//! The shapes of sweeps, API keys and billing entries (SPEC.md section 2). Each view's
//! fields are in byte order of their names, as `serde_json` sorts a `Value`'s keys.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use appliance_storage::records::{ApiKey, BillingEntry, Sweep};

use super::{to_value, Atomic, Decimal, OptTs, Ts};
use crate::registry::Registry;

/// An asset embedded in a sweep.
#[derive(Serialize, ToSchema)]
#[schema(as = SweepAsset)]
pub struct SweepAssetView<'a> {
    contract: &'a str,
    decimals: u8,
    symbol: &'a str,
}

/// A sweep (`object: sweep`): coins moved from a deposit address to the master wallet.
#[derive(Serialize, ToSchema)]
#[schema(as = Sweep)]
pub struct SweepView<'a> {
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    amount: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    amount_decimal: Decimal,
    asset: SweepAssetView<'a>,
    chain: &'a str,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    id: Uuid,
    #[schema(pattern = "^sweep$")]
    object: &'static str,
    /// `below_threshold`, `nothing_to_sweep`, `gas_too_expensive` for a `skipped` sweep.
    skip_reason: &'a Option<String>,
    /// `open`, `submitted`, `confirmed`, `failed` or `skipped` (new values may appear).
    status: &'static str,
    tx_hash: &'a Option<String>,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Ts,
    wallet_id: Uuid,
}

/// `object: sweep` (SPEC.md section 2, Sweep) as a JSON value. An asset the registry does
/// not know is shown with 0 decimals and no contract.
pub fn sweep(reg: &Registry, s: &Sweep) -> Value {
    let asset = reg.asset(&s.chain, &s.asset);
    let decimals = asset.map(|a| a.decimals).unwrap_or(0);
    to_value(&SweepView {
        amount: Atomic(s.amount),
        amount_decimal: Decimal(s.amount, decimals),
        asset: SweepAssetView {
            contract: asset.map(|a| a.contract.as_str()).unwrap_or(""),
            decimals,
            symbol: &s.asset,
        },
        chain: &s.chain,
        created_at: Ts(s.created_at),
        id: s.id,
        object: "sweep",
        skip_reason: &s.skip_reason,
        status: s.status.as_str(),
        tx_hash: &s.tx_hash,
        updated_at: Ts(s.updated_at),
        wallet_id: s.wallet_id,
    })
}

/// An API key (`object: api_key`). The creation and roll answers add `token`.
#[derive(Serialize, ToSchema)]
#[schema(as = ApiKey)]
pub struct ApiKeyView<'a> {
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    /// `merchant`, or `service_staff`, or the operator's label.
    created_by: &'a str,
    /// `live` or `test`.
    env: &'a str,
    #[schema(value_type = Option<String>, format = DateTime)]
    expires_at: OptTs,
    id: Uuid,
    ip_allowlist: &'a [String],
    /// Display handle: the key's prefix plus the first 8 hex characters of its random part.
    key_id: &'a str,
    /// `checkout`, `payout` or `wallet`.
    kind: &'static str,
    last4: &'a str,
    #[schema(value_type = Option<String>, format = DateTime)]
    last_used_at: OptTs,
    name: &'a str,
    #[schema(pattern = "^api_key$")]
    object: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    revoked_at: OptTs,
    rotated_from: Option<Uuid>,
    scopes: &'a [String],
    signing_enabled: bool,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    use_count: Atomic,
}

/// An API key's view; `pending` adds uses counted in memory but not yet flushed.
pub fn api_key_view<'a>(
    k: &'a ApiKey,
    env: &'a str,
    pending: Option<(i64, u64)>,
) -> ApiKeyView<'a> {
    let (last_used, count) = match pending {
        Some((at, n)) => (Some(at), k.use_count + n),
        None => (k.last_used_at, k.use_count),
    };
    ApiKeyView {
        created_at: Ts(k.created_at),
        created_by: &k.created_by,
        env,
        expires_at: OptTs(k.expires_at),
        id: k.id,
        ip_allowlist: &k.ip_allowlist,
        key_id: &k.key_id,
        kind: k.kind.as_str(),
        last4: &k.last4,
        last_used_at: OptTs(last_used),
        name: &k.name,
        object: "api_key",
        revoked_at: OptTs(k.revoked_at),
        rotated_from: k.rotated_from,
        scopes: &k.scopes,
        signing_enabled: k.signing_enabled,
        use_count: Atomic(u128::from(count)),
    }
}

/// [`api_key_view`] as a JSON value.
pub fn api_key(k: &ApiKey, env: &str, pending: Option<(i64, u64)>) -> Value {
    to_value(&api_key_view(k, env, pending))
}

/// An API key with its token, shown once (creation and roll answers). An idempotent replay
/// answers `token: null`.
#[derive(Serialize, ToSchema)]
#[schema(as = ApiKeyWithToken)]
pub struct ApiKeyWithToken<'a> {
    #[serde(flatten)]
    pub key: ApiKeyView<'a>,
    /// The full key: prefix + 64 lowercase hex. Null in an idempotent replay.
    #[schema(value_type = Option<String>, pattern = "^[0-9a-z]+$")]
    pub token: &'a str,
    /// Roll answers only: when the rolled key stops working.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub old_key_expires_at: Option<OptTs>,
}

/// A page of API keys plus the per-kind limit and default scopes.
#[derive(Serialize, ToSchema)]
#[schema(as = ApiKeyList)]
pub struct ApiKeyList<'a> {
    #[schema(pattern = "^list$")]
    pub object: &'static str,
    pub data: Vec<ApiKeyView<'a>>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    /// Enabled keys allowed per kind.
    #[schema(value_type = u32)]
    pub limit_per_kind: usize,
    /// Scopes a new key of each kind gets when `scopes` is omitted.
    #[schema(value_type = Object)]
    pub default_scopes: std::collections::BTreeMap<&'static str, Vec<String>>,
}

/// The on-chain transfer behind a funding entry.
#[derive(Serialize, ToSchema)]
#[schema(as = BillingTransfer)]
pub struct BillingTransferView<'a> {
    amount_decimal: &'a str,
    #[schema(value_type = Option<String>, format = DateTime)]
    block_time: OptTs,
    confirmations: u64,
    explorer_url: Option<String>,
    from_address: &'a Option<String>,
    required_confirmations: u64,
    /// `confirmed` (a credit), `failed` (recorded, refused at confirmation) or `orphaned`
    /// (on the entry reversing a credit); new values may appear.
    status: &'a str,
    tx_hash: &'a str,
}

/// A line of the operational balance's journal (`object: billing_entry`).
#[derive(Serialize, ToSchema)]
#[schema(as = BillingEntry)]
pub struct BillingEntryView<'a> {
    #[schema(value_type = Option<String>, pattern = "^(0|[1-9][0-9]*)$")]
    amount_atomic: Option<Atomic>,
    /// Signed USD cents: credits positive, charges negative.
    #[schema(value_type = String, pattern = "^-?(0|[1-9][0-9]*)$")]
    amount_cents: String,
    asset: &'a Option<String>,
    /// The balance right after this entry.
    #[schema(value_type = String, pattern = "^-?(0|[1-9][0-9]*)$")]
    balance_after_cents: String,
    chain: &'a Option<String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    id: Uuid,
    /// `funding`, `onboarding_fee`, `payment_fee`, `address_fee`, `payout_fee`,
    /// `withdrawal_fee`, `monthly_minimum`, `refund`, `adjustment`, `conversion_fee` (new values
    /// may appear).
    kind: &'static str,
    note: &'a Option<String>,
    #[schema(pattern = "^billing_entry$")]
    object: &'static str,
    /// USD per whole coin.
    rate: &'a Option<String>,
    /// `par`, `test`, `kraken`, `chainlink`.
    rate_source: &'a Option<String>,
    ref_id: &'a Option<String>,
    /// `invoice`, `wallet`, `payout`, `conversion`, `plan`, `month`, `deposit`, `operator`.
    ref_type: &'a Option<String>,
    transfer: Option<BillingTransferView<'a>>,
}

/// A billing entry (SPEC.md section 2, Billing entry) as a JSON value. `amount_cents` is
/// signed (credits positive, charges negative); `balance_after_cents` is the balance right
/// after it.
pub fn billing_entry(reg: &Registry, e: &BillingEntry) -> Value {
    let chain = e.chain.as_deref().and_then(|c| reg.chain(c));
    let transfer = e.transfer.as_ref().map(|t| BillingTransferView {
        amount_decimal: &t.amount_decimal,
        block_time: OptTs(t.block_time),
        confirmations: t.confirmations,
        explorer_url: chain.map(|c| c.info.tx_url(&t.tx_hash)),
        from_address: &t.from_address,
        required_confirmations: t.required_confirmations,
        // Entries written before the status was kept are all credits of confirmed
        // transfers.
        status: t.status.as_deref().unwrap_or("confirmed"),
        tx_hash: &t.tx_hash,
    });
    to_value(&BillingEntryView {
        amount_atomic: e.amount_atomic.map(Atomic),
        amount_cents: e.amount_cents.to_string(),
        asset: &e.asset,
        balance_after_cents: e.balance_after_cents.to_string(),
        chain: &e.chain,
        created_at: Ts(e.created_at),
        id: e.id,
        kind: e.kind.as_str(),
        note: &e.note,
        object: "billing_entry",
        rate: &e.rate,
        rate_source: &e.rate_source,
        ref_id: &e.ref_id,
        ref_type: &e.ref_type,
        transfer,
    })
}
