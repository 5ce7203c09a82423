//! AWS Signature Version 4 for presigned URLs (query-string authentication),
//! as S3 and S3-compatible servers check it: the canonical request, the
//! string to sign and the derived key, written from AWS's specification on
//! the `hmac` and `sha2` crates herald already uses for JWTs and webhooks.
//!
//! Every header given is signed, so a request that sends another value (or
//! another length) for it is refused by the bucket. The payload is not
//! signed (`UNSIGNED-PAYLOAD`): a browser sends the bytes.
//!
//! Not here: which URLs the backend signs, or the bucket's address (`s3.rs`).

use std::sync::Mutex;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The longest a presigned URL may be valid for (SigV4's limit: 7 days).
pub const MAX_EXPIRES_S: i64 = 604_800;

/// An access key and its secret, with the last day's derived signing key
/// (four HMACs saved on every URL signed that day and region).
pub struct Keys {
    pub access: String,
    pub secret: String,
    /// `(day/region, key)`. Held only while reading or replacing it.
    derived: Mutex<Option<(String, Vec<u8>)>>,
}

impl Keys {
    pub fn new(access: String, secret: String) -> Keys {
        Keys { access, secret, derived: Mutex::new(None) }
    }

    /// The signing key of `day` (`YYYYMMDD`) in `region`.
    fn signing_key(&self, day: &str, region: &str) -> Vec<u8> {
        let scope = format!("{day}/{region}");
        if let Some((s, key)) = &*self.derived.lock().unwrap_or_else(|e| e.into_inner())
            && *s == scope
        {
            return key.clone();
        }
        let mut key = hmac(format!("AWS4{}", self.secret).as_bytes(), day.as_bytes());
        for part in [region, "s3", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        *self.derived.lock().unwrap_or_else(|e| e.into_inner()) = Some((scope, key.clone()));
        key
    }
}

/// One request to presign.
pub struct Presign<'a> {
    pub method: &'a str,
    /// The `Host` header the client will send (`host` or `host:port`).
    pub host: &'a str,
    /// Already URI-encoded (see [`encode_path`]); starts with `/`.
    pub path: &'a str,
    /// Parameters besides the `X-Amz-*` ones, not yet encoded.
    pub query: &'a [(&'a str, &'a str)],
    /// Headers to sign besides `host`: lowercase names, values as sent.
    pub headers: &'a [(&'a str, &'a str)],
    /// Signing time, in seconds since the Unix epoch.
    pub at_s: i64,
    /// Valid for this many seconds after `at_s` (1 to [`MAX_EXPIRES_S`]).
    pub expires_s: i64,
}

/// The request's path and query, signature included: `path?query`.
pub fn presign(keys: &Keys, region: &str, req: &Presign<'_>) -> String {
    let amz_date = amz_date(req.at_s);
    let day = &amz_date[..8];
    let scope = format!("{day}/{region}/s3/aws4_request");

    let mut headers: Vec<(String, String)> =
        req.headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), canonical_value(v))).collect();
    headers.push(("host".to_string(), req.host.to_string()));
    headers.sort();
    let signed_headers = headers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(";");

    let expires = req.expires_s.clamp(1, MAX_EXPIRES_S).to_string();
    let credential = format!("{}/{scope}", keys.access);
    let mut params: Vec<(String, String)> = req.query.iter().map(|(k, v)| (encode_query(k), encode_query(v))).collect();
    for (k, v) in [
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
        ("X-Amz-Credential", credential.as_str()),
        ("X-Amz-Date", amz_date.as_str()),
        ("X-Amz-Expires", expires.as_str()),
        ("X-Amz-SignedHeaders", signed_headers.as_str()),
    ] {
        params.push((encode_query(k), encode_query(v)));
    }
    params.sort();
    let query = params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");

    let mut canonical = format!("{}\n{}\n{query}\n", req.method, req.path);
    for (n, v) in &headers {
        canonical.push_str(&format!("{n}:{v}\n"));
    }
    canonical.push_str(&format!("\n{signed_headers}\nUNSIGNED-PAYLOAD"));

    let to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex(&Sha256::digest(canonical.as_bytes())));
    let signature = hex(&hmac(&keys.signing_key(day, region), to_sign.as_bytes()));
    format!("{}?{query}&X-Amz-Signature={signature}", req.path)
}

/// An object key as a URI path: every byte but unreserved ones and `/`
/// percent-encoded (S3 signs the path encoded once).
pub fn encode_path(key: &str) -> String {
    encode(key, true)
}

fn encode_query(s: &str) -> String {
    encode(s, false)
}

fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep_slash && b == b'/' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A header value as signed: trimmed, runs of spaces made one.
fn canonical_value(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// `YYYYMMDDTHHMMSSZ` in UTC.
fn amz_date(secs: i64) -> String {
    let (y, m, d) = crate::utc::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", s / 3600, s % 3600 / 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_782_400 + 86_399), "20000229T235959Z");
        assert_eq!(amz_date(4_107_542_400), "21000301T000000Z");
    }

    /// AWS's published example of a presigned GET (S3 developer guide,
    /// "Authenticating Requests: Using Query Parameters").
    #[test]
    fn signs_as_the_aws_example() {
        let keys = Keys::new("AKIAIOSFODNN7EXAMPLE".into(), "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into());
        let url = presign(
            &keys,
            "us-east-1",
            &Presign {
                method: "GET",
                host: "examplebucket.s3.amazonaws.com",
                path: "/test.txt",
                query: &[],
                headers: &[],
                at_s: 1_369_353_600,
                expires_s: 86_400,
            },
        );
        assert_eq!(
            url,
            "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    #[test]
    fn the_cached_key_is_the_days_own() {
        let keys = Keys::new("k".into(), "s".into());
        let req =
            |at_s| Presign { method: "GET", host: "h", path: "/b/o", query: &[], headers: &[], at_s, expires_s: 60 };
        let day1 = presign(&keys, "us-east-1", &req(1_369_353_600));
        let day2 = presign(&keys, "us-east-1", &req(1_369_353_600 + 86_400));
        let fresh = |at_s| presign(&Keys::new("k".into(), "s".into()), "us-east-1", &req(at_s));
        assert_eq!(day1, fresh(1_369_353_600));
        assert_eq!(day2, fresh(1_369_353_600 + 86_400));
        assert_eq!(presign(&keys, "eu-west-1", &req(1_369_353_600 + 86_400)), {
            presign(&Keys::new("k".into(), "s".into()), "eu-west-1", &req(1_369_353_600 + 86_400))
        });
    }

    #[test]
    fn paths_and_queries_are_encoded_once() {
        assert_eq!(encode_path("ws/chat one/f+é"), "ws/chat%20one/f%2B%C3%A9");
        assert_eq!(encode_query("a/b c=d"), "a%2Fb%20c%3Dd");
        assert_eq!(canonical_value("  text/plain;   charset=utf-8 "), "text/plain; charset=utf-8");
    }
}
