//! Tokens: verifying a client's JWT for `hello`, and issuing tokens for
//! `POST /v1/tokens` and development mode. HS256 with a shared secret; the
//! algorithm list is pinned, so `alg: none` and any other algorithm fail.

use std::time::{SystemTime, UNIX_EPOCH};

use herald_protocol::ids::is_valid_id;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Default lifetime of an issued token.
pub const DEFAULT_TTL_S: u64 = 3600;
/// Longest lifetime a token may be issued for (30 days).
pub const MAX_TTL_S: u64 = 30 * 24 * 3600;
/// Clock skew tolerated for `iat` in the future. `exp` and `nbf` get none:
/// herald usually issues its own tokens, so clocks agree.
const IAT_SKEW_S: u64 = 60;

/// The identity a valid token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub workspace: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    ws: String,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
}

/// Why a token was refused; the message goes to the client.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenError(pub String);

/// Verifies and issues tokens.
pub struct Tokens {
    decoding: DecodingKey,
    encoding: EncodingKey,
    validation: Validation,
}

impl Tokens {
    /// Tokens signed with `secret`; with `audience`, tokens must carry it in `aud`.
    pub fn new(secret: &str, audience: Option<&str>) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256];
        validation.leeway = 0;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        match audience {
            Some(aud) => {
                validation.set_required_spec_claims(&["exp", "sub", "aud"]);
                validation.set_audience(&[aud]);
            }
            None => {
                validation.set_required_spec_claims(&["exp", "sub"]);
                validation.validate_aud = false;
            }
        }
        Tokens {
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            validation,
        }
    }

    /// The identity `token` proves, or why it proves none.
    pub fn verify(&self, token: &str) -> Result<Identity, TokenError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| TokenError(format!("invalid token: {e}")))?;
        let c = data.claims;
        if let Some(iat) = c.iat
            && iat > now_s() + IAT_SKEW_S
        {
            return Err(TokenError("invalid token: issued in the future".into()));
        }
        if !is_valid_id(&c.sub) || !is_valid_id(&c.ws) {
            return Err(TokenError("invalid token: sub and ws must be valid ids".into()));
        }
        Ok(Identity { user: c.sub, workspace: c.ws })
    }

    /// A token for `user` in `workspace`, valid for `ttl_s` seconds.
    pub fn issue(&self, workspace: &str, user: &str, ttl_s: u64) -> String {
        let now = now_s();
        let claims = Claims { sub: user.into(), ws: workspace.into(), exp: now + ttl_s, iat: Some(now), nbf: None };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .expect("HS256 signing cannot fail")
    }
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(claims: serde_json::Value, alg: Algorithm, secret: &str) -> String {
        jsonwebtoken::encode(&Header::new(alg), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    #[test]
    fn accepts_own_tokens_and_refuses_forgeries() {
        let t = Tokens::new("s3cret", None);
        let ok = t.issue("acme", "alice", 60);
        assert_eq!(t.verify(&ok).unwrap(), Identity { user: "alice".into(), workspace: "acme".into() });
        let now = now_s();
        // Wrong secret, wrong algorithm, expired, not yet valid, missing claims, bad ids.
        assert!(
            t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now+60}), Algorithm::HS256, "other")).is_err()
        );
        assert!(
            t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now+60}), Algorithm::HS384, "s3cret")).is_err()
        );
        assert!(
            t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now-1}), Algorithm::HS256, "s3cret")).is_err()
        );
        assert!(
            t.verify(&sign(
                serde_json::json!({"sub":"a","ws":"w","exp":now+60,"nbf":now+30}),
                Algorithm::HS256,
                "s3cret"
            ))
            .is_err()
        );
        assert!(
            t.verify(&sign(
                serde_json::json!({"sub":"a","ws":"w","exp":now+60,"iat":now+3600}),
                Algorithm::HS256,
                "s3cret"
            ))
            .is_err()
        );
        assert!(t.verify(&sign(serde_json::json!({"ws":"w","exp":now+60}), Algorithm::HS256, "s3cret")).is_err());
        assert!(t.verify(&sign(serde_json::json!({"sub":"a","exp":now+60}), Algorithm::HS256, "s3cret")).is_err());
        assert!(t.verify(&sign(serde_json::json!({"sub":"a","ws":"w"}), Algorithm::HS256, "s3cret")).is_err());
        assert!(
            t.verify(&sign(serde_json::json!({"sub":"a b","ws":"w","exp":now+60}), Algorithm::HS256, "s3cret"))
                .is_err()
        );
        // alg: none, hand-made.
        let none = format!(
            "{}.{}.",
            b64(r#"{"alg":"none","typ":"JWT"}"#),
            b64(&format!(r#"{{"sub":"a","ws":"w","exp":{}}}"#, now + 60))
        );
        assert!(t.verify(&none).is_err());
    }

    #[test]
    fn audience_is_checked_when_configured() {
        let t = Tokens::new("s", Some("herald"));
        let now = now_s();
        assert!(
            t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now+60,"aud":"herald"}), Algorithm::HS256, "s"))
                .is_ok()
        );
        assert!(
            t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now+60,"aud":"other"}), Algorithm::HS256, "s"))
                .is_err()
        );
        assert!(t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now+60}), Algorithm::HS256, "s")).is_err());
    }

    fn b64(s: &str) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let b = s.as_bytes();
        let mut out = String::new();
        for chunk in b.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &c)| acc | (c as u32) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}
