//! The hosted checkout page (DECISIONS.md section 12): static HTML, CSS and
//! JavaScript embedded in the binary, the page's strings in every language it speaks, and
//! the QR codes it shows, drawn as SVG by the `qrcode` crate.
//!
//! Nothing here knows about HTTP or the store: the binary's `api::checkout_page` serves these
//! bytes with the headers [`content_security_policy`] describes. The page itself reads the
//! public checkout document (`GET /v1/checkout/{token}`, SPEC.md section 4) and polls it.
//!
//! ```
//! let html = appliance_web::page_html("de");
//! assert!(html.contains("lang=\"de\""));
//! assert!(appliance_web::qr_svg("ethereum:0xabc@1?value=1").unwrap().starts_with("<?xml"));
//! ```

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The page's script (served as `/assets/checkout/checkout.js`).
pub const CHECKOUT_JS: &str = include_str!("../static/checkout.js");
/// The page's style sheet (served as `/assets/checkout/checkout.css`).
pub const CHECKOUT_CSS: &str = include_str!("../static/checkout.css");
/// Every string of the page, per language code: `{"en": {"key": "text", ...}, "de": ...}`.
/// English is complete; a key missing in another language falls back to English.
pub const STRINGS_JSON: &str = include_str!("../static/strings.json");

/// The language used when nothing asked for matches.
pub const DEFAULT_LANGUAGE: &str = "en";

/// The longest text a QR code is drawn for: a payment URI or an address is far shorter;
/// the bound keeps the work per request small.
pub const MAX_QR_TEXT: usize = 512;

type Strings = BTreeMap<String, BTreeMap<String, String>>;

fn strings() -> &'static Strings {
    static S: OnceLock<Strings> = OnceLock::new();
    S.get_or_init(|| {
        serde_json::from_str(STRINGS_JSON).expect("web/static/strings.json is valid (tested)")
    })
}

/// The language codes the page speaks, e.g. `["de", "en", "fr"]`.
pub fn languages() -> Vec<&'static str> {
    strings().keys().map(String::as_str).collect()
}

/// One string in `lang` (English when the language or the key is missing; the key itself
/// when English lacks it too).
pub fn text(lang: &str, key: &str) -> String {
    let s = strings();
    s.get(lang)
        .and_then(|m| m.get(key))
        .or_else(|| s.get(DEFAULT_LANGUAGE).and_then(|m| m.get(key)))
        .cloned()
        .unwrap_or_else(|| key.to_string())
}

/// The page's language: `?lang=` when the page speaks it, else the first language of the
/// `Accept-Language` header it speaks (highest `q` first; `de-CH` matches `de`), else
/// English. The browser's own `navigator.language` is consulted by the script after these.
pub fn pick_language(query_lang: Option<&str>, accept_language: Option<&str>) -> &'static str {
    let known = languages();
    let find = |tag: &str| -> Option<&'static str> {
        let tag = tag.trim().to_ascii_lowercase();
        let base = tag.split('-').next().unwrap_or("");
        known
            .iter()
            .copied()
            .find(|k| *k == tag)
            .or_else(|| known.iter().copied().find(|k| *k == base))
    };
    if let Some(l) = query_lang.and_then(find) {
        return l;
    }
    if let Some(header) = accept_language {
        let mut tags: Vec<(u32, usize, &str)> = header
            .split(',')
            .take(32)
            .enumerate()
            .filter_map(|(i, part)| {
                let mut it = part.split(';');
                let tag = it.next()?.trim();
                let q = it
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .map(|q| {
                        (q.trim().parse::<f32>().unwrap_or(0.0).clamp(0.0, 1.0) * 1000.0) as u32
                    })
                    .unwrap_or(1000);
                (q > 0 && !tag.is_empty()).then_some((q, i, tag))
            })
            .collect();
        tags.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        if let Some(l) = tags.iter().find_map(|(_, _, tag)| find(tag)) {
            return l;
        }
    }
    DEFAULT_LANGUAGE
}

/// Escapes text for HTML element content and double-quoted attributes.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The strings as a JSON data block's content: `</` cannot close the element early.
fn strings_data_block() -> &'static str {
    static S: OnceLock<String> = OnceLock::new();
    S.get_or_init(|| STRINGS_JSON.replace("</", "<\\/"))
}

/// The page for a checkout token that exists: a shell the script fills from
/// `GET /v1/checkout/{token}`. `lang` is the server's pick ([`pick_language`]); the script
/// may still switch (`?lang=`, the language menu). Paths are relative to
/// `/checkout/{token}`, so the page works under any `public_base_url` prefix. No inline
/// script or style: the CSP is `default-src 'self'`.
pub fn page_html(lang: &str) -> String {
    let lang = escape_html(lang);
    let title = escape_html(&text(&lang, "page_title"));
    let loading = escape_html(&text(&lang, "loading"));
    let language = escape_html(&text(&lang, "language"));
    format!(
        r#"{head}<script type="application/json" id="ck-strings">{strings}</script>
<script src="../assets/checkout/checkout.js" defer></script>
</head>
<body>
<div class="ck-page">
<main>
<p id="ck-loading" class="ck-card" role="status">{loading}</p>
<div id="ck-not-found" class="ck-card" hidden></div>
<div id="ck-main" hidden>
<header id="ck-header" class="ck-card"></header>
<div id="ck-status" class="ck-status" role="status" aria-live="polite" aria-atomic="true"></div>
<dl id="ck-summary" class="ck-card"></dl>
<div id="ck-countdown" class="ck-card" hidden></div>
<section id="ck-options" class="ck-card" hidden></section>
<section id="ck-remainder" class="ck-card" aria-labelledby="ck-remainder-title" hidden></section>
<section id="ck-payments" class="ck-card" hidden></section>
<section id="ck-refund" class="ck-card" aria-labelledby="ck-refund-title" aria-live="polite" hidden></section>
<div id="ck-return" hidden></div>
</div>
</main>
<footer>
<label id="ck-lang-label" for="ck-lang">{language}</label>
<select id="ck-lang"></select>
</footer>
<div id="ck-announce" class="ck-sr" aria-live="polite" role="status"></div>
</div>
</body>
</html>
"#,
        head = document_head(
            &format!(r#"lang="{lang}" data-server-lang="{lang}""#),
            &title
        ),
        strings = strings_data_block(),
    )
}

/// A page's start, through its stylesheet: the `html` element with `html_attrs` (escaped
/// by the caller), the metadata every page carries, and the escaped `title`.
fn document_head(html_attrs: &str, title: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html {html_attrs}>
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>{title}</title>
<link rel="stylesheet" href="../assets/checkout/checkout.css">
"#
    )
}

/// The one "not found" page, for a malformed, unknown or deleted token alike (SPEC.md
/// section 4, Checkout: every miss is the same): it names nothing about the token.
pub fn not_found_html(lang: &str) -> String {
    let title = escape_html(&text(lang, "not_found_title"));
    let body = escape_html(&text(lang, "not_found_body"));
    let lang = escape_html(lang);
    let head = document_head(&format!(r#"lang="{lang}""#), &title);
    format!(
        r#"{head}</head>
<body>
<div class="ck-page">
<main class="ck-card">
<h1>{title}</h1>
<p>{body}</p>
</main>
</div>
</body>
</html>
"#
    )
}

/// The page's Content-Security-Policy: `default-src 'self'` and nothing looser, except
/// that images may also come from `logo_origin` (the merchant's own logo host, an
/// `https://host[:port]` origin from the project settings). No inline script or style, no
/// framing, forms post only to the appliance.
pub fn content_security_policy(logo_origin: Option<&str>) -> String {
    let img = match logo_origin {
        Some(o) if is_https_origin(o) => format!("; img-src 'self' {o}"),
        _ => String::new(),
    };
    format!("default-src 'self'{img}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
}

/// The `https://host[:port]` origin of an https URL, when it has a plain host; `None` for
/// anything else (no other scheme, no userinfo, no characters a CSP source cannot carry).
pub fn https_origin(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let origin = format!("https://{authority}");
    is_https_origin(&origin).then_some(origin)
}

fn is_https_origin(o: &str) -> bool {
    let Some(authority) = o.strip_prefix("https://") else {
        return false;
    };
    !authority.is_empty()
        && authority.len() <= 253
        && authority
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
}

/// `text` as a QR code (error correction M, quiet zone included) drawn as an SVG document
/// of black modules on white, 8 px per module. `None` when the text is empty, longer than
/// [`MAX_QR_TEXT`] or does not fit a QR code.
pub fn qr_svg(text: &str) -> Option<String> {
    if text.is_empty() || text.len() > MAX_QR_TEXT {
        return None;
    }
    let code =
        qrcode::QrCode::with_error_correction_level(text.as_bytes(), qrcode::EcLevel::M).ok()?;
    Some(
        code.render::<qrcode::render::svg::Color<'_>>()
            .module_dimensions(8, 8)
            .quiet_zone(true)
            .dark_color(qrcode::render::svg::Color("#000000"))
            .light_color(qrcode::render::svg::Color("#ffffff"))
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_every_english_key() {
        let s = strings();
        let en = &s["en"];
        assert!(s.len() >= 2, "English and at least one more language");
        for (lang, m) in s {
            for k in en.keys() {
                assert!(m.contains_key(k), "{lang} lacks {k}");
            }
            for k in m.keys() {
                assert!(en.contains_key(k), "{lang} has {k}, which English lacks");
            }
        }
    }

    #[test]
    fn placeholders_match_across_languages() {
        let vars = |s: &str| {
            let mut v: Vec<String> = s
                .split('{')
                .skip(1)
                .filter_map(|p| p.split_once('}').map(|(n, _)| n.to_string()))
                .collect();
            v.sort();
            v
        };
        let s = strings();
        for (lang, m) in s {
            for (k, v) in m {
                assert_eq!(vars(v), vars(&s["en"][k]), "{lang}.{k}");
            }
        }
    }

    #[test]
    fn language_choice() {
        assert_eq!(pick_language(Some("de"), Some("fr")), "de");
        assert_eq!(pick_language(Some("xx"), Some("fr-CA,en;q=0.5")), "fr");
        assert_eq!(pick_language(None, Some("en;q=0.4, de-CH;q=0.9")), "de");
        assert_eq!(pick_language(None, Some("ja, *;q=0.1")), "en");
        assert_eq!(pick_language(None, Some("de;q=0")), "en");
        assert_eq!(pick_language(None, None), "en");
    }

    #[test]
    fn page_has_no_inline_script_or_style() {
        let html = page_html("en");
        // The only <script> without src is the JSON data block, which never runs.
        assert_eq!(html.matches("<script").count(), 2);
        assert!(html.contains(r#"<script type="application/json" id="ck-strings">"#));
        assert!(!html.contains("style="));
        assert!(!html.contains("<style"));
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!strings_data_block().contains("</"));
    }

    #[test]
    fn not_found_says_nothing_of_the_token() {
        let a = not_found_html("en");
        assert!(a.contains("Not found"));
        assert_eq!(a, not_found_html("en"));
        assert!(not_found_html("de").contains("Nicht gefunden"));
    }

    #[test]
    fn csp_is_strict() {
        assert_eq!(
            content_security_policy(None),
            "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        );
        let with = content_security_policy(Some("https://cdn.shop.example"));
        assert!(with.starts_with("default-src 'self'; img-src 'self' https://cdn.shop.example;"));
        // Anything that could smuggle a directive is dropped.
        assert!(!content_security_policy(Some("https://a; script-src *")).contains("script-src"));
        assert_eq!(
            https_origin("https://shop.example:8443/logo.png?x=1").as_deref(),
            Some("https://shop.example:8443")
        );
        assert_eq!(https_origin("http://shop.example/logo.png"), None);
        assert_eq!(https_origin("https://user@shop.example/logo.png"), None);
    }

    #[test]
    fn qr_bounds() {
        assert!(qr_svg("").is_none());
        assert!(qr_svg(&"a".repeat(MAX_QR_TEXT + 1)).is_none());
        let svg = qr_svg("ethereum:0xdac17f958d2ee523a2206206994597c13d831ec7@1/transfer?address=0x0000000000000000000000000000000000000001&uint256=40000000").unwrap();
        assert!(svg.contains("<svg") && svg.contains("#000000"));
    }
}
