//! API keys: token format, peppered hashes, the in-memory key cache, kinds, scopes and the
//! order of checks of SPEC.md section 5 (kind, scope, IP allowlist, signing).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use appliance_storage::records::{ApiKey, KeyKind, Mode, Project};

use crate::ids::ProjectId;

/// Token prefix of live keys (DECISIONS.md section 2).
pub const LIVE_PREFIX: &str = "apk";
/// Token prefix of test keys: the live prefix followed by `test`.
pub const TEST_PREFIX: &str = "apktest";

/// Every scope a key may carry (SPEC.md section 5 rule 6, DECISIONS.md section 4).
pub const ALL_SCOPES: &[&str] = &[
    "customers:read",
    "customers:write",
    "wallets:read",
    "wallets:create",
    "balances:read",
    "deposits:read",
    "sweeps:read",
    "sweeps:create",
    "payouts:read",
    "payouts:create",
    "payouts:approve",
    "webhooks:read",
    "webhooks:write",
    "webhooks:replay",
    "invoices:read",
    "invoices:write",
    "events:read",
    "conversions:read",
    "conversions:write",
    "billing:read",
    "billing:write",
    "api_keys:read",
    "api_keys:write",
];

/// Scopes every kind gets by default: the groups any kind reaches.
const ANY_KIND_DEFAULTS: &[&str] = &[
    "webhooks:read",
    "webhooks:write",
    "webhooks:replay",
    "events:read",
    "billing:read",
    "billing:write",
];

/// DECISIONS.md section 4: the kind's read and write scopes, never `payouts:create`,
/// `payouts:approve`, `sweeps:create` or `api_keys:*`.
pub fn default_scopes(kind: KeyKind) -> Vec<String> {
    let own: &[&str] = match kind {
        KeyKind::Checkout => &["invoices:read", "invoices:write"],
        KeyKind::Payout => &[
            "payouts:read",
            "balances:read",
            "conversions:read",
            "conversions:write",
        ],
        KeyKind::Wallet => &[
            "customers:read",
            "customers:write",
            "wallets:read",
            "wallets:create",
            "balances:read",
            "deposits:read",
            "sweeps:read",
            "payouts:read",
        ],
    };
    own.iter()
        .chain(ANY_KIND_DEFAULTS)
        .map(|s| s.to_string())
        .collect()
}

/// Whether a granted scope (possibly `*` or `group:*`) covers `wanted`.
pub fn scope_covers(granted: &str, wanted: &str) -> bool {
    if granted == "*" || granted == wanted {
        return true;
    }
    match granted.strip_suffix(":*") {
        Some(group) => wanted.split(':').next() == Some(group),
        None => false,
    }
}

/// Whether a scope string is acceptable on a key: a known scope, `*`, or `group:*` of a
/// known group.
pub fn is_valid_scope(s: &str) -> bool {
    if s == "*" || ALL_SCOPES.contains(&s) {
        return true;
    }
    s.strip_suffix(":*")
        .is_some_and(|g| ALL_SCOPES.iter().any(|k| k.split(':').next() == Some(g)))
}

/// A freshly minted token (shown once) and what is stored about it.
pub struct NewToken {
    pub token: String,
    pub key_id: String,
    pub last4: String,
}

/// Mints `prefix ‖ 64 lowercase hex` from 32 random bytes.
pub fn mint_token(mode: Mode) -> NewToken {
    let mut raw = [0u8; 32];
    appliance_storage::sources::fill_random(&mut raw);
    let hexpart = hex::encode(raw);
    let prefix = match mode {
        Mode::Live => LIVE_PREFIX,
        Mode::Test => TEST_PREFIX,
    };
    NewToken {
        token: format!("{prefix}{hexpart}"),
        key_id: format!("{prefix}{}", &hexpart[..8]),
        last4: hexpart[60..].to_string(),
    }
}

/// Splits a presented token into (mode, hex part); `None` when malformed.
pub fn parse_token(token: &str) -> Option<Mode> {
    let (mode, rest) = if let Some(r) = token.strip_prefix(TEST_PREFIX) {
        (Mode::Test, r)
    } else if let Some(r) = token.strip_prefix(LIVE_PREFIX) {
        (Mode::Live, r)
    } else {
        return None;
    };
    (rest.len() == 64 && rest.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(mode)
}

/// The secret mixed into every stored token hash, kept as the HMAC-SHA256 state keyed with
/// it (keying once: each hash then costs the token's blocks only).
#[derive(Clone)]
pub struct Pepper(Hmac<Sha256>);

impl std::fmt::Debug for Pepper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pepper(..)")
    }
}

impl Pepper {
    /// Reads `dir/pepper`, creating it (mode 0600) on first use.
    pub fn load_or_create(dir: &Path) -> std::io::Result<Pepper> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir)?;
        let path = dir.join("pepper");
        match std::fs::read_to_string(&path) {
            Ok(s) => Pepper::parse(&s)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut b = [0u8; 32];
                appliance_storage::sources::fill_random(&mut b);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                f.write_all(hex::encode(b).as_bytes())?;
                f.sync_all()?;
                Ok(Pepper::keyed(&b))
            }
            Err(e) => Err(e),
        }
    }

    /// A pepper file's text: 32 bytes as 64 hex digits (surrounding whitespace ignored).
    /// `restore` checks a backup's pepper with it before anything is replaced.
    pub fn parse(text: &str) -> Result<Pepper, String> {
        let mut b = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut b)
            .map_err(|e| format!("not 64 hex digits ({e})"))?;
        Ok(Pepper::keyed(&b))
    }

    fn keyed(secret: &[u8; 32]) -> Pepper {
        Pepper(Hmac::<Sha256>::new_from_slice(secret).expect("any key length"))
    }

    /// HMAC-SHA256(pepper, token), hex (the stored `token_hash`).
    pub fn hash(&self, token: &str) -> String {
        self.hash_hex(token, &mut [0; 64]).to_string()
    }

    /// [`Pepper::hash`] written into `buf`, without an allocation (the request path's key
    /// lookup).
    pub fn hash_hex<'b>(&self, token: &str, buf: &'b mut [u8; 64]) -> &'b str {
        let mut mac = self.0.clone();
        mac.update(token.as_bytes());
        hex::encode_to_slice(mac.finalize().into_bytes(), buf).expect("64 hex digits");
        std::str::from_utf8(buf).expect("hex is ASCII")
    }
}

/// Keys and projects held in memory so authentication needs no store read.
#[derive(Default)]
pub struct KeyCache {
    by_hash: RwLock<HashMap<String, Arc<ApiKey>>>,
    projects: RwLock<HashMap<Uuid, Arc<Project>>>,
    usage: Mutex<HashMap<Uuid, (i64, u64)>>,
}

impl KeyCache {
    /// Replaces (or adds) a key. Revocation and expiry only ever tighten: a record read
    /// before a revocation or a roll committed can never make the key usable again here.
    pub fn put_key(&self, mut key: ApiKey) {
        let mut map = self.by_hash.write().expect("lock");
        if let Some(cur) = map.get(&key.token_hash) {
            key.revoked_at = match (cur.revoked_at, key.revoked_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            key.expires_at = match (cur.expires_at, key.expires_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        map.insert(key.token_hash.clone(), Arc::new(key));
    }

    pub fn put_project(&self, p: Project) {
        self.projects
            .write()
            .expect("lock")
            .insert(p.id, Arc::new(p));
    }

    pub fn project(&self, id: Uuid) -> Option<Arc<Project>> {
        self.projects.read().expect("lock").get(&id).cloned()
    }

    /// The key whose stored hash equals `hash` (compared in constant time).
    pub fn key_by_hash(&self, hash: &str) -> Option<Arc<ApiKey>> {
        let k = self.by_hash.read().expect("lock").get(hash).cloned()?;
        bool::from(k.token_hash.as_bytes().ct_eq(hash.as_bytes())).then_some(k)
    }

    /// Counts one use of a key (flushed to the store by the maintenance worker).
    pub fn record_use(&self, key: Uuid, now: i64) {
        let mut u = self.usage.lock().expect("lock");
        let e = u.entry(key).or_insert((now, 0));
        e.0 = now;
        e.1 += 1;
    }

    /// Takes the uses counted since the last call: key -> (last_used_at, count).
    pub fn take_usage(&self) -> HashMap<Uuid, (i64, u64)> {
        std::mem::take(&mut *self.usage.lock().expect("lock"))
    }

    /// Uses not yet flushed, for answers that show `use_count`.
    pub fn pending_usage(&self, key: Uuid) -> Option<(i64, u64)> {
        self.usage.lock().expect("lock").get(&key).copied()
    }
}

/// What an endpoint requires of the calling key.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    pub kinds: &'static [KeyKind],
    pub scope: Option<&'static str>,
    /// Moves funds: needs signing at service, project and key level.
    pub signing: bool,
}

/// Any kind of key, no scope.
pub const ANY_KIND: &[KeyKind] = &[KeyKind::Checkout, KeyKind::Payout, KeyKind::Wallet];

impl Access {
    pub const fn new(kinds: &'static [KeyKind], scope: &'static str) -> Self {
        Access {
            kinds,
            scope: Some(scope),
            signing: false,
        }
    }
    pub const fn any() -> Self {
        Access {
            kinds: ANY_KIND,
            scope: None,
            signing: false,
        }
    }
    pub const fn signing(mut self) -> Self {
        self.signing = true;
        self
    }
}

/// The authenticated caller of a request.
#[derive(Clone)]
pub struct Caller {
    pub key: Arc<ApiKey>,
    pub project: Arc<Project>,
    pub ip: IpAddr,
    /// Service-level signing switch from config.
    pub service_signing: bool,
}

impl Caller {
    pub fn project_id(&self) -> ProjectId {
        ProjectId::of(&self.project)
    }

    pub fn livemode(&self) -> bool {
        self.project.mode == Mode::Live
    }

    pub fn has_scope(&self, wanted: &str) -> bool {
        self.key.scopes.iter().any(|g| scope_covers(g, wanted))
    }

    /// Which of `service`, `project`, `key` have signing off (SPEC.md section 2, Ping).
    pub fn signing_blocked_by(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if !self.service_signing {
            v.push("service");
        }
        if !self.project.settings.signing_enabled {
            v.push("project");
        }
        if !self.key.signing_enabled {
            v.push("key");
        }
        v
    }

    /// SPEC.md section 5 rule 7: kind, then scope, then IP allowlist, then signing. The
    /// refusal maps to 403 with the variant's code in `api/error.rs`.
    pub fn require(&self, access: Access) -> Result<(), Denied> {
        if !access.kinds.contains(&self.key.kind) {
            return Err(Denied::WrongKeyKind(self.key.kind.as_str()));
        }
        if let Some(scope) = access.scope {
            if !self.has_scope(scope) {
                return Err(Denied::MissingScope(scope));
            }
        }
        if !ip_allowed(&self.key.ip_allowlist, self.ip) {
            return Err(Denied::IpNotAllowed(self.ip));
        }
        if access.signing {
            let blocked = self.signing_blocked_by();
            if !blocked.is_empty() {
                return Err(Denied::SigningDisabled(blocked.join(", ")));
            }
        }
        Ok(())
    }
}

/// How an `ip_allowlist` entry of a request is written, as the API document states it: a
/// dotted IPv4 address without leading zeros, or an IPv6 address of hex groups (no dotted
/// tail), optionally `/` and a prefix length within the address's bits, without leading
/// zeros. [`allow_entry_is_plain`] is the same rule in code, so a request the document
/// refuses is refused here too.
pub const ALLOW_ENTRY_PATTERN: &str = concat!(
    r"^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}(/(3[0-2]|[12]?[0-9]))?",
    r"|(([0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|([0-9A-Fa-f]{1,4}:){1,7}:|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}",
    r"|([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}",
    r"|([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}",
    r"|[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}|:((:[0-9A-Fa-f]{1,4}){1,7}|:))(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?)$",
);

/// Whether `s` is written as [`ALLOW_ENTRY_PATTERN`] states. The standard library's address
/// parsers read exactly those forms (dotted quads without leading zeros; hex groups of 1-4
/// digits with at most one `::` standing for at least one group); the prefix is checked
/// here because the CIDR parser also reads leading zeros.
pub fn allow_entry_is_plain(s: &str) -> bool {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let bits = if addr.contains(':') {
        if addr.contains('.') || addr.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        128
    } else if addr.parse::<std::net::Ipv4Addr>().is_ok() {
        32
    } else {
        return false;
    };
    prefix.is_none_or(|p| {
        (1..=3).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p == "0" || !p.starts_with('0'))
            && p.parse::<u32>().is_ok_and(|n| n <= bits)
    })
}

/// Parses one allowlist entry: an exact IP or a CIDR block, IPv4 or IPv6. An IPv4-mapped
/// IPv6 entry (`::ffff:102:304`, `::ffff:a00:0/104`) is its IPv4 form (`1.2.3.4`,
/// `10.0.0.0/8`): sources are judged that way ([`ip_allowed`]), and the stored entry is
/// then one a client can send back (the request pattern refuses the mapped text form).
pub fn parse_allow_entry(s: &str) -> Option<ipnet::IpNet> {
    let net = match s.parse::<ipnet::IpNet>() {
        Ok(net) => net.trunc(),
        Err(_) => s.parse::<IpAddr>().ok().map(ipnet::IpNet::from)?,
    };
    Some(unmapped(net))
}

/// `net` as IPv4 when it lies within `::ffff:0:0/96`.
fn unmapped(net: ipnet::IpNet) -> ipnet::IpNet {
    if let ipnet::IpNet::V6(v6) = net {
        if let (Some(v4), Some(len)) = (v6.addr().to_ipv4_mapped(), v6.prefix_len().checked_sub(96))
        {
            if let Ok(n) = ipnet::Ipv4Net::new(v4, len) {
                return ipnet::IpNet::V4(n);
            }
        }
    }
    net
}

/// Empty allows any source (SPEC.md section 5 rule 9). IPv4-mapped IPv6 sources are judged
/// as IPv4.
pub fn ip_allowed(list: &[String], ip: IpAddr) -> bool {
    if list.is_empty() {
        return true;
    }
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    list.iter()
        .filter_map(|s| parse_allow_entry(s))
        .any(|n| n.contains(&ip))
}

/// Why an authenticated key may not call an endpoint (SPEC.md section 5 rule 7); each is
/// 403 with the code named in its doc.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Denied {
    /// `wrong_key_kind`: the key's kind is not one the endpoint accepts.
    #[error("A {0} key cannot call this endpoint.")]
    WrongKeyKind(&'static str),
    /// `missing_scope`: the key lacks the endpoint's scope.
    #[error("This key lacks the scope {0}.")]
    MissingScope(&'static str),
    /// `ip_not_allowed`: the source address is outside the key's allowlist.
    #[error("Requests from {0} are not allowed for this key.")]
    IpNotAllowed(IpAddr),
    /// `signing_disabled`: signing is off at the listed levels.
    #[error("Signing is disabled at the {0} level.")]
    SigningDisabled(String),
}

impl Denied {
    /// The SPEC.md section 7 code of this refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Denied::WrongKeyKind(_) => "wrong_key_kind",
            Denied::MissingScope(_) => "missing_scope",
            Denied::IpNotAllowed(_) => "ip_not_allowed",
            Denied::SigningDisabled(_) => "signing_disabled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_format() {
        let t = mint_token(Mode::Test);
        assert!(t.token.starts_with("apktest") && t.token.len() == 7 + 64);
        assert_eq!(parse_token(&t.token), Some(Mode::Test));
        assert_eq!(t.key_id.len(), 7 + 8);
        let l = mint_token(Mode::Live);
        assert_eq!(parse_token(&l.token), Some(Mode::Live));
        assert_eq!(parse_token(&l.token.to_uppercase()), None);
        assert_eq!(parse_token("apk1234"), None);
    }

    #[test]
    fn the_pepper_hash_is_hmac_sha256_in_hex() {
        // RFC 4231 test case 2 ("Jefe"), the key zero-padded to 32 bytes as HMAC pads it.
        let mut secret = [0u8; 32];
        secret[..4].copy_from_slice(b"Jefe");
        let p = Pepper::keyed(&secret);
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(p.hash("what do ya want for nothing?"), want);
        assert_eq!(
            p.hash_hex("what do ya want for nothing?", &mut [0; 64]),
            want
        );
        // The keyed state is reused, never advanced.
        assert_eq!(p.hash("what do ya want for nothing?"), want);
    }

    #[test]
    fn scope_wildcards() {
        assert!(scope_covers("*", "payouts:create"));
        assert!(scope_covers("wallets:*", "wallets:create"));
        assert!(!scope_covers("wallets:*", "customers:read"));
        assert!(!scope_covers("wallets:read", "wallets:create"));
        assert!(is_valid_scope("wallets:*") && !is_valid_scope("nope:*") && !is_valid_scope("x"));
        assert!(!default_scopes(KeyKind::Payout).contains(&"payouts:create".to_string()));
    }

    #[test]
    fn a_stale_record_never_makes_a_revoked_key_usable_again() {
        let t = mint_token(Mode::Test);
        let key = ApiKey {
            id: Uuid::now_v7(),
            project_id: Uuid::now_v7(),
            kind: KeyKind::Wallet,
            name: "k".into(),
            token_hash: "h".into(),
            key_id: t.key_id,
            last4: t.last4,
            scopes: vec!["*".into()],
            ip_allowlist: vec![],
            signing_enabled: true,
            created_by: "merchant".into(),
            rotated_from: None,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
            use_count: 0,
            created_at: 0,
        };
        let cache = KeyCache::default();
        cache.put_key(ApiKey {
            revoked_at: Some(10),
            expires_at: Some(500),
            ..key.clone()
        });
        // A record read before the revocation and the roll arrives late.
        cache.put_key(key.clone());
        let k = cache.key_by_hash("h").unwrap();
        assert_eq!(k.revoked_at, Some(10));
        assert_eq!(k.expires_at, Some(500));
        assert!(!k.is_enabled(20));
        // Other fields still follow the newest record.
        cache.put_key(ApiKey {
            name: "renamed".into(),
            ..key
        });
        assert_eq!(cache.key_by_hash("h").unwrap().name, "renamed");
    }

    #[test]
    fn allowlists_match_cidrs_both_families() {
        let l = vec![
            "10.0.0.0/8".to_string(),
            "2001:db8::/32".to_string(),
            "192.0.2.7".to_string(),
        ];
        assert!(ip_allowed(&l, "10.1.2.3".parse().unwrap()));
        assert!(ip_allowed(&l, "2001:db8::1".parse().unwrap()));
        assert!(ip_allowed(&l, "::ffff:192.0.2.7".parse().unwrap()));
        assert!(!ip_allowed(&l, "192.0.2.8".parse().unwrap()));
        assert!(ip_allowed(&[], "1.1.1.1".parse().unwrap()));
    }

    /// The forms `ALLOW_ENTRY_PATTERN` admits are exactly the ones accepted; the rest
    /// (leading zeros, dotted IPv6 tails, prefixes beyond the address) are refused.
    #[test]
    fn allow_entries_are_written_as_the_pattern_states() {
        for ok in [
            "1.2.3.4",
            "0.0.0.0/0",
            "10.0.0.0/8",
            "255.255.255.255/32",
            "::",
            "::1",
            "1::",
            "fe80::1/64",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "2001:DB8::/128",
        ] {
            assert!(allow_entry_is_plain(ok), "{ok}");
            assert!(parse_allow_entry(ok).is_some(), "{ok}");
        }
        // IPv4-mapped entries are kept in their IPv4 form.
        for (mapped, v4) in [
            ("::ffff:102:304", "1.2.3.4/32"),
            ("::ffff:a00:0/104", "10.0.0.0/8"),
            ("::ffff:0:0/96", "0.0.0.0/0"),
            ("::fffe:0:0/96", "::fffe:0:0/96"),
            ("::ffff:0:0/95", "::fffe:0:0/95"),
        ] {
            assert_eq!(
                parse_allow_entry(mapped).unwrap().to_string(),
                v4,
                "{mapped}"
            );
        }
        let mapped = ["::ffff:a00:0/104".to_string()];
        assert!(ip_allowed(&mapped, "10.1.2.3".parse().unwrap()));
        assert!(ip_allowed(&mapped, "::ffff:10.1.2.3".parse().unwrap()));
        assert!(!ip_allowed(&mapped, "11.1.2.3".parse().unwrap()));
        for bad in [
            "",
            "1.2.3",
            "01.2.3.4",
            "1.2.3.4/08",
            "1.2.3.4/33",
            "1.2.3.4/",
            "::ffff:1.2.3.4",
            "1:2:3:4:5:6:7::8",
            "fe80::1/129",
            "fe80::1/064",
            " 1.2.3.4",
            "1.2.3.4 ",
            "::1%eth0",
        ] {
            assert!(!allow_entry_is_plain(bad), "{bad}");
        }
    }
}
