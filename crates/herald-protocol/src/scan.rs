//! A JSON scanner for frames the typed pass refused: it checks the grammar
//! (RFC 8259) without building values, so nothing valid is refused for how
//! it is written (nesting of any depth, numbers beyond `f64`, lone surrogate
//! escapes), and hands back the top-level members' raw text. It only decides
//! what a refused frame is answered with; the typed pass decides what a
//! request means.

/// One top-level member: its key (raw, without the quotes) and its value's text.
pub struct Member<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// The members of `text` if it is one JSON object, `None` if it is not.
pub fn object_members(text: &str) -> Option<Vec<Member<'_>>> {
    let b = text.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(b, i + 1);
    let mut members = Vec::new();
    if b.get(i) == Some(&b'}') {
        return (ws(b, i + 1) == b.len()).then_some(members);
    }
    loop {
        let key_end = string(b, i)?;
        let key = &text[i + 1..key_end - 1];
        i = ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(b, i + 1);
        let end = value(b, start)?;
        members.push(Member { key, value: &text[start..end] });
        i = ws(b, end);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b'}') => return (ws(b, i + 1) == b.len()).then_some(members),
            _ => return None,
        }
    }
}

/// The integer a JSON number's text denotes, if it is written as an integer
/// (`-?(0|[1-9][0-9]*)`, so `-0` is 0) and fits an `i64`.
pub fn integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let grammar =
        !digits.is_empty() && digits.bytes().all(|d| d.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    if !grammar {
        return None;
    }
    if digits == "0" {
        return Some(0);
    }
    text.parse().ok()
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end of the string starting at `i` (just past its closing quote).
fn string(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    loop {
        match *b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = b.get(i + 2..i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            0x00..=0x1f => return None,
            _ => i += 1,
        }
    }
}

/// The end of the number starting at `i`.
fn number(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |b: &[u8], mut i: usize| {
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = if b.get(i) == Some(&b'0') { i + 1 } else { digits(b, i)? };
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(b, i)?;
    }
    Some(i)
}

/// The end of the value starting at `i`. Containers are tracked on a stack of
/// their closing brackets, not by recursion, so no depth is too deep.
fn value(b: &[u8], mut i: usize) -> Option<usize> {
    let mut open: Vec<u8> = Vec::new();
    loop {
        // A value at `i`.
        match *b.get(i)? {
            b'{' | b'[' => {
                let close = if b[i] == b'{' { b'}' } else { b']' };
                let first = ws(b, i + 1);
                if b.get(first) == Some(&close) {
                    i = first + 1;
                } else {
                    open.push(close);
                    i = if close == b'}' { member_value(b, first)? } else { first };
                    continue;
                }
            }
            b'"' => i = string(b, i)?,
            b't' => i = literal(b, i, b"true")?,
            b'f' => i = literal(b, i, b"false")?,
            b'n' => i = literal(b, i, b"null")?,
            _ => i = number(b, i)?,
        }
        // After a value: close containers, or go on to the next element.
        loop {
            let Some(&close) = open.last() else { return Some(i) };
            i = ws(b, i);
            match *b.get(i)? {
                b',' => {
                    let next = ws(b, i + 1);
                    i = if close == b'}' { member_value(b, next)? } else { next };
                    break;
                }
                c if c == close => {
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// Past an object member's key and colon, at its value.
fn member_value(b: &[u8], i: usize) -> Option<usize> {
    let i = ws(b, string(b, i)?);
    (b.get(i) == Some(&b':')).then(|| ws(b, i + 1))
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agrees_with_serde(text: &str) {
        let serde_object = matches!(serde_json::from_str::<serde_json::Value>(text), Ok(serde_json::Value::Object(_)));
        assert_eq!(object_members(text).is_some(), serde_object, "{text:?}");
    }

    #[test]
    fn reads_what_serde_reads() {
        for text in [
            r#"{}"#,
            r#" { "id" : 1 , "op":"ping" } "#,
            r#"{"a":[1,2,{"b":[]},[[]],{}],"c":{"d":{"e":null}},"f":-0.5e+3,"g":"\"\\\/\b\f\n\r\t\u00e9"}"#,
            r#"{"a":true,"b":false,"c":null,"d":0,"e":-0,"f":10,"g":1E2}"#,
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":-}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":tru}"#,
            r#"{"a":{"b"}}"#,
            r#"{"a":{1:2}}"#,
            r#"{"a":[}"#,
            r#"{"a":1}}"#,
            r#"{"a":1} x"#,
            "{\"a\":\"\u{1}\"}",
            r#"[1,2]"#,
            r#""x""#,
            r#"1"#,
            r#""#,
            r#"{"#,
        ] {
            agrees_with_serde(text);
        }
    }

    #[test]
    fn accepts_valid_json_that_serde_refuses_to_build() {
        let deep = format!(r#"{{"id":4,"body":{}{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
        let members = object_members(&deep).expect("any depth");
        assert_eq!(members[0].value, "4");
        let m = object_members(r#"{"id":5,"x":1e400,"y":"\ud800"}"#).expect("valid JSON");
        assert_eq!((m[1].key, m[1].value, m[2].value), ("x", "1e400", r#""\ud800""#));
    }

    #[test]
    fn integers_as_written() {
        assert_eq!(integer("0"), Some(0));
        assert_eq!(integer("-0"), Some(0));
        assert_eq!(integer("-12"), Some(-12));
        assert_eq!(integer("9223372036854775807"), Some(i64::MAX));
        assert_eq!(integer("-9223372036854775808"), Some(i64::MIN));
        for not in ["9223372036854775808", "1.0", "1e2", "01", "-", "", "\"1\"", "+1", "null"] {
            assert_eq!(integer(not), None, "{not}");
        }
    }
}
