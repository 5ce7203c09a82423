//! What one `--store` entry says: the shard's name, where it is, and whether
//! the connection is encrypted. `NAME=postgres://...` names a shard;
//! a bare `postgres://...` keeps the name herald always derived from the URL
//! (`host:port/database`), so deployments from before names route as they did.
//!
//! A shard's name is what chats are routed by (rendezvous hashing over the
//! names), so every node must give one database one name: the shard records
//! it (see [`super::shard_identity`]) and a node that disagrees refuses to start.
//!
//! Not here: opening connections (`postgres`), the TLS client (`pg_tls`).

use std::path::PathBuf;

/// Longest explicit shard name.
const MAX_NAME: usize = 64;

/// A `--store` entry that cannot be used. The message never holds a password.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(String);

impl SpecError {
    pub(crate) fn new(message: String) -> SpecError {
        SpecError(message)
    }
}

/// How a shard is known: the name chats are routed by, and whether an
/// operator gave it (only a given name may be shown to clients: a derived
/// one spells a host, a port and a database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardName {
    name: String,
    explicit: bool,
}

impl ShardName {
    /// The routing name: `NAME` of `NAME=postgres://...`, else `host:port/database`.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// Whether the name was given with `NAME=`.
    pub fn is_explicit(&self) -> bool {
        self.explicit
    }

    /// A message about this shard that a client may read: `storage shard NAME: {what}`
    /// for a given name, `storage shard {what}` for a derived one.
    pub fn public(&self, what: &str) -> String {
        if self.explicit { format!("storage shard {}: {what}", self.name) } else { format!("storage shard {what}") }
    }

    /// A label for status pages anyone may read: the given name, or `#n`, the
    /// shard's place (from 1) in this node's `--store` list.
    pub fn label(&self, index: usize) -> String {
        if self.explicit { self.name.clone() } else { format!("#{}", index + 1) }
    }
}

impl std::fmt::Display for ShardName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Whether and how the connection to a shard is encrypted, from the URL's `sslmode`.
///
/// herald always verifies the server's certificate (chain and host name)
/// when it encrypts, unlike libpq, whose `require` encrypts without
/// verifying: an unverified connection stops only passive listeners.
/// `verify-ca` and `verify-full` are accepted and mean `require`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// No `sslmode`, or `sslmode=disable`: plain TCP.
    Off,
    /// `sslmode=prefer`: TLS (verified) when the server offers it, plain TCP
    /// when it does not; no protection from an active attacker, who can
    /// answer that it does not.
    Prefer,
    /// `sslmode=require` (or `verify-ca`, `verify-full`): TLS, verified, or no connection.
    Require,
}

/// The certificates a shard's server certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's trusted roots (no `sslrootcert`, or `sslrootcert=system`).
    System,
    /// Only the CA certificates (PEM) in this file (`sslrootcert=PATH`).
    File(PathBuf),
}

/// One parsed `--store` entry.
#[derive(Debug, Clone)]
pub struct ShardSpec {
    pub name: ShardName,
    /// The connection settings, herald's own URL parameters taken out.
    pub pg: tokio_postgres::Config,
    pub tls: TlsMode,
    pub roots: Roots,
    /// The URL without its password, for operators' messages.
    pub shown: String,
    /// One connection setting per host of a multi-host URL (`h1:5432,h2:5432`),
    /// in the URL's order, without `target_session_attrs` (herald finds the
    /// primary itself, see `postgres::connect`); empty for a one-host URL.
    pub hosts: Vec<tokio_postgres::Config>,
}

impl ShardSpec {
    /// Parses `NAME=postgres://...` or `postgres://...`.
    pub fn parse(entry: &str) -> Result<ShardSpec, SpecError> {
        let (name, url) = if is_url(entry) {
            (None, entry)
        } else {
            match entry.split_once('=') {
                Some((name, url)) if is_url(url) => (Some(name), url),
                // The entry is not shown: it may be a libpq key=value string with a password.
                _ => return Err(SpecError("a --store entry is postgres://... or NAME=postgres://...".into())),
            }
        };
        let shown = redact(url);
        if let Some(name) = name
            && !valid_name(name)
        {
            return Err(SpecError(format!(
                "shard name {name:?} (for {shown}) must be 1 to {MAX_NAME} characters of A-Z a-z 0-9 _ . -"
            )));
        }
        let (url, tls, roots) = take_tls_params(url).map_err(|e| SpecError(format!("{shown}: {e}")))?;
        let parse = |url: &str| -> Result<tokio_postgres::Config, SpecError> {
            let mut pg: tokio_postgres::Config =
                url.parse().map_err(|e| SpecError(format!("{shown}: {}", chain(&e))))?;
            if tls == TlsMode::Off {
                // tokio-postgres's default is `prefer`; with no TLS client that is plain TCP. Say so.
                pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
            }
            Ok(pg)
        };
        let pg = parse(&url)?;
        let hosts = match one_url_per_host(&url) {
            Some(urls) => urls.iter().map(|u| parse(u)).collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let name = match name {
            Some(n) => ShardName { name: n.to_string(), explicit: true },
            None => ShardName { name: derived_name(&pg), explicit: false },
        };
        Ok(ShardSpec { name, pg, tls, roots, shown, hosts })
    }

    /// Parses a node's whole `--store` list; refuses a name given twice.
    /// One item may hold several entries separated by commas (`HERALD_STORE`),
    /// and an entry's own hosts are separated by commas too: a comma starts a
    /// new entry only where `postgres://` or `NAME=postgres://` follows it.
    pub fn parse_all(entries: &[String]) -> Result<Vec<ShardSpec>, SpecError> {
        let entries: Vec<&str> = entries.iter().flat_map(|e| split_entries(e)).collect();
        let mut specs: Vec<ShardSpec> = Vec::with_capacity(entries.len());
        for entry in entries {
            let spec = ShardSpec::parse(entry)?;
            if let Some(first) = specs.iter().find(|s| s.name.as_str() == spec.name.as_str()) {
                return Err(SpecError(format!(
                    "--store gives the shard name {:?} twice ({} and {}): give each shard once, each under its own name",
                    spec.name.as_str(),
                    first.shown,
                    spec.shown
                )));
            }
            specs.push(spec);
        }
        Ok(specs)
    }
}

fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// Splits `a=postgres://h1,h2/d,postgres://h3/e` into its two entries: a
/// comma ends an entry only before `postgres://` or `NAME=postgres://`.
fn split_entries(list: &str) -> Vec<&str> {
    let starts_entry =
        |rest: &str| is_url(rest) || rest.split_once('=').is_some_and(|(n, url)| valid_name(n) && is_url(url));
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in list.match_indices(',') {
        if starts_entry(&list[i + 1..]) {
            out.push(&list[start..i]);
            start = i + 1;
        }
    }
    out.push(&list[start..]);
    out
}

/// A URL cut where herald reads it: `scheme://user@hosts` then the path and query.
struct Parts<'a> {
    scheme: &'a str,
    /// `user` or `user:password`, without the `@`.
    user: Option<&'a str>,
    /// One host or several, comma-separated.
    hosts: &'a str,
    /// From the path on (`/db?query`), possibly empty.
    tail: &'a str,
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Option<Parts<'a>> {
        let (scheme, rest) = url.split_once("://")?;
        let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (Some(user), hosts),
            None => (None, authority),
        };
        Some(Parts { scheme, user, hosts, tail })
    }
}

/// A multi-host URL's hosts (`scheme://user@h1:p1,h2:p2/db?query`) as one
/// URL each, `target_session_attrs` taken out; `None` for a one-host URL.
fn one_url_per_host(url: &str) -> Option<Vec<String>> {
    let Parts { scheme, user, hosts, tail } = Parts::of(url)?;
    let user = user.map_or(String::new(), |u| format!("{u}@"));
    if !hosts.contains(',') {
        return None;
    }
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> =
                query.split('&').filter(|p| !p.is_empty() && !p.starts_with("target_session_attrs=")).collect();
            if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) }
        }
        None => tail.to_string(),
    };
    Some(hosts.split(',').map(|h| format!("{scheme}://{user}{h}{tail}")).collect())
}

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The name herald gave shards before names could be given, kept as is:
/// changing it would re-route every chat of a deployment with bare URLs.
/// A multi-host URL's hosts are sorted, so that nodes listing them in
/// another order route alike: `a:5432,b:5432/db`.
fn derived_name(pg: &tokio_postgres::Config) -> String {
    let host = |h: &tokio_postgres::config::Host| match h {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let ports = pg.get_ports();
    // One port for all hosts, or one per host (as libpq reads them).
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let mut hosts: Vec<String> =
        pg.get_hosts().iter().enumerate().map(|(i, h)| format!("{}:{}", host(h), port(i))).collect();
    if hosts.is_empty() {
        hosts.push(format!("localhost:{}", port(0)));
    }
    hosts.sort();
    hosts.dedup();
    format!("{}/{}", hosts.join(","), pg.get_dbname().unwrap_or("postgres"))
}

/// Takes `sslmode` and `sslrootcert` out of the URL's query: tokio-postgres
/// knows no `sslrootcert` and no `verify-*` modes. Other parameters stay.
fn take_tls_params(url: &str) -> Result<(String, TlsMode, Roots), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), TlsMode::Off, Roots::System));
    };
    let (mut mode, mut root_cert) = (None, None);
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some(("sslmode", value)) => {
                mode = Some(match value {
                    "disable" => TlsMode::Off,
                    "prefer" => TlsMode::Prefer,
                    "require" | "verify-ca" | "verify-full" => TlsMode::Require,
                    other => return Err(format!("sslmode {other:?} is not one of disable, prefer, require")),
                });
            }
            Some(("sslrootcert", value)) => root_cert = Some(percent_decode(value)?),
            _ => kept.push(param),
        }
    }
    let mode = mode.unwrap_or(TlsMode::Off);
    let roots = match root_cert.as_deref() {
        None | Some("system") => Roots::System,
        Some(path) => Roots::File(PathBuf::from(path)),
    };
    if root_cert.is_some() && mode == TlsMode::Off {
        return Err("sslrootcert is given but the connection is not encrypted: add sslmode=require".into());
    }
    match mode {
        TlsMode::Off => kept.push("sslmode=disable"),
        TlsMode::Prefer => kept.push("sslmode=prefer"),
        TlsMode::Require => kept.push("sslmode=require"),
    }
    Ok((format!("{base}?{}", kept.join("&")), mode, roots))
}

/// Decodes `%XX` escapes (a path with spaces, say); `+` stays `+`, as in libpq URLs.
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            out.push(hex.ok_or_else(|| format!("bad %-escape in {s:?}"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8"))
}

/// The URL without its password (in the user part or a `password=` parameter).
fn redact(url: &str) -> String {
    let Some(Parts { scheme, user, hosts, tail }) = Parts::of(url) else { return String::new() };
    let authority = match user {
        Some(user) => format!("{}@{hosts}", user.split_once(':').map_or(user, |(u, _)| u)),
        None => hosts.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let params: Vec<&str> =
                query.split('&').map(|p| if p.starts_with("password=") { "password=***" } else { p }).collect();
            format!("{path}?{}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// An error and its causes, `: `-separated (tokio-postgres shows only the first).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_url_keeps_the_name_herald_always_derived() {
        let s = ShardSpec::parse("postgres://herald:secret@127.0.0.1:5433/chats").unwrap();
        assert_eq!(s.name.as_str(), "127.0.0.1:5433/chats");
        assert!(!s.name.is_explicit());
        assert_eq!(s.tls, TlsMode::Off);
        assert_eq!(s.pg.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
        assert_eq!(s.shown, "postgres://herald@127.0.0.1:5433/chats");
        let d = ShardSpec::parse("postgresql://db.internal/x").unwrap();
        assert_eq!(d.name.as_str(), "db.internal:5432/x");
    }

    #[test]
    fn a_name_is_given_before_the_url() {
        let s = ShardSpec::parse("eu-1.a_b=postgres://herald@localhost:5432/chats?sslmode=require").unwrap();
        assert_eq!(s.name.as_str(), "eu-1.a_b");
        assert!(s.name.is_explicit());
        assert_eq!(s.tls, TlsMode::Require);
        assert_eq!(s.pg.get_dbname(), Some("chats"));
        assert_eq!(s.name.public("unavailable"), "storage shard eu-1.a_b: unavailable");
        assert_eq!(s.name.label(3), "eu-1.a_b");
        let max = "a".repeat(MAX_NAME);
        assert!(ShardSpec::parse(&format!("{max}=postgres://h/d")).is_ok());
    }

    #[test]
    fn bad_names_and_entries_are_refused_without_their_passwords() {
        for bad in ["=postgres://h/d", "a b=postgres://h/d", "a/b=postgres://h/d", "ä=postgres://h/d"] {
            let e = ShardSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("must be 1 to 64 characters"), "{bad}: {e}");
        }
        let long = format!("{}=postgres://h/d", "a".repeat(MAX_NAME + 1));
        assert!(ShardSpec::parse(&long).is_err());
        for bad in ["mysql://u:pw@h/d", "a=mysql://u:pw@h/d", "host=h password=pw", "a=b", ""] {
            let e = ShardSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("postgres://... or NAME=postgres://..."), "{bad}: {e}");
            assert!(!e.contains("pw"), "{bad}: {e}");
        }
        let e = ShardSpec::parse("a=postgres://u:pw@h/d?nonsense=1&password=pw").unwrap_err().to_string();
        assert!(e.contains("postgres://u@h/d?nonsense=1&password=***") && !e.contains("pw"), "{e}");
    }

    #[test]
    fn tls_parameters_are_herald_s_own() {
        let s = ShardSpec::parse("postgres://h/d?sslmode=verify-full&sslrootcert=/etc/my%20ca.pem&application_name=x")
            .unwrap();
        assert_eq!(s.tls, TlsMode::Require);
        assert_eq!(s.roots, Roots::File("/etc/my ca.pem".into()));
        assert_eq!(s.pg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_eq!(s.pg.get_application_name(), Some("x"));
        let p = ShardSpec::parse("postgres://h/d?sslmode=prefer&sslrootcert=system").unwrap();
        assert_eq!((p.tls, p.roots), (TlsMode::Prefer, Roots::System));
        assert_eq!(p.pg.get_ssl_mode(), tokio_postgres::config::SslMode::Prefer);
        let e = ShardSpec::parse("postgres://h/d?sslrootcert=/ca.pem").unwrap_err().to_string();
        assert!(e.contains("add sslmode=require"), "{e}");
        let e = ShardSpec::parse("postgres://h/d?sslmode=allow").unwrap_err().to_string();
        assert!(e.contains("not one of disable, prefer, require"), "{e}");
        assert!(ShardSpec::parse("postgres://h/d?sslmode=require&sslrootcert=%zz").is_err());
    }

    #[test]
    fn a_list_gives_each_name_once() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = ShardSpec::parse_all(&list(&["a=postgres://h/d1", "b=postgres://h/d2", "postgres://h/d3"])).unwrap();
        assert_eq!(ok.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b", "h:5432/d3"]);
        let e = ShardSpec::parse_all(&list(&["a=postgres://h/d1", "a=postgres://u:pw@h/d2"])).unwrap_err().to_string();
        assert!(e.contains("\"a\" twice") && e.contains("postgres://u@h/d2") && !e.contains("pw"), "{e}");
        let e = ShardSpec::parse_all(&list(&["postgres://h/d", "postgres://h:5432/d"])).unwrap_err().to_string();
        assert!(e.contains("\"h:5432/d\" twice"), "{e}");
    }

    #[test]
    fn a_shard_of_several_hosts_is_one_entry_named_alike_in_any_order() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let one = "a=postgres://herald:pw@h1:5432,h2:5433/chats?target_session_attrs=read-write";
        let specs = ShardSpec::parse_all(&list(&[&format!("{one},b=postgres://h3/d,postgres://h4,h5/e")])).unwrap();
        assert_eq!(specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b", "h4:5432,h5:5432/e"]);
        let hosts = &specs[0].hosts;
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[1].get_hosts(), [tokio_postgres::config::Host::Tcp("h2".into())]);
        assert_eq!(hosts[1].get_ports(), [5433]);
        assert_eq!(hosts[1].get_password(), Some(&b"pw"[..]));
        assert_eq!(hosts[1].get_dbname(), Some("chats"));
        assert_eq!(hosts[0].get_target_session_attrs(), tokio_postgres::config::TargetSessionAttrs::Any);
        assert!(specs[1].hosts.is_empty());
        assert_eq!(specs[0].shown, "postgres://herald@h1:5432,h2:5433/chats?target_session_attrs=read-write");
        let a = ShardSpec::parse("postgres://x@b:5433,a:5432/db").unwrap();
        let b = ShardSpec::parse("postgres://x@a:5432,b:5433/db").unwrap();
        assert_eq!((a.name.as_str(), b.name.as_str()), ("a:5432,b:5433/db", "a:5432,b:5433/db"));
    }

    #[test]
    fn a_derived_name_is_never_shown_to_clients() {
        let s = ShardSpec::parse("postgres://herald@10.0.0.7:5432/chats").unwrap();
        assert_eq!(s.name.public("unavailable"), "storage shard unavailable");
        assert_eq!(s.name.label(0), "#1");
    }
}
