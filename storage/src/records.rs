//! Stored records. These are the domain rows; the HTTP shapes are built from them in the
//! binary. Times are Unix microseconds (UTC); amounts are atomic units as `u128`.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::{self, IndexTag};
use crate::schema;

/// A stored row with its table and the secondary index keys it must appear under.
pub trait Row: Serialize + serde::de::DeserializeOwned {
    const TABLE: TableDefinition<'static, u128, &'static [u8]>;
    fn id(&self) -> Uuid;
    fn project_id(&self) -> Uuid;
    /// Every index key for this row's current state (see [`crate::index`]).
    fn index_keys(&self) -> Vec<Vec<u8>>;
}

/// Project (tenant) mode: the key's environment follows it (SPEC.md section 4, API keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Live,
    Test,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Test => "test",
        }
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
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    pub id: Uuid,
    pub name: String,
    pub mode: Mode,
    pub settings: ProjectSettings,
    pub created_at: i64,
}

impl Row for Project {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::PROJECTS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        vec![index::key(IndexTag::Projects, Uuid::nil(), &[], self.id)]
    }
}

/// Key kinds (SPEC.md section 5 rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    Checkout,
    Payout,
    Wallet,
}

impl KeyKind {
    pub const ALL: [KeyKind; 3] = [KeyKind::Checkout, KeyKind::Payout, KeyKind::Wallet];
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Checkout => "checkout",
            KeyKind::Payout => "payout",
            KeyKind::Wallet => "wallet",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "checkout" => Some(KeyKind::Checkout),
            "payout" => Some(KeyKind::Payout),
            "wallet" => Some(KeyKind::Wallet),
            _ => None,
        }
    }
}

/// An API key. Only the peppered hash of the token is kept (SPEC.md section 5 rule 10).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKey {
    pub id: Uuid,
    pub project_id: Uuid,
    pub kind: KeyKind,
    pub name: String,
    /// HMAC-SHA256(pepper, token), hex (DECISIONS.md section 2).
    pub token_hash: String,
    /// Display handle: prefix + first 8 hex characters of the random part.
    pub key_id: String,
    pub last4: String,
    pub scopes: Vec<String>,
    pub ip_allowlist: Vec<String>,
    pub signing_enabled: bool,
    pub created_by: String,
    pub rotated_from: Option<Uuid>,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub use_count: u64,
    pub created_at: i64,
}

impl ApiKey {
    /// Usable at `now`: neither revoked nor past its expiry.
    pub fn is_enabled(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

impl Row for ApiKey {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::API_KEYS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        vec![index::key(IndexTag::ApiKeys, self.project_id, &[], self.id)]
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Customer {
    pub id: Uuid,
    pub project_id: Uuid,
    pub reference_id: Option<String>,
    pub email: Option<String>,
    pub status: String,
    pub metadata: serde_json::Value,
    pub created_at: i64,
}

impl Row for Customer {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::CUSTOMERS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let mut k = vec![
            index::key(IndexTag::Customers, self.project_id, &[], self.id),
            index::key(
                IndexTag::CustomersByStatus,
                self.project_id,
                &[self.status.as_bytes()],
                self.id,
            ),
        ];
        if let Some(r) = &self.reference_id {
            k.push(index::key(
                IndexTag::CustomersByRef,
                self.project_id,
                &[r.as_bytes()],
                self.id,
            ));
        }
        k
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Wallet {
    pub id: Uuid,
    pub project_id: Uuid,
    pub customer_id: Uuid,
    pub chain: String,
    pub role: String,
    pub status: String,
    pub address: String,
    pub memo: Option<String>,
    pub created_at: i64,
}

impl Row for Wallet {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::WALLETS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        vec![
            index::key(IndexTag::Wallets, p, &[], self.id),
            index::key(
                IndexTag::WalletsByCustomer,
                p,
                &[self.customer_id.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::WalletsByChain,
                p,
                &[self.chain.as_bytes()],
                self.id,
            ),
        ]
    }
}

/// Deposit statuses (SPEC.md section 3, Deposit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepositStatus {
    Detected,
    Confirmed,
    Failed,
    Orphaned,
}

impl DepositStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DepositStatus::Detected => "detected",
            DepositStatus::Confirmed => "confirmed",
            DepositStatus::Failed => "failed",
            DepositStatus::Orphaned => "orphaned",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "detected" => Some(DepositStatus::Detected),
            "confirmed" => Some(DepositStatus::Confirmed),
            "failed" => Some(DepositStatus::Failed),
            "orphaned" => Some(DepositStatus::Orphaned),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deposit {
    pub id: Uuid,
    pub project_id: Uuid,
    pub customer_id: Uuid,
    pub wallet_id: Uuid,
    pub chain: String,
    pub asset: String,
    pub amount: u128,
    pub tx_hash: String,
    pub log_index: u32,
    pub from_address: String,
    pub to_address: String,
    pub block_number: u64,
    pub block_time: i64,
    pub confirmations: u32,
    pub required_confirmations: u32,
    pub status: DepositStatus,
    pub failure_reason: Option<String>,
    /// Journal entry that credited the customer (set on confirm).
    pub ledger_tx_id: Option<Uuid>,
    /// Journal entry that reversed the credit (set on orphan).
    pub reversal_tx_id: Option<Uuid>,
    /// Manual test deposits (`confirm:false`) are not confirmed by the block clock.
    pub manual: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Row for Deposit {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::DEPOSITS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let mut k = vec![
            index::key(IndexTag::Deposits, p, &[], self.id),
            index::key(
                IndexTag::DepositsByCustomer,
                p,
                &[self.customer_id.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::DepositsByWallet,
                p,
                &[self.wallet_id.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::DepositsByChain,
                p,
                &[self.chain.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::DepositsByStatus,
                p,
                &[self.status.as_str().as_bytes()],
                self.id,
            ),
        ];
        if self.status == DepositStatus::Detected {
            // Global work queue of the confirmation clock (project nil: all projects).
            k.push(index::key(
                IndexTag::DepositsPending,
                Uuid::nil(),
                &[],
                self.id,
            ));
        }
        k
    }
}

/// Payout statuses (DECISIONS.md section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutStatus {
    PendingApproval,
    Queued,
    Signing,
    Submitted,
    Confirmed,
    Failed,
    Canceled,
    Rejected,
}

impl PayoutStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PayoutStatus::PendingApproval => "pending_approval",
            PayoutStatus::Queued => "queued",
            PayoutStatus::Signing => "signing",
            PayoutStatus::Submitted => "submitted",
            PayoutStatus::Confirmed => "confirmed",
            PayoutStatus::Failed => "failed",
            PayoutStatus::Canceled => "canceled",
            PayoutStatus::Rejected => "rejected",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            PayoutStatus::PendingApproval,
            PayoutStatus::Queued,
            PayoutStatus::Signing,
            PayoutStatus::Submitted,
            PayoutStatus::Confirmed,
            PayoutStatus::Failed,
            PayoutStatus::Canceled,
            PayoutStatus::Rejected,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
    /// In flight: funds are locked and the payout counts against the pending ceiling.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            PayoutStatus::PendingApproval
                | PayoutStatus::Queued
                | PayoutStatus::Signing
                | PayoutStatus::Submitted
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payout {
    pub id: Uuid,
    pub project_id: Uuid,
    /// `None`: drawn from the project's own account (customer nil in the ledger).
    pub customer_id: Option<Uuid>,
    pub chain: String,
    pub asset: String,
    pub amount: u128,
    pub fee_amount: u128,
    pub to_address: String,
    pub memo: Option<String>,
    pub status: PayoutStatus,
    pub reference: Option<String>,
    pub tx_hash: Option<String>,
    pub failure_reason: Option<String>,
    /// Value in US cents at creation (stablecoins at par); `None` when no price is known.
    pub amount_usd_cents: Option<u64>,
    pub created_by_key: Uuid,
    pub approved_by_key: Option<Uuid>,
    /// Simulated/real block height when the payout entered `queued`.
    #[serde(default)]
    pub queued_block: Option<u64>,
    pub submitted_block: Option<u64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Row for Payout {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::PAYOUTS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let mut k = vec![
            index::key(IndexTag::Payouts, p, &[], self.id),
            index::key(
                IndexTag::PayoutsByChain,
                p,
                &[self.chain.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::PayoutsByStatus,
                p,
                &[self.status.as_str().as_bytes()],
                self.id,
            ),
        ];
        if let Some(c) = self.customer_id {
            k.push(index::key(
                IndexTag::PayoutsByCustomer,
                p,
                &[c.as_bytes()],
                self.id,
            ));
        }
        if let Some(r) = &self.reference {
            k.push(index::key(
                IndexTag::PayoutsByReference,
                p,
                &[r.as_bytes()],
                self.id,
            ));
        }
        if self.status.is_open() {
            k.push(index::key(IndexTag::PayoutsOpen, p, &[], self.id));
        }
        if matches!(
            self.status,
            PayoutStatus::Queued | PayoutStatus::Signing | PayoutStatus::Submitted
        ) {
            k.push(index::key(IndexTag::PayoutsWork, Uuid::nil(), &[], self.id));
        }
        k
    }
}

/// Sweep statuses (DECISIONS.md section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepStatus {
    Open,
    Submitted,
    Confirmed,
    Failed,
    Skipped,
}

impl SweepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepStatus::Open => "open",
            SweepStatus::Submitted => "submitted",
            SweepStatus::Confirmed => "confirmed",
            SweepStatus::Failed => "failed",
            SweepStatus::Skipped => "skipped",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        [
            SweepStatus::Open,
            SweepStatus::Submitted,
            SweepStatus::Confirmed,
            SweepStatus::Failed,
            SweepStatus::Skipped,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sweep {
    pub id: Uuid,
    pub project_id: Uuid,
    pub wallet_id: Uuid,
    pub chain: String,
    pub asset: String,
    pub amount: u128,
    pub status: SweepStatus,
    pub skip_reason: Option<String>,
    pub tx_hash: Option<String>,
    /// Block height when the sweep was opened.
    #[serde(default)]
    pub open_block: Option<u64>,
    pub submitted_block: Option<u64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Row for Sweep {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::SWEEPS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let mut k = vec![
            index::key(IndexTag::Sweeps, p, &[], self.id),
            index::key(
                IndexTag::SweepsByWallet,
                p,
                &[self.wallet_id.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::SweepsByStatus,
                p,
                &[self.status.as_str().as_bytes()],
                self.id,
            ),
        ];
        if matches!(self.status, SweepStatus::Open | SweepStatus::Submitted) {
            k.push(index::key(IndexTag::SweepsWork, Uuid::nil(), &[], self.id));
        }
        k
    }
}

/// An event of the log (SPEC.md section 6). `data` is the resource as its REST read
/// returns it at the time of the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// `evt_` + ULID.
    pub id: String,
    pub project_id: Uuid,
    pub sequence: u64,
    #[serde(rename = "type")]
    pub event_type: String,
    pub resource_id: String,
    pub created_at: i64,
    pub livemode: bool,
    pub data: serde_json::Value,
}

/// The stored first answer to an idempotent request (DECISIONS.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex: a different body under the same key is a reuse.
    pub request_hash: String,
    pub status: u16,
    pub body: String,
    pub created_at: i64,
}

/// Webhook endpoint statuses (SPEC.md section 3, Webhook endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointStatus {
    Active,
    Paused,
    Disabled,
}

impl EndpointStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointStatus::Active => "active",
            EndpointStatus::Paused => "paused",
            EndpointStatus::Disabled => "disabled",
        }
    }
}

/// `delivery_mode` of an endpoint (DECISIONS.md section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    Unordered,
    /// One delivery in flight per endpoint, in creation (= event sequence) order.
    Ordered,
}

impl DeliveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Unordered => "unordered",
            DeliveryMode::Ordered => "ordered",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "unordered" => Some(DeliveryMode::Unordered),
            "ordered" => Some(DeliveryMode::Ordered),
            _ => None,
        }
    }
}

/// A signing secret replaced by a rotation, still signing until `valid_until_us`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredSecret {
    /// Sealed, as [`WebhookEndpoint::secret`].
    pub secret: String,
    pub valid_until_us: i64,
}

/// A webhook endpoint (SPEC.md section 2). Its signing secrets are stored sealed under the
/// data key (`sealed:v1:...`, see the binary's `sealing` module; a row written before sealing
/// holds `whsec_...` until the start-up migration seals it); they are never logged and only
/// returned at creation and rotation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub project_id: Uuid,
    pub url: String,
    pub description: Option<String>,
    /// Empty: every event type, including types added later.
    pub event_types: Vec<String>,
    pub status: EndpointStatus,
    pub delivery_mode: DeliveryMode,
    /// Consecutive exhausted deliveries; five disable the endpoint.
    pub consecutive_failures: u32,
    /// `consecutive_failures` or `gone` (DECISIONS.md section 5).
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<i64>,
    /// The sealed form of `whsec_` + 43 base64url characters.
    pub secret: String,
    /// Older secrets still inside their rotation overlap, newest first.
    #[serde(default)]
    pub retired_secrets: Vec<RetiredSecret>,
    pub last_success_at: Option<i64>,
    pub last_failure_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl WebhookEndpoint {
    /// Every secret that signs at `now`, newest first, in their stored (sealed) form.
    pub fn live_sealed_secrets(&self, now: i64) -> impl Iterator<Item = &str> {
        std::iter::once(self.secret.as_str()).chain(
            self.retired_secrets
                .iter()
                .filter(move |r| r.valid_until_us > now)
                .map(|r| r.secret.as_str()),
        )
    }

    /// End of the current rotation overlap, if one is running at `now`.
    pub fn overlap_until(&self, now: i64) -> Option<i64> {
        self.retired_secrets
            .iter()
            .map(|r| r.valid_until_us)
            .filter(|t| *t > now)
            .max()
    }

    /// Whether events of `event_type` go to this endpoint.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        self.event_types.is_empty() || self.event_types.iter().any(|t| t == event_type)
    }
}

impl Row for WebhookEndpoint {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::WEBHOOK_ENDPOINTS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        vec![index::key(
            IndexTag::WebhookEndpoints,
            self.project_id,
            &[],
            self.id,
        )]
    }
}

/// Webhook delivery statuses (SPEC.md section 3, Webhook delivery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not yet attempted.
    Pending,
    Succeeded,
    /// The last attempt failed and another is scheduled at `next_attempt_at`.
    Failed,
    /// Every attempt failed (or the receiver answered 410).
    Exhausted,
    /// Recorded while the endpoint was paused or disabled; never sent.
    Skipped,
    /// Was open when its endpoint was disabled.
    Canceled,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 6] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Succeeded,
        DeliveryStatus::Failed,
        DeliveryStatus::Exhausted,
        DeliveryStatus::Skipped,
        DeliveryStatus::Canceled,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Succeeded => "succeeded",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Exhausted => "exhausted",
            DeliveryStatus::Skipped => "skipped",
            DeliveryStatus::Canceled => "canceled",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
    /// Still to be sent (now or at `next_attempt_at`).
    pub fn is_open(self) -> bool {
        matches!(self, DeliveryStatus::Pending | DeliveryStatus::Failed)
    }
    /// May be replayed (SPEC.md section 3).
    pub fn is_replayable(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Failed | DeliveryStatus::Exhausted | DeliveryStatus::Skipped
        )
    }
}

/// One event bound for one endpoint, retried in place (`attempt` climbs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// A ULID (time-ordered) as a UUID; rendered `whd_` + ULID.
    pub id: Uuid,
    pub project_id: Uuid,
    pub endpoint_id: Uuid,
    pub event_id: String,
    pub event_sequence: u64,
    pub event_type: String,
    pub endpoint_url: String,
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempt: u32,
    pub max_attempts: u32,
    /// When the next attempt is due (open deliveries only).
    pub next_attempt_at: Option<i64>,
    pub response_status: Option<u16>,
    pub resolved_ip: Option<String>,
    pub duration_ms: Option<u64>,
    pub error_detail: Option<String>,
    /// The start of the receiver's answer, truncated.
    pub response_body: Option<String>,
    pub replay_of: Option<Uuid>,
    pub delivered_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl WebhookDelivery {
    /// Key of the dispatcher's due index for an open delivery.
    pub fn due_key(at_us: i64, id: Uuid) -> Vec<u8> {
        index::key(
            IndexTag::WebhookDeliveriesDue,
            Uuid::nil(),
            &[&(at_us.max(0) as u64).to_be_bytes()],
            id,
        )
    }

    /// (next_attempt_at, id) of a due-index key.
    pub fn parse_due_key(key: &[u8]) -> Option<(i64, Uuid)> {
        // tag (1) ‖ nil project (16) ‖ len (2) ‖ at (8) ‖ id (16)
        if key.len() != 43 {
            return None;
        }
        let at = u64::from_be_bytes(key[19..27].try_into().ok()?);
        Some((at as i64, index::id_of(key)))
    }
}

impl Row for WebhookDelivery {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::WEBHOOK_DELIVERIES;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let status = self.status.as_str().as_bytes();
        let ep = self.endpoint_id.as_bytes();
        let mut k = vec![
            index::key(IndexTag::WebhookDeliveries, p, &[], self.id),
            index::key(IndexTag::WebhookDeliveriesByEndpoint, p, &[ep], self.id),
            index::key(
                IndexTag::WebhookDeliveriesByEvent,
                p,
                &[&self.event_sequence.to_be_bytes()],
                self.id,
            ),
            index::key(IndexTag::WebhookDeliveriesByStatus, p, &[status], self.id),
            index::key(
                IndexTag::WebhookDeliveriesByEndpointStatus,
                p,
                &[ep, status],
                self.id,
            ),
        ];
        if let (true, Some(at)) = (self.status.is_open(), self.next_attempt_at) {
            k.push(Self::due_key(at, self.id));
        }
        k
    }
}
