//! The client address behind a reverse proxy.
//!
//! Only when the TCP peer is one of `trusted_proxies` is `X-Forwarded-For` read at all; then
//! the client is the rightmost address of the header that is not itself a trusted proxy
//! (each proxy appends the address it saw, so everything left of the first untrusted hop
//! may have been written by the client and is ignored). With no trusted proxies configured,
//! or a peer outside them, the peer address is the client whatever the header says.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;
use serde::Deserialize;

/// Most `X-Forwarded-For` entries looked at (a longer chain is cut from the left: the
/// entries nearest to us are the ones that can be trusted).
const MAX_HOPS: usize = 32;

/// The address requests are attributed to (API key IP allowlists, the per-IP budget,
/// `/metrics` loopback access): `peer`, or for a trusted peer the rightmost untrusted
/// `X-Forwarded-For` address.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = canonical(peer);
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let mut hops: Vec<&str> = Vec::new();
    for v in headers.get_all("x-forwarded-for") {
        // A header that is not visible ASCII cannot name an address: it ends the chain.
        let Ok(s) = v.to_str() else {
            return peer;
        };
        hops.extend(s.split(',').map(str::trim).filter(|h| !h.is_empty()));
    }
    let mut client = peer;
    for hop in hops.iter().rev().take(MAX_HOPS) {
        match parse_hop(hop) {
            Some(ip) => {
                client = ip;
                if !is_trusted(ip, trusted) {
                    return ip;
                }
            }
            // Garbage where an address should be: stop at the last hop we could read.
            None => return client,
        }
    }
    client
}

/// True when the connection was relayed by someone (`X-Forwarded-For` or `Forwarded`).
pub fn is_forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key("x-forwarded-for") || headers.contains_key("forwarded")
}

fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    trusted.iter().any(|n| n.contains(&ip))
}

/// IPv4-mapped IPv6 addresses compare as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// One `X-Forwarded-For` entry: an address, optionally `[v6]` or `v4:port` as some proxies
/// write them.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Ok(sa) = hop.parse::<std::net::SocketAddr>() {
        return Some(canonical(sa.ip()));
    }
    hop.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .and_then(|h| h.parse::<IpAddr>().ok())
        .map(canonical)
}

/// Parses one `trusted_proxies` entry: a CIDR block or a single address (a /32 or /128).
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n.trunc());
    }
    s.parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{s:?} is not an IP address or CIDR block"))
}

/// `trusted_proxies` as a TOML array of strings, or one comma-separated string (for
/// `APPLIANCE_TRUSTED_PROXIES`).
pub fn deserialize_nets<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<String>),
        Text(String),
    }
    let items: Vec<String> = match Form::deserialize(d)? {
        Form::List(v) => v,
        Form::Text(s) => s
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect(),
    };
    if items.len() > 256 {
        return Err(serde::de::Error::custom(
            "trusted_proxies has more than 256 entries",
        ));
    }
    items
        .iter()
        .map(|s| parse_net(s).map_err(serde::de::Error::custom))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn untrusted_peer_ignores_the_header() {
        let trusted = vec![parse_net("127.0.0.1/32").unwrap()];
        assert_eq!(
            client_ip(ip("203.0.113.9"), &xff(&["10.0.0.1"]), &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(
            client_ip(ip("127.0.0.1"), &xff(&["10.0.0.1"]), &[]),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn trusted_peer_takes_the_rightmost_untrusted_hop() {
        let trusted = vec![
            parse_net("127.0.0.1").unwrap(),
            parse_net("10.1.0.0/16").unwrap(),
        ];
        // The client wrote "1.1.1.1" itself; the first proxy saw 198.51.100.7.
        let h = xff(&["1.1.1.1, 198.51.100.7", "10.1.2.3"]);
        assert_eq!(client_ip(ip("127.0.0.1"), &h, &trusted), ip("198.51.100.7"));
        // All hops trusted: the leftmost one.
        let h = xff(&["10.1.9.9, 10.1.2.3"]);
        assert_eq!(client_ip(ip("127.0.0.1"), &h, &trusted), ip("10.1.9.9"));
        // No header: the peer.
        assert_eq!(
            client_ip(ip("127.0.0.1"), &HeaderMap::new(), &trusted),
            ip("127.0.0.1")
        );
        // Garbage stops the walk at the last readable hop.
        let h = xff(&["198.51.100.7, junk, 10.1.2.3"]);
        assert_eq!(client_ip(ip("127.0.0.1"), &h, &trusted), ip("10.1.2.3"));
        // Ports and brackets as some proxies write them.
        let h = xff(&["[2001:db8::1]"]);
        assert_eq!(client_ip(ip("127.0.0.1"), &h, &trusted), ip("2001:db8::1"));
        let h = xff(&["198.51.100.7:4711"]);
        assert_eq!(client_ip(ip("127.0.0.1"), &h, &trusted), ip("198.51.100.7"));
        // A v4-mapped peer is matched as v4.
        let h = xff(&["198.51.100.8"]);
        assert_eq!(
            client_ip(ip("::ffff:127.0.0.1"), &h, &trusted),
            ip("198.51.100.8")
        );
    }

    #[test]
    fn nets_parse_from_a_list_or_a_string() {
        #[derive(Deserialize)]
        struct T {
            #[serde(deserialize_with = "deserialize_nets")]
            n: Vec<IpNet>,
        }
        let t: T = toml::from_str("n = [\"127.0.0.1\", \"10.0.0.0/8\", \"::1\"]").unwrap();
        assert_eq!(t.n.len(), 3);
        assert_eq!(t.n[0].to_string(), "127.0.0.1/32");
        let t: T = toml::from_str("n = \"127.0.0.1/32, fd00::/8\"").unwrap();
        assert_eq!(t.n.len(), 2);
        assert!(toml::from_str::<T>("n = [\"nope\"]").is_err());
    }
}
