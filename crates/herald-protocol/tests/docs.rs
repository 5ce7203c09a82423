//! The protocol version the documentation states is the one a server announces: `hello`'s reply
//! carries [`PROTOCOL_VERSION`] as `"protocol"`, and `docs/protocol.md` and the README's opening say
//! which version herald speaks. When the constant moves on and a page does not (or a page is edited
//! to another version), these tests name every place that disagrees.
//!
//! Owns: the agreement between the docs' stated version and the constant. Does not own: what each
//! version means (docs/protocol.md), or the fixtures (`tests/fixtures.rs`).

use std::path::PathBuf;

use herald_protocol::reply::PROTOCOL_VERSION;

/// A file of the repository, read relative to this crate.
fn read(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A version a document states, where it states it.
#[derive(Debug)]
struct Claim {
    file: &'static str,
    line: usize,
    /// What the document says there, for the failure message.
    what: String,
    version: String,
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Byte offsets just past each occurrence of `needle` in `text`.
fn after_each<'a>(text: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(needle).map(move |(at, _)| at + needle.len())
}

/// A version token at the start of `s`: digits and dots, without a sentence's final dot.
fn version_token(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    s[..end].trim_end_matches('.')
}

/// The string value of a JSON member whose key ends just before `rest` (`: "1.2"`), if it is one.
fn json_string_value(rest: &str) -> Option<&str> {
    let rest = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    Some(&rest[..rest.find('"')?])
}

/// Every JSON member `"protocol"` or `"version"` with a string value: `hello`'s reply in the
/// examples, and prose that quotes it.
fn json_claims(file: &'static str, text: &str) -> Vec<Claim> {
    let mut claims = Vec::new();
    for key in ["\"protocol\"", "\"version\""] {
        for at in after_each(text, key) {
            if let Some(v) = json_string_value(&text[at..]) {
                claims.push(Claim {
                    file,
                    line: line_of(text, at),
                    what: format!("{key}: \"{v}\""),
                    version: v.to_string(),
                });
            }
        }
    }
    claims
}

/// Every `needle` followed by a version (`protocol v1.2`), case-insensitive.
fn phrase_claims(file: &'static str, text: &str, needle: &str) -> Vec<Claim> {
    let lower = text.to_ascii_lowercase();
    after_each(&lower, needle)
        .filter_map(|at| {
            let v = version_token(&text[at..]);
            (!v.is_empty()).then(|| Claim {
                file,
                line: line_of(text, at),
                what: format!("{needle}{v}"),
                version: v.to_string(),
            })
        })
        .collect()
}

/// Fails with every claim that is not [`PROTOCOL_VERSION`].
fn check(claims: &[Claim]) {
    let mut wrong: Vec<&Claim> = claims.iter().filter(|c| c.version != PROTOCOL_VERSION).collect();
    wrong.sort_by_key(|c| (c.file, c.line));
    let wrong: Vec<String> = wrong
        .iter()
        .map(|c| format!("  {}:{}: says {} (the server announces \"{PROTOCOL_VERSION}\")", c.file, c.line, c.what))
        .collect();
    assert!(
        wrong.is_empty(),
        "the docs state another protocol version than herald_protocol::reply::PROTOCOL_VERSION = \"{PROTOCOL_VERSION}\" \
         (crates/herald-protocol/src/reply.rs), which `hello` answers as \"protocol\":\n{}\n\
         Make the docs say \"{PROTOCOL_VERSION}\" (or, if the server's version is what is wrong, the constant).",
        wrong.join("\n")
    );
}

#[test]
fn protocol_md_states_the_version_hello_answers() {
    const FILE: &str = "docs/protocol.md";
    let text = read(FILE);

    // Every `hello` reply shown must say which version it speaks.
    let silent: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("\"heartbeat_ms\"") && !l.contains("\"protocol\""))
        .map(|(i, _)| i + 1)
        .collect();
    assert!(
        silent.is_empty(),
        "{FILE}: the `hello` replies on lines {silent:?} carry no \"protocol\"; a server of this version answers \
         \"protocol\": \"{PROTOCOL_VERSION}\""
    );

    let mut claims = json_claims(FILE, &text);
    assert!(
        claims.iter().any(|c| c.what.starts_with("\"protocol\"")),
        "{FILE}: no `hello` example states \"protocol\"; this test has nothing to check (was the example reworded?)"
    );
    // `protocol` the protocol version the server speaks (`"1.2"`; ...)
    for at in after_each(&text, "the server speaks") {
        let rest = text[at..].trim_start();
        if let Some(v) = rest.strip_prefix("(`\"").and_then(|r| r.find('"').map(|end| &r[..end])) {
            claims.push(Claim {
                file: FILE,
                line: line_of(&text, at),
                what: format!("the server speaks \"{v}\""),
                version: v.to_string(),
            });
        }
    }
    // The page's opening: "It describes protocol version 1.2, the version this herald speaks".
    claims.extend(phrase_claims(FILE, &text, "describes protocol version "));
    check(&claims);
}

#[test]
fn readme_opening_states_the_version_hello_answers() {
    const FILE: &str = "README.md";
    let text = read(FILE);
    // The opening: everything before the first section.
    let opening = &text[..text.find("\n## ").unwrap_or(text.len())];
    let mut claims = phrase_claims(FILE, opening, "protocol v");
    claims.extend(phrase_claims(FILE, opening, "protocol version "));
    assert!(
        !claims.is_empty(),
        "{FILE}: the opening names no protocol version (\"protocol v{PROTOCOL_VERSION}\"); this test has nothing to \
         check (was it reworded?)"
    );
    claims.extend(json_claims(FILE, &text));
    check(&claims);
}
