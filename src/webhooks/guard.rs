//! The webhook URL guard (SPEC.md section 4, Webhooks rules; DECISIONS.md section 7).
//!
//! A target must be `https` on port 443 or 8443, carry no credentials, and every address its
//! host resolves to must be public. The check runs when an endpoint is created or its URL
//! changed, and again on every send: [`GuardedResolver`] is the only resolver the sender's
//! client uses, so every connection goes to an address that passed [`classify`].
//! `webhooks.allow_private_targets` lifts the scheme, port and address rules (tests and local
//! development); credentials are refused always.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest13::Url;

/// Longest accepted URL.
pub const MAX_URL_LEN: usize = 2048;
/// Longest wait for a name lookup.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a URL is refused. The message is safe to show the merchant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("url is not an absolute URL ({0})")]
    Malformed(String),
    #[error("url must be at most {MAX_URL_LEN} characters")]
    TooLong,
    #[error("url must use https")]
    Scheme,
    #[error("url must use port 443 or 8443, not {0}")]
    Port(u16),
    #[error("url must not carry a user name or password")]
    Credentials,
    #[error("url has no host")]
    NoHost,
    #[error("{host} does not resolve ({detail})")]
    Unresolvable { host: String, detail: String },
    #[error("{host} resolves to {addr}, a {kind} address; only public addresses are allowed")]
    NotPublic {
        host: String,
        addr: IpAddr,
        kind: &'static str,
    },
}

/// How a target URL of a request is written, as the API document states it: `http://` or
/// `https://`, a host name of letters, digits and hyphens in dot-separated labels or an
/// `[IPv6]` literal, an optional port of 1-5 digits, then optionally `/`, `?` or `#` and
/// printable ASCII without spaces. [`url_form_ok`] is the same rule in code. The scheme and
/// port rules that `webhooks.allow_private_targets` lifts stay in [`check_syntax`].
pub const URL_PATTERN: &str =
    r"^https?://([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?([/?#][!-~]*)?$";

/// Why [`url_form_ok`] refuses a URL, as the merchant reads it.
pub const URL_FORM: &str = "url must be an absolute http(s) URL: a host name or an [IPv6] literal, an optional port, then printable ASCII without spaces";

/// Whether `raw` is written as [`URL_PATTERN`] states. The URL parser also reads forms the
/// document does not describe (upper-case schemes, missing slashes, surrounding spaces);
/// this keeps what is accepted to what is documented.
pub fn url_form_ok(raw: &str) -> bool {
    let Some(rest) = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
    else {
        return false;
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    if !tail.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        return false;
    }
    let port = match authority.strip_prefix('[') {
        Some(literal) => {
            let Some((inner, after)) = literal.split_once(']') else {
                return false;
            };
            let ok = |b: u8| b.is_ascii_hexdigit() || b == b':' || b == b'.';
            if inner.is_empty() || !inner.bytes().all(ok) {
                return false;
            }
            after
        }
        None => {
            let (host, after) = authority.split_at(authority.find(':').unwrap_or(authority.len()));
            let label = |l: &str| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            };
            if !host.split('.').all(label) {
                return false;
            }
            after
        }
    };
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks the form of a URL: scheme, port, credentials, host. No lookups.
pub fn check_syntax(raw: &str, allow_private: bool) -> Result<Url, GuardError> {
    if raw.len() > MAX_URL_LEN {
        return Err(GuardError::TooLong);
    }
    let url = Url::parse(raw).map_err(|e| GuardError::Malformed(e.to_string()))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(GuardError::Scheme),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(GuardError::Credentials);
    }
    if url.host().is_none() {
        return Err(GuardError::NoHost);
    }
    let port = url.port_or_known_default().ok_or(GuardError::NoHost)?;
    if !allow_private && port != 443 && port != 8443 {
        return Err(GuardError::Port(port));
    }
    Ok(url)
}

/// Full check of a URL: its form, then every address its host resolves to.
pub async fn check(raw: &str, allow_private: bool) -> Result<Url, GuardError> {
    let url = check_syntax(raw, allow_private)?;
    resolve(&url, allow_private).await?;
    Ok(url)
}

/// The addresses a checked URL's host stands for, each one checked. An IP literal is itself;
/// a name is looked up and refused whole when any of its addresses is not public.
pub async fn resolve(url: &Url, allow_private: bool) -> Result<Vec<SocketAddr>, GuardError> {
    let port = url.port_or_known_default().ok_or(GuardError::NoHost)?;
    let host = url.host_str().ok_or(GuardError::NoHost)?;
    match literal_ip(host) {
        Some(ip) => checked(host, ip, port, allow_private),
        None => lookup(host, port, allow_private).await,
    }
}

/// The address of an IP-literal host (`url` writes IPv4 in dotted form whatever the input
/// spelling, IPv6 in brackets).
pub fn literal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn checked(
    host: &str,
    ip: IpAddr,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, GuardError> {
    check_ip(host, ip, allow_private)?;
    Ok(vec![SocketAddr::new(ip, port)])
}

fn check_ip(host: &str, ip: IpAddr, allow_private: bool) -> Result<(), GuardError> {
    match classify(ip) {
        Some(kind) if !allow_private => Err(GuardError::NotPublic {
            host: host.to_string(),
            addr: ip,
            kind,
        }),
        _ => Ok(()),
    }
}

/// Looks `host` up and checks every address.
pub async fn lookup(
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, GuardError> {
    let unresolvable = |detail: String| GuardError::Unresolvable {
        host: host.to_string(),
        detail,
    };
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| unresolvable("lookup timed out".into()))?
        .map_err(|e| unresolvable(e.to_string()))?;
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for a in found {
        check_ip(host, a.ip(), allow_private)?;
        if !addrs.contains(&a) {
            addrs.push(a);
        }
    }
    if addrs.is_empty() {
        return Err(unresolvable("no addresses".into()));
    }
    Ok(addrs)
}

/// Why an address is not public, or `None` for a public (globally routable unicast) one.
pub fn classify(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    let kind = match o {
        [169, 254, 169, 254] | [100, 100, 100, 200] | [192, 0, 0, 192] => "cloud metadata",
        [0, ..] => "unspecified",
        [127, ..] => "loopback",
        [10, ..] => "private",
        [172, b, ..] if (16..32).contains(&b) => "private",
        [192, 168, ..] => "private",
        [169, 254, ..] => "link-local",
        [100, b, ..] if (64..128).contains(&b) => "carrier-grade NAT",
        [192, 0, 0, _] => "special-purpose",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "documentation",
        [198, b, ..] if b == 18 || b == 19 => "benchmarking",
        [192, 88, 99, _] => "6to4 relay",
        [a, ..] if (224..240).contains(&a) => "multicast",
        [a, ..] if a >= 240 => "reserved",
        _ => return None,
    };
    Some(kind)
}

fn classify_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4).map(|_| "IPv4-mapped non-public");
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    let kind = match s {
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254] => "cloud metadata",
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback",
        // IPv4-compatible (deprecated) addresses.
        [0, 0, 0, 0, 0, 0, _, _] => "IPv4-compatible",
        // NAT64: judge the IPv4 address inside.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => {
            return classify_v4(embedded(hi, lo)).map(|_| "NAT64 non-public")
        }
        [0x64, 0xff9b, 1, ..] => "local NAT64",
        [0x100, 0, 0, 0, ..] => "discard-only",
        [0x2001, 0x0db8, ..] => "documentation",
        // 6to4: judge the IPv4 address inside.
        [0x2002, hi, lo, ..] => return classify_v4(embedded(hi, lo)).map(|_| "6to4 non-public"),
        [a, b, ..] if a == 0x2001 && b < 0x0200 => "special-purpose",
        [a, ..] if a & 0xfe00 == 0xfc00 => "unique local (ULA)",
        [a, ..] if a & 0xffc0 == 0xfe80 => "link-local",
        [a, ..] if a & 0xffc0 == 0xfec0 => "site-local",
        [a, ..] if a & 0xff00 == 0xff00 => "multicast",
        [a, ..] if a & 0xe000 != 0x2000 => "reserved",
        _ => return None,
    };
    Some(kind)
}

/// The resolver of the sender's HTTP client: looks names up and refuses the whole answer when
/// any address is not public, so no connection ever reaches an unchecked address.
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl reqwest13::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest13::dns::Name) -> reqwest13::dns::Resolving {
        let host = name.as_str().to_string();
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs = lookup(&host, 0, allow_private).await?;
            let it: reqwest13::dns::Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(s: &str) -> Option<&'static str> {
        classify(s.parse().unwrap())
    }

    #[test]
    fn refuses_every_non_public_range() {
        for (ip, k) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.1.1", "link-local"),
            ("169.254.169.254", "cloud metadata"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.254", "carrier-grade NAT"),
            ("100.100.100.200", "cloud metadata"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("192.0.2.10", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fc00::1", "unique local (ULA)"),
            ("fd12:3456::1", "unique local (ULA)"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "IPv4-mapped non-public"),
            ("::ffff:10.0.0.1", "IPv4-mapped non-public"),
            ("::ffff:169.254.169.254", "IPv4-mapped non-public"),
            ("64:ff9b::a9fe:a9fe", "NAT64 non-public"),
            ("2002:7f00:1::1", "6to4 non-public"),
            ("2001:db8::1", "documentation"),
            ("::127.0.0.1", "IPv4-compatible"),
        ] {
            assert_eq!(kind(ip), Some(k), "{ip}");
        }
    }

    #[test]
    fn accepts_public_addresses() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert_eq!(kind(ip), None, "{ip}");
        }
    }

    #[test]
    fn syntax_rules() {
        assert!(check_syntax("https://example.com/hook", false).is_ok());
        assert!(check_syntax("https://example.com:8443/hook", false).is_ok());
        assert_eq!(
            check_syntax("http://example.com/hook", false),
            Err(GuardError::Scheme)
        );
        assert_eq!(
            check_syntax("https://example.com:8080/", false),
            Err(GuardError::Port(8080))
        );
        assert_eq!(
            check_syntax("https://u:p@example.com/", false),
            Err(GuardError::Credentials)
        );
        assert_eq!(
            check_syntax("https://u@example.com/", true),
            Err(GuardError::Credentials)
        );
        assert!(matches!(
            check_syntax("not a url", false),
            Err(GuardError::Malformed(_))
        ));
        assert_eq!(
            check_syntax(&format!("https://e.com/{}", "a".repeat(3000)), false),
            Err(GuardError::TooLong)
        );
        assert!(check_syntax("http://127.0.0.1:9000/", true).is_ok());
    }

    #[tokio::test]
    async fn literal_and_odd_forms_of_private_addresses_are_refused() {
        for u in [
            "https://127.0.0.1/",
            "https://[::1]/",
            "https://0x7f.1/",
            "https://2130706433/",
            "https://[::ffff:7f00:1]/",
            "https://169.254.169.254/latest/meta-data",
            "https://[fd00:ec2::254]/",
        ] {
            assert!(
                matches!(check(u, false).await, Err(GuardError::NotPublic { .. })),
                "{u}"
            );
        }
        assert!(matches!(
            check("https://localhost/", false).await,
            Err(GuardError::NotPublic { .. })
        ));
        assert!(check("http://localhost:1/", true).await.is_ok());
    }

    /// The forms `URL_PATTERN` admits are the ones `url_form_ok` accepts.
    #[test]
    fn url_forms_follow_the_pattern() {
        for ok in [
            "https://hooks.example.com/in?x=1#f",
            "http://127.0.0.1:9/hook",
            "https://[2001:db8::1]:8443",
            "https://a-b.c",
        ] {
            assert!(url_form_ok(ok), "{ok}");
        }
        for bad in [
            "",
            "https://",
            "HTTPS://a.b",
            "https:a.b",
            " https://a.b",
            "https://a.b/x y",
            "https://u:p@a.b/",
            "https://a..b",
            "https://a.b:",
            "https://a.b:123456",
            "ftp://a.b",
            "https://[]/",
            "https://a.b/\u{e9}",
        ] {
            assert!(!url_form_ok(bad), "{bad}");
        }
    }
}
