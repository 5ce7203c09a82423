//! Client tokens, signed here (HS256) with the secret the bench gave the
//! server. Signing locally costs a few microseconds, where `POST /v1/tokens`
//! would cost a round trip per client: that matters at 15,000 clients.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{EncodingKey, Header, encode};
use serde::Serialize;

/// A token lives this long: longer than any bounded run.
const TOKEN_TTL_S: u64 = 3600;

#[derive(Serialize)]
struct Claims<'a> {
    sub: &'a str,
    ws: &'a str,
    exp: u64,
}

/// Signs tokens for one workspace.
#[derive(Clone)]
pub struct Signer {
    key: EncodingKey,
    workspace: String,
}

impl Signer {
    pub fn new(secret: &str, workspace: &str) -> Signer {
        Signer { key: EncodingKey::from_secret(secret.as_bytes()), workspace: workspace.to_string() }
    }

    /// A token proving `user` of this signer's workspace.
    pub fn token(&self, user: &str) -> anyhow::Result<String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let claims = Claims { sub: user, ws: &self.workspace, exp: now + TOKEN_TTL_S };
        Ok(encode(&Header::default(), &claims, &self.key)?)
    }

    pub fn workspace(&self) -> &str {
        &self.workspace
    }
}
