//! The `Service-Signature` header (DECISIONS.md section 7), compatible with Stripe's scheme:
//! `t=<unix seconds>,v1=<hex>[,v1=<hex>...]`, each `<hex>` being HMAC-SHA256 keyed by the
//! whole secret string (`whsec_` included) over `<t>.<raw body>`. During a rotation overlap
//! there is one `v1=` per live secret, newest first.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Name of the header.
pub const HEADER: &str = "Service-Signature";
/// Age of `t` past which a receiver should refuse a delivery.
pub const TOLERANCE_S: i64 = 300;

/// Hex HMAC-SHA256 of `<t>.<body>` keyed by `secret`.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The header value for `body` sent at `t`, signed with each of `secrets` in order.
pub fn header<'a>(secrets: impl IntoIterator<Item = &'a str>, t: i64, body: &[u8]) -> String {
    let mut out = format!("t={t}");
    for s in secrets {
        out.push_str(",v1=");
        out.push_str(&sign(s, t, body));
    }
    out
}

/// Why a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the header has no t= or no v1= value")]
    Malformed,
    #[error("no v1= value matches")]
    Mismatch,
    #[error("t= is older than the tolerance")]
    TooOld,
}

/// What a receiver does: some `v1=` must match `secret`, and `t` be within `tolerance_s` of
/// `now_s`.
pub fn verify(
    header_value: &str,
    body: &[u8],
    secret: &str,
    tolerance_s: i64,
    now_s: i64,
) -> Result<(), VerifyError> {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header_value.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.push(v),
            _ => {}
        }
    }
    let t = t.ok_or(VerifyError::Malformed)?;
    if sigs.is_empty() {
        return Err(VerifyError::Malformed);
    }
    let expected = sign(secret, t, body);
    if !sigs
        .iter()
        .any(|s| bool::from(s.as_bytes().ct_eq(expected.as_bytes())))
    {
        return Err(VerifyError::Mismatch);
    }
    if now_s - t > tolerance_s {
        return Err(VerifyError::TooOld);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac 'whsec_test'
        let h = header(["whsec_test"], 1_700_000_000, br#"{"a":1}"#);
        assert_eq!(
            h,
            "t=1700000000,v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
        assert_eq!(
            verify(&h, br#"{"a":1}"#, "whsec_test", 300, 1_700_000_100),
            Ok(())
        );
        assert_eq!(
            verify(&h, br#"{"a":2}"#, "whsec_test", 300, 1_700_000_100),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&h, br#"{"a":1}"#, "whsec_test", 300, 1_700_001_000),
            Err(VerifyError::TooOld)
        );
    }

    #[test]
    fn either_secret_verifies_during_an_overlap() {
        let body = b"{}";
        let h = header(["whsec_new", "whsec_old"], 10, body);
        assert_eq!(h.matches("v1=").count(), 2);
        assert_eq!(verify(&h, body, "whsec_new", 300, 10), Ok(()));
        assert_eq!(verify(&h, body, "whsec_old", 300, 10), Ok(()));
        assert_eq!(
            verify(&h, body, "whsec_other", 300, 10),
            Err(VerifyError::Mismatch)
        );
    }
}
