//! Redaction of operator-configured upstream URLs.
//!
//! Hosted node providers put the account key in the URL's path (`https://host/v3/KEY`) or
//! its user info. Wherever such a URL is shown (API answers, logs, error messages) only its
//! scheme, host and port remain.

/// `scheme://host[:port]` of `url`: user info, path, query and fragment removed. A string
/// that is not a URL is replaced whole (`<url>`), never echoed.
///
/// ```
/// use appliance_chains::redact::redact_url;
/// assert_eq!(redact_url("https://u:p@node.example:8545/v3/SECRET?x=1"), "https://node.example:8545");
/// assert_eq!(redact_url("no url"), "<url>");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(i) = url.find("://") else {
        return "<url>".into();
    };
    let scheme = &url[..i];
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return "<url>".into();
    }
    let rest = &url[i + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    format!("{scheme}://{host}")
}

/// `text` with every URL in it (`scheme://...` up to white space, a quote, a bracket or a
/// comma) replaced by [`redact_url`]: for error messages of HTTP clients that embed the URL
/// they called.
pub fn scrub_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = rest[..i]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .last()
            .map(|(j, _)| j)
            .unwrap_or(i);
        let tail = &rest[i + 3..];
        let len = tail
            .find(|c: char| {
                c.is_whitespace()
                    || matches!(
                        c,
                        '"' | '\'' | '<' | '>' | '(' | ')' | '{' | '}' | ',' | '`'
                    )
            })
            .unwrap_or(tail.len());
        let end = i + 3 + len;
        out.push_str(&rest[..start]);
        if start == i {
            // `://` with no scheme before it: not a URL we can shorten; drop what follows.
            out.push_str("<url>");
        } else {
            out.push_str(&redact_url(&rest[start..end]));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// An error as one line for a log: its whole chain (`{:#}`), with every node URL's secret
/// part removed ([`scrub_urls`]).
pub fn clean_error(e: &dyn std::fmt::Display) -> String {
    scrub_urls(&format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_scheme_host_and_port_only() {
        assert_eq!(
            redact_url("https://mainnet.infura.io/v3/abcdef0123"),
            "https://mainnet.infura.io"
        );
        assert_eq!(redact_url("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
        assert_eq!(redact_url("http://[::1]:8545/key"), "http://[::1]:8545");
        assert_eq!(
            redact_url("wss://user:secret@node.example/ws?apikey=s"),
            "wss://node.example"
        );
        assert_eq!(redact_url("https://h.example#frag"), "https://h.example");
        assert_eq!(redact_url("127.0.0.1:8545/secret"), "<url>");
        assert_eq!(redact_url("://x/secret"), "<url>");
    }

    #[test]
    fn scrubs_every_url_in_a_message() {
        let m = "error sending request for url (https://h.example/v3/SECRET): connection refused; \
                 retried http://u:pw@10.0.0.1:8545/KEY2, then \"https://x.example/?k=K3\"";
        let s = scrub_urls(m);
        for secret in ["SECRET", "pw", "KEY2", "K3"] {
            assert!(!s.contains(secret), "{secret} left in {s}");
        }
        assert!(s.contains("(https://h.example)"), "{s}");
        assert!(s.contains("http://10.0.0.1:8545,"), "{s}");
        assert!(s.contains("\"https://x.example\""), "{s}");
        assert_eq!(scrub_urls("no urls here"), "no urls here");
        assert_eq!(scrub_urls("odd ://secret"), "odd <url>");
    }
}
