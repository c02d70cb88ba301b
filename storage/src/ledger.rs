//! The double-entry ledger.
//!
//! Every balance change is a [`JournalEntry`] whose postings balance per asset: the sum of
//! debits equals the sum of credits for each (chain, asset). Entries never change; a
//! correction is a new entry (a reversal). Each account keeps its posted debit and credit
//! totals as two `u128`s, TigerBeetle style, so no balance needs a sign.
//!
//! Accounts, per (project, chain, asset):
//!
//! | kind | owner | normal side | meaning |
//! |---|---|---|---|
//! | `available` | customer (or nil: the project's own) | credit | spendable, owed to the customer |
//! | `locked` | customer | credit | reserved against an in-flight payout |
//! | `receivable` | customer | debit | a reorged credit the customer had already spent |
//! | `deposits` | project | debit | funds on deposit addresses, not yet swept |
//! | `in_transit` | project | debit | sweep submitted, not yet confirmed |
//! | `treasury` | project | debit | funds in the master wallet |
//!
//! Invariants (checked by [`verify`] and the property tests): every entry balances; the sum
//! of (debits - credits) over all accounts of an asset is zero; no `available` or `locked`
//! account has more debits than credits.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Account kinds. Values are part of the key layout: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum AccountKind {
    Available = 1,
    Locked = 2,
    Receivable = 3,
    /// Project side (customer nil), credit-normal: the operator's coins among the project's,
    /// received on its billing funding addresses (they paid its operational balance,
    /// DECISIONS.md section 13). Nothing of the project draws on it; a funding transfer
    /// orphaned after its credit is taken back out of it.
    Operator = 4,
    Deposits = 10,
    InTransit = 11,
    Treasury = 12,
}

impl AccountKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => AccountKind::Available,
            2 => AccountKind::Locked,
            3 => AccountKind::Receivable,
            4 => AccountKind::Operator,
            10 => AccountKind::Deposits,
            11 => AccountKind::InTransit,
            12 => AccountKind::Treasury,
            _ => return None,
        })
    }

    /// Liability accounts may never go below zero.
    pub fn is_credit_normal(self) -> bool {
        matches!(
            self,
            AccountKind::Available | AccountKind::Locked | AccountKind::Operator
        )
    }
}

/// Identifies one ledger account.
///
/// Serialized as its fields in human-readable formats (JSON: the value encoding before
/// schema version 4, and any API view) and as its compact [`Account::key`] bytes in binary
/// ones (the store's MessagePack, where a journal entry names two or more accounts: about
/// 47 bytes each instead of 110). Both forms read back from either.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Account {
    pub project_id: Uuid,
    /// Nil for the project's own accounts.
    pub customer_id: Uuid,
    pub chain: String,
    pub asset: String,
    pub kind: AccountKind,
}

impl Account {
    pub fn customer(
        project: Uuid,
        customer: Uuid,
        chain: &str,
        asset: &str,
        kind: AccountKind,
    ) -> Self {
        Account {
            project_id: project,
            customer_id: customer,
            chain: chain.to_string(),
            asset: asset.to_string(),
            kind,
        }
    }

    pub fn project(project: Uuid, chain: &str, asset: &str, kind: AccountKind) -> Self {
        Self::customer(project, Uuid::nil(), chain, asset, kind)
    }

    /// Key layout: project (16) ‖ customer (16) ‖ len (1) ‖ chain ‖ len (1) ‖ asset ‖ kind (1).
    /// A customer's accounts are one contiguous range (prefix [`Account::customer_prefix`]).
    pub fn key(&self) -> Vec<u8> {
        let mut k = Self::customer_prefix(self.project_id, self.customer_id);
        k.push(self.chain.len() as u8);
        k.extend_from_slice(self.chain.as_bytes());
        k.push(self.asset.len() as u8);
        k.extend_from_slice(self.asset.as_bytes());
        k.push(self.kind as u8);
        k
    }

    /// Prefix of every account of one customer (nil: the project's own accounts).
    pub fn customer_prefix(project: Uuid, customer: Uuid) -> Vec<u8> {
        let mut k = Vec::with_capacity(48);
        k.extend_from_slice(project.as_bytes());
        k.extend_from_slice(customer.as_bytes());
        k
    }

    /// Inverse of [`Account::key`]; `None` for a malformed key.
    pub fn from_key(k: &[u8]) -> Option<Self> {
        if k.len() < 35 {
            return None;
        }
        let project_id = Uuid::from_slice(&k[..16]).ok()?;
        let customer_id = Uuid::from_slice(&k[16..32]).ok()?;
        let mut i = 32;
        let cl = *k.get(i)? as usize;
        let chain = std::str::from_utf8(k.get(i + 1..i + 1 + cl)?)
            .ok()?
            .to_string();
        i += 1 + cl;
        let al = *k.get(i)? as usize;
        let asset = std::str::from_utf8(k.get(i + 1..i + 1 + al)?)
            .ok()?
            .to_string();
        i += 1 + al;
        let kind = AccountKind::from_u8(*k.get(i)?)?;
        if i + 1 != k.len() {
            return None;
        }
        Some(Account {
            project_id,
            customer_id,
            chain,
            asset,
            kind,
        })
    }
}

/// Byte that follows (chain, asset) in the `accounts` key of a wallet's holding, above every
/// [`AccountKind`] value: a holding is not a ledger account (see [`holding_key`]).
pub const HOLDING_MARK: u8 = 0xF0;

/// Key in the `accounts` table of the ledger's holding of `wallet` (of `customer` in
/// `project`, on `chain`) in `asset`:
///
/// ```text
/// project (16) ‖ customer (16) ‖ len (1) ‖ chain ‖ len (1) ‖ asset ‖ 0xF0 ‖ wallet (16)
/// ```
///
/// It sorts right after the customer's accounts of that chain and asset, so a deposit's
/// credit to the customer and the change of the wallet's holding dirty one leaf page
/// instead of two (docs/performance.md). Its value is [`Holding`] as `(amount, open
/// sweep)`: the id of the wallet's open sweep of `asset` as a `u128`, 0 for none (schema 8;
/// a store of an earlier schema moves its open sweeps' keys from `unique` into these rows
/// on open).
pub fn holding_key(
    project: Uuid,
    customer: Uuid,
    chain: &str,
    asset: &str,
    wallet: Uuid,
) -> Vec<u8> {
    let mut k = Account::customer(project, customer, chain, asset, AccountKind::Available).key();
    k.pop();
    k.push(HOLDING_MARK);
    k.extend_from_slice(wallet.as_bytes());
    k
}

/// A wallet's holding row in `accounts` ([`holding_key`]): the ledger's amount on the
/// deposit address in one asset (atomic units), and the wallet's open sweep of that asset
/// if any (SPEC.md section 4, Sweeps: at most one open sweep per address and asset).
///
/// The open sweep is kept in this row, which every credit and every sweep submission
/// writes anyway, instead of a unique key of its own: such a key (wallet ‖ asset) would land
/// on a random leaf of `unique` per new sweep, i.e. per test deposit to a wallet without one,
/// and again when the sweep leaves (schema 8; docs/performance.md, "Why pages, not rows, are
/// the cost"). Stored as the pair
/// `(amount, open sweep id as u128 or 0)`; sweep ids are UUID v7, never nil.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holding {
    /// Atomic units the ledger holds on the address.
    pub amount: u128,
    /// The wallet's open sweep of this asset.
    pub open_sweep: Option<Uuid>,
}

impl Holding {
    /// From the stored pair (`None` row: nothing held, no open sweep).
    pub fn from_value(v: (u128, u128)) -> Holding {
        Holding {
            amount: v.0,
            open_sweep: (v.1 != 0).then(|| Uuid::from_u128(v.1)),
        }
    }

    /// The stored pair.
    pub fn to_value(self) -> (u128, u128) {
        (self.amount, self.open_sweep.map_or(0, |u| u.as_u128()))
    }
}

/// The parts of a [`holding_key`]: (project, customer, chain, asset, wallet); `None` for
/// any other key.
pub fn parse_holding_key(k: &[u8]) -> Option<(Uuid, Uuid, String, String, Uuid)> {
    let (head, wallet) = k.split_at_checked(k.len().checked_sub(16)?)?;
    let (&mark, head) = head.split_last()?;
    if mark != HOLDING_MARK {
        return None;
    }
    let mut as_account = head.to_vec();
    as_account.push(AccountKind::Available as u8);
    let a = Account::from_key(&as_account)?;
    Some((
        a.project_id,
        a.customer_id,
        a.chain,
        a.asset,
        Uuid::from_slice(wallet).ok()?,
    ))
}

/// The field form of [`Account`] (its serde shape in human-readable formats).
#[derive(Serialize, Deserialize)]
#[serde(rename = "Account")]
struct AccountFields {
    project_id: Uuid,
    customer_id: Uuid,
    chain: String,
    asset: String,
    kind: AccountKind,
}

impl Serialize for Account {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            AccountFields {
                project_id: self.project_id,
                customer_id: self.customer_id,
                chain: self.chain.clone(),
                asset: self.asset.clone(),
                kind: self.kind,
            }
            .serialize(s)
        } else {
            s.serialize_bytes(&self.key())
        }
    }
}

impl<'de> Deserialize<'de> for Account {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Account;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a ledger account: its key bytes or its fields")
            }
            fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<Account, E> {
                Account::from_key(b).ok_or_else(|| E::custom("malformed account key"))
            }
            /// The short form a journal entry writes (see [`JournalEntry`]): the project is
            /// left nil for the entry to fill in.
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut q: A,
            ) -> Result<Account, A::Error> {
                use serde::de::Error;
                let missing = || A::Error::custom("short account: too few elements");
                let customer: Option<Uuid> = q.next_element()?.ok_or_else(missing)?;
                // [customer, chain, asset, kind], or [customer, kind] for an account of the
                // posting before's chain and asset (schema 14): chain and asset left empty
                // for the entry to fill in.
                let (chain, asset, kind) = match q.next_element()?.ok_or_else(missing)? {
                    ChainOrKind::Chain(chain) => {
                        let asset: String = q.next_element()?.ok_or_else(missing)?;
                        let kind: u8 = q.next_element()?.ok_or_else(missing)?;
                        (chain, asset, kind)
                    }
                    ChainOrKind::Kind(kind) => (String::new(), String::new(), kind),
                };
                if q.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::custom("short account: too many elements"));
                }
                Ok(Account {
                    project_id: Uuid::nil(),
                    customer_id: customer.unwrap_or_default(),
                    chain,
                    asset,
                    kind: AccountKind::from_u8(kind)
                        .ok_or_else(|| A::Error::custom("unknown account kind"))?,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Account, A::Error> {
                let f =
                    AccountFields::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(Account {
                    project_id: f.project_id,
                    customer_id: f.customer_id,
                    chain: f.chain,
                    asset: f.asset,
                    kind: f.kind,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// The second element of a journal entry's short account ([`Account`]'s `visit_seq`): the
/// chain's name, or the kind of an account of the chain and asset of the posting before.
enum ChainOrKind {
    Chain(String),
    Kind(u8),
}

impl<'de> Deserialize<'de> for ChainOrKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ChainOrKind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a chain name or an account kind")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ChainOrKind, E> {
                Ok(ChainOrKind::Chain(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ChainOrKind, E> {
                u8::try_from(v)
                    .map(ChainOrKind::Kind)
                    .map_err(|_| E::custom("account kind out of range"))
            }
        }
        d.deserialize_any(V)
    }
}

/// One side of a journal entry: exactly one of `debit`, `credit` is non-zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posting {
    pub account: Account,
    #[serde(serialize_with = "crate::codec::amount")]
    pub debit: u128,
    #[serde(serialize_with = "crate::codec::amount")]
    pub credit: u128,
}

impl Posting {
    pub fn debit(account: Account, amount: u128) -> Self {
        Posting {
            account,
            debit: amount,
            credit: 0,
        }
    }
    pub fn credit(account: Account, amount: u128) -> Self {
        Posting {
            account,
            debit: 0,
            credit: amount,
        }
    }
}

/// Declares [`JournalKind`] from one list of (variant, stored name) pairs, so `as_str` and
/// `parse` cannot drift apart.
macro_rules! journal_kinds {
    ($($(#[$doc:meta])* $v:ident => $s:literal),+ $(,)?) => {
        /// What caused a journal entry ([`JournalEntry::kind`]). Stored and shown as its
        /// name; the names of [`crate::codec::JOURNAL_KIND_CODES`] are stored as their
        /// number there. A stored name this build does not list reads as
        /// [`JournalKind::Other`], so every row stays readable.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum JournalKind {
            $($(#[$doc])* $v,)+
            /// A name this build does not write (a row of another build, a test's entry).
            Other(String),
        }

        impl JournalKind {
            /// The kind's stored name.
            pub fn as_str(&self) -> &str {
                match self {
                    $(JournalKind::$v => $s,)+
                    JournalKind::Other(s) => s,
                }
            }

            /// The kind named `s`; [`JournalKind::Other`] for a name not listed (total: a
            /// stored row always reads).
            pub fn parse(s: &str) -> Self {
                match s {
                    $($s => JournalKind::$v,)+
                    other => JournalKind::Other(other.to_string()),
                }
            }
        }
    };
}

journal_kinds! {
    /// A confirmed deposit credits its customer (SPEC.md section 3, Deposit).
    DepositCredit => "deposit_credit",
    /// An orphaned deposit's credit is taken back.
    DepositReversal => "deposit_reversal",
    /// A payout's amount and fee move from `available` to `locked`.
    PayoutLock => "payout_lock",
    /// A confirmed payout leaves the treasury.
    PayoutSettle => "payout_settle",
    /// A failed, canceled or rejected payout's lock returns to `available`.
    PayoutRelease => "payout_release",
    /// A confirmed payout undone by a reorg: its settlement is reversed.
    PayoutUnsettle => "payout_unsettle",
    /// An unsettled payout's transaction confirmed again.
    PayoutResettle => "payout_resettle",
    /// A sweep's amount moves from `deposits` to `in_transit`.
    SweepSubmit => "sweep_submit",
    /// A confirmed sweep reaches the treasury.
    SweepSettle => "sweep_settle",
    /// A failed sweep's amount returns to `deposits`.
    SweepRevert => "sweep_revert",
    /// A conversion batch's input is held in `locked`.
    ConversionLock => "conversion_lock",
    /// A conversion batch settles: input out, output in.
    ConversionSettle => "conversion_settle",
    /// A conversion batch that did not swap returns its input.
    ConversionRelease => "conversion_release",
    /// An invoice overpayment's excess is held for its refund claim (DECISIONS.md section 12).
    InvoiceRefundHold => "invoice_refund_hold",
    /// The fee part of a refund claim returns to the merchant at the first request.
    InvoiceRefundFee => "invoice_refund_fee",
    /// A skipped refund claim's hold returns to the merchant.
    InvoiceRefundSkip => "invoice_refund_skip",
    /// A refund claim's hold returns to `available` for its payout confirmed after all
    /// (a reorg let its transaction succeed), which takes it from there.
    InvoiceRefundRelease => "invoice_refund_release",
}

impl JournalKind {
    /// Whether the entry belongs to a conversion batch (`ref_id` is the batch).
    pub fn is_conversion(&self) -> bool {
        matches!(
            self,
            JournalKind::ConversionLock
                | JournalKind::ConversionSettle
                | JournalKind::ConversionRelease
        ) || matches!(self, JournalKind::Other(s) if s.starts_with("conversion_"))
    }
}

impl From<&str> for JournalKind {
    fn from(s: &str) -> Self {
        JournalKind::parse(s)
    }
}

impl std::fmt::Display for JournalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An immutable journal entry.
///
/// Stored (schema 12) with each account of the entry's own project in a short form,
/// `[customer or nil, chain, asset, kind]`, instead of its whole [`Account::key`]: the
/// project is the entry's, so it is not repeated, and a project-side account (customer nil)
/// takes a byte for its customer instead of 16 (about 47 bytes less per two-posting entry). An account of another project, and every account in human-readable formats,
/// keeps its form. Rows of earlier schemas (whole keys, or fields in JSON) read as before.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "JournalRow")]
pub struct JournalEntry {
    /// UUID v7; also the `ledger_tx_id` shown on deposits.
    pub id: Uuid,
    pub project_id: Uuid,
    /// What caused it.
    pub kind: JournalKind,
    /// The resource the entry is about.
    pub ref_id: Uuid,
    pub created_at: i64,
    pub postings: Vec<Posting>,
}

/// A journal entry as read: its accounts in the short form name no project yet.
#[derive(Deserialize)]
#[serde(rename = "JournalEntry")]
struct JournalRow {
    id: Uuid,
    project_id: Uuid,
    #[serde(deserialize_with = "crate::codec::read_journal_kind")]
    kind: String,
    ref_id: Uuid,
    created_at: i64,
    postings: Vec<Posting>,
}

impl TryFrom<JournalRow> for JournalEntry {
    type Error = &'static str;
    fn try_from(r: JournalRow) -> Result<Self, Self::Error> {
        let mut postings = r.postings;
        for i in 0..postings.len() {
            // Only the short form reads as nil: no project is ever nil.
            if postings[i].account.project_id.is_nil() {
                postings[i].account.project_id = r.project_id;
            }
            // Only the shortest form reads without a chain: no chain is ever empty.
            if postings[i].account.chain.is_empty() {
                let before = i
                    .checked_sub(1)
                    .map(|b| &postings[b].account)
                    .ok_or("a journal entry's first account names no chain")?;
                let (chain, asset) = (before.chain.clone(), before.asset.clone());
                postings[i].account.chain = chain;
                postings[i].account.asset = asset;
            }
        }
        Ok(JournalEntry {
            id: r.id,
            project_id: r.project_id,
            kind: JournalKind::parse(&r.kind),
            ref_id: r.ref_id,
            created_at: r.created_at,
            postings,
        })
    }
}

/// A journal entry as written (same fields and order as [`JournalEntry`]).
#[derive(Serialize)]
#[serde(rename = "JournalEntry")]
struct JournalOut<'a> {
    id: Uuid,
    project_id: Uuid,
    #[serde(serialize_with = "crate::codec::journal_kind")]
    kind: &'a str,
    ref_id: Uuid,
    created_at: i64,
    postings: EntryPostings<'a>,
}

/// An entry's postings as written, each account as [`EntryAccount`] (no list built).
struct EntryPostings<'a> {
    project: Uuid,
    postings: &'a [Posting],
}

impl Serialize for EntryPostings<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.postings.iter().enumerate().map(|(i, p)| PostingOut {
            account: EntryAccount {
                project: self.project,
                account: &p.account,
                before: i.checked_sub(1).map(|b| &self.postings[b].account),
            },
            debit: p.debit,
            credit: p.credit,
        }))
    }
}

/// A posting as written (same fields and order as [`Posting`]).
#[derive(Serialize)]
#[serde(rename = "Posting")]
struct PostingOut<'a> {
    account: EntryAccount<'a>,
    #[serde(serialize_with = "crate::codec::amount")]
    debit: u128,
    #[serde(serialize_with = "crate::codec::amount")]
    credit: u128,
}

/// An account as a journal entry of `project` writes it (see [`JournalEntry`]).
struct EntryAccount<'a> {
    project: Uuid,
    account: &'a Account,
    /// The account of the posting before, if any.
    before: Option<&'a Account>,
}

impl Serialize for EntryAccount<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let a = self.account;
        if s.is_human_readable() || a.project_id != self.project {
            return a.serialize(s);
        }
        let customer = (!a.customer_id.is_nil()).then_some(a.customer_id);
        if self.before.is_some_and(|b| {
            b.project_id == a.project_id && b.chain == a.chain && b.asset == a.asset
        }) {
            let mut t = s.serialize_tuple(2)?;
            t.serialize_element(&customer)?;
            t.serialize_element(&(a.kind as u8))?;
            return t.end();
        }
        let mut t = s.serialize_tuple(4)?;
        t.serialize_element(&customer)?;
        t.serialize_element(&a.chain)?;
        t.serialize_element(&a.asset)?;
        t.serialize_element(&(a.kind as u8))?;
        t.end()
    }
}

impl Serialize for JournalEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        JournalOut {
            id: self.id,
            project_id: self.project_id,
            kind: self.kind.as_str(),
            ref_id: self.ref_id,
            created_at: self.created_at,
            postings: EntryPostings {
                project: self.project_id,
                postings: &self.postings,
            },
        }
        .serialize(s)
    }
}

/// Posted totals of one account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Balance {
    pub debits: u128,
    pub credits: u128,
}

impl Balance {
    /// `credits - debits` for a credit-normal account (0 if the invariant were broken).
    pub fn credit_balance(&self) -> u128 {
        self.credits.saturating_sub(self.debits)
    }

    /// `debits - credits` as a signed decimal string (debit-normal accounts may be negative).
    pub fn debit_balance_string(&self) -> String {
        signed_string(self.debits, self.credits)
    }
}

/// `a - b` as a decimal string, exact for any pair of `u128`.
pub fn signed_string(a: u128, b: u128) -> String {
    if a >= b {
        (a - b).to_string()
    } else {
        format!("-{}", b - a)
    }
}

/// Why an entry was refused. Nothing is written when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    #[error("journal entry has no postings")]
    Empty,
    #[error("posting must have exactly one non-zero side")]
    BadPosting,
    #[error("postings for {chain}/{asset} do not balance: debits {debits}, credits {credits}")]
    Unbalanced {
        chain: String,
        asset: String,
        debits: u128,
        credits: u128,
    },
    #[error("account totals overflow")]
    Overflow,
    #[error("{kind:?} balance would go negative for {chain}/{asset}: have {have}, need {need}")]
    Insufficient {
        chain: String,
        asset: String,
        kind: AccountKind,
        have: u128,
        need: u128,
    },
}

/// Checks an entry's shape: non-empty, one side per posting, balanced per asset.
pub fn check_balanced(entry: &JournalEntry) -> Result<(), LedgerError> {
    if entry.postings.is_empty() {
        return Err(LedgerError::Empty);
    }
    let mut sums: std::collections::BTreeMap<(&str, &str), (u128, u128)> = Default::default();
    for p in &entry.postings {
        if (p.debit == 0) == (p.credit == 0) {
            return Err(LedgerError::BadPosting);
        }
        let s = sums
            .entry((&p.account.chain, &p.account.asset))
            .or_default();
        s.0 = s.0.checked_add(p.debit).ok_or(LedgerError::Overflow)?;
        s.1 = s.1.checked_add(p.credit).ok_or(LedgerError::Overflow)?;
    }
    for ((chain, asset), (d, c)) in sums {
        if d != c {
            return Err(LedgerError::Unbalanced {
                chain: chain.into(),
                asset: asset.into(),
                debits: d,
                credits: c,
            });
        }
    }
    Ok(())
}

/// Applies `entry` to `balances` (account -> totals), refusing any change that leaves a
/// credit-normal account with more debits than credits. Pure: the store calls it on the
/// balances it read, then writes the result.
pub fn apply(
    entry: &JournalEntry,
    balances: &mut std::collections::BTreeMap<Account, Balance>,
) -> Result<(), LedgerError> {
    check_balanced(entry)?;
    for p in &entry.postings {
        let b = balances.entry(p.account.clone()).or_default();
        b.debits = b.debits.checked_add(p.debit).ok_or(LedgerError::Overflow)?;
        b.credits = b
            .credits
            .checked_add(p.credit)
            .ok_or(LedgerError::Overflow)?;
    }
    for p in &entry.postings {
        let b = balances[&p.account];
        if p.account.kind.is_credit_normal() && b.debits > b.credits {
            return Err(LedgerError::Insufficient {
                chain: p.account.chain.clone(),
                asset: p.account.asset.clone(),
                kind: p.account.kind,
                have: b.credits.saturating_sub(b.debits.saturating_sub(p.debit)),
                need: p.debit,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn acct(c: u8, kind: AccountKind) -> Account {
        let cust = if c == 0 {
            Uuid::nil()
        } else {
            Uuid::from_u128(c as u128)
        };
        Account::customer(Uuid::from_u128(1), cust, "ethereum", "USDT", kind)
    }

    #[test]
    fn account_key_round_trips() {
        let a = acct(7, AccountKind::Locked);
        assert_eq!(Account::from_key(&a.key()), Some(a.clone()));
        assert!(a
            .key()
            .starts_with(&Account::customer_prefix(a.project_id, a.customer_id)));
    }

    /// The store's binary form of an account is its key; JSON keeps the fields; each
    /// reads back to the same account.
    #[test]
    fn accounts_serialize_as_keys_in_binary_and_fields_in_json() {
        let a = acct(7, AccountKind::Receivable);
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["kind"], "receivable");
        assert_eq!(json["chain"], "ethereum");
        assert_eq!(serde_json::from_value::<Account>(json).unwrap(), a);
        let bin = crate::codec::encode(&a);
        assert!(bin.len() < a.key().len() + 4, "{}", bin.len());
        assert_eq!(crate::codec::decode::<Account>(&bin).unwrap(), a);
        let old = crate::codec::encode_json_v1(&a);
        assert_eq!(crate::codec::decode::<Account>(&old).unwrap(), a);
        assert!(
            crate::codec::decode::<Account>(&crate::codec::encode(&b"short".as_slice())).is_err()
        );
    }

    /// Schema 12: a journal entry writes its own project's accounts in the short form (no
    /// project, a nil customer as one byte) and reads them back with the entry's project;
    /// an account of another project keeps its key; an entry written with whole keys (up to
    /// schema 11), named or positional, or as JSON, reads the same.
    #[test]
    fn journal_entries_store_their_own_projects_accounts_short() {
        let project = Uuid::now_v7();
        let customer = Account::customer(
            project,
            Uuid::now_v7(),
            "ethereum",
            "USDT",
            AccountKind::Available,
        );
        let deposits = Account::project(project, "ethereum", "USDT", AccountKind::Deposits);
        let e = JournalEntry {
            id: Uuid::now_v7(),
            project_id: project,
            kind: "deposit_credit".into(),
            ref_id: Uuid::now_v7(),
            created_at: 1_700_000_000_000_000,
            postings: vec![
                Posting::debit(deposits.clone(), 5_000_000),
                Posting::credit(customer.clone(), 5_000_000),
            ],
        };
        #[derive(Serialize)]
        #[serde(rename = "JournalEntry")]
        struct Whole<'a> {
            id: Uuid,
            project_id: Uuid,
            kind: &'a str,
            ref_id: Uuid,
            created_at: i64,
            postings: &'a [Posting],
        }
        let whole = Whole {
            id: e.id,
            project_id: e.project_id,
            kind: e.kind.as_str(),
            ref_id: e.ref_id,
            created_at: e.created_at,
            postings: &e.postings,
        };
        let short = crate::codec::encode_positional(&e);
        let old = crate::codec::encode_positional(&whole);
        assert!(
            short.len() + 45 <= old.len(),
            "{} vs {}",
            short.len(),
            old.len()
        );
        for bytes in [
            short,
            old,
            crate::codec::encode(&e),
            crate::codec::encode(&whole),
            crate::codec::encode_json_v1(&e),
        ] {
            assert_eq!(crate::codec::decode::<JournalEntry>(&bytes).unwrap(), e);
        }
        assert_eq!(
            serde_json::to_value(&e).unwrap()["postings"][0]["account"]["chain"],
            "ethereum"
        );

        // An account of another project is written whole and reads as itself.
        let mut mixed = e.clone();
        mixed.postings[0].account.project_id = Uuid::now_v7();
        let bytes = crate::codec::encode_positional(&mixed);
        assert_eq!(crate::codec::decode::<JournalEntry>(&bytes).unwrap(), mixed);
        // A short account with an unknown kind does not read.
        let mut bad = e.clone();
        bad.postings[1].account.kind = AccountKind::Treasury;
        let mut bytes = crate::codec::encode_positional(&bad);
        let at = bytes
            .iter()
            .rposition(|b| *b == AccountKind::Treasury as u8)
            .unwrap();
        bytes[at] = 99;
        assert!(crate::codec::decode::<JournalEntry>(&bytes).is_err());
    }

    /// A short account of the chain and asset of the posting before is written as
    /// `[customer, kind]` (schema 14): each chain and asset is stored once per run of
    /// postings that share them, and reads back whole; entries of schema 13 (every account
    /// with its chain and asset) read the same; a first account without a chain is refused.
    #[test]
    fn journal_entries_name_a_repeated_chain_and_asset_once() {
        use crate::codec::{decode, encode_positional};
        let project = Uuid::now_v7();
        let customer = Uuid::now_v7();
        let acct = |c: Uuid, chain: &str, asset: &str, kind| {
            Account::customer(project, c, chain, asset, kind)
        };
        let entry = |postings: Vec<Posting>| JournalEntry {
            id: Uuid::now_v7(),
            project_id: project,
            kind: "deposit_credit".into(),
            ref_id: Uuid::now_v7(),
            created_at: 1_700_000_000_000_000,
            postings,
        };
        let count =
            |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).filter(|w| *w == needle).count();
        let e = entry(vec![
            Posting::debit(
                acct(Uuid::nil(), "ethereum", "USDT", AccountKind::Deposits),
                7,
            ),
            Posting::credit(
                acct(customer, "ethereum", "USDT", AccountKind::Available),
                7,
            ),
        ]);
        let bytes = encode_positional(&e);
        assert_eq!((count(&bytes, b"ethereum"), count(&bytes, b"USDT")), (1, 1));
        assert_eq!(decode::<JournalEntry>(&bytes).unwrap(), e);
        // Three postings: the chain repeats, the asset changes, then repeats.
        let three = entry(vec![
            Posting::debit(
                acct(Uuid::nil(), "ethereum", "ETH", AccountKind::Deposits),
                9,
            ),
            Posting::credit(
                acct(customer, "ethereum", "USDT", AccountKind::Available),
                5,
            ),
            Posting::credit(
                acct(Uuid::nil(), "ethereum", "USDT", AccountKind::Operator),
                4,
            ),
        ]);
        let bytes = encode_positional(&three);
        assert_eq!((count(&bytes, b"ethereum"), count(&bytes, b"USDT")), (2, 1));
        assert_eq!(decode::<JournalEntry>(&bytes).unwrap(), three);
        // After an account of another project (written whole), the short form still names
        // only what differs.
        let mut mixed = e.clone();
        mixed.postings[0].account.project_id = Uuid::now_v7();
        let bytes = encode_positional(&mixed);
        assert_eq!(decode::<JournalEntry>(&bytes).unwrap(), mixed);
        // As schema 13 wrote it: every short account with its chain and asset.
        type Short<'a> = (Option<Uuid>, &'a str, &'a str, u8);
        let old = encode_positional(&(
            e.id,
            e.project_id,
            0u8,
            e.ref_id,
            e.created_at,
            vec![
                (
                    (
                        None::<Uuid>,
                        "ethereum",
                        "USDT",
                        AccountKind::Deposits as u8,
                    ) as Short,
                    7u64,
                    0u64,
                ),
                (
                    (
                        Some(customer),
                        "ethereum",
                        "USDT",
                        AccountKind::Available as u8,
                    ),
                    0,
                    7,
                ),
            ],
        ));
        assert_eq!(decode::<JournalEntry>(&old).unwrap(), e);
        assert!(old.len() >= encode_positional(&e).len() + 14);
        // A first account that names no chain does not read.
        let bad = encode_positional(&(
            e.id,
            e.project_id,
            0u8,
            e.ref_id,
            e.created_at,
            vec![((None::<Uuid>, AccountKind::Deposits as u8), 7u64, 0u64)],
        ));
        assert!(decode::<JournalEntry>(&bad).is_err());
    }

    /// A journal entry's kind of `codec::JOURNAL_KIND_CODES` is stored as its one-byte
    /// number and reads back as its text; an unlisted kind is stored as text; JSON keeps
    /// the text; a number past the list is corrupt. (Rows with the text, schema 12 and
    /// before, read: the test above.)
    #[test]
    fn journal_kinds_are_stored_as_their_numbers() {
        use crate::codec::{decode, encode_positional, JOURNAL_KIND_CODES};
        let project = Uuid::now_v7();
        let entry = |kind: &str| JournalEntry {
            id: Uuid::now_v7(),
            project_id: project,
            kind: kind.into(),
            ref_id: Uuid::now_v7(),
            created_at: 1,
            postings: vec![],
        };
        assert_eq!(JOURNAL_KIND_CODES[0], "deposit_credit");
        assert_eq!(JOURNAL_KIND_CODES[7], "sweep_revert");
        for k in JOURNAL_KIND_CODES.iter().copied().chain(["some_new_kind"]) {
            let e = entry(k);
            assert_eq!(decode::<JournalEntry>(&encode_positional(&e)).unwrap(), e);
            assert_eq!(serde_json::to_value(&e).unwrap()["kind"], k);
        }
        let coded = encode_positional(&entry("payout_settle"));
        let text = encode_positional(&entry("payout_settlx"));
        assert_eq!(coded.len() + "payout_settle".len(), text.len());
        // version, array, id (18), project (18), then the kind's number
        let at = 2 + 18 + 18;
        assert_eq!(coded[at], 3);
        let mut bad = coded.clone();
        bad[at] = 0x7f;
        assert!(decode::<JournalEntry>(&bad).is_err());
    }

    /// Every listed kind reads back as itself, not as `Other`; every stored number names a
    /// listed kind; an unlisted name stays readable as `Other`.
    #[test]
    fn journal_kinds_parse_back_and_unknown_names_stay_readable() {
        use crate::codec::JOURNAL_KIND_CODES;
        for name in JOURNAL_KIND_CODES {
            let k = JournalKind::parse(name);
            assert!(!matches!(k, JournalKind::Other(_)), "{name}");
            assert_eq!(k.as_str(), *name);
        }
        for k in [
            JournalKind::PayoutUnsettle,
            JournalKind::InvoiceRefundRelease,
        ] {
            assert_eq!(JournalKind::parse(k.as_str()), k);
        }
        assert_eq!(
            JournalKind::parse("some_new_kind"),
            JournalKind::Other("some_new_kind".into())
        );
        assert!(JournalKind::ConversionSettle.is_conversion());
        assert!(!JournalKind::PayoutSettle.is_conversion());
    }

    #[test]
    fn holding_keys_sit_beside_the_customers_accounts_and_parse_back() {
        let a = acct(7, AccountKind::Available);
        let w = Uuid::now_v7();
        let k = holding_key(a.project_id, a.customer_id, &a.chain, &a.asset, w);
        assert!(k.starts_with(&Account::customer_prefix(a.project_id, a.customer_id)));
        assert!(k > acct(7, AccountKind::Receivable).key());
        assert_eq!(Account::from_key(&k), None);
        assert_eq!(
            parse_holding_key(&k),
            Some((
                a.project_id,
                a.customer_id,
                a.chain.clone(),
                a.asset.clone(),
                w
            ))
        );
        assert_eq!(parse_holding_key(&a.key()), None);
    }

    #[test]
    fn unbalanced_entry_is_refused() {
        let e = JournalEntry {
            id: Uuid::now_v7(),
            project_id: Uuid::from_u128(1),
            kind: "t".into(),
            ref_id: Uuid::nil(),
            created_at: 0,
            postings: vec![
                Posting::debit(acct(0, AccountKind::Deposits), 5),
                Posting::credit(acct(1, AccountKind::Available), 4),
            ],
        };
        assert!(matches!(
            check_balanced(&e),
            Err(LedgerError::Unbalanced { .. })
        ));
    }

    /// One step of a random workload over a few customers.
    #[derive(Debug, Clone)]
    enum Op {
        Deposit(u8, u64),
        Lock(u8, u64),
        Settle(u8, u64),
        Release(u8, u64),
        Sweep(u64),
        Reverse(u8, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u8..4, 1u64..1_000_000).prop_map(|(c, a)| Op::Deposit(c, a)),
            (1u8..4, 1u64..1_000_000).prop_map(|(c, a)| Op::Lock(c, a)),
            (1u8..4, 1u64..1_000_000).prop_map(|(c, a)| Op::Settle(c, a)),
            (1u8..4, 1u64..1_000_000).prop_map(|(c, a)| Op::Release(c, a)),
            (1u64..1_000_000).prop_map(Op::Sweep),
            (1u8..4, 1u64..1_000_000).prop_map(|(c, a)| Op::Reverse(c, a)),
        ]
    }

    fn entry(postings: Vec<Posting>) -> JournalEntry {
        JournalEntry {
            id: Uuid::now_v7(),
            project_id: Uuid::from_u128(1),
            kind: "t".into(),
            ref_id: Uuid::nil(),
            created_at: 0,
            postings,
        }
    }

    proptest! {
        /// Every accepted entry balances, the sum over all accounts is zero, and no
        /// available or locked balance ever goes negative, whatever the sequence of
        /// (possibly over-drawing) operations.
        #[test]
        fn ledger_invariants_hold(ops in proptest::collection::vec(op(), 1..200)) {
            use AccountKind::*;
            let mut balances: BTreeMap<Account, Balance> = BTreeMap::new();
            let mut journal = Vec::new();
            for op in ops {
                let amount = |a: u64| a as u128;
                let e = match op {
                    Op::Deposit(c, a) => entry(vec![
                        Posting::debit(acct(0, Deposits), amount(a)),
                        Posting::credit(acct(c, Available), amount(a)),
                    ]),
                    Op::Lock(c, a) => entry(vec![
                        Posting::debit(acct(c, Available), amount(a)),
                        Posting::credit(acct(c, Locked), amount(a)),
                    ]),
                    Op::Settle(c, a) => entry(vec![
                        Posting::debit(acct(c, Locked), amount(a)),
                        Posting::credit(acct(0, Treasury), amount(a)),
                    ]),
                    Op::Release(c, a) => entry(vec![
                        Posting::debit(acct(c, Locked), amount(a)),
                        Posting::credit(acct(c, Available), amount(a)),
                    ]),
                    Op::Sweep(a) => entry(vec![
                        Posting::debit(acct(0, InTransit), amount(a)),
                        Posting::credit(acct(0, Deposits), amount(a)),
                    ]),
                    Op::Reverse(c, a) => {
                        let have = balances.get(&acct(c, Available)).map(|b| b.credit_balance()).unwrap_or(0);
                        let from_avail = have.min(amount(a));
                        let mut p = vec![Posting::credit(acct(0, Deposits), amount(a))];
                        if from_avail > 0 { p.push(Posting::debit(acct(c, Available), from_avail)); }
                        if amount(a) > from_avail { p.push(Posting::debit(acct(c, Receivable), amount(a) - from_avail)); }
                        entry(p)
                    }
                };
                let mut trial = balances.clone();
                if apply(&e, &mut trial).is_ok() {
                    balances = trial;
                    journal.push(e);
                }
            }
            for e in &journal {
                prop_assert!(check_balanced(e).is_ok());
            }
            let mut net: i128 = 0;
            for (a, b) in &balances {
                net += b.debits as i128 - b.credits as i128;
                if a.kind.is_credit_normal() {
                    prop_assert!(b.credits >= b.debits, "{a:?} negative");
                }
            }
            prop_assert_eq!(net, 0);
            // Replaying the journal from zero gives the same balances.
            let mut replay = BTreeMap::new();
            for e in &journal { apply(e, &mut replay).unwrap(); }
            prop_assert_eq!(replay, balances);
        }
    }
}
