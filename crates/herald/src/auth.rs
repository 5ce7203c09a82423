//! Tokens: verifying a client's JWT for `hello`, and issuing tokens for
//! `POST /v1/tokens` and development mode.
//!
//! Up to two keys verify: a shared secret (HS256) and an operator's public
//! key (RS256 for RSA, EdDSA for Ed25519), e.g. an identity provider's. Each
//! key is pinned to its one algorithm and a token is checked only against the
//! key of the algorithm its header names: `alg: none`, any other algorithm,
//! and an HS256 token "signed" with the public key's text all fail. Only the
//! secret issues tokens.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use herald_protocol::ids::{invalid_id, invalid_user_id, is_valid_id, is_valid_user_id};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Default lifetime of an issued token.
pub const DEFAULT_TTL_S: u64 = 3600;
/// Longest lifetime a token may be issued for (30 days).
pub const MAX_TTL_S: u64 = 30 * 24 * 3600;
/// Clock skew tolerated for `iat` in the future, at least (the leeway if longer).
const IAT_SKEW_S: u64 = 60;
/// Default clock skew allowed on `exp` and `nbf`.
pub const DEFAULT_LEEWAY_MS: u64 = 5_000;
/// The smallest RSA key accepted, in bits.
const MIN_RSA_BITS: usize = 2048;

/// The identity a valid token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub workspace: String,
    /// When the token was issued (seconds), if it says: what revocations compare.
    pub iat: Option<u64>,
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

/// What verifies tokens, as configured.
#[derive(Debug, Clone, Default)]
pub struct TokenKeys {
    /// The HS256 secret.
    pub secret: Option<String>,
    /// A PEM public key (RSA or Ed25519).
    pub public_key_pem: Option<Vec<u8>>,
    /// When set, tokens must carry this `aud`.
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in milliseconds (rounded up to seconds, as JWT times are).
    pub leeway_ms: u64,
}

/// One key and the one algorithm it verifies.
struct Verifier {
    key: DecodingKey,
    validation: Validation,
}

/// Verifies and issues tokens.
pub struct Tokens {
    verifiers: Vec<Verifier>,
    encoding: Option<EncodingKey>,
    iat_skew_s: u64,
}

impl Tokens {
    /// Tokens verified by `keys`. Fails on a public key that is not an RSA
    /// (at least 2048 bits) or Ed25519 PEM public key.
    pub fn new(keys: &TokenKeys) -> anyhow::Result<Tokens> {
        let leeway_s = keys.leeway_ms.div_ceil(1000);
        let validation = |alg: Algorithm| {
            let mut v = Validation::new(alg);
            v.algorithms = vec![alg];
            v.leeway = leeway_s;
            v.validate_exp = true;
            v.validate_nbf = true;
            match &keys.audience {
                Some(aud) => {
                    v.set_required_spec_claims(&["exp", "sub", "aud"]);
                    v.set_audience(&[aud]);
                }
                None => {
                    v.set_required_spec_claims(&["exp", "sub"]);
                    v.validate_aud = false;
                }
            }
            v
        };
        let mut verifiers = Vec::new();
        if let Some(secret) = &keys.secret {
            let key = DecodingKey::from_secret(secret.as_bytes());
            verifiers.push(Verifier { key, validation: validation(Algorithm::HS256) });
        }
        if let Some(pem) = &keys.public_key_pem {
            let (key, alg) = public_key(pem)?;
            verifiers.push(Verifier { key, validation: validation(alg) });
        }
        anyhow::ensure!(!verifiers.is_empty(), "no key to verify tokens with");
        Ok(Tokens {
            verifiers,
            encoding: keys.secret.as_ref().map(|s| EncodingKey::from_secret(s.as_bytes())),
            iat_skew_s: IAT_SKEW_S.max(leeway_s),
        })
    }

    /// Tokens signed with `secret` (HS256) only, no audience, the default leeway.
    pub fn with_secret(secret: &str) -> Tokens {
        let keys = TokenKeys { secret: Some(secret.into()), leeway_ms: DEFAULT_LEEWAY_MS, ..TokenKeys::default() };
        Tokens::new(&keys).expect("a secret is a valid key")
    }

    /// The identity `token` proves, or why it proves none.
    pub fn verify(&self, token: &str) -> Result<Identity, TokenError> {
        not_a_jwt(token).map_or(Ok(()), |why| Err(TokenError(format!("invalid token: {why}"))))?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            TokenError("invalid token: not a JWT (its first part is not a base64url JSON header)".into())
        })?;
        let Some(v) = self.verifiers.iter().find(|v| v.validation.algorithms[0] == header.alg) else {
            let accepted: Vec<String> =
                self.verifiers.iter().map(|v| format!("{:?}", v.validation.algorithms[0])).collect();
            return Err(TokenError(format!(
                "invalid token: it is signed with {:?}; this server accepts {}",
                header.alg,
                accepted.join(" or ")
            )));
        };
        let data = jsonwebtoken::decode::<Claims>(token, &v.key, &v.validation)
            .map_err(|e| TokenError(format!("invalid token: {}", refusal(token, &e))))?;
        let c = data.claims;
        if let Some(iat) = c.iat
            && iat > now_s() + self.iat_skew_s
        {
            return Err(TokenError("invalid token: issued in the future".into()));
        }
        if !is_valid_user_id(&c.sub) {
            return Err(TokenError(format!("invalid token: {}", invalid_user_id("sub"))));
        }
        if !is_valid_id(&c.ws) {
            return Err(TokenError(format!("invalid token: {}", invalid_id("ws"))));
        }
        Ok(Identity { user: c.sub, workspace: c.ws, iat: c.iat })
    }

    /// Whether this server can issue tokens (it has a secret).
    pub fn can_issue(&self) -> bool {
        self.encoding.is_some()
    }

    /// A token for `user` in `workspace`, valid for `ttl_s` seconds; `None`
    /// without a secret to sign it with.
    pub fn issue(&self, workspace: &str, user: &str, ttl_s: u64) -> Option<String> {
        let encoding = self.encoding.as_ref()?;
        let now = now_s();
        let claims = Claims { sub: user.into(), ws: workspace.into(), exp: now + ttl_s, iat: Some(now), nbf: None };
        Some(
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, encoding).expect("HS256 signing cannot fail"),
        )
    }
}

/// Why `token` cannot be a JWT at all, in words that say what to pass instead; `None` when it has
/// a JWT's shape (three base64url parts joined by dots).
fn not_a_jwt(token: &str) -> Option<String> {
    let t = token.trim();
    if t.is_empty() {
        return Some("the token is empty: pass the JWT your backend got from POST /v1/tokens".into());
    }
    if t.starts_with('{') {
        return Some("this is JSON, not a JWT: pass the \"token\" field of the answer, not the whole answer".into());
    }
    if t.starts_with("Bearer ") {
        return Some("drop the \"Bearer \" prefix: pass the JWT alone".into());
    }
    let parts = t.split('.').count();
    let base64url = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    if parts != 3 || !t.chars().all(base64url) {
        return Some(format!(
            "not a JWT: a JWT is three base64url parts joined by dots (header.claims.signature), this has {parts} \
             part{}{}",
            if parts == 1 { "" } else { "s" },
            if t.chars().all(base64url) { "" } else { " and other characters" }
        ));
    }
    None
}

/// Why a token with a JWT's shape was refused, in plain words: when it expired, which claim is
/// missing, that the signature is another key's. The library's own words name its internals.
fn refusal(token: &str, e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    let claims = unverified_claims(token);
    let claim = |name: &str| claims.as_ref().and_then(|c| c.get(name)).and_then(serde_json::Value::as_i64);
    let ws = claims.as_ref().and_then(|c| c.get("ws")).and_then(|w| w.as_str()).map(str::to_owned);
    let for_ws = ws.map(|ws| format!(" (a token for workspace {ws})")).unwrap_or_default();
    match e.kind() {
        ErrorKind::ExpiredSignature => match claim("exp") {
            Some(exp) => format!(
                "the token expired at {} ({} s ago){for_ws}: ask your backend for a new one",
                crate::utc::text(exp),
                (now_s() as i64 - exp).max(0)
            ),
            None => format!("the token has expired{for_ws}: ask your backend for a new one"),
        },
        ErrorKind::ImmatureSignature => match claim("nbf") {
            Some(nbf) => format!("the token is not valid before {}{for_ws}", crate::utc::text(nbf)),
            None => format!("the token is not valid yet{for_ws}"),
        },
        ErrorKind::InvalidSignature => format!(
            "the token's signature does not match this server's key{for_ws}: it was signed with another \
             secret (HERALD_JWT_SECRET) or key"
        ),
        ErrorKind::MissingRequiredClaim(c) => {
            format!("the token has no \"{c}\" claim: herald reads sub (the user), ws (the workspace) and exp")
        }
        ErrorKind::InvalidAudience => format!("the token is for another audience (its aud claim){for_ws}"),
        ErrorKind::InvalidIssuer => format!("the token is from another issuer (its iss claim){for_ws}"),
        ErrorKind::Json(_) => {
            let missing =
                ["sub", "ws", "exp"].into_iter().find(|k| claims.as_ref().is_some_and(|c| !c.contains_key(*k)));
            match missing {
                Some(k) => {
                    format!("the token has no \"{k}\" claim: herald reads sub (the user), ws (the workspace) and exp")
                }
                None => {
                    "the token's claims are not what herald reads: sub and ws as strings, exp as seconds since 1970"
                        .into()
                }
            }
        }
        ErrorKind::Base64(_) | ErrorKind::Utf8(_) => {
            "not a JWT: one of its parts is not base64url (header.claims.signature)".into()
        }
        _ => format!("the token was refused ({e})"),
    }
}

/// A token's claims as it states them, signature unchecked: only to word a refusal.
fn unverified_claims(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    use base64::Engine;
    let payload = token.trim().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The decoding key of a PEM public key and the algorithm it is pinned to.
fn public_key(pem: &[u8]) -> anyhow::Result<(DecodingKey, Algorithm)> {
    let text = std::str::from_utf8(pem).context("the public key is not PEM text")?;
    anyhow::ensure!(text.contains("-----BEGIN"), "the public key is not PEM (no -----BEGIN line)");
    anyhow::ensure!(!text.contains("PRIVATE KEY"), "that is a private key: give the public key");
    if let Ok(key) = DecodingKey::from_ed_pem(pem) {
        return Ok((key, Algorithm::EdDSA));
    }
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        let bits = rsa_bits(pem).context("reading the RSA public key")?;
        anyhow::ensure!(bits >= MIN_RSA_BITS, "the RSA public key has {bits} bits; at least {MIN_RSA_BITS} are needed");
        return Ok((key, Algorithm::RS256));
    }
    anyhow::bail!("the public key is neither an RSA nor an Ed25519 public key (EC keys are not supported)")
}

/// The modulus size of an RSA public key in PEM (SPKI or PKCS#1).
fn rsa_bits(pem: &[u8]) -> anyhow::Result<usize> {
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::pkcs8::DecodePublicKey;
    use rsa::traits::PublicKeyParts;
    let text = std::str::from_utf8(pem)?;
    let key = rsa::RsaPublicKey::from_public_key_pem(text).or_else(|_| rsa::RsaPublicKey::from_pkcs1_pem(text))?;
    Ok(key.size() * 8)
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
        let t = Tokens::new(&TokenKeys { secret: Some("s3cret".into()), ..TokenKeys::default() }).unwrap();
        let ok = t.issue("acme", "alice", 60).unwrap();
        let id = t.verify(&ok).unwrap();
        assert_eq!((id.user.as_str(), id.workspace.as_str()), ("alice", "acme"));
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
        let keys = TokenKeys { secret: Some("s".into()), audience: Some("herald".into()), ..TokenKeys::default() };
        let t = Tokens::new(&keys).unwrap();
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

    fn key(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/keys/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn sign_with(claims: serde_json::Value, alg: Algorithm, key: &EncodingKey) -> String {
        jsonwebtoken::encode(&Header::new(alg), &claims, key).unwrap()
    }

    #[test]
    fn public_keys_verify_their_own_algorithm_only() {
        let now = now_s();
        let claims = serde_json::json!({"sub":"a","ws":"w","exp":now+60});
        let rsa = EncodingKey::from_rsa_pem(&key("rsa-private.pem")).unwrap();
        let ed = EncodingKey::from_ed_pem(&key("ed25519-private.pem")).unwrap();
        let rsa_pub = key("rsa-public.pem");

        let t = Tokens::new(&TokenKeys { public_key_pem: Some(rsa_pub.clone()), ..TokenKeys::default() }).unwrap();
        assert_eq!(t.verify(&sign_with(claims.clone(), Algorithm::RS256, &rsa)).unwrap().user, "a");
        // Another RSA algorithm with the same key, an Ed25519 token, and an
        // HS256 token whose secret is the public key's text: all refused.
        assert!(t.verify(&sign_with(claims.clone(), Algorithm::RS512, &rsa)).is_err());
        assert!(t.verify(&sign_with(claims.clone(), Algorithm::PS256, &rsa)).is_err());
        assert!(t.verify(&sign_with(claims.clone(), Algorithm::EdDSA, &ed)).is_err());
        let confused = EncodingKey::from_secret(&rsa_pub);
        assert!(t.verify(&sign_with(claims.clone(), Algorithm::HS256, &confused)).is_err());
        assert!(!t.can_issue() && t.issue("w", "a", 60).is_none());

        // Ed25519 beside a secret: both verify, each only its own algorithm.
        let keys = TokenKeys {
            secret: Some("s3cret".into()),
            public_key_pem: Some(key("ed25519-public.pem")),
            ..TokenKeys::default()
        };
        let t = Tokens::new(&keys).unwrap();
        assert!(t.verify(&sign_with(claims.clone(), Algorithm::EdDSA, &ed)).is_ok());
        assert!(t.verify(&sign(claims.clone(), Algorithm::HS256, "s3cret")).is_ok());
        assert!(t.verify(&sign_with(claims.clone(), Algorithm::RS256, &rsa)).is_err());
        let confused = EncodingKey::from_secret(&key("ed25519-public.pem"));
        assert!(t.verify(&sign_with(claims, Algorithm::HS256, &confused)).is_err());
    }

    #[test]
    fn refuses_keys_it_cannot_pin() {
        for (name, why) in [
            ("rsa1024-public.pem", "1024 bits"),
            ("ec-public.pem", "neither an RSA nor an Ed25519"),
            ("rsa-private.pem", "private key"),
        ] {
            let err = Tokens::new(&TokenKeys { public_key_pem: Some(key(name)), ..TokenKeys::default() })
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(err.to_string().contains(why), "{name}: {err}");
        }
        let not_pem = TokenKeys { public_key_pem: Some(b"hello".to_vec()), ..TokenKeys::default() };
        assert!(Tokens::new(&not_pem).is_err());
    }

    #[test]
    fn leeway_applies_to_exp_and_nbf() {
        let now = now_s();
        let keys = TokenKeys { secret: Some("s".into()), leeway_ms: 5_000, ..TokenKeys::default() };
        let t = Tokens::new(&keys).unwrap();
        let expired_2s_ago = serde_json::json!({"sub":"a","ws":"w","exp":now-2});
        let valid_in_2s = serde_json::json!({"sub":"a","ws":"w","exp":now+60,"nbf":now+2});
        assert!(t.verify(&sign(expired_2s_ago.clone(), Algorithm::HS256, "s")).is_ok());
        assert!(t.verify(&sign(valid_in_2s.clone(), Algorithm::HS256, "s")).is_ok());
        assert!(t.verify(&sign(serde_json::json!({"sub":"a","ws":"w","exp":now-30}), Algorithm::HS256, "s")).is_err());
        let strict = Tokens::new(&TokenKeys { leeway_ms: 0, ..keys }).unwrap();
        assert!(strict.verify(&sign(expired_2s_ago, Algorithm::HS256, "s")).is_err());
        assert!(strict.verify(&sign(valid_in_2s, Algorithm::HS256, "s")).is_err());
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
