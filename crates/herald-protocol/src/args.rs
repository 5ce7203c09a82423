//! v1.2's request arguments, read from their raw JSON by the ops that take them: a seq (`thread`,
//! `quote`), a flag (`stream`, `done`), `text`, `mentions`, and a chat profile's fields, which tell
//! "left out" (keep) from `null` (clear). Each reader answers the `bad_request` message that names
//! the argument and what it must be.
//!
//! Why raw: `request::Wire` reads every argument of every op in one pass, and a typed field there
//! refuses a frame whose value has another type even when its op does not take that argument.
//! Before v1.2 those arguments were unknown and ignored whatever their type; kept raw, they still are
//! for every op that does not take them. Not here: which op takes which argument (`request`).

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::limits::{FILE_NAME_MAX, FILES_MAX, MENTIONS_MAX, PROFILE_DATA_LIMIT, PROFILE_IMAGE_MAX, PROFILE_NAME_MAX};

/// One field of a change: left out, set to `null`, or set to a value.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Patch<T> {
    /// Left out of the request: the field keeps its value.
    #[default]
    Keep,
    /// Given as `null`: the field is cleared.
    Clear,
    /// Given a value.
    Set(T),
}

/// The change a `profile` request asks for (v1.2); each field checked against its limit.
#[derive(Debug, Default)]
pub struct ProfilePatch {
    pub name: Patch<String>,
    pub image: Patch<String>,
    /// Raw JSON, as the server stores it.
    pub data: Patch<Box<RawValue>>,
}

impl ProfilePatch {
    /// Reads `name`, `image` and `data`.
    pub fn read(name: Option<&RawValue>, image: Option<&RawValue>, data: Option<&RawValue>) -> Result<Self, String> {
        let name = text_patch(name, "name", PROFILE_NAME_MAX)?;
        let image = text_patch(image, "image", PROFILE_IMAGE_MAX)?;
        let data = match data {
            None => Patch::Keep,
            Some(raw) if raw.get() == "null" => Patch::Clear,
            Some(raw) if raw.get().len() > PROFILE_DATA_LIMIT => {
                return Err(format!("\"data\" must be at most {PROFILE_DATA_LIMIT} bytes serialized"));
            }
            Some(raw) => Patch::Set(raw.to_owned()),
        };
        Ok(ProfilePatch { name, image, data })
    }
}

/// A string field of a profile: `null` clears it; a string of at most `max` characters sets it.
fn text_patch(raw: Option<&RawValue>, what: &str, max: usize) -> Result<Patch<String>, String> {
    let Some(raw) = raw else { return Ok(Patch::Keep) };
    let refused = || format!("\"{what}\" must be a string of at most {max} characters, or null");
    match serde_json::from_str::<Option<String>>(raw.get()) {
        Ok(None) => Ok(Patch::Clear),
        Ok(Some(s)) if s.chars().count() <= max => Ok(Patch::Set(s)),
        Ok(Some(_)) | Err(_) => Err(refused()),
    }
}

/// An optional seq (`thread`, `quote`): a non-negative integer; `null` reads as left out.
pub fn seq(raw: Option<&RawValue>, what: &str) -> Result<Option<u64>, String> {
    let Some(raw) = raw else { return Ok(None) };
    serde_json::from_str::<Option<u64>>(raw.get()).map_err(|_| format!("\"{what}\" must be the seq of a message"))
}

/// An optional flag (`stream`, `done`): `true` or `false`; left out or `null` reads as false.
pub fn flag(raw: Option<&RawValue>, what: &str) -> Result<bool, String> {
    let Some(raw) = raw else { return Ok(false) };
    serde_json::from_str::<Option<bool>>(raw.get())
        .map(|b| b.unwrap_or(false))
        .map_err(|_| format!("\"{what}\" must be true or false"))
}

/// `append`'s `text`: a string, empty only when `done` ends the stream.
pub fn append_text(raw: Option<&RawValue>, done: bool) -> Result<String, String> {
    let Some(raw) = raw else { return Err("missing \"text\"".into()) };
    match serde_json::from_str::<String>(raw.get()) {
        Ok(t) if t.is_empty() && !done => Err("\"text\" must not be empty unless \"done\" is true".into()),
        Ok(t) => Ok(t),
        Err(_) => Err("\"text\" must be a string".into()),
    }
}

/// `mentions`: at most [`MENTIONS_MAX`] distinct user ids. Duplicates are removed, the first of each
/// kept in the order given. `None` when left out (or `null`); `Some([])` when given empty (an `edit`
/// then clears the message's mentions).
pub fn mentions(raw: Option<&RawValue>) -> Result<Option<Vec<String>>, String> {
    let Some(raw) = raw else { return Ok(None) };
    let refused = || format!("\"mentions\" must be a list of at most {MENTIONS_MAX} distinct user ids");
    let Ok(given) = serde_json::from_str::<Option<Vec<String>>>(raw.get()) else { return Err(refused()) };
    let Some(given) = given else { return Ok(None) };
    let mut users: Vec<String> = Vec::new();
    for user in given {
        if !crate::ids::is_valid_user_id(&user) {
            return Err(format!("each of \"mentions\" must be a user id: {}", crate::ids::USER_ID_RULE));
        }
        if users.contains(&user) {
            continue;
        }
        if users.len() == MENTIONS_MAX {
            return Err(refused());
        }
        users.push(user);
    }
    Ok(Some(users))
}

/// `files` on `send` and `edit`: at most [`FILES_MAX`] distinct file ids. `None` when left out (or
/// `null`); `Some([])` when given empty (an `edit` then removes the message's files). A file named
/// twice is refused: a file belongs to one message.
pub fn files(raw: Option<&RawValue>) -> Result<Option<Vec<String>>, String> {
    let Some(raw) = raw else { return Ok(None) };
    let refused = || format!("\"files\" must be a list of at most {FILES_MAX} file ids from \"upload\"");
    let Ok(given) = serde_json::from_str::<Option<Vec<String>>>(raw.get()) else { return Err(refused()) };
    let Some(given) = given else { return Ok(None) };
    if given.len() > FILES_MAX || !given.iter().all(|f| crate::ids::is_valid_id(f)) {
        return Err(refused());
    }
    if let Some(twice) = given.iter().enumerate().find_map(|(i, f)| given[..i].contains(f).then_some(f)) {
        return Err(format!("file {twice} is named twice in \"files\""));
    }
    Ok(Some(given))
}

/// What `upload` declares of a file: its name, MIME type and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDeclared {
    /// 1 to [`FILE_NAME_MAX`] characters.
    pub name: String,
    /// `type/subtype`, optionally with parameters (see [`valid_mime`]).
    pub mime: String,
    /// In bytes; the server refuses more than its limit with `too_large`.
    pub size: u64,
}

impl FileDeclared {
    /// Reads `name`, `type` and `size`.
    pub fn read(name: Option<&RawValue>, mime: Option<&RawValue>, size: Option<&RawValue>) -> Result<Self, String> {
        let name = match name.map(|r| serde_json::from_str::<String>(r.get())) {
            None => return Err("missing \"name\"".into()),
            Some(Ok(n)) if (1..=FILE_NAME_MAX).contains(&n.chars().count()) => n,
            Some(_) => return Err(format!("\"name\" must be a string of 1 to {FILE_NAME_MAX} characters")),
        };
        let mime = match mime.map(|r| serde_json::from_str::<String>(r.get())) {
            None => return Err("missing \"type\"".into()),
            Some(Ok(t)) if valid_mime(&t) => t,
            Some(_) => return Err("\"type\" must be a MIME type, like \"image/png\"".into()),
        };
        let size = match size.map(|r| serde_json::from_str::<u64>(r.get())) {
            None => return Err("missing \"size\"".into()),
            Some(Ok(n)) => n,
            Some(Err(_)) => return Err("\"size\" must be the file's size in bytes, 0 or more".into()),
        };
        Ok(FileDeclared { name, mime, size })
    }
}

/// Whether `mime` is a MIME type: `type/subtype` of RFC 9110 tokens, optionally `; parameters`, at
/// most 255 bytes, all ASCII with no control characters (it is served back as a header).
pub fn valid_mime(mime: &str) -> bool {
    fn token(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    }
    if mime.len() > 255 || mime.bytes().any(|b| b.is_ascii_control() || !b.is_ascii()) {
        return false;
    }
    let essence = mime.split(';').next().unwrap_or("").trim();
    matches!(essence.split_once('/'), Some((t, s)) if token(t) && token(s))
}

/// A streamed message's body (`send` with `"stream": true`): an object whose `text` is a string.
pub fn check_stream_body(body: &RawValue) -> Result<(), String> {
    #[derive(Deserialize)]
    struct Streamed<'a> {
        #[serde(borrow)]
        #[allow(dead_code)] // only its type is checked
        text: std::borrow::Cow<'a, str>,
    }
    // serde would also read the struct from an array; the body must be an object.
    let object = body.get().trim_start_matches([' ', '\t', '\n', '\r']).starts_with('{');
    if object && serde_json::from_str::<Streamed>(body.get()).is_ok() {
        Ok(())
    } else {
        Err("with \"stream\": true, \"body\" must be an object whose \"text\" is a string".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.into()).expect("JSON")
    }

    #[test]
    fn files_are_distinct_ids_at_most_ten() {
        assert_eq!(files(None), Ok(None));
        assert_eq!(files(Some(&raw("[]"))), Ok(Some(vec![])));
        assert_eq!(files(Some(&raw(r#"["fa","fb"]"#))), Ok(Some(vec!["fa".into(), "fb".into()])));
        assert!(files(Some(&raw(r#"["fa","fa"]"#))).unwrap_err().contains("twice"));
        let eleven = format!("[{}]", (0..11).map(|i| format!("\"f{i}\"")).collect::<Vec<_>>().join(","));
        assert!(files(Some(&raw(&eleven))).is_err());
        assert!(files(Some(&raw(r#"["a/b"]"#))).is_err());
        assert!(files(Some(&raw("3"))).is_err());
    }

    #[test]
    fn an_upload_declares_a_name_a_type_and_a_size() {
        let png = raw(r#""image/png""#);
        let ok = FileDeclared::read(Some(&raw(r#""사진.png""#)), Some(&png), Some(&raw("12")));
        assert_eq!(ok.unwrap().size, 12);
        let long = raw(&format!("\"{}\"", "a".repeat(256)));
        assert!(FileDeclared::read(Some(&long), Some(&png), Some(&raw("1"))).is_err());
        assert!(FileDeclared::read(Some(&raw("\"\"")), Some(&png), Some(&raw("1"))).is_err());
        assert!(FileDeclared::read(Some(&raw("\"a\"")), Some(&raw("\"png\"")), Some(&raw("1"))).is_err());
        assert!(FileDeclared::read(Some(&raw("\"a\"")), Some(&png), Some(&raw("-1"))).is_err());
        assert!(FileDeclared::read(Some(&raw("\"a\"")), Some(&png), None).is_err());
        assert!(valid_mime("text/plain; charset=utf-8"));
        for bad in ["", "image", "image/", "/png", "a b/c", "text/html\r\nX: y"] {
            assert!(!valid_mime(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_profile_field_left_out_is_kept_and_a_null_one_is_cleared() {
        let (name, data) = (raw(r#""Team""#), raw("null"));
        let p = ProfilePatch::read(Some(&name), None, Some(&data)).expect("valid");
        assert_eq!(p.name, Patch::Set("Team".into()));
        assert_eq!(p.image, Patch::Keep);
        assert!(matches!(p.data, Patch::Clear));
        let set = raw(r#"{"color":"blue"}"#);
        let p = ProfilePatch::read(None, None, Some(&set)).expect("valid");
        assert!(matches!(p.data, Patch::Set(d) if d.get() == r#"{"color":"blue"}"#));
    }

    #[test]
    fn profile_limits_count_characters_and_serialized_bytes() {
        let at_limit = raw(&format!("\"{}\"", "é".repeat(PROFILE_NAME_MAX)));
        assert!(ProfilePatch::read(Some(&at_limit), None, None).is_ok(), "200 characters, 400 bytes");
        let over = raw(&format!("\"{}\"", "x".repeat(PROFILE_NAME_MAX + 1)));
        assert!(ProfilePatch::read(Some(&over), None, None).unwrap_err().contains("\"name\""));
        let long_url = raw(&format!("\"https://x/{}\"", "a".repeat(PROFILE_IMAGE_MAX)));
        assert!(ProfilePatch::read(None, Some(&long_url), None).unwrap_err().contains("\"image\""));
        let big = raw(&format!("\"{}\"", "x".repeat(PROFILE_DATA_LIMIT)));
        assert!(ProfilePatch::read(None, None, Some(&big)).unwrap_err().contains("\"data\""));
        let number = raw("5");
        assert!(ProfilePatch::read(Some(&number), None, None).is_err());
    }

    #[test]
    fn mentions_are_distinct_in_the_order_given_and_at_most_fifty() {
        let m = raw(r#"["bob","carol@example.com","bob","dan+1"]"#);
        assert_eq!(mentions(Some(&m)).unwrap(), Some(vec!["bob".into(), "carol@example.com".into(), "dan+1".into()]));
        assert_eq!(mentions(Some(&raw("[]"))).unwrap(), Some(vec![]));
        assert_eq!(mentions(Some(&raw("null"))).unwrap(), None);
        assert_eq!(mentions(None).unwrap(), None);
        let fifty: Vec<String> = (0..MENTIONS_MAX).map(|i| format!("u{i}")).collect();
        let mut repeated = fifty.clone();
        repeated.extend(fifty.iter().cloned());
        assert_eq!(mentions(Some(&raw(&serde_json::to_string(&repeated).unwrap()))).unwrap(), Some(fifty.clone()));
        let mut too_many = fifty;
        too_many.push("one-more".into());
        assert!(mentions(Some(&raw(&serde_json::to_string(&too_many).unwrap()))).is_err());
        for bad in [r#"["a b"]"#, r#"[""]"#, r#"[1]"#, r#""bob""#] {
            assert!(mentions(Some(&raw(bad))).is_err(), "{bad}");
        }
    }

    #[test]
    fn seqs_flags_and_text() {
        assert_eq!(seq(Some(&raw("41")), "thread"), Ok(Some(41)));
        assert_eq!(seq(Some(&raw("null")), "thread"), Ok(None));
        assert!(seq(Some(&raw("-1")), "quote").unwrap_err().contains("\"quote\""));
        assert!(seq(Some(&raw("\"41\"")), "quote").is_err());
        assert_eq!(flag(Some(&raw("true")), "stream"), Ok(true));
        assert_eq!(flag(None, "stream"), Ok(false));
        assert!(flag(Some(&raw("1")), "done").is_err());
        assert_eq!(append_text(Some(&raw(r#""lo""#)), false), Ok("lo".into()));
        assert_eq!(append_text(Some(&raw(r#""""#)), true), Ok(String::new()));
        assert!(append_text(Some(&raw(r#""""#)), false).is_err());
        assert!(append_text(Some(&raw("5")), true).is_err());
        assert!(append_text(None, true).is_err());
    }

    #[test]
    fn a_streamed_body_is_an_object_with_a_string_text() {
        assert!(check_stream_body(&raw(r#"{"text":""}"#)).is_ok());
        assert!(check_stream_body(&raw(r#" {"model":"m","text":"He"}"#)).is_ok());
        for bad in [r#"{"text":5}"#, r#"{}"#, r#"["He"]"#, r#""He""#, "null"] {
            assert!(check_stream_body(&raw(bad)).is_err(), "{bad}");
        }
    }
}
