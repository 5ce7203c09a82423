//! The hooks' flags (`--hook-secret`, `--webhook-*`, `--send-hook-*`),
//! declared once, and their check into [`HookSettings`]: a hook needs the
//! secret, URLs must be http(s), event types must exist. Not here: what the
//! hooks do with them ([`super::webhook`], [`super::send`]).

use std::time::Duration;

use clap::Args;

use super::{
    DEFAULT_SEND_HOOK_TIMEOUT_MS, DEFAULT_WEBHOOK_OFFLINE_MAX, FailMode, HookSettings, SendHookSettings,
    WEBHOOK_RETRY_FIRST, WEBHOOK_RETRY_MAX, WEBHOOK_TIMEOUT, WebhookSettings,
};

/// The hooks' flags as given.
#[derive(Debug, Clone, Args)]
pub struct HookArgs {
    /// Signs the webhook's and the send hook's requests (`Herald-Signature`);
    /// required with either, at least 32 bytes.
    #[arg(long, env = "HERALD_HOOK_SECRET", hide_env_values = true)]
    pub hook_secret: Option<String>,
    /// Where stored events are POSTed, batched and signed, at least once.
    #[arg(long, env = "HERALD_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Event types the webhook delivers, comma-separated (default: all).
    #[arg(long, env = "HERALD_WEBHOOK_EVENTS", value_delimiter = ',')]
    pub webhook_events: Vec<String>,
    /// Chats with more members get no `offline` list in webhook events.
    #[arg(long, env = "HERALD_WEBHOOK_OFFLINE_MAX", default_value_t = DEFAULT_WEBHOOK_OFFLINE_MAX)]
    pub webhook_offline_max: u64,
    /// Tests only: ms the webhook waits for an answer.
    #[arg(long, env = "HERALD_WEBHOOK_TIMEOUT_MS", hide = true, default_value_t = WEBHOOK_TIMEOUT.as_millis() as u64)]
    pub webhook_timeout_ms: u64,
    /// Tests only: the webhook's first wait before a retry, in ms.
    #[arg(long, env = "HERALD_WEBHOOK_RETRY_MS", hide = true, default_value_t = WEBHOOK_RETRY_FIRST.as_millis() as u64)]
    pub webhook_retry_ms: u64,
    /// Tests only: the webhook's longest wait before a retry, in ms.
    #[arg(long, env = "HERALD_WEBHOOK_RETRY_MAX_MS", hide = true, default_value_t = WEBHOOK_RETRY_MAX.as_millis() as u64)]
    pub webhook_retry_max_ms: u64,
    /// Asked before a client's `send` or `edit` is stored: accept, reject or replace.
    #[arg(long, env = "HERALD_SEND_HOOK_URL")]
    pub send_hook_url: Option<String>,
    /// Milliseconds the send hook has to answer.
    #[arg(long, env = "HERALD_SEND_HOOK_TIMEOUT_MS", default_value_t = DEFAULT_SEND_HOOK_TIMEOUT_MS)]
    pub send_hook_timeout_ms: u64,
    /// Without a valid answer in time: `closed` (the client gets `unavailable`) or `open` (stored as sent).
    #[arg(long, env = "HERALD_SEND_HOOK_FAIL", default_value = "closed")]
    pub send_hook_fail: String,
}

impl HookArgs {
    /// The hooks' settings, checked: a hook needs `--hook-secret`, URLs must be http(s).
    pub fn resolve(&self, check_secret: impl Fn(&str, &str) -> anyhow::Result<()>) -> anyhow::Result<HookSettings> {
        let url = |name: &str, value: &Option<String>| -> anyhow::Result<Option<String>> {
            let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
            let parsed = reqwest::Url::parse(v).map_err(|e| anyhow::anyhow!("{name} {v:?}: {e}"))?;
            anyhow::ensure!(
                matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
                "{name} {v:?} must be an http:// or https:// URL"
            );
            Ok(Some(v.to_owned()))
        };
        let webhook = url("--webhook-url", &self.webhook_url)?;
        let send_hook = url("--send-hook-url", &self.send_hook_url)?;
        if webhook.is_none() && send_hook.is_none() {
            return Ok(HookSettings::default());
        }
        let secret = self.hook_secret.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "a hook is configured but --hook-secret (HERALD_HOOK_SECRET) is not: hooks sign their requests \
                 with it; give at least {} random bytes",
                super::MIN_HOOK_SECRET_BYTES
            )
        })?;
        check_secret("--hook-secret (HERALD_HOOK_SECRET)", &secret)?;
        let webhook = match webhook {
            None => None,
            Some(url) => {
                let list: Vec<String> =
                    self.webhook_events.iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
                for t in &list {
                    anyhow::ensure!(
                        herald_protocol::EventType::parse(t).is_some(),
                        "--webhook-events: {t:?} is not an event type"
                    );
                }
                let events = Some(list).filter(|l| !l.is_empty());
                let timeout = Duration::from_millis(self.webhook_timeout_ms);
                let retry_max = Duration::from_millis(self.webhook_retry_max_ms);
                let retry_first = Duration::from_millis(self.webhook_retry_ms).min(retry_max);
                anyhow::ensure!(
                    !timeout.is_zero() && !retry_first.is_zero(),
                    "--webhook-timeout-ms and --webhook-retry-ms must be above 0"
                );
                Some(WebhookSettings {
                    url,
                    events,
                    offline_max: self.webhook_offline_max,
                    timeout,
                    retry_first,
                    retry_max,
                })
            }
        };
        let send_hook = match send_hook {
            None => None,
            Some(url) => {
                let timeout_ms = self.send_hook_timeout_ms;
                anyhow::ensure!(
                    (1..=60_000).contains(&timeout_ms),
                    "--send-hook-timeout-ms must be between 1 and 60000"
                );
                let fail = match self.send_hook_fail.trim() {
                    "closed" => FailMode::Closed,
                    "open" => FailMode::Open,
                    other => anyhow::bail!("--send-hook-fail {other:?}: give closed or open"),
                };
                Some(SendHookSettings { url, timeout: Duration::from_millis(timeout_ms), fail })
            }
        };
        Ok(HookSettings { secret: Some(secret), webhook, send_hook })
    }
}
