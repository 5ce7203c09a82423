//! The send hook: before a client's `send` or `edit` is stored, herald POSTs
//! it to the app (`--send-hook-url`), signed, and waits at most
//! `--send-hook-timeout-ms` for `accept`, `reject` (the client gets
//! `forbidden` with the app's message) or `replace` (stored with the app's
//! body). No valid answer in time is a failure, which `--send-hook-fail`
//! turns into `unavailable` (closed, the default) or into storing the event
//! as sent (open).
//!
//! This file owns the HTTP exchange and what an answer means; when to ask
//! (client requests only, never the server API) is the chat layer's rule.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{FailMode, SIGNATURE_HEADER, SendHookSettings, signature_now};
use crate::error::Error;

/// What a client is told to wait when the hook failed and the mode is closed:
/// about one hook timeout's worth, so a retry does not pile onto a hook that
/// is down.
pub const SEND_HOOK_RETRY_MS: u64 = 1_000;
/// The longest `reject` message passed on to the client, in characters.
const MESSAGE_MAX_CHARS: usize = 1_000;
/// Room in an answer beside a replacement body (the action, whitespace).
const ANSWER_SLACK_BYTES: usize = 4 * 1024;

/// Which request the hook is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HookOp {
    Send,
    Edit,
}

/// The request body herald POSTs.
#[derive(Debug, Serialize)]
pub struct HookRequest<'a> {
    pub workspace: &'a str,
    pub chat: &'a str,
    pub user: &'a str,
    pub op: HookOp,
    pub body: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<&'a str>,
    /// `edit`: the seq of the message edited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<u64>,
}

/// What to store, as the hook decided.
#[derive(Debug)]
pub enum Verdict {
    /// The body as the client sent it (an `accept`, or a failure with `--send-hook-fail open`).
    AsSent,
    /// The hook's body instead of the client's.
    Replace(Box<RawValue>),
}

/// The answer's JSON.
#[derive(Deserialize)]
struct Answer {
    action: String,
    message: Option<String>,
    body: Option<Box<RawValue>>,
}

/// Why there was no valid answer; the name is the metrics outcome.
#[derive(Debug)]
enum Failure {
    Timeout,
    Error(String),
}

/// The send hook of a node: one keep-alive HTTP client, reused by every send.
pub struct SendHook {
    client: reqwest::Client,
    url: String,
    secret: Vec<u8>,
    timeout: Duration,
    fail: FailMode,
    /// The body limit: a replacement over it is no valid answer.
    body_limit: usize,
}

impl SendHook {
    pub fn new(settings: &SendHookSettings, secret: &str, body_limit: usize) -> SendHook {
        SendHook {
            client: super::client(settings.timeout),
            url: settings.url.clone(),
            secret: secret.as_bytes().to_vec(),
            timeout: settings.timeout,
            fail: settings.fail,
            body_limit,
        }
    }

    /// Asks the hook about `req`: what to store, or the client's error
    /// (`forbidden` for a reject; `unavailable` for a failure when closed).
    pub async fn decide(&self, req: &HookRequest<'_>) -> Result<Verdict, Error> {
        let payload = serde_json::to_vec(req).expect("a hook request serializes");
        let started = Instant::now();
        let answer = match tokio::time::timeout(self.timeout, self.ask(payload)).await {
            Ok(answer) => answer,
            Err(_) => Err(Failure::Timeout),
        };
        metrics::histogram!("herald_hook_seconds", "hook" => "send").record(started.elapsed().as_secs_f64());
        let decided = answer.and_then(|a| self.judge(a));
        let outcome = match &decided {
            Ok(Ok(Verdict::AsSent)) => "accept",
            Ok(Ok(Verdict::Replace(_))) => "replace",
            Ok(Err(_)) => "reject",
            Err(Failure::Timeout) => "timeout",
            Err(Failure::Error(_)) => "error",
        };
        metrics::counter!("herald_send_hook_total", "outcome" => outcome).increment(1);
        match decided {
            Ok(Ok(verdict)) => Ok(verdict),
            Ok(Err(message)) => Err(Error::Forbidden(message)),
            Err(failure) => {
                let why = match &failure {
                    Failure::Timeout => format!("no answer within {} ms", self.timeout.as_millis()),
                    Failure::Error(why) => why.clone(),
                };
                tracing::warn!(
                    workspace = req.workspace, chat = req.chat, op = ?req.op, error = %why, fail = ?self.fail,
                    "send hook failed"
                );
                match self.fail {
                    FailMode::Open => Ok(Verdict::AsSent),
                    FailMode::Closed => Err(Error::Unavailable {
                        message: "the send hook did not answer; try again".into(),
                        retry_after_ms: SEND_HOOK_RETRY_MS,
                    }),
                }
            }
        }
    }

    /// One POST and its answer, read up to the size a valid answer can have.
    async fn ask(&self, payload: Vec<u8>) -> Result<Answer, Failure> {
        let signature = signature_now(&self.secret, &payload);
        let sent = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature)
            .body(payload)
            .send()
            .await;
        let mut resp = sent.map_err(request_failure)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Failure::Error(format!("answered HTTP {}", status.as_u16())));
        }
        let cap = self.body_limit.saturating_mul(2) + ANSWER_SLACK_BYTES;
        let mut raw = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(request_failure)? {
            if raw.len() + chunk.len() > cap {
                return Err(Failure::Error(format!("answer over {cap} bytes")));
            }
            raw.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&raw).map_err(|e| Failure::Error(format!("answer is not the expected JSON: {e}")))
    }

    /// What an answer means: a verdict, a reject's message, or no valid answer.
    fn judge(&self, answer: Answer) -> Result<Result<Verdict, String>, Failure> {
        match answer.action.as_str() {
            "accept" => Ok(Ok(Verdict::AsSent)),
            "reject" => {
                let message = answer
                    .message
                    .filter(|m| !m.is_empty())
                    .map(|m| m.chars().take(MESSAGE_MAX_CHARS).collect())
                    .unwrap_or_else(|| "refused by the send hook".to_string());
                Ok(Err(message))
            }
            "replace" => match answer.body {
                // An answer herald cannot store is no valid answer: the
                // client did nothing wrong, so it gets no body error.
                None => Err(Failure::Error("replace without a body".into())),
                Some(body) if body.get().len() > self.body_limit => Err(Failure::Error(format!(
                    "replacement body of {} bytes is over the body limit ({})",
                    body.get().len(),
                    self.body_limit
                ))),
                Some(body) => Ok(Ok(Verdict::Replace(body))),
            },
            other => Err(Failure::Error(format!("unknown action {:?}", truncate(other, 64)))),
        }
    }
}

fn request_failure(e: reqwest::Error) -> Failure {
    if e.is_timeout() { Failure::Timeout } else { Failure::Error(format!("request failed: {e}")) }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(fail: FailMode) -> SendHook {
        let settings = SendHookSettings { url: "http://127.0.0.1:9/".into(), timeout: Duration::from_millis(50), fail };
        SendHook::new(&settings, "a-secret-of-at-least-thirty-two-bytes!", 16)
    }

    fn answer(json: &str) -> Answer {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn answers_mean_what_the_contract_says() {
        let h = hook(FailMode::Closed);
        assert!(matches!(h.judge(answer(r#"{"action":"accept"}"#)), Ok(Ok(Verdict::AsSent))));
        let r = h.judge(answer(r#"{"action":"reject","message":"no links"}"#));
        assert!(matches!(r, Ok(Err(m)) if m == "no links"));
        let r = h.judge(answer(r#"{"action":"replace","body":{"t":"x"}}"#));
        assert!(matches!(r, Ok(Ok(Verdict::Replace(b))) if b.get() == r#"{"t":"x"}"#));
        // No valid answer: herald cannot store these.
        assert!(matches!(h.judge(answer(r#"{"action":"replace"}"#)), Err(Failure::Error(_))));
        assert!(matches!(h.judge(answer(r#"{"action":"replace","body":null}"#)), Err(Failure::Error(_))));
        let big = r#"{"action":"replace","body":{"text":"far over sixteen bytes"}}"#;
        assert!(matches!(h.judge(answer(big)), Err(Failure::Error(_))));
        assert!(matches!(h.judge(answer(r#"{"action":"maybe"}"#)), Err(Failure::Error(_))));
    }

    #[test]
    fn the_request_names_op_and_leaves_out_what_it_lacks() {
        let body = RawValue::from_string(r#"{"text":"hi"}"#.into()).unwrap();
        let req = HookRequest {
            workspace: "acme",
            chat: "general",
            user: "alice",
            op: HookOp::Send,
            body: &body,
            client_id: None,
            target: None,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"workspace":"acme","chat":"general","user":"alice","op":"send","body":{"text":"hi"}}"#
        );
        let req = HookRequest { op: HookOp::Edit, target: Some(41), client_id: Some("m-1"), ..req };
        let text = serde_json::to_string(&req).unwrap();
        assert!(
            text.contains(r#""op":"edit""#) && text.contains(r#""target":41"#) && text.contains(r#""client_id":"m-1""#)
        );
    }

    #[tokio::test]
    async fn a_hook_that_cannot_be_reached_fails_closed_or_open() {
        let body = RawValue::from_string("{}".into()).unwrap();
        let req = HookRequest {
            workspace: "w",
            chat: "c",
            user: "u",
            op: HookOp::Send,
            body: &body,
            client_id: None,
            target: None,
        };
        let closed = hook(FailMode::Closed).decide(&req).await;
        assert!(matches!(closed, Err(Error::Unavailable { retry_after_ms: SEND_HOOK_RETRY_MS, .. })), "{closed:?}");
        assert!(matches!(hook(FailMode::Open).decide(&req).await, Ok(Verdict::AsSent)));
    }
}
