//! HMAC-signed, time-limited blob URLs for kubosh's blob endpoint ([`super::endpoint`]).
//!
//! `<base>/blobs/<id>?expires=<unix seconds>&method=GET|PUT&sig=<hex>` where `sig` is
//! HMAC-SHA256 over `<method>|<id>|<expires>` with the signer's key. Checking compares in
//! constant time (ring's `hmac::verify`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use url::Url;

use super::{SignedMethod, check_id};
use kubosh_base::digest::to_hex;

/// Why a signed request is refused (each is a `403`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A query parameter is missing or malformed.
    #[error("malformed signed URL: {0}")]
    Malformed(&'static str),
    /// `expires` is in the past.
    #[error("signed URL expired")]
    Expired,
    /// The URL was signed for another method.
    #[error("signed URL is for another method")]
    WrongMethod,
    /// The signature does not match (another id, method, expiry, or key).
    #[error("bad signature")]
    BadSignature,
}

/// Signs and checks blob URLs. Cheap to clone; `Debug` leaves out the key.
#[derive(Clone)]
pub struct HmacSigner {
    key: ring::hmac::Key,
    base: Url,
}

impl std::fmt::Debug for HmacSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HmacSigner")
            .field("key", &"<redacted>")
            .field("base", &self.base.as_str())
            .finish()
    }
}

impl HmacSigner {
    /// A signer with `key` (at least 32 random bytes advised) for URLs under `base` (the
    /// endpoint as agents reach it, e.g. `https://10.0.0.5:25250`).
    pub fn new(key: &[u8], base: Url) -> HmacSigner {
        HmacSigner {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key),
            base,
        }
    }

    /// A signer with a fresh random 32-byte key.
    pub fn random(base: Url) -> HmacSigner {
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system random source works");
        HmacSigner { key, base }
    }

    /// The same key for URLs under `base` (e.g. once the endpoint's port is known).
    pub fn with_base(mut self, base: Url) -> HmacSigner {
        self.base = base;
        self
    }

    /// A URL allowing `method` on blob `id` for `ttl` from now.
    pub fn sign(&self, method: SignedMethod, id: &str, ttl: Duration) -> Url {
        let expires = unix(SystemTime::now()).saturating_add(ttl.as_secs());
        self.sign_until(method, id, expires)
    }

    /// A URL allowing `method` on blob `id` until `expires` (Unix seconds).
    pub fn sign_until(&self, method: SignedMethod, id: &str, expires: u64) -> Url {
        let sig = self.mac(method.as_str(), id, expires);
        let mut url = self.base.clone();
        url.set_path(&format!("/blobs/{id}"));
        url.query_pairs_mut()
            .clear()
            .append_pair("expires", &expires.to_string())
            .append_pair("method", method.as_str())
            .append_pair("sig", &sig);
        url
    }

    /// Checks a request for `method` on blob `id` whose query string is `query`, at `now`.
    pub fn verify(
        &self,
        method: SignedMethod,
        id: &str,
        query: &str,
        now: SystemTime,
    ) -> Result<(), SignatureError> {
        let (mut expires, mut signed_method, mut sig) = (None, None, None);
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            let slot = match &*k {
                "expires" => &mut expires,
                "method" => &mut signed_method,
                "sig" => &mut sig,
                _ => continue,
            };
            if slot.replace(v.into_owned()).is_some() {
                return Err(SignatureError::Malformed("repeated parameter"));
            }
        }
        let expires: u64 = expires
            .ok_or(SignatureError::Malformed("no expires"))?
            .parse()
            .map_err(|_| SignatureError::Malformed("expires is not a number"))?;
        let signed_method = signed_method.ok_or(SignatureError::Malformed("no method"))?;
        let sig = from_hex(&sig.ok_or(SignatureError::Malformed("no sig"))?)
            .ok_or(SignatureError::Malformed("sig is not hex"))?;
        check_id(id).map_err(|_| SignatureError::Malformed("invalid blob id"))?;
        let message = format!("{signed_method}|{id}|{expires}");
        ring::hmac::verify(&self.key, message.as_bytes(), &sig)
            .map_err(|_| SignatureError::BadSignature)?;
        // Authentic from here on: the other checks cannot be used to probe the key.
        if signed_method != method.as_str() {
            return Err(SignatureError::WrongMethod);
        }
        if unix(now) > expires {
            return Err(SignatureError::Expired);
        }
        Ok(())
    }

    fn mac(&self, method: &str, id: &str, expires: u64) -> String {
        let message = format!("{method}|{id}|{expires}");
        to_hex(ring::hmac::sign(&self.key, message.as_bytes()).as_ref())
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> HmacSigner {
        HmacSigner::new(
            b"0123456789abcdef0123456789abcdef",
            "https://h:1".parse().unwrap(),
        )
    }

    #[test]
    fn signs_and_verifies() {
        let s = signer();
        let url = s.sign(SignedMethod::Get, "abc", Duration::from_secs(60));
        assert_eq!(url.path(), "/blobs/abc");
        let q = url.query().unwrap();
        let now = SystemTime::now();
        s.verify(SignedMethod::Get, "abc", q, now).unwrap();
        assert_eq!(
            s.verify(SignedMethod::Put, "abc", q, now),
            Err(SignatureError::WrongMethod)
        );
        assert_eq!(
            s.verify(SignedMethod::Get, "abd", q, now),
            Err(SignatureError::BadSignature)
        );
        assert_eq!(
            s.verify(SignedMethod::Get, "abc", q, now + Duration::from_secs(120)),
            Err(SignatureError::Expired)
        );
        let tampered = q.replace("method=GET", "method=PUT");
        assert_eq!(
            s.verify(SignedMethod::Put, "abc", &tampered, now),
            Err(SignatureError::BadSignature)
        );
        let other = HmacSigner::new(b"another key", "https://h:1".parse().unwrap());
        assert_eq!(
            other.verify(SignedMethod::Get, "abc", q, now),
            Err(SignatureError::BadSignature)
        );
        assert!(matches!(
            s.verify(SignedMethod::Get, "abc", "expires=1&method=GET", now),
            Err(SignatureError::Malformed(_))
        ));
    }

    #[test]
    fn debug_hides_the_key() {
        let text = format!("{:?}", signer());
        assert!(!text.contains("0123456789abcdef"), "{text}");
    }
}
