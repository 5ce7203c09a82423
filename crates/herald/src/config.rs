//! `herald serve`'s settings. Each setting is declared once, as a flag of
//! the module that reads it (`front::FrontSettings`, `gateway::GatewaySettings`, `hub::HubSettings`,
//! `chat::ChatSettings`, `store::settings`, `broker::settings`,
//! `hooks::settings`; the node's own and its secrets here), with its
//! environment variable (`HERALD_` + its name) and its default. A TOML file
//! given by `--config` has keys named as the flags; its values become the
//! flags' defaults ([`with_config_file`]), so flags win over env, env over
//! the file, the file over the built-in defaults, with no list of settings
//! to keep in step. [`ServeArgs::resolve`] checks them together and makes
//! the [`Config`] the server is wired from.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{ArgAction, Args, Command, FromArgMatches};

use crate::auth::{DEFAULT_LEEWAY_MS, TokenKeys, Tokens};
use crate::broker::settings::BrokerSettings;
use crate::chat::ChatSettings;
use crate::front::FrontSettings;
use crate::gateway::settings::GatewaySettings;
use crate::hooks::HookSettings;
use crate::hooks::settings::HookArgs;
use crate::hub::HubSettings;
use crate::store::settings::StoreSettings;

/// The flags of `herald serve`, grouped by the module that reads them.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// A TOML file whose keys are these flags' names.
    #[arg(long, env = "HERALD_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerSettings,
    #[command(flatten)]
    pub secrets: Secrets,
    #[command(flatten)]
    pub store: StoreSettings,
    #[command(flatten)]
    pub broker: BrokerSettings,
    #[command(flatten)]
    pub front: FrontSettings,
    #[command(flatten)]
    pub gateway: GatewaySettings,
    #[command(flatten)]
    pub chat: ChatSettings,
    #[command(flatten)]
    pub hub: HubSettings,
    #[command(flatten)]
    pub hooks: HookArgs,
    #[command(flatten)]
    pub files: crate::files::settings::FilesSettings,
}

/// The node itself: where it listens, who it is in its cell, how it leaves.
#[derive(Debug, Clone, Args)]
pub struct ServerSettings {
    /// Address to listen on.
    #[arg(long, env = "HERALD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// This node's name, as `hello` reports it (default: `herald-` and six random hex digits).
    #[arg(long, env = "HERALD_NODE", default_value_t = random_node_name(), hide_default_value = true)]
    pub node: String,
    /// This node's cell: its NATS subjects and node list are the cell's own.
    #[arg(long, env = "HERALD_CELL", default_value = "default")]
    pub cell: String,
    /// Every cell of the deployment, as `name` or `name=ws://entry`, comma-separated.
    /// Workspaces map to cells by consistent hash; a node serves only its own
    /// cell's. Empty: no cells (one cell serving everything).
    #[arg(long, env = "HERALD_CELLS", value_delimiter = ',')]
    pub cells: Vec<String>,
    /// When a node joins the cell, move this node's clients whose workspace now
    /// routes to it (spread over the drain window). On by default; with nginx's
    /// own hashing in front, turn it off (`--rebalance false`).
    #[arg(long, env = "HERALD_REBALANCE", default_value_t = true, action = ArgAction::Set)]
    pub rebalance: bool,
    /// The base WebSocket URL clients reach this node at (for `/v1/gateway`),
    /// e.g. `ws://10.0.0.5:8080`. Unset: as the client reached it.
    #[arg(long, env = "HERALD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Milliseconds over which a drain spreads its clients' reconnects.
    #[arg(long, env = "HERALD_DRAIN_WINDOW_MS", default_value_t = DEFAULT_DRAIN_WINDOW_MS)]
    pub drain_window_ms: u64,
    /// Serve the WebSocket echo route `/diag/echo` (for conformance tests only).
    #[arg(long, env = "HERALD_DIAG_ECHO")]
    pub diag_echo: bool,
    /// Log filter, as RUST_LOG takes it.
    #[arg(long, env = "HERALD_LOG", default_value = "herald=info,warn")]
    pub log: String,
}

impl ServerSettings {
    pub fn drain_window(&self) -> Duration {
        Duration::from_millis(self.drain_window_ms)
    }
}

/// The secrets as given. With none of them the server runs in development
/// mode; otherwise [`ServeArgs::resolve`] checks them.
#[derive(Debug, Clone, Args)]
pub struct Secrets {
    /// Secret that client JWTs are signed with (HS256), at least 32 bytes.
    #[arg(long, env = "HERALD_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// A PEM public key that client JWTs may be signed with instead: RS256
    /// for an RSA key (2048 bits or more), EdDSA for an Ed25519 key.
    #[arg(long, env = "HERALD_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,
    /// Clock skew allowed on a token's `exp` and `nbf`, in milliseconds.
    #[arg(long, env = "HERALD_JWT_LEEWAY_MS", default_value_t = DEFAULT_LEEWAY_MS)]
    pub jwt_leeway_ms: u64,
    /// When set, client tokens must carry this `aud`.
    #[arg(long, env = "HERALD_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Key that server-to-server calls present as `Authorization: Bearer`, at least 32 bytes.
    #[arg(long, env = "HERALD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Development mode even with secrets given: the api key and JWT secret given are kept (so a
    /// backend's `.env` stays valid across restarts), missing ones are made at random, and the
    /// demo page and loopback dev tokens are served. Without any secret, development mode is on
    /// anyway. Never on a server that faces the internet.
    #[arg(long, env = "HERALD_DEV")]
    pub dev: bool,
}

/// The settings the server is wired from: each module's own, moved here
/// whole (never copied field by field), and what the secrets resolve to.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerSettings,
    pub store: StoreSettings,
    pub broker: BrokerSettings,
    pub front: FrontSettings,
    pub gateway: GatewaySettings,
    pub chat: ChatSettings,
    pub hub: HubSettings,
    /// The webhook and the send hook, if configured.
    pub hooks: HookSettings,
    /// v1.2: where files live and how large they may be.
    pub files: crate::files::settings::FilesSettings,
    /// What verifies client tokens (and the secret that issues them).
    pub tokens: TokenKeys,
    pub api_key: String,
    /// No secret or key was given, or `--dev`: random secrets where none were given, a demo page
    /// and dev tokens.
    pub dev_mode: bool,
}

/// The shortest secret or api key accepted outside development mode, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;
/// Default drain window: a node's clients come back over ten seconds.
pub const DEFAULT_DRAIN_WINDOW_MS: u64 = 10_000;

/// `cmd` (the `herald` command, or `serve` itself) with the values of the
/// `--config` file named in `args` (or by `HERALD_CONFIG`) as the `serve`
/// flags' defaults. A key that names no flag, or a value that is not a
/// string, number, boolean or list of them, is refused with the file's name.
pub fn with_config_file(cmd: Command, args: &[OsString]) -> anyhow::Result<Command> {
    let Some(path) = config_path(args) else { return Ok(cmd) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if cmd.get_name() == "serve" {
        return file_defaults(cmd, &path, table);
    }
    let mut failed = None;
    let cmd = cmd.mut_subcommand("serve", |serve| match file_defaults(serve.clone(), &path, table) {
        Ok(serve) => serve,
        Err(e) => {
            failed = Some(e);
            serve
        }
    });
    failed.map_or(Ok(cmd), Err)
}

/// The `--config` path among `args`, else `HERALD_CONFIG`'s.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let arg = arg.to_string_lossy();
        if arg == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("HERALD_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Sets each of `table`'s values as the default of the flag of its key.
fn file_defaults(mut cmd: Command, path: &Path, table: toml::Table) -> anyhow::Result<Command> {
    for (key, value) in table {
        let Some(id) = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && key != "config")
            .map(|a| a.get_id().clone())
        else {
            anyhow::bail!(
                "{}: {key:?} is not a setting (keys are the flags' names, e.g. listen, rate)",
                path.display()
            );
        };
        let scalar = |v: &toml::Value| match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(anyhow::anyhow!("{}: {key:?} = {other}: give a string, number or boolean", path.display())),
        };
        let values: Vec<String> = match &value {
            toml::Value::Array(items) => items.iter().map(scalar).collect::<anyhow::Result<_>>()?,
            v => vec![scalar(v)?],
        };
        // Defaults are shown by `--help`; a file's may be secrets.
        cmd = cmd.mut_arg(id, |a| a.default_values(values).hide_default_value(true));
    }
    Ok(cmd)
}

impl ServeArgs {
    /// Parses `serve`'s flags from `args` (the first is the command's name),
    /// with the `--config` file's values as defaults.
    pub fn parse_from<I, T>(args: I) -> anyhow::Result<ServeArgs>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let cmd = with_config_file(ServeArgs::augment_args(Command::new("serve")), &args)?;
        let matches = cmd.try_get_matches_from(&args)?;
        Ok(ServeArgs::from_arg_matches(&matches)?)
    }

    /// The settings checked together, and the secrets resolved. Makes random
    /// secrets in development mode; outside it, a missing, empty or short
    /// secret stops the server with a message that names it.
    pub fn resolve(mut self) -> anyhow::Result<Config> {
        let s = &self.secrets;
        let dev_mode = s.dev || s.jwt_secret.is_none() && s.api_key.is_none() && s.jwt_public_key.is_none();
        let (tokens, api_key) = if dev_mode {
            // What was given is kept (checked as outside development mode); the rest is made.
            s.check_given()?;
            anyhow::ensure!(
                s.jwt_public_key.is_none(),
                "--dev issues its own tokens with a secret: give --jwt-secret, not --jwt-public-key"
            );
            let keys = TokenKeys {
                secret: Some(s.jwt_secret.clone().unwrap_or_else(random_secret)),
                public_key_pem: None,
                audience: s.jwt_audience.clone(),
                leeway_ms: s.jwt_leeway_ms,
            };
            (keys, s.api_key.clone().unwrap_or_else(random_secret))
        } else {
            s.checked()?
        };
        let hooks = self.hooks.resolve(check_secret)?;
        self.front.check()?;
        self.gateway.check()?;
        let (frame, body) = (self.gateway.frame_limit, self.chat.body_limit);
        anyhow::ensure!(
            frame >= body + 1024,
            "frame-limit ({frame}) must be at least body-limit ({body}) plus 1024 bytes: a send's frame carries its body"
        );
        anyhow::ensure!(body >= 1, "body-limit must be at least 1 byte");
        let server = &self.server;
        anyhow::ensure!(
            herald_protocol::ids::is_valid_id(&server.cell) && !server.cell.contains('.'),
            "cell must be an id without dots"
        );
        anyhow::ensure!(
            self.broker.brokers.is_empty() || !self.store.stores.is_empty(),
            "nodes joined over --broker must share an event log: give --store postgres://... too"
        );
        if !self.broker.brokers.is_empty() {
            check_public_url(server.public_url.as_deref(), server.listen)?;
        }
        // `[NAME=]postgres://...`, names unique; no I/O, and no password in its errors.
        crate::store::ShardSpec::parse_all(&self.store.stores).map_err(|e| anyhow::anyhow!("--store: {e}"))?;
        Ok(Config {
            server: self.server,
            store: self.store,
            broker: self.broker,
            front: self.front,
            gateway: self.gateway,
            chat: self.chat,
            hub: self.hub,
            hooks,
            files: self.files,
            tokens,
            api_key,
            dev_mode,
        })
    }
}

impl Secrets {
    /// The api key and the JWT secret, each checked if given.
    fn check_given(&self) -> anyhow::Result<()> {
        if let Some(key) = &self.api_key {
            check_secret("--api-key (HERALD_API_KEY)", key)?;
        }
        if let Some(secret) = &self.jwt_secret {
            check_secret("--jwt-secret (HERALD_JWT_SECRET)", secret)?;
        }
        Ok(())
    }

    /// The api key and token keys given, checked (outside development mode).
    fn checked(&self) -> anyhow::Result<(TokenKeys, String)> {
        let api_key = self.api_key.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "no api key: set --api-key (or HERALD_API_KEY) to at least {MIN_SECRET_BYTES} random bytes; \
                 it guards the server API"
            )
        })?;
        self.check_given()?;
        let public_key_pem = match &self.jwt_public_key {
            Some(path) => {
                let pem =
                    std::fs::read(path).with_context(|| format!("--jwt-public-key: reading {}", path.display()))?;
                anyhow::ensure!(
                    pem.len() >= MIN_SECRET_BYTES,
                    "--jwt-public-key: {} is {} bytes, no public key",
                    path.display(),
                    pem.len()
                );
                Some(pem)
            }
            None => None,
        };
        anyhow::ensure!(
            self.jwt_secret.is_some() || public_key_pem.is_some(),
            "no way to verify client tokens: set --jwt-secret (or HERALD_JWT_SECRET, at least {MIN_SECRET_BYTES} bytes) \
             and/or --jwt-public-key (a PEM public key)"
        );
        let keys = TokenKeys {
            secret: self.jwt_secret.clone(),
            public_key_pem,
            audience: self.jwt_audience.clone(),
            leeway_ms: self.jwt_leeway_ms,
        };
        // The key must parse as one this server can pin an algorithm to.
        Tokens::new(&keys).map_err(|e| match &self.jwt_public_key {
            Some(path) => anyhow::anyhow!("--jwt-public-key {}: {e}", path.display()),
            None => e,
        })?;
        Ok((keys, api_key))
    }
}

/// Refuses an empty or short secret, naming the setting.
fn check_secret(name: &str, value: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!value.is_empty(), "{name} is set but empty: give at least {MIN_SECRET_BYTES} random bytes");
    anyhow::ensure!(
        value.len() >= MIN_SECRET_BYTES,
        "{name} is {} bytes long: give at least {MIN_SECRET_BYTES} random bytes (e.g. `openssl rand -hex 32`)",
        value.len()
    );
    Ok(())
}

/// A cluster node tells other nodes' clients where it is: that must not be a wildcard address.
fn check_public_url(public_url: Option<&str>, listen: SocketAddr) -> anyhow::Result<()> {
    let Some(url) = public_url else {
        anyhow::ensure!(
            !listen.ip().is_unspecified(),
            "a cluster node listening on {listen} needs --public-url (e.g. ws://10.0.0.5:{}): \
             other nodes send clients there, and {} is no address a client can reach",
            listen.port(),
            listen.ip()
        );
        return Ok(());
    };
    let rest = url
        .strip_prefix("ws://")
        .or_else(|| url.strip_prefix("wss://"))
        .ok_or_else(|| anyhow::anyhow!("--public-url {url:?} must start with ws:// or wss://"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    anyhow::ensure!(!host.is_empty(), "--public-url {url:?} has no host");
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        anyhow::ensure!(!ip.is_unspecified(), "--public-url {url:?} is a wildcard address, which no client can reach");
    }
    Ok(())
}

impl Config {
    /// Development settings for tests and embedding: loopback, random port, given data dir.
    pub fn for_tests(data: PathBuf, jwt_secret: &str, api_key: &str) -> Config {
        let mut args: Vec<OsString> =
            ["serve", "--listen", "127.0.0.1:0", "--jwt-secret", jwt_secret, "--api-key", api_key]
                .into_iter()
                .map(OsString::from)
                .collect();
        args.extend([OsString::from("--data"), data.into_os_string()]);
        ServeArgs::parse_from(args).and_then(ServeArgs::resolve).expect("test defaults are valid")
    }

    /// The settings of `herald serve` with no flags (development mode), for tests.
    pub fn defaults() -> Config {
        ServeArgs::parse_from(["serve"]).and_then(ServeArgs::resolve).expect("the defaults are valid")
    }
}

fn random_secret() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    (0..32).map(|_| format!("{:02x}", rng.random::<u8>())).collect()
}

fn random_node_name() -> String {
    format!("herald-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef-secret";
    const KEY: &str = "0123456789abcdef0123456789abcdef-apikey";

    /// `herald serve` with `flags`.
    fn serve(flags: &[&str]) -> anyhow::Result<Config> {
        ServeArgs::parse_from(std::iter::once("serve").chain(flags.iter().copied()))?.resolve()
    }

    /// `herald serve` with both secrets and `flags`.
    fn given(flags: &[&str]) -> anyhow::Result<Config> {
        let mut all = vec!["--jwt-secret", SECRET, "--api-key", KEY];
        all.extend_from_slice(flags);
        serve(&all)
    }

    fn refusal(r: anyhow::Result<Config>) -> String {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn flags_win_over_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("herald.toml");
        std::fs::write(
            &file,
            format!(
                "listen = \"127.0.0.1:9000\"\ndata = \"/tmp/x\"\nrate = 7\nburst = 8\njwt-secret = \"{SECRET}\"\n\
                 api-key = \"{KEY}\"\nallowed-origins = [\"https://a.example\", \"http://b.example:8080\"]\n\
                 rebalance = false\nhot-chat-deliveries = 5\n"
            ),
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let cfg = serve(&["--config", path, "--rate", "9"]).unwrap();
        assert_eq!(cfg.server.listen.port(), 9000);
        assert_eq!((cfg.gateway.rate, cfg.gateway.burst), (9, 8));
        assert_eq!(cfg.gateway.limits.allowed_origins, ["https://a.example", "http://b.example:8080"]);
        assert!(!cfg.server.rebalance);
        assert_eq!(cfg.hub.hot_deliveries, 5);
        assert_eq!(cfg.tokens.secret.as_deref(), Some(SECRET));
        assert!(!cfg.dev_mode);
        // What the file does not set keeps its default.
        assert_eq!(cfg.gateway.heartbeat_ms, herald_protocol::limits::HEARTBEAT_MS);
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "lisen = 1\n").unwrap();
        let e = refusal(serve(&["--config", bad.to_str().unwrap()]));
        assert!(e.contains("\"lisen\" is not a setting"), "{e}");
    }

    #[test]
    fn every_flag_is_a_key_of_the_config_file() {
        let cmd = ServeArgs::augment_args(Command::new("serve"));
        let longs: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
        assert!(longs.len() > 40, "{longs:?}");
        for long in longs.iter().filter(|l| !matches!(**l, "config" | "help")) {
            let table: toml::Table = toml::from_str(&format!("{long} = \"x\"")).unwrap();
            assert!(file_defaults(cmd.clone(), Path::new("f.toml"), table).is_ok(), "{long}");
        }
    }

    #[test]
    fn no_secrets_means_dev_mode() {
        let cfg = serve(&[]).unwrap();
        assert!(cfg.dev_mode);
        assert_eq!(cfg.tokens.secret.as_ref().unwrap().len(), 64);
        assert_ne!(cfg.tokens.secret.as_deref(), Some(cfg.api_key.as_str()));
        assert!(cfg.server.node.starts_with("herald-"));
    }

    #[test]
    fn dev_keeps_the_secrets_given_checks_them_and_makes_the_rest() {
        let key = "k".repeat(40);
        let cfg = serve(&["--dev", "--api-key", &key]).unwrap();
        assert!(cfg.dev_mode);
        assert_eq!(cfg.api_key, key, "the api key given is kept");
        assert_eq!(cfg.tokens.secret.as_ref().unwrap().len(), 64, "the missing secret is made");
        let short = serve(&["--dev", "--api-key", "short"]).unwrap_err().to_string();
        assert!(short.contains("--api-key"), "{short}");
        // Without --dev, a secret given turns development mode off.
        let secret = "s".repeat(40);
        assert!(!serve(&["--api-key", &key, "--jwt-secret", &secret]).unwrap().dev_mode);
    }

    #[test]
    fn missing_empty_or_short_secrets_stop_the_server_by_name() {
        let e = refusal(serve(&["--api-key", ""]));
        assert!(e.contains("--api-key (HERALD_API_KEY) is set but empty"), "{e}");
        let e = refusal(serve(&["--jwt-secret", SECRET]));
        assert!(e.contains("no api key"), "{e}");
        let e = refusal(serve(&["--api-key", KEY]));
        assert!(e.contains("no way to verify client tokens"), "{e}");
        let e = refusal(serve(&["--api-key", KEY, "--jwt-secret", "short"]));
        assert!(e.contains("--jwt-secret (HERALD_JWT_SECRET) is 5 bytes long"), "{e}");
        let e = refusal(serve(&["--api-key", KEY, "--jwt-secret", ""]));
        assert!(e.contains("--jwt-secret (HERALD_JWT_SECRET) is set but empty"), "{e}");
        let short = "k".repeat(31);
        let e = refusal(serve(&["--api-key", &short, "--jwt-secret", SECRET]));
        assert!(e.contains("--api-key (HERALD_API_KEY) is 31 bytes long"), "{e}");
        assert!(given(&[]).is_ok());
    }

    #[test]
    fn a_public_key_alone_verifies_tokens() {
        let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/keys/");
        let with_key = |name: &str| serve(&["--jwt-public-key", &format!("{keys}{name}"), "--api-key", KEY]);
        let cfg = with_key("ed25519-public.pem").unwrap();
        assert!(!cfg.dev_mode && cfg.tokens.secret.is_none() && cfg.tokens.public_key_pem.is_some());
        let e = refusal(with_key("rsa1024-public.pem"));
        assert!(e.contains("--jwt-public-key") && e.contains("1024 bits"), "{e}");
        let e = refusal(with_key("missing.pem"));
        assert!(e.contains("--jwt-public-key: reading"), "{e}");
    }

    #[test]
    fn hooks_need_a_secret_and_sound_settings() {
        let hook = ["--webhook-url", "http://127.0.0.1:9/hook"];
        let e = refusal(given(&hook));
        assert!(e.contains("--hook-secret"), "{e}");
        let e = refusal(given(&[&hook[..], &["--hook-secret", "short"]].concat()));
        assert!(e.contains("--hook-secret (HERALD_HOOK_SECRET) is 5 bytes"), "{e}");
        let secret = "h".repeat(32);
        let e = refusal(given(&["--webhook-url", "ftp://x/y", "--hook-secret", &secret]));
        assert!(e.contains("must be an http:// or https:// URL"), "{e}");
        let e = refusal(given(&[&hook[..], &["--webhook-events", "nope", "--hook-secret", &secret]].concat()));
        assert!(e.contains("\"nope\" is not an event type"), "{e}");
        let send = ["--send-hook-url", "https://app.example/hook", "--hook-secret", &secret];
        let e = refusal(given(&[&send[..], &["--send-hook-fail", "ajar"]].concat()));
        assert!(e.contains("give closed or open"), "{e}");
        let e = refusal(given(&[&send[..], &["--send-hook-timeout-ms", "0"]].concat()));
        assert!(e.contains("--send-hook-timeout-ms"), "{e}");
        let cfg = given(&[&send[..], &["--webhook-events", "message,join"]].concat()).unwrap();
        let sh = cfg.hooks.send_hook.expect("send hook");
        assert_eq!((sh.fail, sh.timeout), (crate::hooks::FailMode::Closed, Duration::from_secs(1)));
        assert!(cfg.hooks.webhook.is_none());
        let cfg = given(&[&hook[..], &["--webhook-events", "message", "--hook-secret", &secret]].concat()).unwrap();
        let wh = cfg.hooks.webhook.expect("webhook");
        assert_eq!((wh.events, wh.offline_max), (Some(vec!["message".to_string()]), 1000));
        assert!(given(&[]).unwrap().hooks.secret.is_none(), "no hook, no secret needed");
    }

    #[test]
    fn nonsense_settings_stop_the_server() {
        let e = refusal(given(&["--heartbeat-ms", "0"]));
        assert!(e.contains("heartbeat-ms must be above 0"), "{e}");
        let e = refusal(given(&["--frame-limit", "16384", "--body-limit", "16384"]));
        assert!(e.contains("frame-limit (16384) must be at least body-limit (16384)"), "{e}");
        let e = refusal(given(&["--broker", "nats://127.0.0.1:4222"]));
        assert!(e.contains("give --store"), "{e}");
        let cluster = |more: &[&str]| {
            given(&[&["--broker", "nats://127.0.0.1:4222", "--store", "postgres://h/db"][..], more].concat())
        };
        let e = refusal(cluster(&["--listen", "0.0.0.0:8080"]));
        assert!(e.contains("needs --public-url"), "{e}");
        for url in ["ws://0.0.0.0:8080", "ws://[::]:8080/x", "http://10.0.0.5:8080"] {
            assert!(cluster(&["--public-url", url]).is_err(), "{url}");
        }
        assert!(cluster(&["--listen", "0.0.0.0:8080", "--public-url", "wss://chat.example.com"]).is_ok());
        let cfg = given(&["--allowed-origins", ""]).unwrap();
        assert!(cfg.gateway.limits.allowed_origins.is_empty(), "a blank list is no list");
        let e = refusal(given(&["--allowed-origins", "example.com"]));
        assert!(e.contains("--allowed-origins"), "{e}");
        let e = refusal(given(&["--store", "mysql://h/db"]));
        assert!(e.contains("--store"), "{e}");
        assert!(given(&["--store", "a=postgres://h/db1,b=postgres://h/db2"]).is_ok());
        let e = refusal(given(&["--store", "a=postgres://u:hunter2@h/db1", "--store", "a=postgres://h/db2"]));
        assert!(e.contains("\"a\" twice") && !e.contains("hunter2"), "{e}");
        let e = refusal(given(&["--max-watches", "0"]));
        assert!(e.contains("max-watches"), "{e}");
    }
}
