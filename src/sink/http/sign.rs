//! The webhook signature: `X-Outbox-Signature: t=<unix seconds>,v1=<hex>`,
//! where the hex is HMAC-SHA256(secret, "<t>." + body) over the body bytes
//! exactly as sent, one `v1=` per active secret (rotation: receivers accept
//! a request when any `v1` verifies with a secret they hold).
//!
//! The timestamp is signed with the body so that a receiver can refuse a
//! replayed request older than its tolerance.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header the signature travels in.
pub const SIGNATURE_HEADER: &str = "x-outbox-signature";

/// HMAC-SHA256 of `"<t>." + body` under `secret`, as lower-case hex.
pub fn v1(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex(&mac.finalize().into_bytes())
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

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// HMAC-SHA256 computed by OpenSSL, independent of the hmac crate.
    fn openssl_hmac(secret: &[u8], message: &[u8]) -> String {
        let key = openssl::pkey::PKey::hmac(secret).unwrap();
        let mut signer =
            openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), &key).unwrap();
        signer.update(message).unwrap();
        hex(&signer.sign_to_vec().unwrap())
    }

    #[test]
    fn rfc4231_case_2() {
        // RFC 4231, test case 2: the MAC primitive the signature is built on.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
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
            format!("v1={}", openssl_hmac(b"old", b"1700000000.{}"))
        );
        assert_eq!(
            parts[2],
            format!("v1={}", openssl_hmac(b"new", b"1700000000.{}"))
        );
        assert_ne!(parts[1], parts[2]);
    }

    proptest! {
        #[test]
        fn matches_an_independent_hmac_for_any_bytes(
            secret in proptest::collection::vec(any::<u8>(), 1..100),
            body in proptest::collection::vec(any::<u8>(), 0..2000),
            t in any::<u64>(),
        ) {
            let mut message = format!("{t}.").into_bytes();
            message.extend_from_slice(&body);
            prop_assert_eq!(v1(&secret, t, &body), openssl_hmac(&secret, &message));
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
