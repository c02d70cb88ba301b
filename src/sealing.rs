//! Secrets at rest: the data key and the sealed form of the secrets the store keeps
//! (webhook signing secrets, invoices' checkout tokens wherever they are stored: the
//! invoice row, `invoice.*` events' data, the idempotent answer of `POST /v1/invoices`). A
//! copy of `appliance.redb` alone reveals none of them.
//!
//! The data key is 32 random bytes in `data.key` beside the pepper (hex, mode 0600), created
//! with the pepper on first start and carried by `appliance backup`. A sealed value is
//! `sealed:v1:` + base64url(24-byte random nonce ‖ XChaCha20-Poly1305 ciphertext and tag),
//! bound by its associated data to what it belongs to (e.g. one webhook endpoint), so a
//! sealed value moved to another row does not open.

use std::path::Path;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use uuid::Uuid;
use zeroize::Zeroizing;

use appliance_storage::records::{IdempotencyRecord, Invoice, WebhookEndpoint};
use appliance_storage::{ReadOps, ScanOps, Store, StoreError, WriteError};

/// File name of the data key in the data dir.
pub const DATA_KEY_FILE: &str = "data.key";
/// Prefix of every sealed value.
pub const SEALED_PREFIX: &str = "sealed:v1:";

/// A sealed value could not be opened: the data key is not the one it was sealed with, or the
/// stored value was altered.
#[derive(Debug, thiserror::Error)]
#[error("a sealed secret could not be opened (wrong data key or altered value)")]
pub struct OpenError;

/// The key that seals secrets in the store.
#[derive(Clone)]
pub struct DataKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

impl DataKey {
    /// Reads `dir/data.key`; `None` when there is none.
    pub fn load(dir: &Path) -> std::io::Result<Option<DataKey>> {
        let path = dir.join(DATA_KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(s) => {
                let s = Zeroizing::new(s);
                let mut b = Zeroizing::new([0u8; 32]);
                hex::decode_to_slice(s.trim(), &mut b[..]).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: {e}", path.display()),
                    )
                })?;
                Ok(Some(DataKey(b)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads `dir/data.key`, creating it (mode 0600) on first use.
    pub fn load_or_create(dir: &Path) -> std::io::Result<DataKey> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir)?;
        let path = dir.join(DATA_KEY_FILE);
        match Self::load(dir) {
            Ok(Some(k)) => Ok(k),
            Ok(None) => {
                let mut b = Zeroizing::new([0u8; 32]);
                appliance_storage::sources::fill_random(&mut b[..]);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                f.write_all(hex::encode(&b[..]).as_bytes())?;
                f.sync_all()?;
                Ok(DataKey(b))
            }
            Err(e) => Err(e),
        }
    }

    /// A key from raw bytes (tests).
    pub fn from_bytes(b: [u8; 32]) -> DataKey {
        DataKey(Zeroizing::new(b))
    }

    /// Seals `plain` bound to `aad`.
    pub fn seal(&self, aad: &[u8], plain: &str) -> String {
        let cipher = XChaCha20Poly1305::new_from_slice(&self.0[..]).expect("32-byte key");
        let mut nonce = [0u8; 24];
        appliance_storage::sources::fill_random(&mut nonce);
        let ct = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain.as_bytes(),
                    aad,
                },
            )
            .expect("XChaCha20-Poly1305 encryption of a short secret cannot fail");
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&ct);
        format!(
            "{SEALED_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        )
    }

    /// Opens a value written by [`DataKey::seal`] with the same `aad`.
    pub fn open(&self, aad: &[u8], sealed: &str) -> Result<Zeroizing<String>, OpenError> {
        let b64 = sealed.strip_prefix(SEALED_PREFIX).ok_or(OpenError)?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(b64)
            .map_err(|_| OpenError)?;
        if raw.len() < 24 + 16 {
            return Err(OpenError);
        }
        let (nonce, ct) = raw.split_at(24);
        let cipher = XChaCha20Poly1305::new_from_slice(&self.0[..]).expect("32-byte key");
        let plain = cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad })
            .map_err(|_| OpenError)?;
        String::from_utf8(plain)
            .map(Zeroizing::new)
            .map_err(|_| OpenError)
    }
}

/// Associated data of a webhook endpoint's signing secrets: they open only on that row.
fn webhook_aad(endpoint: Uuid) -> Vec<u8> {
    let mut aad = b"webhook_endpoint:".to_vec();
    aad.extend_from_slice(endpoint.as_bytes());
    aad
}

impl DataKey {
    /// Seals a webhook signing secret of `endpoint` for the store.
    pub fn seal_webhook_secret(&self, endpoint: Uuid, plain: &str) -> String {
        self.seal(&webhook_aad(endpoint), plain)
    }

    /// The secrets that sign for `ep` at `now`, newest first, opened. A value still in clear
    /// (a row from before sealing, not yet migrated) is taken as it is.
    pub fn webhook_secrets(
        &self,
        ep: &WebhookEndpoint,
        now: i64,
    ) -> Result<Vec<Zeroizing<String>>, OpenError> {
        let aad = webhook_aad(ep.id);
        ep.live_sealed_secrets(now)
            .map(|s| {
                if is_sealed(s) {
                    self.open(&aad, s)
                } else {
                    Ok(Zeroizing::new(s.to_string()))
                }
            })
            .collect()
    }

    /// Seals every secret of `ep` still in clear; returns whether anything changed.
    pub fn seal_endpoint_in_place(&self, ep: &mut WebhookEndpoint) -> bool {
        let mut changed = false;
        if !is_sealed(&ep.secret) {
            ep.secret = self.seal_webhook_secret(ep.id, &Zeroizing::new(ep.secret.clone()));
            changed = true;
        }
        for r in &mut ep.retired_secrets {
            if !is_sealed(&r.secret) {
                r.secret = self.seal_webhook_secret(ep.id, &Zeroizing::new(r.secret.clone()));
                changed = true;
            }
        }
        changed
    }
}

/// Seals every webhook secret the store still holds in clear (rows written before secrets
/// were sealed), in one transaction. Returns how many endpoints were sealed.
pub fn migrate_webhook_secrets(store: &Store, key: &DataKey) -> Result<usize, StoreError> {
    let key = key.clone();
    store
        .write_blocking(move |ctx| {
            let mut n = 0;
            for mut ep in ctx.all::<WebhookEndpoint>()? {
                if key.seal_endpoint_in_place(&mut ep) {
                    ctx.put(&ep)?;
                    n += 1;
                }
            }
            Ok::<_, StoreError>(n)
        })
        .map_err(|e| match e {
            WriteError::Rejected(e) => e,
            WriteError::Store(e) => StoreError::Corrupt(e.to_string()),
        })
}

/// Checks that `key` opens every sealed webhook secret of a store (a restore must bring the
/// data key its store was sealed with). Returns how many endpoints were checked.
pub fn check_webhook_secrets(r: &impl ScanOps, key: Option<&DataKey>) -> Result<usize, String> {
    let eps = r.all::<WebhookEndpoint>().map_err(|e| e.to_string())?;
    for ep in &eps {
        let sealed = std::iter::once(&ep.secret)
            .chain(ep.retired_secrets.iter().map(|r| &r.secret))
            .any(|s| is_sealed(s));
        if !sealed {
            continue;
        }
        let Some(key) = key else {
            return Err(format!(
                "webhook endpoint {} has a sealed secret but there is no {DATA_KEY_FILE}",
                ep.id
            ));
        };
        let aad = webhook_aad(ep.id);
        for s in std::iter::once(&ep.secret).chain(ep.retired_secrets.iter().map(|r| &r.secret)) {
            if is_sealed(s) && key.open(&aad, s).is_err() {
                return Err(format!(
                    "{DATA_KEY_FILE} does not open the secret of webhook endpoint {}",
                    ep.id
                ));
            }
        }
    }
    Ok(eps.len())
}

/// Associated data of an invoice's checkout token: it opens only for that invoice.
fn checkout_aad(invoice: Uuid) -> Vec<u8> {
    let mut aad = b"checkout_token:".to_vec();
    aad.extend_from_slice(invoice.as_bytes());
    aad
}

/// Associated data of a sealed idempotent answer: it opens only under its record's key.
fn answer_aad(record_key: &[u8]) -> Vec<u8> {
    let mut aad = b"idempotent_answer:".to_vec();
    aad.extend_from_slice(record_key);
    aad
}

impl DataKey {
    /// Seals the checkout token (`ck_...`) of `invoice` for the store: the form
    /// `Invoice::checkout_token` and the `checkout_url` of `invoice.*` events' data hold.
    pub fn seal_checkout_token(&self, invoice: Uuid, token: &str) -> String {
        self.seal(&checkout_aad(invoice), token)
    }

    /// The checkout token of `invoice` from its stored form, opened; a token still in clear
    /// (a row from before tokens were sealed, not yet migrated) as it is.
    pub fn checkout_token(
        &self,
        invoice: Uuid,
        stored: &str,
    ) -> Result<Zeroizing<String>, OpenError> {
        if is_sealed(stored) {
            self.open(&checkout_aad(invoice), stored)
        } else {
            Ok(Zeroizing::new(stored.to_string()))
        }
    }

    /// Seals the JSON answer an idempotency record stores under `record_key` (an answer
    /// that carries a credential: `POST /v1/invoices`'s `checkout_url`).
    pub fn seal_answer(&self, record_key: &[u8], body: &str) -> String {
        self.seal(&answer_aad(record_key), body)
    }

    /// The answer an idempotency record stores under `record_key`, opened when sealed
    /// ([`DataKey::seal_answer`]), else as it is.
    pub fn open_answer(&self, record_key: &[u8], stored: &str) -> Result<String, OpenError> {
        if is_sealed(stored) {
            self.open(&answer_aad(record_key), stored)
                .map(|s| s.to_string())
        } else {
            Ok(stored.to_string())
        }
    }
}

/// `meta` key set once every checkout token the store held in clear is sealed.
const CHECKOUT_TOKENS_SEALED: &str = "checkout_tokens_sealed";

/// Rows [`migrate_checkout_tokens`] reads per transaction.
const MIGRATE_BATCH: usize = 2_000;

/// What [`migrate_checkout_tokens`] sealed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SealedTokens {
    pub invoices: usize,
    pub events: usize,
    pub answers: usize,
}

/// Whether `b` may stand in a checkout token after `ck_` (base64url).
pub fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Whether `s` has the checkout token's shape (`^ck_[A-Za-z0-9_-]{43}$`).
pub fn is_checkout_token(s: &str) -> bool {
    s.strip_prefix("ck_")
        .is_some_and(|r| r.len() == 43 && r.bytes().all(is_token_byte))
}

/// The token of a `checkout_url` stored in clear (`.../checkout/ck_...`).
fn token_in_url(url: &str) -> Option<&str> {
    let t = url.rsplit('/').next()?;
    is_checkout_token(t).then_some(t)
}

/// Seals every checkout token a store written before tokens were sealed holds in clear:
/// invoice rows, the `checkout_url` of `invoice.*` events (kept as the sealed token, which
/// `views::event_data` renders back into the URL) and idempotent answers that carry one.
/// Runs once (a `meta` mark), in transactions of [`MIGRATE_BATCH`] rows; every step is
/// idempotent, so an interrupted run is finished by the next start. The old values may
/// linger in the file's free pages until they are reused; `appliance backup` writes a
/// copy without them.
pub fn migrate_checkout_tokens(store: &Store, key: &DataKey) -> Result<SealedTokens, StoreError> {
    let done = store.read_blocking(|r| r.meta_get(CHECKOUT_TOKENS_SEALED))?;
    if done.is_some() {
        return Ok(SealedTokens::default());
    }
    let mut out = SealedTokens::default();
    let mut after: Option<Uuid> = None;
    loop {
        let k = key.clone();
        let (n, last, more) = write_job(store, move |ctx| {
            let rows = ctx.after::<Invoice>(after, MIGRATE_BATCH)?;
            // Read until a batch comes back empty (a row that does not decode is passed over,
            // so a short batch is not yet the end).
            let more = !rows.is_empty();
            let last = rows.last().map(|i| i.id);
            let mut n = 0;
            for mut inv in rows {
                if !is_sealed(&inv.checkout_token) {
                    inv.checkout_token = k.seal_checkout_token(inv.id, &inv.checkout_token);
                    ctx.put(&inv)?;
                    n += 1;
                }
            }
            Ok((n, last, more))
        })?;
        out.invoices += n;
        after = last;
        if !more {
            break;
        }
    }
    let mut after: Option<(u128, u64)> = None;
    loop {
        let k = key.clone();
        let (n, last) = write_job(store, move |ctx| {
            ctx.rewrite_event_data(after, MIGRATE_BATCH, |ev| {
                if !ev.event_type.starts_with("invoice.") {
                    return None;
                }
                let url = ev.data.get("checkout_url")?.as_str()?;
                let token = token_in_url(url)?;
                let invoice = Uuid::parse_str(ev.data.get("id")?.as_str()?).ok()?;
                let mut data = ev.data.clone();
                data["checkout_url"] = k.seal_checkout_token(invoice, token).into();
                Some(data)
            })
        })?;
        out.events += n;
        match last {
            Some(l) => after = Some(l),
            None => break,
        }
    }
    let mut after: Option<Vec<u8>> = None;
    loop {
        let k = key.clone();
        let a = after.clone();
        let (n, last) = write_job(store, move |ctx| {
            ctx.rewrite_idempotency(a.as_deref(), MIGRATE_BATCH, |rk, rec| {
                if is_sealed(&rec.body) || !rec.body.contains("/checkout/ck_") {
                    return None;
                }
                Some(IdempotencyRecord {
                    body: k.seal_answer(rk, &rec.body),
                    ..rec.clone()
                })
            })
        })?;
        out.answers += n;
        match last {
            Some(l) => after = Some(l),
            None => break,
        }
    }
    write_job(store, |ctx| ctx.meta_put(CHECKOUT_TOKENS_SEALED, &[1]))?;
    Ok(out)
}

/// Runs `job` as one store transaction, its refusal and the store's failure alike a
/// [`StoreError`].
fn write_job<T: Send + 'static>(
    store: &Store,
    job: impl FnOnce(&mut appliance_storage::WriteCtx<'_>) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    store.write_blocking(job).map_err(|e| match e {
        WriteError::Rejected(e) => e,
        WriteError::Store(e) => StoreError::Corrupt(e.to_string()),
    })
}

/// Checks that `key` opens the sealed checkout tokens of a store (a restore must bring the
/// data key its store was sealed with; a wrong one would make every checkout link dead).
/// The first invoices are tried, a sample: one key seals them all.
pub fn check_checkout_tokens(r: &impl ScanOps, key: Option<&DataKey>) -> Result<usize, String> {
    let invoices = r.after::<Invoice>(None, 16).map_err(|e| e.to_string())?;
    for inv in &invoices {
        if !is_sealed(&inv.checkout_token) {
            continue;
        }
        let Some(key) = key else {
            return Err(format!(
                "invoice {} has a sealed checkout token but there is no {DATA_KEY_FILE}",
                inv.id
            ));
        };
        if key.checkout_token(inv.id, &inv.checkout_token).is_err() {
            return Err(format!(
                "{DATA_KEY_FILE} does not open the checkout token of invoice {}",
                inv.id
            ));
        }
    }
    Ok(invoices.len())
}

/// Whether a stored value is in sealed form (older rows may hold a secret in clear until the
/// start-up migration seals them).
pub fn is_sealed(v: &str) -> bool {
    v.starts_with(SEALED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_round_trip_bound_to_aad() {
        let k = DataKey::from_bytes([7; 32]);
        let s = k.seal(b"endpoint-1", "whsec_abc");
        assert!(is_sealed(&s));
        assert!(!s.contains("whsec_abc"));
        assert_ne!(s, k.seal(b"endpoint-1", "whsec_abc"), "nonces repeat");
        assert_eq!(&*k.open(b"endpoint-1", &s).unwrap(), "whsec_abc");
        assert!(
            k.open(b"endpoint-2", &s).is_err(),
            "opened under another aad"
        );
        assert!(DataKey::from_bytes([8; 32])
            .open(b"endpoint-1", &s)
            .is_err());
        assert!(k.open(b"endpoint-1", "whsec_abc").is_err());
        let mut bad = s.clone();
        bad.pop();
        bad.push(if s.ends_with('A') { 'B' } else { 'A' });
        assert!(k.open(b"endpoint-1", &bad).is_err(), "altered value opened");
    }

    #[test]
    fn the_key_file_is_created_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let a = DataKey::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(DATA_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = DataKey::load_or_create(dir.path()).unwrap();
        let s = a.seal(b"x", "secret");
        assert_eq!(&*b.open(b"x", &s).unwrap(), "secret");
    }
}
