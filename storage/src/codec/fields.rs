//! The field codecs the records name in `#[serde(with)]` (or `serialize_with`): each
//! stores one kind of field more compactly than its text (amounts, event ids and types,
//! journal kinds, deflated answers and outgoing transactions, UUID and hex texts, request
//! fingerprints) and reads back every form stored before.

use super::*;

/// `#[serde(serialize_with = "crate::codec::amount")]` for a `u128` amount: in the store's
/// binary encoding an amount that fits 64 bits is a MessagePack integer (1-9 bytes) rather
/// than rmp-serde's 16-byte binary for every `u128` (18 bytes). The derived `Deserialize`
/// reads both forms (rmp-serde's `u128` accepts any integer), and JSON is unchanged.
pub fn amount<S: serde::Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
    match u64::try_from(*v) {
        Ok(small) if !s.is_human_readable() => s.serialize_u64(small),
        _ => s.serialize_u128(*v),
    }
}

/// `#[serde(with = "crate::codec::event_id_field")]` for an event's id: in the store's binary
/// encoding an id `evt_` + ULID in its canonical form is the ULID's 16 bytes (18 bytes written
/// instead of 31); any other string, and every human-readable form, is the string.
pub fn event_id<S: serde::Serializer, T: AsRef<str>>(id: &T, s: S) -> Result<S::Ok, S::Error> {
    let id = id.as_ref();
    if !s.is_human_readable() {
        match short_event_id_parts(id) {
            Some((random, false)) => return s.serialize_bytes(&random),
            Some((random, true)) => {
                let mut b = [0u8; SHORT_EVENT_ID_BYTES + 1];
                b[0] = SHORT_EVENT_ID_REL_MARK;
                b[1..].copy_from_slice(&random);
                return s.serialize_bytes(&b);
            }
            None => {}
        }
        if let Some(u) = id.strip_prefix("evt_").and_then(|rest| {
            ulid::Ulid::from_string(rest)
                .ok()
                .filter(|u| u.to_string() == rest)
        }) {
            return s.serialize_bytes(&u.to_bytes());
        }
    }
    s.serialize_str(id)
}

/// Reads what [`event_id`] writes: a string, 16 bytes (`evt_` + the ULID), or the 5 random
/// bytes of a short id ([`SHORT_EVENT_ID`] + their hex, which the store's reader makes
/// whole from the event's time and sequence, `ctx::event_id_in_full`).
pub fn read_event_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(StrOrBytes(|b| match b.len() {
        SHORT_EVENT_ID_BYTES => Some(short_event_id(b.try_into().ok()?, false)),
        n if n == SHORT_EVENT_ID_BYTES + 1 && b[0] == SHORT_EVENT_ID_REL_MARK => {
            Some(short_event_id(b[1..].try_into().ok()?, true))
        }
        _ => Some(format!(
            "evt_{}",
            ulid::Ulid::from_bytes(b.try_into().ok()?)
        )),
    }))
}

/// Prefix of an event id read in short form (schema 14): the id's ULID is the event's
/// millisecond, its sequence and these random bits (`ctx::event_ulid`), so the row stores
/// only the random bits, 7 bytes instead of 18; the store's reader makes the id whole
/// (`ctx::event_id_in_full`) and its writer shortens it (`ctx::event_id_in_short`). Never
/// shown: no reader returns an event before making its id whole.
pub const SHORT_EVENT_ID: &str = "evt~";

/// Bytes of a short event id: the ULID's 40 random bits.
pub const SHORT_EVENT_ID_BYTES: usize = 5;

/// Prefix of a short event id (schema 15) whose row stores `created_at` as its distance in
/// microseconds from the millisecond of the event's resource, a UUID v7 (a few bytes
/// instead of 9; `ctx::event_id_in_short`, `ctx::event_id_in_full`). Stored as
/// [`SHORT_EVENT_ID_REL_MARK`] and the 5 random bytes. Never shown, like [`SHORT_EVENT_ID`].
pub const SHORT_EVENT_ID_REL: &str = "evt=";

/// First of the 6 bytes of a [`SHORT_EVENT_ID_REL`] id.
const SHORT_EVENT_ID_REL_MARK: u8 = 1;

/// The short event id of `random`, [`SHORT_EVENT_ID_REL`] when its row's time is `relative`
/// (else [`SHORT_EVENT_ID`]).
pub fn short_event_id(random: [u8; SHORT_EVENT_ID_BYTES], relative: bool) -> String {
    let prefix = if relative {
        SHORT_EVENT_ID_REL
    } else {
        SHORT_EVENT_ID
    };
    format!("{prefix}{}", hex::encode(random))
}

/// A short event id's random bytes and whether its row's time is relative
/// ([`short_event_id`]'s inverse); `None` for any other id.
pub fn short_event_id_parts(id: &str) -> Option<([u8; SHORT_EVENT_ID_BYTES], bool)> {
    let (digits, relative) = match id.strip_prefix(SHORT_EVENT_ID) {
        Some(d) => (d, false),
        None => (id.strip_prefix(SHORT_EVENT_ID_REL)?, true),
    };
    let mut b = [0u8; SHORT_EVENT_ID_BYTES];
    hex::decode_to_slice(digits, &mut b).ok()?;
    Some((b, relative))
}

/// Every event type the appliance emits or SPEC.md section 6 lists: the binary's event
/// catalog (`services::EVENT_CATALOG` is this list), and the numbers an event row stores
/// its type as (its position here; schema 13): one byte where the type's text
/// took 14-26. The stored rows depend on the positions: append new types at the end, never
/// reorder or remove one. A type not listed ([`crate::records::BILLING_LINE`], which is
/// not an event of the catalog) is stored as its text; every build reads both.
pub const EVENT_TYPE_CODES: &[&str] = &[
    "customer.created",
    "customer.updated",
    "wallet.created",
    "deposit.detected",
    "deposit.confirmed",
    "deposit.failed",
    "deposit.orphaned",
    "payout.created",
    "payout.approved",
    "payout.signing",
    "payout.submitted",
    "payout.confirmed",
    "payout.failed",
    "payout.canceled",
    "payout.rejected",
    "sweep.submitted",
    "sweep.confirmed",
    "sweep.skipped",
    "sweep.failed",
    "invoice.created",
    "invoice.pending",
    "invoice.paid",
    "invoice.underpaid",
    "invoice.overpaid",
    "invoice.expired",
    "invoice.canceled",
    "invoice.late_payment",
    "invoice.payment_orphaned",
    "invoice.refunded",
    "conversion.completed",
    "billing.plan_activated",
    "endpoint.test",
];

/// `#[serde(with = "crate::codec::event_type_field")]` for an event's type: in the store's binary
/// encoding a type of [`EVENT_TYPE_CODES`] is its position there (one byte); any other type, and
/// every human-readable form, is its text.
pub fn event_type<S: serde::Serializer, T: AsRef<str>>(t: &T, s: S) -> Result<S::Ok, S::Error> {
    listed_text(EVENT_TYPE_CODES, t.as_ref(), s)
}

/// Reads what [`event_type`] writes: a text, or a number of [`EVENT_TYPE_CODES`] (any
/// other number is an error: the row is from a newer build or damaged).
pub fn read_event_type<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read_listed_text(d, "event type", |n| listed(EVENT_TYPE_CODES, n))
}

/// The kinds of journal entry a row stores as their number in this list (schema 13, issue
/// 16; `ledger::JournalEntry::kind`): one byte where the text took 11-19. Stored: append
/// new kinds at the end, never reorder or remove one. A kind not listed is stored as text.
pub const JOURNAL_KIND_CODES: &[&str] = &[
    "deposit_credit",
    "deposit_reversal",
    "payout_lock",
    "payout_settle",
    "payout_release",
    "sweep_submit",
    "sweep_settle",
    "sweep_revert",
    "conversion_lock",
    "conversion_settle",
    "conversion_release",
    "invoice_refund_hold",
    "invoice_refund_fee",
    "invoice_refund_skip",
];

/// [`event_type`] for a journal entry's kind ([`JOURNAL_KIND_CODES`]).
pub fn journal_kind<S: serde::Serializer, T: AsRef<str>>(k: &T, s: S) -> Result<S::Ok, S::Error> {
    listed_text(JOURNAL_KIND_CODES, k.as_ref(), s)
}

/// Reads what [`journal_kind`] writes.
pub fn read_journal_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read_listed_text(d, "journal entry kind", |n| listed(JOURNAL_KIND_CODES, n))
}

/// `t` as its position in `list` (one byte) in binary encodings when listed there, else
/// (and in every human-readable form) as its text.
fn listed_text<S: serde::Serializer>(list: &[&str], t: &str, s: S) -> Result<S::Ok, S::Error> {
    if !s.is_human_readable() {
        if let Some(code) = list.iter().position(|c| *c == t) {
            return s.serialize_u8(code as u8);
        }
    }
    s.serialize_str(t)
}

/// The visitor of a value stored as a name or a number: the records' `coded_serde!`
/// enums and [`read_listed_text`].
pub(crate) struct NameOrCode<T> {
    pub what: &'static str,
    pub name: fn(&str) -> Option<T>,
    pub code: fn(u64) -> Option<T>,
}

impl<T> serde::de::Visitor<'_> for NameOrCode<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} (a name or a number)", self.what)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        (self.name)(v).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
        (self.code)(v).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
        }
    }
}

/// Reads what [`listed_text`] writes: a text, or a number that `code` names
/// ([`listed`]).
fn read_listed_text<'de, D: serde::Deserializer<'de>>(
    d: D,
    what: &'static str,
    code: fn(u64) -> Option<String>,
) -> Result<String, D::Error> {
    d.deserialize_any(NameOrCode {
        what,
        name: |t| Some(t.to_string()),
        code,
    })
}

/// The text at position `n` of `list`.
fn listed(list: &[&str], n: u64) -> Option<String> {
    list.get(usize::try_from(n).ok()?).map(|t| t.to_string())
}

/// Marker of an answer body stored deflated with [`ANSWER_DICT_1`] ([`answer_body`]).
pub(super) const ANSWER_DEFLATE_1: u8 = 1;

/// Marker of a JSON document stored deflated with [`OUT_TX_DICT_1`] ([`deflate_doc`]): the
/// live sender's outgoing-transaction rows (schema 12).
pub const OUT_TX_DEFLATE_1: u8 = 2;

/// The preset dictionary of stored answer bodies of marker [`ANSWER_DEFLATE_1`]: the JSON
/// of the resources idempotent requests answer most (errors, wallets, customers, deposits,
/// payouts last: deflate finds the nearest match first). Stored rows depend on these exact
/// bytes: never change them (a test pins their hash); a better dictionary takes a new
/// marker and this one stays for the rows written with it.
pub(super) const ANSWER_DICT_1: &[u8] = br#"{"error":{"code":"invalid_request","message":"","param":"","type":"invalid_request_error"}}{"address":"0x","chain":"ethereum","created_at":"2026-01-01T00:00:00.000Z","customer_id":"","id":"","memo":null,"object":"wallet","role":"deposit","status":"active"}{"created_at":"2026-01-01T00:00:00.000Z","email":null,"id":"","metadata":{},"object":"customer","reference_id":null,"status":"active"}{"amount":"","amount_decimal":"","asset":{"chain":"ethereum","contract":"0x","decimals":6,"symbol":"USDT"},"block_number":,"block_time":"","chain":"ethereum","confirmations":0,"created_at":"","customer_id":"","explorer_url":null,"failure_reason":null,"from_address":"0x","id":"","ledger_tx_id":null,"log_index":0,"object":"deposit","required_confirmations":,"status":"detected","to_address":"0x","tx_hash":"0x","wallet_id":""}{"amount":"","amount_decimal":"","amount_usd":null,"asset":"USDT","asset_id":"","chain":"ethereum","created_at":"2026-01-01T00:00:00.000Z","customer_id":"","decimals":6,"explorer_url":null,"failure_reason":null,"fee_amount":"0","fee_amount_decimal":"0","id":"","memo":null,"object":"payout","reference":null,"status":"queued","to_address":"0x","tx_hash":null,"updated_at":"2026-01-01T00:00:00.000Z"}"#;

/// The preset dictionary of outgoing-transaction rows of marker [`OUT_TX_DEFLATE_1`]: their
/// JSON shape (`OutTx` of the sender) with an ERC-20 transfer's calldata and the start of a
/// signed EIP-1559 transaction. Never change it (a test pins its hash); see
/// [`ANSWER_DICT_1`].
pub(super) const OUT_TX_DICT_1: &[u8] = br#"{"nonce":0,"kind":"sweep","ref_id":"","project_id":"","to":"0x","value":"0","data":"","gas_limit":100000,"max_fee_per_gas":"","max_priority_fee_per_gas":"","raws":["02f8"],"hashes":["0x"],"sent_at":0,"done":true,"mined":{"hash":"0x","block":0,"filler":false},"settled":true,"filler_raws":[],"filler_hashes":[]}{"nonce":0,"kind":"payout","ref_id":"","project_id":"","to":"0x","value":"0","data":"a9059cbb000000000000000000000000","gas_limit":100000,"max_fee_per_gas":"1000000000","max_priority_fee_per_gas":"1000000000","raws":["02f8b1018084773594008477359400830186a094","02f8b1018084773594008477359400830186a094"],"hashes":["0x"],"sent_at":0,"done":false,"mined":null,"settled":null,"filler_raws":[],"filler_hashes":[]}"#;

/// Most bytes of a document [`deflate_doc`] compresses or [`stored_doc`] inflates: far
/// above any answer or row stored this way; a row that claims more is refused as corrupt
/// instead of filling memory.
pub(super) const DOC_MAX: usize = 4 << 20;

/// The preset dictionary of `marker`, if it is one.
fn dictionary(marker: u8) -> Option<&'static [u8]> {
    match marker {
        ANSWER_DEFLATE_1 => Some(ANSWER_DICT_1),
        OUT_TX_DEFLATE_1 => Some(OUT_TX_DICT_1),
        _ => None,
    }
}

thread_local! {
    /// The thread's compressor, reset for each document: a new one allocates and clears
    /// zlib's window and hash tables, about half the cost of deflating a payout's answer on
    /// the store writer's thread.
    static COMPRESS: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(flate2::Compression::default(), false));
}

/// `marker ‖` raw deflate of `doc` with `marker`'s preset dictionary, when shorter than
/// `doc` (`None` otherwise, or for an unknown marker or a document over [`DOC_MAX`]). For
/// an idempotent answer ([`answer_body`]) and for rows whose JSON the store keeps opaque
/// (schema 12: the sender's outgoing transactions); [`stored_doc`] reads it back.
pub fn deflate_doc(marker: u8, doc: &[u8]) -> Option<Vec<u8>> {
    use flate2::{FlushCompress, Status};
    let dict = dictionary(marker)?;
    if doc.len() > DOC_MAX {
        return None;
    }
    COMPRESS.with_borrow_mut(|c| {
        c.reset();
        c.set_dictionary(dict).ok()?;
        // Deflate never grows data by more than a few bytes per 16 KiB block: one call
        // with this much room finishes the stream, and anything else keeps the text.
        let mut out = Vec::with_capacity(1 + doc.len() + doc.len() / 1024 + 64);
        out.push(marker);
        match c.compress_vec(doc, &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) if out.len() < doc.len() => Some(out),
            _ => None,
        }
    })
}

/// A stored JSON document: `stored` itself when it is JSON text (a first byte of `{`, as
/// every row before schema 12), else what [`deflate_doc`] wrote, inflated; `None` when it
/// is neither (an unknown marker, a stream that does not end, more than [`DOC_MAX`]).
pub fn stored_doc(stored: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    match stored.first() {
        Some(b'{') => Some(std::borrow::Cow::Borrowed(stored)),
        _ => inflate(stored).map(std::borrow::Cow::Owned),
    }
}

/// The bytes `marker ‖ deflate` of [`deflate_doc`] stand for (see [`stored_doc`]).
fn inflate(stored: &[u8]) -> Option<Vec<u8>> {
    use flate2::{Decompress, FlushDecompress, Status};
    let (&marker, z) = stored.split_first()?;
    let dict = dictionary(marker)?;
    let mut d = Decompress::new(false);
    d.set_dictionary(dict).ok()?;
    let mut out = Vec::with_capacity((z.len() * 6).clamp(256, DOC_MAX));
    loop {
        let read = usize::try_from(d.total_in()).ok()?;
        match d.decompress_vec(&z[read..], &mut out, FlushDecompress::Finish) {
            Ok(Status::StreamEnd) => break,
            Ok(_) if out.len() == out.capacity() && out.len() < DOC_MAX => {
                // Exact: the capacity, which bounds what the next call writes, never
                // passes the bound.
                out.reserve_exact(out.len().min(DOC_MAX - out.len()));
            }
            _ => return None,
        }
    }
    (out.len() <= DOC_MAX).then_some(out)
}

/// `#[serde(with = "crate::codec::answer_body_field")]` for the JSON body of a stored idempotent
/// answer (schema 12): in the store's binary encoding, [`ANSWER_DEFLATE_1`] ‖ the body as raw
/// deflate with the preset dictionary [`ANSWER_DICT_1`] when that is shorter (a payout's answer:
/// about 560 bytes to about 120), else the string; every human-readable form is the string. A
/// replay answers exactly the bytes first sent.
pub fn answer_body<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    if !s.is_human_readable() {
        if let Some(z) = deflate_doc(ANSWER_DEFLATE_1, v.as_bytes()) {
            return s.serialize_bytes(&z);
        }
    }
    s.serialize_str(v)
}

/// Reads what [`answer_body`] writes: a string, or a marker and deflated bytes.
pub fn read_answer_body<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON body as text or deflated bytes")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
            Ok(v)
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<String, E> {
            inflate_answer(v).ok_or_else(|| E::custom("stored answer body does not inflate"))
        }
    }
    d.deserialize_any(V)
}

/// The body [`answer_body`] wrote as bytes; `None` for anything else (another marker, a
/// stream that does not end, more than [`DOC_MAX`] bytes, or not UTF-8).
pub(super) fn inflate_answer(stored: &[u8]) -> Option<String> {
    if stored.first() != Some(&ANSWER_DEFLATE_1) {
        return None;
    }
    String::from_utf8(inflate(stored)?).ok()
}

/// `#[serde(with = "crate::codec::uuid_text_field")]` for a text field that usually holds a UUID
/// (an event's `resource_id`): in the store's binary encoding a UUID in its canonical form
/// (lower-case, hyphenated) is its 16 bytes (18 bytes written instead of 38); any other string, and
/// every human-readable form, is the string.
pub fn uuid_text<S: serde::Serializer, T: AsRef<str>>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    let v = v.as_ref();
    if !s.is_human_readable() {
        if let Some(u) = canonical_uuid(v) {
            return s.serialize_bytes(u.as_bytes());
        }
    }
    s.serialize_str(v)
}

/// The UUID `s` spells in its canonical text (lower-case, hyphenated), which reads back
/// from its 16 bytes as `s` exactly; `None` for any other string.
pub fn canonical_uuid(s: &str) -> Option<Uuid> {
    let u = Uuid::try_parse(s).ok()?;
    (u.hyphenated().encode_lower(&mut Uuid::encode_buffer()) == s).then_some(u)
}

/// The millisecond a UUID v7 was minted at (its top 48 bits; any UUID gives a number).
pub fn uuid_ms(u: Uuid) -> u64 {
    (u.as_u128() >> 80) as u64
}

/// Reads what [`uuid_text`] writes: a string, or 16 bytes (the UUID, hyphenated).
pub fn read_uuid_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(StrOrBytes(|b| Some(Uuid::from_slice(b).ok()?.to_string())))
}

/// A visitor of a string, or of bytes rendered as a string by its function (`None`: bytes
/// of a length it does not read).
struct StrOrBytes(fn(&[u8]) -> Option<String>);

impl serde::de::Visitor<'_> for StrOrBytes {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string or its bytes")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<String, E> {
        (self.0)(v).ok_or_else(|| E::invalid_length(v.len(), &self))
    }
}

/// The prefix of an idempotency record's request fingerprint (the binary's
/// `api::extract::Fingerprint`: `v2:` and the hex SHA-256 of the canonical body).
const FINGERPRINT_V2: &str = "v2:";

/// `#[serde(with = "crate::codec::fingerprint_field")]` for an idempotency record's request
/// fingerprint (schema 15): in the store's binary encoding `v2:` and 64 lower-case
/// hex digits are written as the 32 bytes they spell (34 bytes instead of 69); any other
/// string (an older record's bare hex), and every human-readable form, is the string.
pub fn fingerprint_text<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    if !s.is_human_readable() {
        let digest = v
            .strip_prefix(FINGERPRINT_V2)
            .filter(|d| d.len() == 64 && d.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
            .and_then(|d| hex::decode(d).ok());
        if let Some(b) = digest {
            return s.serialize_bytes(&b);
        }
    }
    s.serialize_str(v)
}

/// Reads what [`fingerprint_text`] writes: a string, or 32 bytes (`v2:` and their hex).
pub fn read_fingerprint_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(StrOrBytes(|b| {
        (b.len() == 32).then(|| format!("{FINGERPRINT_V2}{}", hex::encode(b)))
    }))
}

/// Most hex digits (after `0x`) that [`hex_text`] stores as bytes: a 32-byte hash.
pub(super) const HEX_TEXT_MAX_DIGITS: usize = 64;

/// Serializes a `0x` hex string (a transaction hash, an EVM address: `0x` and an even
/// number, 2 to 64, of hex digits) as bytes in binary encodings (schema 10):
/// `0 ‖ bytes` when its digits are all lower case, `1 ‖ bytes ‖ case mask` otherwise (bit
/// `i` of the mask, least significant first, set when digit `i` is upper case: an EIP-55
/// checksummed address reads back exactly as written). A 32-byte hash takes 35 bytes
/// instead of 67, an address 23 or 26 instead of 43. Any other string, and every string in
/// JSON, is written as it is. Read with [`read_hex_text`].
pub fn hex_text<S: serde::Serializer, T: AsRef<str>>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    let v = v.as_ref();
    if !s.is_human_readable() {
        if let Some((b, len)) = hex_text_bytes(v) {
            return s.serialize_bytes(&b[..len]);
        }
    }
    s.serialize_str(v)
}

/// [`hex_text`] of an optional string.
pub fn hex_text_opt<S: serde::Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    struct HexText<'a>(&'a str);
    impl Serialize for HexText<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            hex_text(&self.0, s)
        }
    }
    match v {
        Some(v) => s.serialize_some(&HexText(v)),
        None => s.serialize_none(),
    }
}

/// Reads what [`hex_text`] writes: a string, or its bytes (the same string back).
pub fn read_hex_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(StrOrHex)
}

/// Reads what [`hex_text_opt`] writes.
pub fn read_hex_text_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    struct HexString(String);
    impl<'de> serde::Deserialize<'de> for HexString {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            read_hex_text(d).map(HexString)
        }
    }
    Ok(<Option<HexString> as serde::Deserialize>::deserialize(d)?.map(|h| h.0))
}

/// Most bytes [`hex_text`] writes for one string: the tag, 32 bytes and a 64-bit case mask.
const HEX_TEXT_MAX_BYTES: usize = 1 + HEX_TEXT_MAX_DIGITS / 2 + HEX_TEXT_MAX_DIGITS / 8;

/// The value of one hex digit; `None` for any other byte.
fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The bytes [`hex_text`] stores for `v` (in a buffer and its length), when `v` has that
/// shape. One pass over the digits, nothing allocated: it runs for every hash and address
/// of every row a writer encodes.
pub(super) fn hex_text_bytes(v: &str) -> Option<([u8; HEX_TEXT_MAX_BYTES], usize)> {
    let digits = v.strip_prefix("0x")?.as_bytes();
    if digits.is_empty() || digits.len() % 2 != 0 || digits.len() > HEX_TEXT_MAX_DIGITS {
        return None;
    }
    let n = digits.len() / 2;
    let mut out = [0u8; HEX_TEXT_MAX_BYTES];
    let mut mask = 0u64;
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[1 + i] = hex_digit(pair[0])? << 4 | hex_digit(pair[1])?;
        mask |= u64::from(pair[0].is_ascii_uppercase()) << (2 * i);
        mask |= u64::from(pair[1].is_ascii_uppercase()) << (2 * i + 1);
    }
    if mask == 0 {
        return Some((out, 1 + n));
    }
    // Tag 1, the bytes, then the mask's first ceil(digits / 8) bytes, least significant
    // first (bit `i % 8` of byte `i / 8` for digit `i`).
    out[0] = 1;
    let mask_len = digits.len().div_ceil(8);
    out[1 + n..1 + n + mask_len].copy_from_slice(&mask.to_le_bytes()[..mask_len]);
    Some((out, 1 + n + mask_len))
}

/// The string of bytes written by [`hex_text`]; `None` when they are not of its shape.
pub(super) fn hex_text_of(b: &[u8]) -> Option<String> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let (&tag, rest) = b.split_first()?;
    let (raw, mask) = match tag {
        0 => (rest, &[][..]),
        1 => {
            // n bytes and a mask of ceil(2n / 8) bytes: n + ceil(n / 4) grows with n, so
            // the length gives n.
            let n = (1..=HEX_TEXT_MAX_DIGITS / 2).find(|n| n + n.div_ceil(4) == rest.len())?;
            rest.split_at(n)
        }
        _ => return None,
    };
    if raw.is_empty() || raw.len() * 2 > HEX_TEXT_MAX_DIGITS {
        return None;
    }
    let mut text = Vec::with_capacity(2 + raw.len() * 2);
    text.extend_from_slice(b"0x");
    for &byte in raw {
        text.push(DIGITS[usize::from(byte >> 4)]);
        text.push(DIGITS[usize::from(byte & 0x0f)]);
    }
    if !mask.is_empty() {
        for (i, c) in text[2..].iter_mut().enumerate() {
            if mask[i / 8] & (1 << (i % 8)) != 0 {
                c.make_ascii_uppercase();
            }
        }
    }
    String::from_utf8(text).ok()
}

/// A visitor of a string, or of the bytes [`hex_text`] writes.
struct StrOrHex;

impl serde::de::Visitor<'_> for StrOrHex {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string or hex text as bytes")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<String, E> {
        hex_text_of(v).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Bytes(v), &self))
    }
}

/// Each field codec above whose field reads back through its pair, as the module
/// `#[serde(with = "crate::codec::…")]` names: one attribute on the field, not two paths.
macro_rules! with_modules {
    ($($module:ident => $ser:ident, $de:ident;)*) => {
        $(
            #[doc = concat!("[`", stringify!($ser), "`] and [`", stringify!($de), "`].")]
            pub mod $module {
                pub use super::{$de as deserialize, $ser as serialize};
            }
        )*
    };
}

with_modules! {
    event_id_field => event_id, read_event_id;
    event_type_field => event_type, read_event_type;
    answer_body_field => answer_body, read_answer_body;
    uuid_text_field => uuid_text, read_uuid_text;
    fingerprint_field => fingerprint_text, read_fingerprint_text;
    hex_field => hex_text, read_hex_text;
    hex_opt_field => hex_text_opt, read_hex_text_opt;
}
