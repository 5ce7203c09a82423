//! Drives one connection of a real in-process herald node (embedded store,
//! in-process broker, hub, chat rules) through `FrameHarness`, and checks what
//! a client of PROTOCOL v1 would see.
//!
//! Each input is one connection of a fresh node: a valid `hello` (or, for
//! some inputs, a fuzzed first frame), then up to [`MAX_STEPS`] frames made
//! from the input with `arbitrary`: often a preamble (join, sends, watch),
//! then requests of every v1 op with valid, extreme and wrongly typed
//! arguments, raw and damaged text, and binary frames. An input starting with
//! `#` is instead one frame per line (see [`Script::from_text`]): the
//! hand-written seeds of `fuzz/corpus/connection` are so. With
//! `HERALD_FUZZ_TRACE=1` every frame in and out is printed.
//!
//! Checked after each frame:
//! - every frame that is a JSON object with an integer `id` gets exactly one
//!   reply with that id, and no other frame gets one, unless the connection
//!   was closed; a frame that is not a request gets `bad_request` with id
//!   `null` and close 4000;
//! - replies are `{"id", "ok"}` or `{"id", "err": {"code", "message"}}`, with
//!   v1 error codes (`throttled` and `unavailable` with `retry_after_ms`), and
//!   `ok` shaped as the op's row of the protocol's table says;
//! - `event` pushes are well formed, only for watched chats, in strictly
//!   increasing `seq` per chat, after the watch's `after` (or reply `seq`);
//! - close codes are v1's; `send`, `watch` and `fetch` succeed only for
//!   members; `send` with a known `client_id` returns the first `seq`, a new
//!   `send` a seq above every seq seen; `fetch` and `watch` report a latest
//!   `seq` no lower than any seen; `fetch` returns events in order after
//!   `after`, at most `limit`; `read` positions only move forward.

#![no_main]

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use arbitrary::{Result as AResult, Unstructured};
use herald::harness::FrameHarness;
use herald_fuzz::json;
use herald_protocol::{BadFrame, Op, Request, request::parse_frame};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// Frames per input after the hello: enough for interplay, few enough for many execs/s.
const MAX_STEPS: usize = 40;
const SECRET: &str = "fuzz-secret-fuzz-secret-fuzz-secret-0123456789";
const WS: &str = "w";
const USER: &str = "u";
const ERROR_CODES: [&str; 8] =
    ["bad_request", "unauthenticated", "forbidden", "not_found", "throttled", "unavailable", "too_large", "internal"];
const CLOSE_CODES: [u16; 6] = [1009, 4000, 4001, 4008, 4012, 4029];
const EVENT_TYPES: [&str; 10] =
    ["message", "reaction", "read", "join", "leave", "system", "edit", "delete", "profile", "pin"];
/// PROTOCOL v1's default body limit, of the body as serialized.
const BODY_LIMIT: usize = herald_protocol::limits::BODY_LIMIT;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

/// Where the per-input stores go: memory when there is a tmpfs.
fn scratch() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
    })
}

fuzz_target!(|data: &[u8]| {
    let script = if let Some(text) = data.strip_prefix(b"#") {
        Script::from_text(text)
    } else {
        let mut u = Unstructured::new(data);
        let Ok(script) = Script::generate(&mut u) else { return };
        script
    };
    runtime().block_on(run(script));
});

/// What to feed one connection.
#[derive(Debug)]
struct Script {
    /// `None`: a valid hello first. `Some`: this frame first.
    first: Option<Step>,
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
enum Step {
    Text(Text),
    Binary(Vec<u8>),
}

/// A text frame; tokens are placeholders filled in once the node exists.
#[derive(Debug, Clone)]
enum Text {
    Raw(String),
    Request(Vec<(String, Arg)>),
}

#[derive(Debug, Clone)]
enum Arg {
    /// JSON text, as is.
    Json(String),
    /// A token of the node for (workspace, user), as a JSON string.
    Token(&'static str, &'static str),
}

const OPS: [&str; 17] = [
    "hello", "join", "leave", "watch", "unwatch", "send", "react", "read", "fetch", "ping", "typing", "presence",
    "edit", "delete", "inbox", "upload", "search",
];

impl Script {
    /// The readable form (an input starting with `#`): one frame per line,
    /// `$TOKEN` standing for a valid token of the user; a line `!binary ...`
    /// is a binary frame; a first line `!nohello` skips the hello.
    fn from_text(text: &[u8]) -> Script {
        let text = String::from_utf8_lossy(text);
        let mut lines = text.split('\n').peekable();
        let mut first = None;
        if lines.peek() == Some(&"!nohello") {
            lines.next();
            first = lines.next().map(line_step);
        }
        Script { first, steps: lines.take(MAX_STEPS).map(line_step).collect() }
    }

    fn generate(u: &mut Unstructured) -> AResult<Script> {
        let first = if u.ratio(1, 12)? { Some(step(u)?) } else { None };
        // Often start from a chat with events and a watch, to reach replays and pushes sooner.
        let preamble: &[&str] = match u.int_in_range(0..=3u8)? {
            0 => &[],
            1 => &[r#"{"id":100,"op":"join","chat":"g"}"#],
            2 => &[r#"{"id":100,"op":"join","chat":"g"}"#, r#"{"id":101,"op":"watch","chat":"g"}"#],
            _ => &[
                r#"{"id":100,"op":"join","chat":"g"}"#,
                r#"{"id":101,"op":"send","chat":"g","body":{"text":"a"},"client_id":"c1"}"#,
                r#"{"id":102,"op":"send","chat":"g","body":{"text":"b"}}"#,
                r#"{"id":103,"op":"react","chat":"g","target":2,"emoji":"+1"}"#,
                r#"{"id":104,"op":"watch","chat":"g","after":1}"#,
            ],
        };
        let mut steps: Vec<Step> = preamble.iter().map(|f| Step::Text(Text::Raw(f.to_string()))).collect();
        while steps.len() < MAX_STEPS && !u.is_empty() {
            steps.push(step(u)?);
        }
        Ok(Script { first, steps })
    }
}

fn line_step(line: &str) -> Step {
    if let Some(b) = line.strip_prefix("!binary ") {
        return Step::Binary(b.as_bytes().to_vec());
    }
    match line.split_once("$TOKEN") {
        Some((a, b)) => Step::Text(Text::Request(vec![
            (String::new(), Arg::Json(a.to_string())),
            (String::new(), Arg::Token(WS, USER)),
            (String::new(), Arg::Json(b.to_string())),
        ])),
        None => Step::Text(Text::Raw(line.to_string())),
    }
}

fn step(u: &mut Unstructured) -> AResult<Step> {
    Ok(match u.int_in_range(0..=99u8)? {
        0..=1 => Step::Binary(u.arbitrary::<Vec<u8>>()?.into_iter().take(64).collect()),
        2..=7 => Step::Text(Text::Raw(raw(u)?)),
        _ => Step::Text(Text::Request(request(u)?)),
    })
}

fn raw(u: &mut Unstructured) -> AResult<String> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => u.arbitrary::<String>()?.chars().take(64).collect(),
        1 => {
            (*u.choose(&["", "{}", "[]", "null", "{\"id\":1", "{\"id\":\"1\",\"op\":\"ping\"}", "{\"op\":\"ping\"}"])?)
                .to_string()
        }
        2 => format!("{{\"id\":{},\"op\":{}}}", num(u)?, json_string(&u.arbitrary::<String>()?)),
        _ => {
            // A request with its text damaged.
            let mut s = encode(&request(u)?, &|_, _| "\"t\"".into());
            let at = u.choose_index(s.len().max(1))?.min(s.len());
            let at = (0..=at).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
            match u.int_in_range(0..=2u8)? {
                0 => s.truncate(at),
                1 => s.insert(at, *u.choose(&['"', '{', '}', ',', ':', '\\', '\0'])?),
                _ => s.push_str(&u.arbitrary::<String>()?.chars().take(8).collect::<String>()),
            }
            s
        }
    })
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// A number-like JSON value: small, extreme, or wrongly typed.
fn num(u: &mut Unstructured) -> AResult<String> {
    Ok(match u.int_in_range(0..=23u8)? {
        0..=9 => u.int_in_range(0..=6u64)?.to_string(),
        10 => "9223372036854775807".into(),
        11 => "9223372036854775808".into(),
        12 => "18446744073709551615".into(),
        13 => "18446744073709551616".into(),
        14 => "-1".into(),
        15 => "-9223372036854775808".into(),
        16 => "1.5".into(),
        17 => "\"3\"".into(),
        18 => "null".into(),
        19 => "4294967295".into(),
        20 => "4294967296".into(),
        21 => "500".into(),
        _ => u.arbitrary::<u64>()?.to_string(),
    })
}

fn id(u: &mut Unstructured) -> AResult<Option<String>> {
    Ok(match u.int_in_range(0..=19u8)? {
        0..=11 => Some(u.int_in_range(1..=6i64)?.to_string()),
        12 => Some("0".into()),
        13 => Some(i64::MAX.to_string()),
        14 => Some(i64::MIN.to_string()),
        15 => Some(u.arbitrary::<i64>()?.to_string()),
        16 => Some((*u.choose(&["9223372036854775808", "18446744073709551615", "1.0", "\"7\"", "null", "-0"])?).into()),
        _ => None,
    })
}

fn chat(u: &mut Unstructured) -> AResult<String> {
    Ok(match u.int_in_range(0..=15u8)? {
        0..=6 => json_string("g"),
        7..=9 => json_string("h"),
        10 => json_string(&"c".repeat(128)),
        11 => json_string(&"c".repeat(129)),
        12 => json_string(*u.choose(&["", "bad chat", "é", "a/b", "a.b:c-d_E9"])?),
        13 => num(u)?,
        _ => json_string(&u.arbitrary::<String>()?.chars().take(16).collect::<String>()),
    })
}

fn body(u: &mut Unstructured) -> AResult<String> {
    Ok(match u.int_in_range(0..=15u8)? {
        0..=5 => {
            format!("{{\"text\":{}}}", json_string(&u.arbitrary::<String>()?.chars().take(16).collect::<String>()))
        }
        6 => "null".into(),
        7 => num(u)?,
        8 => "[]".into(),
        9 => format!("{}{}", "[".repeat(200), "]".repeat(200)),
        10 => json_string(&"b".repeat(BODY_LIMIT - 2)), // exactly the limit, quotes included
        11 => json_string(&"b".repeat(BODY_LIMIT - 1)), // one byte over
        12 => "{\"a\":\"\\ud800\",\"b\":1e400}".into(),
        13 => "{\"text\":\"x\",\"text\":\"y\"}".into(),
        _ => json_string(&u.arbitrary::<String>()?.chars().take(32).collect::<String>()),
    })
}

fn token(u: &mut Unstructured) -> AResult<Arg> {
    Ok(match u.int_in_range(0..=7u8)? {
        0..=2 => Arg::Token(WS, USER),
        3 => Arg::Token(WS, "u2"),
        4 => Arg::Token("w2", USER),
        5 => Arg::Json(json_string(*u.choose(&["", "x.y.z", "eyJhbGciOiJub25lIn0.e30."])?)),
        6 => Arg::Json(json_string(&"t".repeat(8 * 1024 + 1))),
        _ => Arg::Json(num(u)?),
    })
}

/// A request-shaped frame: an id, an op, and arguments, each maybe absent or wrong.
fn request(u: &mut Unstructured) -> AResult<Vec<(String, Arg)>> {
    let mut fields: Vec<(String, Arg)> = Vec::new();
    let put = |fields: &mut Vec<(String, Arg)>, k: &str, v: String| fields.push((k.to_string(), Arg::Json(v)));
    if let Some(i) = id(u)? {
        put(&mut fields, "id", i);
    }
    let op = match u.int_in_range(0..=40u8)? {
        0 => None,
        1 => Some(json_string(&u.arbitrary::<String>()?.chars().take(8).collect::<String>())),
        2 => Some("1".to_string()),
        n => Some(json_string(OPS[usize::from(n) % OPS.len()])),
    };
    let op_name: Option<String> = op.as_deref().and_then(|o| serde_json::from_str(o).ok());
    if let Some(op) = op {
        put(&mut fields, "op", op);
    }
    // The arguments of the op, each present most of the time; any other now and then.
    let want = |name: &str| op_name.as_deref().is_some_and(|o| o == name);
    let maybe = |u: &mut Unstructured, wanted: bool| -> AResult<bool> {
        Ok(if wanted { u.int_in_range(0..=15u8)? != 0 } else { u.int_in_range(0..=31u8)? == 0 })
    };
    if maybe(u, !want("hello") && !want("ping"))? {
        put(&mut fields, "chat", chat(u)?);
    }
    if maybe(u, want("watch") || want("fetch"))? {
        put(&mut fields, "after", num(u)?);
    }
    if maybe(u, want("send") || want("edit"))? {
        put(&mut fields, "body", body(u)?);
    }
    let half = u.ratio(1, 2)?;
    if maybe(u, want("send") && half)? {
        let c = match u.int_in_range(0..=7u8)? {
            0..=4 => json_string(*u.choose(&["c1", "c2", "c3"])?),
            5 => json_string(*u.choose(&["", "é"])?),
            6 => json_string(&"c".repeat(*u.choose(&[128, 129])?)),
            _ => num(u)?,
        };
        put(&mut fields, "client_id", c);
    }
    if maybe(u, want("react") || want("edit") || want("delete"))? {
        put(&mut fields, "target", num(u)?);
    }
    if maybe(u, want("react"))? {
        let e = match u.int_in_range(0..=5u8)? {
            0..=2 => json_string(*u.choose(&["+1", "🎉", "heart"])?),
            3 => json_string(&"e".repeat(*u.choose(&[0, 64, 65])?)),
            _ => num(u)?,
        };
        put(&mut fields, "emoji", e);
    }
    let half = u.ratio(1, 2)?;
    if maybe(u, want("react") && half)? {
        put(&mut fields, "on", (*u.choose(&["true", "false", "1", "null"])?).into());
    }
    if maybe(u, want("read"))? {
        put(&mut fields, "seq", num(u)?);
    }
    let half = u.ratio(1, 2)?;
    if maybe(u, (want("fetch") || want("inbox")) && half)? {
        put(&mut fields, "limit", num(u)?);
    }
    let half = u.ratio(1, 2)?;
    if maybe(u, want("inbox") && half)? {
        put(&mut fields, "live", (*u.choose(&["true", "false", "1"])?).into());
    }
    // v1.2 files: an upload's declaration, and files named by a send or edit.
    if maybe(u, want("upload"))? {
        let n = match u.int_in_range(0..=5u8)? {
            0..=3 => json_string(*u.choose(&["a.png", "猫.jpg", "x"])?),
            4 => json_string(&"n".repeat(*u.choose(&[0, 255, 256])?)),
            _ => num(u)?,
        };
        put(&mut fields, "name", n);
    }
    if maybe(u, want("upload"))? {
        let t = match u.int_in_range(0..=4u8)? {
            0..=2 => json_string(*u.choose(&["image/png", "text/html", "application/pdf; x=1"])?),
            3 => json_string(*u.choose(&["png", "a b/c", "text/html\r\nX: y", ""])?),
            _ => num(u)?,
        };
        put(&mut fields, "type", t);
    }
    if maybe(u, want("upload"))? {
        put(&mut fields, "size", num(u)?);
    }
    if maybe(u, want("search"))? {
        let q = match u.int_in_range(0..=4u8)? {
            0..=2 => json_string(*u.choose(&["a", "서버", "B c", " ", ""])?),
            3 => json_string(&"q".repeat(*u.choose(&[200, 201])?)),
            _ => num(u)?,
        };
        put(&mut fields, "query", q);
    }
    let half = u.ratio(1, 4)?;
    if maybe(u, (want("send") || want("edit")) && half)? {
        let f = match u.int_in_range(0..=3u8)? {
            0 => "[]".to_string(),
            1 => r#"["fNoSuchFile0000000000000"]"#.to_string(),
            2 => r#"["a","a"]"#.to_string(),
            _ => num(u)?,
        };
        put(&mut fields, "files", f);
    }
    if want("hello") || u.ratio(1, 64)? {
        fields.push(("token".into(), token(u)?));
    }
    if u.ratio(1, 32)? {
        put(&mut fields, "extra", body(u)?); // servers ignore fields they do not know
    }
    Ok(fields)
}

fn encode(fields: &[(String, Arg)], token: &dyn Fn(&str, &str) -> String) -> String {
    if fields.first().is_some_and(|(k, _)| k.is_empty()) {
        // A line of the readable form: its pieces verbatim.
        return fields
            .iter()
            .map(|(_, v)| match v {
                Arg::Json(j) => j.clone(),
                Arg::Token(ws, user) => token(ws, user),
            })
            .collect();
    }
    let mut s = String::from("{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&json_string(k));
        s.push(':');
        match v {
            Arg::Json(j) => s.push_str(j),
            Arg::Token(ws, user) => s.push_str(&token(ws, user)),
        }
    }
    s.push('}');
    s
}

async fn run(script: Script) {
    let dir = tempfile::Builder::new().prefix("herald-fuzz-").tempdir_in(scratch()).expect("temp dir");
    let mut h = FrameHarness::new(dir.path(), SECRET).await.expect("harness");
    let tokens: HashMap<(&str, &str), String> = [(WS, USER), (WS, "u2"), ("w2", USER)]
        .into_iter()
        .map(|(ws, user)| ((ws, user), json_string(&h.token(ws, user))))
        .collect();
    let render = |step: &Step| -> Fed {
        match step {
            Step::Binary(b) => Fed::Binary(b.clone()),
            Step::Text(Text::Raw(s)) => Fed::Text(s.clone()),
            Step::Text(Text::Request(fields)) => Fed::Text(encode(fields, &|ws, user| tokens[&(ws, user)].clone())),
        }
    };
    let mut model = Model::default();
    let first = script
        .first
        .as_ref()
        .map(&render)
        .unwrap_or_else(|| Fed::Text(format!("{{\"id\":1,\"op\":\"hello\",\"token\":{}}}", tokens[&(WS, USER)])));
    let open = feed(&mut h, &mut model, &first).await;
    if open && script.first.is_none() {
        assert!(model.hello, "the valid hello was refused");
    }
    if open {
        for step in &script.steps {
            if !feed(&mut h, &mut model, &render(step)).await {
                break;
            }
        }
    }
    h.close().await;
}

enum Fed {
    Text(String),
    Binary(Vec<u8>),
}

/// Feeds one frame and checks what came back. Returns whether the connection is still open.
async fn feed(h: &mut FrameHarness, model: &mut Model, frame: &Fed) -> bool {
    match frame {
        Fed::Text(t) => h.text(t).await,
        Fed::Binary(b) => h.binary(b).await,
    }
    let (out, close) = h.take();
    if trace() {
        match frame {
            Fed::Text(t) => eprintln!(">> {}", truncate(t)),
            Fed::Binary(b) => eprintln!(">> binary {b:?}"),
        }
        for f in &out {
            eprintln!("<< {}", truncate(f));
        }
        if let Some(c) = close {
            eprintln!("<< close {c}");
        }
    }
    model.check(frame, &out, close);
    close.is_none()
}

/// `HERALD_FUZZ_TRACE=1`: print every frame in and out (to replay one input).
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("HERALD_FUZZ_TRACE").is_some_and(|v| v == "1"))
}

/// What PROTOCOL v1 makes of a frame, judged without the parser under test.
enum Ident {
    /// A JSON object with an integer `id`.
    Request(i64),
    /// A JSON object with several `id` members: the protocol does not say which one counts.
    Ambiguous(Vec<i64>),
    NotRequest,
}

/// What the client knows so far.
#[derive(Default)]
struct Model {
    hello: bool,
    /// The user the hello's token named.
    user: String,
    /// Chats this user is a member of (joined and not left since).
    joined: HashSet<String>,
    chats: HashMap<String, ChatModel>,
    /// (chat, client_id) -> the seq of the first send.
    client_ids: HashMap<(String, String), u64>,
    /// Each chat's `known` before this step.
    known_before: HashMap<String, u64>,
}

#[derive(Default)]
struct ChatModel {
    /// Watched now (watch answered ok, no unwatch or leave answered since).
    watching: bool,
    /// Event pushes must have a seq above this.
    floor: u64,
    /// The highest seq of an event known to exist.
    known: u64,
    /// The read position last answered.
    read: Option<u64>,
}

impl Model {
    fn check(&mut self, frame: &Fed, out: &[String], close: Option<u16>) {
        let ctx = Ctx { frame, out, close };
        // This step's pushes may come before its reply: the reply is judged by what was known before.
        self.known_before = self.chats.iter().map(|(c, m)| (c.clone(), m.known)).collect();
        if let Some(c) = close {
            ctx.ensure(CLOSE_CODES.contains(&c), "close code not in PROTOCOL v1");
        }
        // What the frame is, by PROTOCOL v1 and by the parser.
        let (oracle_id, parsed) = match frame {
            Fed::Binary(_) => (Ident::NotRequest, None),
            Fed::Text(t) => {
                let members = json::top_level(t);
                let parsed = parse_frame(t);
                let ids = members.as_deref().map(|m| json::get(m, "id")).unwrap_or_default();
                let ident = match (&ids[..], members.as_deref().and_then(json::integer_id)) {
                    (_, Some(id)) => Ident::Request(id),
                    ([_, _, ..], None) => Ident::Ambiguous(ids.iter().filter_map(|t| t.as_i64()).collect()),
                    _ => Ident::NotRequest,
                };
                (ident, Some(parsed))
            }
        };

        let mut replies = 0;
        for text in out {
            let v = lenient(text, 0).unwrap_or_else(|| ctx.fail(&format!("server frame is not JSON: {text}")));
            let Some(o) = v.as_object() else { ctx.fail(&format!("server frame is not an object: {text}")) };
            if o.contains_key("id") {
                replies += 1;
                self.reply(&ctx, o, &oracle_id, parsed.as_ref());
            } else if let Some(ev) = o.get("ev") {
                self.push(&ctx, o, ev);
            } else {
                ctx.fail(&format!("server frame is neither a reply nor a push: {text}"));
            }
        }
        match (&oracle_id, close) {
            (Ident::Request(_), None) => ctx.ensure(replies == 1, "a request did not get exactly one reply"),
            (Ident::Request(_), Some(_)) => ctx.ensure(replies <= 1, "a request got more than one reply"),
            (Ident::Ambiguous(_), _) => ctx.ensure(replies <= 1, "a frame got more than one reply"),
            (Ident::NotRequest, _) => {
                ctx.ensure(replies <= 1, "a frame that is not a request got more than one reply");
                if self.hello && matches!(parsed, Some(Err(BadFrame::NotRequest(_)))) {
                    ctx.ensure(close == Some(4000), "a frame that is not a request did not close with 4000");
                }
            }
        }
        if self.hello && matches!(parsed, Some(Err(BadFrame::BadRequest { .. }))) {
            ctx.ensure(close.is_none(), "a request with bad arguments closed the connection");
        }
        if !self.hello && close.is_none() {
            ctx.fail("the connection stayed open without a hello");
        }
    }

    fn reply(
        &mut self,
        ctx: &Ctx,
        o: &Map<String, Value>,
        oracle_id: &Ident,
        parsed: Option<&Result<Request, BadFrame>>,
    ) {
        let keys: Vec<&str> = o.keys().map(String::as_str).collect();
        let ok = match (o.get("ok"), o.get("err")) {
            (Some(ok), None) if o.len() == 2 => Ok(ok),
            (None, Some(err)) if o.len() == 2 => Err(err),
            _ => ctx.fail(&format!("a reply is not {{id, ok}} or {{id, err}}: {keys:?}")),
        };
        let id = &o["id"];
        if let Err(err) = ok {
            let code = err.get("code").and_then(Value::as_str).unwrap_or_else(|| ctx.fail("err without a string code"));
            ctx.ensure(ERROR_CODES.contains(&code), "error code not in PROTOCOL v1");
            ctx.ensure(err.get("message").is_some_and(Value::is_string), "err without a string message");
            if matches!(code, "throttled" | "unavailable") {
                ctx.ensure(
                    err.get("retry_after_ms").is_some_and(Value::is_u64),
                    "throttled/unavailable without retry_after_ms",
                );
            }
        }
        match oracle_id {
            Ident::Request(i) => ctx.ensure(id.as_i64() == Some(*i), "the reply's id is not the request's"),
            Ident::Ambiguous(ids) => ctx.ensure(
                id.is_null() || id.as_i64().is_some_and(|i| ids.contains(&i)),
                "the reply's id is none of the frame's ids",
            ),
            Ident::NotRequest => {
                ctx.ensure(id.is_null(), "a frame without an integer id got a reply with an id");
                ctx.ensure(ok.is_err(), "a frame that is not a request got ok");
            }
        }
        let code = ok.err().and_then(|e| e["code"].as_str());
        if code == Some("throttled") {
            return;
        }
        if !self.hello {
            // The first frame: a hello with a good token, or unauthenticated and 4001.
            match (ok, parsed) {
                (Ok(v), Some(Ok(Request { op: Op::Hello { .. }, .. }))) => {
                    for k in ["user", "workspace", "node", "session"] {
                        ctx.ensure(
                            v.get(k).is_some_and(Value::is_string),
                            "hello ok without user/workspace/node/session",
                        );
                    }
                    ctx.ensure(v.get("heartbeat_ms").is_some_and(Value::is_u64), "hello ok without heartbeat_ms");
                    self.hello = true;
                    self.user = v["user"].as_str().unwrap_or_default().to_string();
                }
                (Ok(_), _) => ctx.fail("a first request other than hello got ok"),
                (Err(_), Some(_)) => {
                    ctx.ensure(
                        ctx.close == Some(4001) || code != Some("unauthenticated"),
                        "unauthenticated first frame without close 4001",
                    );
                    ctx.ensure(ctx.close.is_some(), "a refused first frame left the connection open");
                }
                (Err(_), None) => ctx.ensure(ctx.close.is_some(), "a refused first frame left the connection open"),
            }
            return;
        }
        let req = match parsed {
            Some(Ok(req)) => req,
            Some(Err(BadFrame::BadRequest { .. })) => {
                ctx.ensure(code == Some("bad_request"), "a request with bad arguments did not get bad_request");
                return;
            }
            Some(Err(BadFrame::NotRequest(_))) | None => {
                ctx.ensure(code == Some("bad_request"), "a frame that is not a request did not get bad_request");
                return;
            }
        };
        let v = match ok {
            Ok(v) => v,
            Err(_) => {
                if let Op::Hello { .. } = req.op {
                    return;
                }
                return;
            }
        };
        let chat = req.op.chat().map(str::to_string);
        let seq_of = |v: &Value, what: &str| -> u64 {
            v.get("seq").and_then(Value::as_u64).unwrap_or_else(|| ctx.fail(&format!("{what} ok without a u64 seq")))
        };
        match &req.op {
            Op::Hello { .. } => ctx.fail("a second hello got ok"),
            Op::Ping | Op::Leave { .. } | Op::Unwatch { .. } => {
                ctx.ensure(v.is_object(), "ping/leave/unwatch ok is not an object");
                let c = chat.unwrap_or_default();
                if let Some(m) = self.chats.get_mut(&c) {
                    m.watching = false;
                }
                if matches!(req.op, Op::Leave { .. }) {
                    self.joined.remove(&c);
                    if let Some(m) = self.chats.get_mut(&c) {
                        m.read = None;
                    }
                }
            }
            Op::Join { chat } => {
                ctx.ensure(v.get("chat").and_then(Value::as_str) == Some(chat), "join ok names another chat");
                ctx.ensure(
                    v.get("members").and_then(Value::as_u64).is_some_and(|m| m >= 1),
                    "join ok without members >= 1",
                );
                let seq = seq_of(v, "join");
                self.joined.insert(chat.clone());
                let m = self.chats.entry(chat.clone()).or_default();
                m.known = m.known.max(seq);
            }
            Op::Watch { chat, after } => {
                ctx.ensure(self.joined.contains(chat), "watch ok for a chat this user is not a member of");
                ctx.ensure(v.get("chat").and_then(Value::as_str) == Some(chat), "watch ok names another chat");
                let seq = seq_of(v, "watch");
                let m = self.chats.entry(chat.clone()).or_default();
                ctx.ensure(seq >= m.known, "watch ok seq is below a seq already seen");
                if after.is_none() {
                    // Pushes come after this seq: it is the chat's latest.
                    m.known = seq;
                }
                m.watching = true;
                // Pushes follow the reply: events after `after` (or after the reply's seq). An
                // `after` beyond the chat's latest seq is taken as the latest (the server's choice:
                // PROTOCOL v1 does not say), and a watch again replays from its `after`, as asked.
                m.floor = after.map_or(seq, |a| a.min(seq));
            }
            Op::Send { chat, body, client_id, .. } => {
                let repeated =
                    client_id.as_ref().is_some_and(|c| self.client_ids.contains_key(&(chat.clone(), c.clone())));
                // A repeated client_id may be answered from the first send's record (nothing is stored).
                ctx.ensure(repeated || self.joined.contains(chat), "send ok for a chat this user is not a member of");
                if !body.get().contains(char::is_whitespace) {
                    ctx.ensure(body.get().len() <= BODY_LIMIT, "send ok for a body over the limit");
                }
                let seq = seq_of(v, "send");
                let m = self.chats.entry(chat.clone()).or_default();
                match client_id.as_ref().and_then(|c| self.client_ids.get(&(chat.clone(), c.clone()))) {
                    Some(first) => {
                        ctx.ensure(seq == *first, "send with a known client_id did not return the first seq")
                    }
                    None => {
                        let before = self.known_before.get(chat).copied().unwrap_or(0);
                        ctx.ensure(seq > before, "send ok seq is not above every seq seen before it");
                        if let Some(c) = client_id {
                            self.client_ids.insert((chat.clone(), c.clone()), seq);
                        }
                    }
                }
                m.known = m.known.max(seq);
            }
            Op::React { chat, .. } => {
                let seq = seq_of(v, "react");
                let m = self.chats.entry(chat.clone()).or_default();
                m.known = m.known.max(seq);
            }
            // A thread's read position is its own (1.2): not the chat's.
            Op::Read { thread: Some(_), .. } => {
                seq_of(v, "read");
            }
            Op::Read { chat, thread: None, .. } => {
                let seq = seq_of(v, "read");
                let m = self.chats.entry(chat.clone()).or_default();
                if let Some(before) = m.read {
                    ctx.ensure(seq >= before, "read position moved backward");
                }
                m.read = Some(seq);
            }
            Op::Fetch { chat, after, limit, .. } => {
                ctx.ensure(self.joined.contains(chat), "fetch ok for a chat this user is not a member of");
                let seq = seq_of(v, "fetch");
                ctx.ensure(v.get("more").is_some_and(Value::is_boolean), "fetch ok without a boolean more");
                let events =
                    v.get("events").and_then(Value::as_array).unwrap_or_else(|| ctx.fail("fetch ok without events"));
                let cap = limit.unwrap_or(100).min(500) as usize;
                ctx.ensure(events.len() <= cap, "fetch returned more events than its limit");
                let m = self.chats.entry(chat.clone()).or_default();
                ctx.ensure(seq >= m.known, "fetch ok seq (the latest) is below a seq already seen");
                let mut last = *after;
                for e in events {
                    let s = check_event(ctx, e, "fetched event", &self.user);
                    ctx.ensure(s > last, "fetched events not in increasing seq after `after`");
                    ctx.ensure(s <= seq, "fetched event above the chat's latest seq");
                    last = s;
                }
                m.known = m.known.max(seq);
            }
            Op::Edit { chat, .. } | Op::Delete { chat, .. } => {
                let seq = seq_of(v, req.op.name());
                let m = self.chats.entry(chat.clone()).or_default();
                m.known = m.known.max(seq);
            }
            Op::Inbox { limit, .. } => {
                let chats = v.get("chats").and_then(Value::as_array).unwrap_or_else(|| ctx.fail("inbox without chats"));
                ctx.ensure(chats.len() <= limit.unwrap_or(50).min(200) as usize, "inbox page above its limit");
                let more = v.get("more").and_then(Value::as_bool).unwrap_or_else(|| ctx.fail("inbox without more"));
                ctx.ensure(!more || v.get("cursor").is_some_and(Value::is_string), "inbox more without a cursor");
                for c in chats {
                    let name = c.get("chat").and_then(Value::as_str).unwrap_or("");
                    ctx.ensure(self.joined.contains(name), "inbox lists a chat this user is not a member of");
                }
            }
            Op::Typing { chat } => {
                ctx.ensure(self.joined.contains(chat), "typing ok for a chat this user is not a member of");
                ctx.ensure(v.as_object().is_some_and(Map::is_empty), "typing ok is not {}");
            }
            Op::Presence { chat } => {
                ctx.ensure(self.joined.contains(chat), "presence ok for a chat this user is not a member of");
                let count =
                    v.get("count").and_then(Value::as_u64).unwrap_or_else(|| ctx.fail("presence without count"));
                let users =
                    v.get("users").and_then(Value::as_array).unwrap_or_else(|| ctx.fail("presence without users"));
                ctx.ensure(users.len() as u64 <= count && users.len() <= 100, "presence lists too many users");
                let names: Vec<&str> = users.iter().filter_map(Value::as_str).collect();
                ctx.ensure(names.len() == users.len(), "presence users are not strings");
                ctx.ensure(names.windows(2).all(|w| w[0] < w[1]), "presence users not sorted");
            }
            // Protocol 1.2's conversations.
            Op::Profile { chat, .. } | Op::Pin { chat, .. } => {
                ctx.ensure(self.joined.contains(chat), "a 1.2 write ok for a chat this user is not a member of");
                let seq = seq_of(v, req.op.name());
                let m = self.chats.entry(chat.clone()).or_default();
                m.known = m.known.max(seq);
            }
            Op::Members { chat, limit, .. } => {
                ctx.ensure(self.joined.contains(chat), "members ok for a chat this user is not a member of");
                let members =
                    v.get("members").and_then(Value::as_array).unwrap_or_else(|| ctx.fail("members without members"));
                ctx.ensure(
                    members.len() <= limit.unwrap_or(100).clamp(1, 1000) as usize,
                    "members page above its limit",
                );
                ctx.ensure(v.get("count").is_some_and(Value::is_u64), "members without a count");
                let more = v.get("more").and_then(Value::as_bool).unwrap_or_else(|| ctx.fail("members without more"));
                ctx.ensure(!more || v.get("cursor").is_some_and(Value::is_string), "members more without a cursor");
                let users: Vec<&str> = members.iter().filter_map(|m| m.get("user")?.as_str()).collect();
                ctx.ensure(users.len() == members.len(), "a member without a user");
                ctx.ensure(users.windows(2).all(|w| w[0] < w[1]), "members not sorted by user id");
            }
            Op::Threads { limit, .. } => {
                let threads =
                    v.get("threads").and_then(Value::as_array).unwrap_or_else(|| ctx.fail("threads without threads"));
                ctx.ensure(threads.len() <= limit.unwrap_or(20).clamp(1, 100) as usize, "threads page above its limit");
                let more = v.get("more").and_then(Value::as_bool).unwrap_or_else(|| ctx.fail("threads without more"));
                ctx.ensure(!more || v.get("cursor").is_some_and(Value::is_string), "threads more without a cursor");
                for t in threads {
                    let name = t.get("chat").and_then(Value::as_str).unwrap_or("");
                    ctx.ensure(self.joined.contains(name), "threads lists a chat this user is not a member of");
                }
            }
            Op::Pins { chat } | Op::Reactions { chat, .. } => {
                ctx.ensure(self.joined.contains(chat), "a 1.2 read ok for a chat this user is not a member of");
                let field = if matches!(req.op, Op::Pins { .. }) { "pins" } else { "reactions" };
                ctx.ensure(v.get(field).is_some_and(|f| f.is_array() || f.is_object()), "a 1.2 read without its list");
            }
            Op::Append { chat, .. } => {
                ctx.ensure(self.joined.contains(chat), "append ok for a chat this user is not a member of");
                ctx.ensure(v.as_object().is_some_and(Map::is_empty), "append ok is not {}");
            }
            Op::Upload { chat, file } => {
                ctx.ensure(self.joined.contains(chat), "upload ok for a chat this user is not a member of");
                let id = v.get("file").and_then(Value::as_str).unwrap_or_default();
                ctx.ensure(id.starts_with('f') && id.len() == 23, "upload ok without a file id");
                ctx.ensure(v.get("method").and_then(Value::as_str) == Some("PUT"), "upload ok without PUT");
                let url = v.get("url").and_then(Value::as_str).unwrap_or_default();
                ctx.ensure(url.starts_with("http") && url.contains(id), "upload ok without its URL");
                let typed = v.pointer("/headers/Content-Type").and_then(Value::as_str);
                ctx.ensure(typed == Some(file.mime.as_str()), "upload ok without the declared Content-Type");
                ctx.ensure(v.get("expires_ms").and_then(Value::as_i64).is_some(), "upload ok without expires_ms");
            }
            Op::Search { chat, limit, .. } => {
                if let Some(c) = chat {
                    ctx.ensure(self.joined.contains(c), "search ok in a chat this user is not a member of");
                }
                let results =
                    v.get("results").and_then(Value::as_array).unwrap_or_else(|| ctx.fail("search ok without results"));
                ctx.ensure(results.len() <= limit.unwrap_or(20).min(100) as usize, "search returned over its limit");
                ctx.ensure(v.get("more").is_some_and(Value::is_boolean), "search ok without a boolean more");
                for r in results {
                    let c = r.get("chat").and_then(Value::as_str).unwrap_or_default();
                    ctx.ensure(self.joined.contains(c), "search found a message of a chat this user is not in");
                    ctx.ensure(r.get("type").and_then(Value::as_str) == Some("message"), "search found a non-message");
                }
            }
        }
    }

    fn push(&mut self, ctx: &Ctx, o: &Map<String, Value>, ev: &Value) {
        match ev.as_str() {
            Some("event") => {
                let v = Value::Object(o.clone());
                let seq = check_event(ctx, &v, "event push", &self.user);
                let chat = o.get("chat").and_then(Value::as_str).unwrap_or_else(|| ctx.fail("event push without chat"));
                ctx.ensure(herald_protocol::ids::is_valid_id(chat), "event push for an invalid chat id");
                let m = self.chats.entry(chat.to_string()).or_default();
                ctx.ensure(m.watching, "event push for a chat not watched");
                ctx.ensure(seq > m.floor, "event push not in strictly increasing seq (or not after the watch's start)");
                m.floor = seq;
                m.known = m.known.max(seq);
            }
            Some("notify") => {
                ctx.ensure(o.get("chat").is_some_and(Value::is_string), "notify without chat");
                ctx.ensure(o.get("seq").is_some_and(Value::is_u64), "notify without seq");
            }
            Some("reconnect") => {
                ctx.ensure(o.get("after_ms").is_some_and(Value::is_u64), "reconnect without after_ms");
            }
            Some(_) => {} // clients ignore pushes they do not know
            None => ctx.fail("ev is not a string"),
        }
    }
}

/// Parses a server frame. Bodies are clients' JSON of any depth, past
/// serde_json's nesting limit: a value too deep is checked to be JSON (by the
/// independent grammar) and stands as the string "<deep>".
fn lenient(text: &str, depth: usize) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Some(v);
    }
    if !json::is_json(text) {
        return None;
    }
    let t = text.trim_start();
    if depth < 4 && t.starts_with('{') {
        let m: Vec<(String, Box<serde_json::value::RawValue>)> =
            serde_json::from_str::<std::collections::BTreeMap<String, Box<serde_json::value::RawValue>>>(text)
                .ok()?
                .into_iter()
                .collect();
        return m
            .into_iter()
            .map(|(k, v)| Some((k, lenient(v.get(), depth + 1)?)))
            .collect::<Option<Map<_, _>>>()
            .map(Value::Object);
    }
    if depth < 4 && t.starts_with('[') {
        let a: Vec<Box<serde_json::value::RawValue>> = serde_json::from_str(text).ok()?;
        return a.iter().map(|v| lenient(v.get(), depth + 1)).collect::<Option<Vec<_>>>().map(Value::Array);
    }
    // A lone surrogate escape, a number beyond f64, or nesting deeper still.
    Some(Value::String("<deep>".into()))
}

/// Checks an event's shape (as pushed or fetched) and returns its seq.
fn check_event(ctx: &Ctx, e: &Value, what: &str, user: &str) -> u64 {
    let seq = e.get("seq").and_then(Value::as_u64).unwrap_or_else(|| ctx.fail(&format!("{what} without a u64 seq")));
    ctx.ensure(seq >= 1, "an event with seq 0");
    let kind = e.get("type").and_then(Value::as_str).unwrap_or_else(|| ctx.fail(&format!("{what} without a type")));
    ctx.ensure(EVENT_TYPES.contains(&kind), "event type not in the protocol (v1.2)");
    ctx.ensure(e.get("ts").is_some_and(Value::is_i64), "event without an integer ts");
    let body = e.get("body").unwrap_or_else(|| ctx.fail(&format!("{what} without a body")));
    // Every event here is this connection's user's own.
    ctx.ensure(e.get("user").and_then(Value::as_str) == Some(user), "an event not by the only user");
    let shaped = match kind {
        "reaction" => {
            body.get("target").is_some_and(Value::is_u64)
                && body.get("emoji").is_some_and(Value::is_string)
                && body.get("on").is_some_and(Value::is_boolean)
        }
        "read" => body.get("seq").is_some_and(Value::is_u64),
        "join" | "leave" => body.as_object().is_some_and(Map::is_empty),
        // The target's new body, `null` once the target is deleted.
        "edit" => body.get("target").is_some_and(Value::is_u64) && body.get("body").is_some(),
        "delete" => body.get("target").is_some_and(Value::is_u64),
        "pin" => body.get("target").is_some_and(Value::is_u64) && body.get("on").is_some_and(Value::is_boolean),
        "profile" => ["name", "image", "data"].iter().all(|f| body.get(f).is_some()),
        // The stored view: a deleted message has no body left.
        "message" if e.get("deleted").is_some() => e.get("deleted") == Some(&Value::Bool(true)) && body.is_null(),
        _ => true,
    };
    ctx.ensure(shaped, "event body not shaped as the protocol says for its type");
    if let Some(edited) = e.get("edited") {
        ctx.ensure(kind == "message" && edited.as_u64().is_some_and(|s| s > seq), "edited is not a later seq");
    }
    seq
}

/// One step's evidence, for failure messages.
struct Ctx<'a> {
    frame: &'a Fed,
    out: &'a [String],
    close: Option<u16>,
}

impl Ctx<'_> {
    fn fail(&self, what: &str) -> ! {
        let frame = match self.frame {
            Fed::Text(t) => format!("text {:?}", truncate(t)),
            Fed::Binary(b) => format!("binary {b:?}"),
        };
        let out: Vec<String> = self.out.iter().map(|s| truncate(s)).collect();
        panic!("{what}\n  frame: {frame}\n  server frames: {out:#?}\n  close: {:?}", self.close);
    }

    fn ensure(&self, cond: bool, what: &str) {
        if !cond {
            self.fail(what);
        }
    }
}

fn truncate(s: &str) -> String {
    if s.len() <= 300 {
        return s.to_string();
    }
    let mut end = 300;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}
