//! Secondary index keys.
//!
//! Layout of a key in the `index` table (all fixed-width parts big-endian):
//!
//! ```text
//! tag (1) ‖ project (16) ‖ for each value: len (2) ‖ bytes ‖ row id (16)
//! ```
//!
//! Length-prefixing each value makes "all rows with value V" an exact prefix, and because
//! row ids are UUID v7 the rows under one prefix sort oldest to newest: a list is a reverse
//! range scan from the cursor.
//!
//! Keys of the `unique` table have the same shape without the trailing row id; the row id is
//! the value.
//!
//! Since schema 7 the keys of the hot tags sit in a table per tag
//! ([`crate::schema::SPLIT_INDEXES`]; same layout, the table found from the key's first byte
//! by [`crate::schema::index_table_of`]), and the event index keys have their own tables and
//! layouts ([`event_type_key`], [`event_resource_key`]).

use uuid::Uuid;

/// One tag per index. Values are part of the on-disk layout: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum IndexTag {
    Projects = 1,
    ApiKeys = 2,
    /// Keys of the `idempotency` table from schema 15: project ‖ the first 16 bytes of the
    /// SHA-256 of the request's [`IndexTag::Projects`] record key (method, path and
    /// `Idempotency-Key`, length-prefixed), 33 bytes instead of 40 to 300.
    IdempotencyDigest = 3,
    /// Keys of the `idempotency` table from schema 15 whose `Idempotency-Key` is a UUID in
    /// its canonical text: project ‖ the UUID's 16 bytes ‖ the first 8 bytes of the SHA-256
    /// of the method and path (length-prefixed), 41 bytes. A client's UUID v7 keys then
    /// come in order, appended at the table's end instead of at random like digests.
    IdempotencyUuid = 4,
    Customers = 10,
    CustomersByStatus = 11,
    CustomersByRef = 12,
    Wallets = 20,
    WalletsByCustomer = 21,
    WalletsByChain = 22,
    Deposits = 30,
    /// Up to schema 8 only: project ‖ customer ‖ deposit. Schema 9 keeps these entries
    /// under [`IndexTag::ByCustomer`] ([`deposit_by_customer_key`]) and moves them on open.
    /// Never reuse the number.
    DepositsByCustomer = 31,
    /// Up to schema 5 only: project ‖ wallet ‖ deposit. Schema 6 lists a wallet's
    /// deposits under its customer ([`IndexTag::DepositsByCustomer`]) and removes these
    /// entries on open. Never reuse the number.
    DepositsByWallet = 32,
    DepositsByChain = 33,
    DepositsByStatus = 34,
    DepositsPending = 35,
    /// project ‖ invoice id: the payments of an invoice (deposit rows with `invoice_id`).
    DepositsByInvoice = 36,
    /// project ‖ customer ‖ kind ‖ ...: what is listed per customer, in one range per
    /// customer so that a request's entries share its leaf (schema 9): a
    /// customer's deposits ([`deposit_by_customer_key`]) and its wallets' sweeps
    /// ([`sweep_by_wallet_key`]). A test deposit that opens a sweep wrote one random leaf
    /// of `index` for each before.
    ByCustomer = 37,
    Payouts = 40,
    PayoutsByCustomer = 41,
    PayoutsByChain = 42,
    PayoutsByStatus = 43,
    PayoutsByReference = 44,
    PayoutsOpen = 45,
    PayoutsWork = 46,
    Sweeps = 50,
    /// Up to schema 8 only: project ‖ wallet ‖ sweep. Schema 9 keeps these entries under
    /// [`IndexTag::ByCustomer`] ([`sweep_by_wallet_key`]). Never reuse the number.
    SweepsByWallet = 51,
    SweepsByStatus = 52,
    SweepsWork = 53,
    /// Up to schema 6 only: project ‖ type ‖ sequence in `index`. Schema 7 keeps these
    /// keys in their own table ([`event_type_key`]). Never reuse the number.
    EventsByType = 60,
    /// Up to schema 6 only: project ‖ resource id (text) ‖ sequence in `index`. Schema 7
    /// keeps these keys in their own table ([`event_resource_key`]). Never reuse the number.
    EventsByResource = 61,
    /// Webhook endpoints of a project (at most 16).
    WebhookEndpoints = 70,
    WebhookDeliveries = 71,
    /// project ‖ endpoint id.
    WebhookDeliveriesByEndpoint = 72,
    /// project ‖ event sequence (8 bytes, big-endian).
    WebhookDeliveriesByEvent = 73,
    /// project ‖ status.
    WebhookDeliveriesByStatus = 74,
    /// project ‖ endpoint id ‖ status (bulk replay, ordered delivery, cancel on disable).
    WebhookDeliveriesByEndpointStatus = 75,
    /// Global (project nil) ‖ next_attempt_at (8 bytes, big-endian µs): open deliveries by
    /// due time, the dispatcher's durable schedule.
    WebhookDeliveriesDue = 76,
    /// Global (project nil) ‖ endpoint id: a deleted endpoint whose deliveries are still
    /// being removed in chunks.
    WebhookPurge = 77,
    /// Conversion rows of a project (SPEC.md section 2, Conversion).
    Conversions = 80,
    /// project ‖ status.
    ConversionsByStatus = 81,
    /// project ‖ chain.
    ConversionsByChain = 82,
    /// project ‖ kind (`auto` | `manual`).
    ConversionsByKind = 83,
    /// project ‖ batch id: the rows of a batch.
    ConversionsByBatch = 84,
    /// Conversion batches of a project.
    ConversionBatches = 85,
    /// Global (project nil): batches still `approving` or `swapping`, the chain worker's queue.
    ConversionBatchesWork = 86,
    /// Conversion rules of a project (one per chain).
    ConversionRules = 87,
    /// Global (project nil): automatic conversion rows still `queued`, oldest first, the
    /// chain worker's planning queue.
    ConversionsQueued = 88,
    /// project: every invoice.
    Invoices = 90,
    /// project ‖ status.
    InvoicesByStatus = 91,
    /// project ‖ expires_at (8 bytes BE, project clock µs): open and underpaid invoices by
    /// deadline, the expiry worker's durable schedule.
    InvoicesDue = 92,
    /// Billing entries of a project (DECISIONS.md section 13).
    BillingEntries = 130,
    /// project ‖ entry kind.
    BillingEntriesByKind = 131,
    /// Funding addresses of a project (one per chain).
    FundingAddresses = 132,
    /// (project nil) Confirmed funding transfers waiting for a usable spot price before
    /// they are credited (DECISIONS.md section 13; the billing worker drains it).
    FundingAwaitingPrice = 133,
    /// Unique: project ‖ reference_id -> customer.
    UniqueCustomerRef = 100,
    /// Unique: project ‖ customer ‖ chain -> wallet.
    UniqueWallet = 101,
    /// Unique: token hash -> api key.
    UniqueTokenHash = 102,
    /// Unique: project name -> project.
    UniqueProjectName = 103,
    /// Unique: chain ‖ lower-case address -> wallet (any project), up to schema version 4.
    /// Schema 5 moved these keys to [`IndexTag::UniqueAddressChain`] on open; none is
    /// written any more ([`address_key_from_legacy`] reads both old layouts).
    UniqueAddress = 104,
    /// Unique, schema 5 to 15: (project nil) ‖ lower-case address ‖ chain -> wallet (any
    /// project). Schema 16 moves these keys to [`IndexTag::UniqueAddressDigest`] on open;
    /// none is written any more.
    UniqueAddressChain = 108,
    /// Unique, up to schema 15: (project nil) ‖ chain ‖ tx hash (text) ‖ log index ->
    /// deposit (from schema 7 only for a hash that is not `0x` + 64 lower-case hex). Schema
    /// 16 moves these keys to [`IndexTag::UniqueTransfer`] on open.
    UniqueDepositTx = 105,
    /// Unique, schema 7 to 15: tx hash (32 bytes) ‖ log index (4) ‖ chain -> deposit.
    /// Schema 16 moves these keys to [`IndexTag::UniqueTransfer`] on open.
    UniqueDepositTxHash = 109,
    /// Unique: a 16-byte digest of the lower-case address ‖ chain -> wallet (any project)
    /// ([`address_key`], schema 16): 25 bytes on `ethereum` instead of 72.
    UniqueAddressDigest = 112,
    /// Up to schema 7 only: (project nil) ‖ wallet ‖ asset -> the sweep still `open` for
    /// it. Schema 8 keeps a wallet's open sweep in its holding row
    /// ([`crate::ledger::Holding`]) and moves these keys there on open. Never reuse the
    /// number.
    UniqueOpenSweep = 106,
    /// Unique: project ‖ chain -> the project's conversion rule of that chain.
    UniqueConversionRule = 107,
    /// Unique: (project nil) ‖ SHA-256 of a checkout token -> invoice.
    UniqueCheckoutToken = 110,
    /// Unique: project ‖ reference_id -> the first invoice with it.
    UniqueInvoiceRef = 111,
    /// Unique: project ‖ entry kind ‖ what it is for (invoice, wallet, payout, conversion,
    /// deposit or month id) -> the billing entry: a fee or credit is written once.
    UniqueBillingRef = 120,
    /// Unique: project ‖ chain -> the project's funding address there.
    UniqueFundingChain = 121,
    /// Unique: the tx hash's first 16 bytes ‖ 8 bytes of a digest of chain, tx hash and log
    /// index -> deposit ([`transfer_key`], schema 16): 25 bytes instead of 45. The highest
    /// tag of `unique` on purpose: test mode's hashes are minted in order, so its keys are
    /// appended at the table's end, where redb fills a leaf before it starts the next
    /// (under a lower tag, behind random keys, each full leaf was split in halves).
    UniqueTransfer = 200,
}

impl IndexTag {
    /// Counted indexes keep the number of their keys per project in the `counters` table,
    /// maintained by `WriteCtx::put`, so "how many" is one read instead of a scan.
    pub fn is_counted(self) -> bool {
        matches!(self, IndexTag::PayoutsOpen)
    }

    fn from_u8(v: u8) -> Option<IndexTag> {
        (v == IndexTag::PayoutsOpen as u8).then_some(IndexTag::PayoutsOpen)
    }
}

/// The counter key (`tag ‖ project`) of an index key whose tag is counted.
pub fn counter_key(key: &[u8]) -> Option<&[u8]> {
    let tag = IndexTag::from_u8(*key.first()?)?;
    (tag.is_counted() && key.len() >= 17).then(|| &key[..17])
}

/// Prefix of all index keys for `tag`, `project` and the given values.
pub fn prefix(tag: IndexTag, project: Uuid, values: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(17 + values.iter().map(|v| v.len() + 2).sum::<usize>() + 16);
    k.push(tag as u8);
    k.extend_from_slice(project.as_bytes());
    for v in values {
        let len = u16::try_from(v.len()).unwrap_or(u16::MAX);
        k.extend_from_slice(&len.to_be_bytes());
        k.extend_from_slice(&v[..len as usize]);
    }
    k
}

/// Kind byte of a customer's deposits under [`IndexTag::ByCustomer`].
const BY_CUSTOMER_DEPOSIT: &[u8] = b"d";
/// Kind byte of a customer's wallets' sweeps under [`IndexTag::ByCustomer`].
const BY_CUSTOMER_SWEEP: &[u8] = b"s";

/// Prefix of a customer's deposits (`GET /v1/deposits?customer_id=`, and `wallet_id=` under
/// the wallet's customer): [`IndexTag::ByCustomer`] ‖ project ‖ customer ‖ `d`.
pub fn deposits_of_customer(project: Uuid, customer: Uuid) -> Vec<u8> {
    prefix(
        IndexTag::ByCustomer,
        project,
        &[customer.as_bytes(), BY_CUSTOMER_DEPOSIT],
    )
}

/// Index key of a deposit under its customer: [`deposits_of_customer`] ‖ deposit id.
pub fn deposit_by_customer_key(project: Uuid, customer: Uuid, deposit: Uuid) -> Vec<u8> {
    let mut k = deposits_of_customer(project, customer);
    k.extend_from_slice(deposit.as_bytes());
    k
}

/// Prefix of a wallet's sweeps (`GET /v1/sweeps?wallet_id=`), under the wallet's customer
/// (nil for an invoice's or the funding address): [`IndexTag::ByCustomer`] ‖ project ‖
/// customer ‖ `s` ‖ wallet.
pub fn sweeps_of_wallet(project: Uuid, customer: Uuid, wallet: Uuid) -> Vec<u8> {
    prefix(
        IndexTag::ByCustomer,
        project,
        &[customer.as_bytes(), BY_CUSTOMER_SWEEP, wallet.as_bytes()],
    )
}

/// Index key of a sweep under its wallet's customer: [`sweeps_of_wallet`] ‖ sweep id.
pub fn sweep_by_wallet_key(project: Uuid, customer: Uuid, wallet: Uuid, sweep: Uuid) -> Vec<u8> {
    let mut k = sweeps_of_wallet(project, customer, wallet);
    k.extend_from_slice(sweep.as_bytes());
    k
}

/// Schema 8 -> 9: the [`deposit_by_customer_key`] of an [`IndexTag::DepositsByCustomer`]
/// key (tag ‖ project ‖ len 16 ‖ customer ‖ deposit); `None` for any other shape.
pub fn deposit_by_customer_from_legacy(k: &[u8]) -> Option<Vec<u8>> {
    let rest = k.strip_prefix(&[IndexTag::DepositsByCustomer as u8])?;
    if rest.len() != 16 + 2 + 16 + 16 || rest[16..18] != 16u16.to_be_bytes() {
        return None;
    }
    let project = Uuid::from_slice(&rest[..16]).ok()?;
    let customer = Uuid::from_slice(&rest[18..34]).ok()?;
    let deposit = Uuid::from_slice(&rest[34..]).ok()?;
    Some(deposit_by_customer_key(project, customer, deposit))
}

/// Full index key: [`prefix`] followed by the row id.
pub fn key(tag: IndexTag, project: Uuid, values: &[&[u8]], id: Uuid) -> Vec<u8> {
    let mut k = prefix(tag, project, values);
    k.extend_from_slice(id.as_bytes());
    k
}

/// Same as [`key`] for an integer row id (event sequences).
pub fn key_seq(tag: IndexTag, project: Uuid, values: &[&[u8]], seq: u64) -> Vec<u8> {
    let mut k = prefix(tag, project, values);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The row id at the end of an index key.
pub fn id_of(key: &[u8]) -> Uuid {
    let mut b = [0u8; 16];
    b.copy_from_slice(&key[key.len() - 16..]);
    Uuid::from_bytes(b)
}

/// Key of the `unique` table.
pub fn unique(tag: IndexTag, project: Uuid, values: &[&[u8]]) -> Vec<u8> {
    prefix(tag, project, values)
}

/// Bytes of the SHA-256 digest in an [`address_key`]; a [`transfer_key`] holds as many
/// bytes of its hash (or digest) and [`TRANSFER_DIGEST_BYTES`] more of its digest.
pub const DIGEST_KEY_BYTES: usize = 16;

/// Bytes of a [`transfer_key`]'s digest after the hash's first [`DIGEST_KEY_BYTES`].
pub const TRANSFER_DIGEST_BYTES: usize = 8;

/// Unique key of a detected transfer (schema 16), 25 bytes whatever the chain and hash:
///
/// ```text
/// UniqueTransfer ‖ the hash's first 16 bytes (an EVM hash: `0x` + 64 lower-case hex)
///                  or bytes 8..24 of the digest (any other text) ‖ the digest's first 8
/// digest = SHA-256(length of chain (2 bytes, BE) ‖ chain ‖ tx hash as written ‖ log index (4, BE))
/// ```
///
/// A native transfer's log index is `u32::MAX`, so a transaction that both sends the coin
/// and emits a token log yields two deposits. The hash comes first so that the keys of
/// transfers whose hashes are minted in order (test mode's, `services::sim_transfer_hash`
/// in the binary) are appended side by side instead of one random leaf each. Distinct
/// transfers share a key only if their hashes share 16 bytes and their digests 8 (a
/// stored key is matched on purpose only by a preimage of both); another text of the same
/// hash is another key, as in every layout before. 45 bytes in schema 7's layout.
pub fn transfer_key(chain: &str, tx_hash: &str, log_index: u32) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let len = u16::try_from(chain.len()).unwrap_or(u16::MAX);
    h.update(len.to_be_bytes());
    h.update(&chain.as_bytes()[..len as usize]);
    h.update(tx_hash.as_bytes());
    h.update(log_index.to_be_bytes());
    let digest = h.finalize();
    let mut k = Vec::with_capacity(1 + DIGEST_KEY_BYTES + TRANSFER_DIGEST_BYTES);
    k.push(IndexTag::UniqueTransfer as u8);
    match evm_hash(tx_hash) {
        Some(hash) => k.extend_from_slice(&hash[..DIGEST_KEY_BYTES]),
        None => k.extend_from_slice(&digest[TRANSFER_DIGEST_BYTES..][..DIGEST_KEY_BYTES]),
    }
    k.extend_from_slice(&digest[..TRANSFER_DIGEST_BYTES]);
    k
}

/// The 32 bytes of `0x` + 64 lower-case hex digits; `None` for any other text.
fn evm_hash(h: &str) -> Option<[u8; 32]> {
    let digits = h.strip_prefix("0x")?;
    if digits.len() != 64 || digits.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

/// The [`transfer_key`] of a transfer key of an older layout: schema 6's
/// [`IndexTag::UniqueDepositTx`] (nil ‖ chain ‖ hash ‖ log index, each length-prefixed;
/// from schema 7 to 15 the layout of a hash that is not lower-case hex) or schema 7's
/// [`IndexTag::UniqueDepositTxHash`] (hash (32) ‖ log index (4, BE) ‖ chain, the hash
/// written back as `0x` + lower-case hex, which is what it was keyed from). `None` when
/// `legacy` has neither shape.
pub fn transfer_key_from_legacy(legacy: &[u8]) -> Option<Vec<u8>> {
    let (&tag, rest) = legacy.split_first()?;
    if tag == IndexTag::UniqueDepositTxHash as u8 {
        let hash = rest.get(..32)?;
        let log: [u8; 4] = rest.get(32..36)?.try_into().ok()?;
        let chain = std::str::from_utf8(rest.get(36..)?).ok()?;
        let hash = format!("0x{}", hex::encode(hash));
        return Some(transfer_key(chain, &hash, u32::from_be_bytes(log)));
    }
    if tag != IndexTag::UniqueDepositTx as u8 {
        return None;
    }
    let rest = rest.get(16..)?;
    let (chain, rest) = length_prefixed(rest)?;
    let (hash, rest) = length_prefixed(rest)?;
    let (log, rest) = length_prefixed(rest)?;
    let log: [u8; 4] = log.try_into().ok()?;
    if !rest.is_empty() {
        return None;
    }
    Some(transfer_key(
        std::str::from_utf8(chain).ok()?,
        std::str::from_utf8(hash).ok()?,
        u32::from_be_bytes(log),
    ))
}

/// Unique key of an issued address on a chain (any project), schema 16:
/// [`IndexTag::UniqueAddressDigest`] ‖ the first [`DIGEST_KEY_BYTES`] of SHA-256 of the
/// lower-case `address` ‖ `chain` (unprefixed: the key is only ever looked up whole). 25
/// bytes on `ethereum` instead of 72. The address comes first because an EVM address is
/// the same on every EVM chain: the keys of one invoice's addresses (one per accepted
/// chain), of one funding address and of a test project's master wallet sit side by side
/// on one leaf instead of one random leaf each. Detects self-payouts and custodied
/// destinations and attributes transfers to their wallet. Addresses are derived by the
/// appliance, so no caller chooses the address a stored key protects: matching one on
/// purpose takes a SHA-256 preimage of 16 bytes.
pub fn address_key(chain: &str, address: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(address.to_ascii_lowercase().as_bytes());
    let mut k = Vec::with_capacity(1 + DIGEST_KEY_BYTES + chain.len());
    k.push(IndexTag::UniqueAddressDigest as u8);
    k.extend_from_slice(&digest[..DIGEST_KEY_BYTES]);
    k.extend_from_slice(chain.as_bytes());
    k
}

/// The [`address_key`] of an address key of an older layout: schema 4's
/// [`IndexTag::UniqueAddress`] (nil ‖ chain ‖ lower-case address) or schema 5's
/// [`IndexTag::UniqueAddressChain`] (nil ‖ lower-case address ‖ chain), each part
/// length-prefixed; `None` when `legacy` has neither shape.
pub fn address_key_from_legacy(legacy: &[u8]) -> Option<Vec<u8>> {
    let (&tag, rest) = legacy.split_first()?;
    let address_first = match tag {
        t if t == IndexTag::UniqueAddress as u8 => false,
        t if t == IndexTag::UniqueAddressChain as u8 => true,
        _ => return None,
    };
    let rest = rest.get(16..)?;
    let (a, rest) = length_prefixed(rest)?;
    let (b, rest) = length_prefixed(rest)?;
    if !rest.is_empty() {
        return None;
    }
    let (address, chain) = if address_first { (a, b) } else { (b, a) };
    Some(address_key(
        std::str::from_utf8(chain).ok()?,
        std::str::from_utf8(address).ok()?,
    ))
}

/// The byte after the project in an [`crate::schema::EVENTS_BY_TYPE`] key of schema 12,
/// where a key of schema 7 to 11 has its type's length (1 or more: no type is empty).
const TYPE_HASHED: u8 = 0;

/// Prefix of the [`crate::schema::EVENTS_BY_TYPE`] keys of `project`'s events of type
/// `event_type` (schema 12; only the migrations write these keys since schema 13, whose
/// index is [`crate::event_runs`]):
///
/// ```text
/// project (16) ‖ 0 ‖ FNV-1a 32 of the type (4, big-endian)
/// ```
///
/// 21 bytes whatever the type, where schema 7 wrote the type's text (about 17 bytes more
/// per key). Two types with one hash share a range: a reader compares each
/// event's own type, so that costs reads, never a wrong answer.
pub fn event_type_prefix(project: Uuid, event_type: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(29);
    k.extend_from_slice(project.as_bytes());
    k.push(TYPE_HASHED);
    k.extend_from_slice(&event_type_hash(event_type).to_be_bytes());
    k
}

/// FNV-1a (32 bits) of `event_type`'s bytes: part of the stored key layout (this index's
/// keys up to schema 12, [`crate::event_runs`] since), never change it.
pub(crate) fn event_type_hash(event_type: &str) -> u32 {
    event_type.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Key of event `seq` in [`crate::schema::EVENTS_BY_TYPE`]: [`event_type_prefix`] ‖
/// sequence (8, big-endian), so a type's events sort by sequence.
pub fn event_type_key(project: Uuid, event_type: &str, seq: u64) -> Vec<u8> {
    let mut k = event_type_prefix(project, event_type);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The schema 12 key of a key of [`crate::schema::EVENTS_BY_TYPE`] of schema 7 to 11
/// (project (16) ‖ type length (1) ‖ type ‖ sequence (8)); a key of schema 12 is itself.
/// `None` for a key of neither shape.
pub fn event_type_key_from_7(key: &[u8]) -> Option<Vec<u8>> {
    let project = Uuid::from_slice(key.get(..16)?).ok()?;
    let (&len, rest) = key[16..].split_first()?;
    if len == TYPE_HASHED {
        return (rest.len() == 12).then(|| key.to_vec());
    }
    let len = usize::from(len);
    if rest.len() != len + 8 {
        return None;
    }
    let event_type = std::str::from_utf8(&rest[..len]).ok()?;
    let seq = u64::from_be_bytes(rest[len..].try_into().ok()?);
    Some(event_type_key(project, event_type, seq))
}

/// First byte of an [`event_resource_prefix`] of a UUID resource id.
const RESOURCE_UUID: u8 = 0;
/// First byte of an [`event_resource_prefix`] of any other resource id.
const RESOURCE_TEXT: u8 = 1;

/// Prefix of the [`crate::schema::EVENTS_BY_RESOURCE`] keys of the events about
/// `resource_id` in `project`:
///
/// ```text
/// 0 ‖ the UUID's 16 bytes                               resource id in canonical UUID text
/// 1 ‖ project (16) ‖ length (2) ‖ the id's bytes       any other resource id
/// ```
///
/// A UUID (v7, minted here) names one resource of one project, so its key needs no project:
/// 25 bytes with the sequence instead of 63. A reader must still check each event's
/// `resource_id` (the sequence it finds is looked up in the reader's project's log, and the
/// key could be another project's, asked for by id).
pub fn event_resource_prefix(project: Uuid, resource_id: &str) -> Vec<u8> {
    match Uuid::parse_str(resource_id) {
        Ok(u) if u.hyphenated().to_string() == resource_id => {
            let mut k = Vec::with_capacity(25);
            k.push(RESOURCE_UUID);
            k.extend_from_slice(u.as_bytes());
            k
        }
        _ => {
            let mut k = prefix(
                IndexTag::EventsByResource,
                project,
                &[resource_id.as_bytes()],
            );
            k[0] = RESOURCE_TEXT;
            k
        }
    }
}

/// Key of event `seq` in [`crate::schema::EVENTS_BY_RESOURCE`]: [`event_resource_prefix`] ‖
/// sequence (8, big-endian).
pub fn event_resource_key(project: Uuid, resource_id: &str, seq: u64) -> Vec<u8> {
    let mut k = event_resource_prefix(project, resource_id);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The event sequence at the end of an event index key (0 for a key too short to hold one).
pub fn event_seq_of(key: &[u8]) -> u64 {
    key.len()
        .checked_sub(8)
        .and_then(|at| key[at..].try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The schema 7 key of a schema 6 event index key of the `index` table
/// ([`IndexTag::EventsByType`] or [`IndexTag::EventsByResource`] ‖ project ‖ length (2) ‖
/// value ‖ sequence (8)): `Some((true, key))` for a key of
/// [`crate::schema::EVENTS_BY_TYPE`], `Some((false, key))` for one of
/// [`crate::schema::EVENTS_BY_RESOURCE`]; `None` when `legacy` does not have that shape.
pub fn event_key_from_legacy(legacy: &[u8]) -> Option<(bool, Vec<u8>)> {
    let (&tag, rest) = legacy.split_first()?;
    let project = Uuid::from_slice(rest.get(..16)?).ok()?;
    let (value, rest) = length_prefixed(&rest[16..])?;
    let seq: [u8; 8] = rest.try_into().ok()?;
    let seq = u64::from_be_bytes(seq);
    let value = std::str::from_utf8(value).ok()?;
    if tag == IndexTag::EventsByType as u8 && value.len() <= u8::MAX as usize {
        Some((true, event_type_key(project, value, seq)))
    } else if tag == IndexTag::EventsByResource as u8 {
        Some((false, event_resource_key(project, value, seq)))
    } else {
        None
    }
}

/// Splits a 2-byte big-endian length and that many bytes off the front of `b`.
fn length_prefixed(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u16::from_be_bytes([*b.first()?, *b.get(1)?]) as usize;
    let v = b.get(2..2 + len)?;
    Some((v, &b[2 + len..]))
}

/// The smallest key strictly greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1]
}

/// What ends a run's key after its prefix, big-endian: the run's first event sequence
/// (`u64`, [`crate::event_runs`]) or first id (`u128`, [`crate::id_runs`]).
pub trait RunStart: Copy {
    /// Bytes of the big-endian form.
    const LEN: usize;
    fn put(self, out: &mut Vec<u8>);
    fn read(bytes: &[u8]) -> Option<Self>;
}

macro_rules! run_start {
    ($($t:ty),*) => {$(
        impl RunStart for $t {
            const LEN: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn read(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_be_bytes(bytes.try_into().ok()?))
            }
        }
    )*};
}
run_start!(u64, u128);

/// Key of the run of `prefix` that starts at `first`: `prefix` ‖ `first`.
pub fn run_key<T: RunStart>(prefix: &[u8], first: T) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + T::LEN);
    k.extend_from_slice(prefix);
    first.put(&mut k);
    k
}

/// (prefix, start) of a key [`run_key`] makes; `None` for a key too short to hold a prefix
/// and a start.
pub fn split_run_key<T: RunStart>(k: &[u8]) -> Option<(&[u8], T)> {
    let at = k.len().checked_sub(T::LEN).filter(|at| *at > 0)?;
    Some((&k[..at], T::read(&k[at..])?))
}

/// A row of a runs table read by a list's walk: (first, what `decode` makes of the run).
/// `None` for a run that does not decode, logged with `what` (the walk passes over it);
/// `Some(Err)` when the row cannot be read.
pub(crate) fn read_run<T: RunStart, X>(
    row: Result<RunRow<'_>, redb::StorageError>,
    decode: impl Fn(T, &[u8]) -> Option<X>,
    what: &str,
) -> Option<Result<(T, X), crate::StoreError>> {
    let (k, v) = match row {
        Ok(row) => row,
        Err(e) => return Some(Err(e.into())),
    };
    let (_, first) = split_run_key(k.value())?;
    match decode(first, v.value()) {
        Some(run) => Some(Ok((first, run))),
        None => {
            tracing::error!(key = %hex::encode(k.value()), "{what}");
            None
        }
    }
}

/// A row of a runs table: its key and value.
pub(crate) type RunRow<'a> = (
    redb::AccessGuard<'a, &'static [u8]>,
    redb::AccessGuard<'a, &'static [u8]>,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_under_one_prefix_sort_by_time_ordered_id() {
        let p = Uuid::now_v7();
        let a = Uuid::now_v7();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = Uuid::now_v7();
        let ka = key(IndexTag::DepositsByChain, p, &[b"bsc"], a);
        let kb = key(IndexTag::DepositsByChain, p, &[b"bsc"], b);
        assert!(ka < kb);
        let pre = prefix(IndexTag::DepositsByChain, p, &[b"bsc"]);
        assert!(ka.starts_with(&pre) && kb.starts_with(&pre));
        assert!(kb.as_slice() < prefix_end(&pre).as_slice());
        assert_eq!(id_of(&kb), b);
    }

    #[test]
    fn address_keys_of_one_address_sit_together_and_legacy_keys_convert() {
        let a = "0x35503aB8094214FeD332D87630B21FaF4D79ea84";
        let b = "0x35503ab8094214fed332d87630b21faf4d79ea85";
        let k = address_key("ethereum", a);
        assert_eq!(k.len(), 1 + 16 + 8);
        assert_eq!(k[0], IndexTag::UniqueAddressDigest as u8);
        assert!(k.ends_with(b"ethereum"));
        let mut keys = [
            address_key("ethereum", a),
            address_key("bsc", b),
            address_key("polygon", a),
            address_key("base", a),
        ];
        keys.sort();
        // The three keys of `a` are adjacent whatever the chain (they share the address's
        // digest); `b`'s sorts before or after them, never between.
        let of_a: Vec<usize> = (0..4)
            .filter(|&i| keys[i] != address_key("bsc", b))
            .collect();
        assert!(of_a == [0, 1, 2] || of_a == [1, 2, 3], "{of_a:?}");
        assert_eq!(
            address_key("base", a),
            address_key("base", &a.to_lowercase())
        );
        assert_ne!(address_key("base", a), address_key("bas", a));
        // Schema 4 (chain first) and schema 5 (address first) keys, both of lower case.
        let lower = a.to_lowercase();
        let schema4 = unique(
            IndexTag::UniqueAddress,
            Uuid::nil(),
            &[b"polygon", lower.as_bytes()],
        );
        let schema5 = unique(
            IndexTag::UniqueAddressChain,
            Uuid::nil(),
            &[lower.as_bytes(), b"polygon"],
        );
        for legacy in [&schema4, &schema5] {
            assert_eq!(
                address_key_from_legacy(legacy),
                Some(address_key("polygon", a))
            );
            assert_eq!(address_key_from_legacy(&legacy[..legacy.len() - 1]), None);
            assert_eq!(
                address_key_from_legacy(&[legacy.as_slice(), b"x"].concat()),
                None
            );
        }
        assert_eq!(address_key_from_legacy(&address_key("polygon", a)), None);
    }

    #[test]
    fn event_keys_are_short_sort_by_sequence_and_convert_from_schema_6() {
        let p = Uuid::now_v7();
        let r = Uuid::now_v7();
        let by_uuid = event_resource_key(p, &r.to_string(), 7);
        assert_eq!(by_uuid.len(), 25);
        assert_eq!(
            by_uuid,
            event_resource_key(Uuid::now_v7(), &r.to_string(), 7)
        );
        assert_eq!(event_seq_of(&by_uuid), 7);
        // Not the canonical text of a UUID: keyed as text, under its project.
        let upper = r.to_string().to_uppercase();
        let text = event_resource_key(p, &upper, 7);
        assert_ne!(text[..17], by_uuid[..17]);
        assert_ne!(text, event_resource_key(Uuid::now_v7(), &upper, 7));
        assert!(event_resource_key(p, "ref", 2) < event_resource_key(p, "ref", 10));
        let pre = event_type_prefix(p, "deposit.confirmed");
        let k = event_type_key(p, "deposit.confirmed", 300);
        assert!(k.starts_with(&pre) && k.len() == pre.len() + 8);
        assert!(!event_type_key(p, "deposit.confirmedx", 1).starts_with(&pre));
        assert_eq!(k.len(), 29, "schema 12: project, marker, hash, sequence");
        assert_eq!(event_seq_of(&k), 300);
        // A key of schema 7 to 11 (the type's text) becomes the same key; one of schema 12
        // is itself; a key of neither shape is left.
        let seven = [
            p.as_bytes().as_slice(),
            &[17],
            b"deposit.confirmed",
            &300u64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(event_type_key_from_7(&seven), Some(k.clone()));
        assert_eq!(event_type_key_from_7(&k), Some(k.clone()));
        assert_eq!(event_type_key_from_7(&seven[..seven.len() - 1]), None);
        assert_eq!(event_type_key_from_7(&k[..20]), None);
        assert_eq!(
            event_key_from_legacy(&key_seq(
                IndexTag::EventsByType,
                p,
                &[b"deposit.confirmed"],
                300
            )),
            Some((true, k))
        );
        assert_eq!(
            event_key_from_legacy(&key_seq(
                IndexTag::EventsByResource,
                p,
                &[r.to_string().as_bytes()],
                7
            )),
            Some((false, by_uuid))
        );
        let legacy = key_seq(IndexTag::EventsByResource, p, &[b"ref"], 2);
        assert_eq!(
            event_key_from_legacy(&legacy),
            Some((false, event_resource_key(p, "ref", 2)))
        );
        assert_eq!(event_key_from_legacy(&legacy[..legacy.len() - 1]), None);
        assert_eq!(
            event_key_from_legacy(&key(IndexTag::Deposits, p, &[b"x"], r)),
            None
        );
    }

    #[test]
    fn transfer_keys_are_digests_and_legacy_keys_convert() {
        let h = format!("0x{}", "ab".repeat(32));
        let k = transfer_key("ethereum", &h, 3);
        assert_eq!(k.len(), 25);
        assert_eq!(k[0], IndexTag::UniqueTransfer as u8);
        // An EVM hash's first 16 bytes lead, so keys follow the hashes' order.
        assert_eq!(&k[1..17], &[0xab; 16]);
        let next = format!("0x{}{}", "ab".repeat(15), "ac".repeat(17));
        assert!(transfer_key("ethereum", &next, 0) > k);
        assert_eq!(transfer_key("tron", "abc", 3).len(), 25);
        assert_ne!(k, transfer_key("bsc", &h, 3));
        assert_ne!(k, transfer_key("ethereum", &h, u32::MAX));
        // The chain's length is hashed: moving a byte between chain and hash changes it.
        assert_ne!(transfer_key("ab", "c", 3), transfer_key("a", "bc", 3));
        // Another text of the same hash is another key (as in every layout before).
        let upper = format!("0x{}", "AB".repeat(32));
        assert_ne!(transfer_key("ethereum", &upper, 3), k);
        // Schema 6's layout (any hash text) and schema 7's (an EVM hash as its bytes).
        let schema6 = |hash: &str| {
            unique(
                IndexTag::UniqueDepositTx,
                Uuid::nil(),
                &[b"ethereum", hash.as_bytes(), &3u32.to_be_bytes()],
            )
        };
        let mut schema7 = vec![IndexTag::UniqueDepositTxHash as u8];
        schema7.extend_from_slice(&[0xab; 32]);
        schema7.extend_from_slice(&3u32.to_be_bytes());
        schema7.extend_from_slice(b"ethereum");
        assert_eq!(transfer_key_from_legacy(&schema6(&h)), Some(k.clone()));
        assert_eq!(transfer_key_from_legacy(&schema7), Some(k.clone()));
        assert_eq!(
            transfer_key_from_legacy(&schema6(&upper)),
            Some(transfer_key("ethereum", &upper, 3))
        );
        assert_eq!(transfer_key_from_legacy(&schema6(&h)[..60]), None);
        assert_eq!(transfer_key_from_legacy(&schema7[..35]), None);
        assert_eq!(transfer_key_from_legacy(&k), None);
    }

    #[test]
    fn a_value_is_not_a_prefix_of_a_longer_value() {
        let p = Uuid::nil();
        let short = prefix(IndexTag::CustomersByRef, p, &[b"ab"]);
        let long = key(IndexTag::CustomersByRef, p, &[b"abc"], Uuid::nil());
        assert!(!long.starts_with(&short));
    }
}
