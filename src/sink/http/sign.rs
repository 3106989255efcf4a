//! The webhook signature: `X-Outbox-Signature: t=<unix seconds>,v1=<hex>`,
//! where the hex is HMAC-SHA256(secret, "<t>." + body) over the body bytes
//! exactly as sent, one `v1=` per active secret (rotation: receivers accept
//! a request when any `v1` verifies with a secret they hold).
//!
//! The timestamp is signed with the body so that a receiver can refuse a
//! replayed request older than its tolerance.

use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// The header the signature travels in.
pub const SIGNATURE_HEADER: &str = "x-outbox-signature";

/// HMAC-SHA256 of `"<t>." + body` under `secret`, as lower-case hex.
pub fn v1(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    hex::encode(hmac_sha256(secret, &[timestamp.as_bytes(), b".", body]))
}

/// HMAC-SHA256 of `parts`, one after the other, under `secret`. Through
/// OpenSSL, the relay's one SHA-256 (TLS, the dead letters' payload
/// digests).
fn hmac_sha256(secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC pads a key shorter than SHA-256's 64-byte block with zeros, so
    // an empty key is the block of zeros, which OpenSSL (3.0) takes where
    // it refuses an empty one.
    const EMPTY_KEY: [u8; 64] = [0; 64];
    let secret = if secret.is_empty() {
        &EMPTY_KEY
    } else {
        secret
    };
    let mac = || -> Result<Vec<u8>, ErrorStack> {
        let key = PKey::hmac(secret)?;
        let mut signer = Signer::new(MessageDigest::sha256(), &key)?;
        for part in parts {
            signer.update(part)?;
        }
        signer.sign_to_vec()
    };
    // HMAC takes keys of any length; OpenSSL fails here only without memory.
    mac().expect("HMAC-SHA256 of any key and message")
}

/// The header value for `body` signed at `timestamp` with every secret.
pub fn header_value(secrets: &[String], timestamp: u64, body: &[u8]) -> String {
    let mut out = format!("t={timestamp}");
    for secret in secrets {
        out.push_str(",v1=");
        out.push_str(&v1(secret.as_bytes(), timestamp, body));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, KeyInit, Mac};
    use proptest::prelude::*;
    use sha2::Sha256;

    /// HMAC-SHA256 computed by the hmac and sha2 crates, independent of
    /// OpenSSL.
    fn independent_hmac(secret: &[u8], message: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).unwrap();
        mac.update(message);
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn rfc4231_case_2() {
        // RFC 4231, test case 2: the MAC primitive the signature is built on.
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", &[b"what do ya want for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// The config refuses an empty secret, but one signs all the same
    /// (OpenSSL alone refuses an empty HMAC key).
    #[test]
    fn an_empty_secret_signs_as_hmac_defines_it() {
        assert_eq!(v1(b"", 7, b"{}"), independent_hmac(b"", b"7.{}"));
    }

    #[test]
    fn header_has_one_v1_per_secret() {
        let secrets = vec!["old".to_owned(), "new".to_owned()];
        let value = header_value(&secrets, 1_700_000_000, b"{}");
        let parts: Vec<&str> = value.split(',').collect();
        assert_eq!(parts[0], "t=1700000000");
        assert_eq!(parts.len(), 3);
        assert_eq!(
            parts[1],
            format!("v1={}", independent_hmac(b"old", b"1700000000.{}"))
        );
        assert_eq!(
            parts[2],
            format!("v1={}", independent_hmac(b"new", b"1700000000.{}"))
        );
        assert_ne!(parts[1], parts[2]);
    }

    proptest! {
        #[test]
        fn matches_an_independent_hmac_for_any_bytes(
            secret in proptest::collection::vec(any::<u8>(), 0..100),
            body in proptest::collection::vec(any::<u8>(), 0..2000),
            t in any::<u64>(),
        ) {
            let mut message = format!("{t}.").into_bytes();
            message.extend_from_slice(&body);
            prop_assert_eq!(v1(&secret, t, &body), independent_hmac(&secret, &message));
        }

        #[test]
        fn any_change_to_the_body_or_time_changes_the_signature(
            body in proptest::collection::vec(any::<u8>(), 1..200),
            flip in any::<usize>(),
            t in 0u64..u64::MAX,
        ) {
            let mut other = body.clone();
            let i = flip % other.len();
            other[i] ^= 1;
            prop_assert_ne!(v1(b"k", t, &body), v1(b"k", t, &other));
            prop_assert_ne!(v1(b"k", t, &body), v1(b"k", t + 1, &body));
        }
    }
}
