//! Shared pieces of herald's fuzz targets.
//!
//! [`json::top_level`] is an oracle independent of serde_json: a strict
//! RFC 8259 grammar check (no depth limit, no number range limit, any `\u`
//! escape) that reports the members of a top-level object. The targets use it
//! to decide what PROTOCOL v1 calls "a JSON object with an integer `id`"
//! without asking the parser under test.

pub mod json {
    /// A member value, as far as the targets care.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Token {
        /// A number written as an integer (`-? (0 | [1-9][0-9]*)`), as written.
        Int(String),
        /// Any other number, as written.
        Num(String),
        /// A string, decoded (a lone surrogate escape becomes U+FFFD).
        Str(String),
        /// `true`, `false`, `null`, an array or an object.
        Other,
    }

    impl Token {
        /// The value of an integer token, if it fits an `i64`.
        pub fn as_i64(&self) -> Option<i64> {
            match self {
                Token::Int(s) => s.parse().ok(),
                _ => None,
            }
        }
    }

    /// The members of `text` if it is exactly one JSON object (surrounded by
    /// JSON whitespace), in order, duplicates kept. `None` if it is not JSON,
    /// or JSON but not an object.
    pub fn top_level(text: &str) -> Option<Vec<(String, Token)>> {
        let mut p = Parser { b: text.as_bytes(), i: 0 };
        p.ws();
        if p.peek() != Some(b'{') {
            return None;
        }
        p.i += 1;
        let mut members = Vec::new();
        p.ws();
        if p.peek() == Some(b'}') {
            p.i += 1;
        } else {
            loop {
                p.ws();
                let key = p.string()?;
                p.ws();
                p.expect(b':')?;
                p.ws();
                let token = match p.peek()? {
                    b'"' => Token::Str(p.string()?),
                    b'-' | b'0'..=b'9' => {
                        let (raw, int) = p.number()?;
                        if int { Token::Int(raw) } else { Token::Num(raw) }
                    }
                    _ => {
                        p.skip_value()?;
                        Token::Other
                    }
                };
                members.push((key, token));
                p.ws();
                match p.peek()? {
                    b',' => p.i += 1,
                    b'}' => {
                        p.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        p.ws();
        (p.i == p.b.len()).then_some(members)
    }

    /// Whether `text` is one JSON value of any kind.
    pub fn is_json(text: &str) -> bool {
        let mut p = Parser { b: text.as_bytes(), i: 0 };
        p.ws();
        p.skip_value().is_some() && {
            p.ws();
            p.i == p.b.len()
        }
    }

    /// The values of every member named `key`.
    pub fn get<'a>(members: &'a [(String, Token)], key: &str) -> Vec<&'a Token> {
        members.iter().filter(|(k, _)| k == key).map(|(_, t)| t).collect()
    }

    /// The integer `id` of a frame, when it has exactly one `id` member and
    /// that is an integer that fits `i64`.
    pub fn integer_id(members: &[(String, Token)]) -> Option<i64> {
        match get(members, "id")[..] {
            [t] => t.as_i64(),
            _ => None,
        }
    }

    struct Parser<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<u8> {
            self.b.get(self.i).copied()
        }

        fn ws(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i += 1;
            }
        }

        fn expect(&mut self, c: u8) -> Option<()> {
            (self.peek()? == c).then(|| self.i += 1)
        }

        fn literal(&mut self, word: &[u8]) -> Option<()> {
            self.b.get(self.i..self.i + word.len()).filter(|s| *s == word)?;
            self.i += word.len();
            Some(())
        }

        fn digits(&mut self) -> usize {
            let start = self.i;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
            self.i - start
        }

        /// A number: its text, and whether it is written as an integer.
        fn number(&mut self) -> Option<(String, bool)> {
            let start = self.i;
            if self.peek() == Some(b'-') {
                self.i += 1;
            }
            match self.peek()? {
                b'0' => self.i += 1,
                b'1'..=b'9' => {
                    self.digits();
                }
                _ => return None,
            }
            let mut int = true;
            if self.peek() == Some(b'.') {
                self.i += 1;
                int = false;
                if self.digits() == 0 {
                    return None;
                }
            }
            if matches!(self.peek(), Some(b'e' | b'E')) {
                self.i += 1;
                int = false;
                if matches!(self.peek(), Some(b'+' | b'-')) {
                    self.i += 1;
                }
                if self.digits() == 0 {
                    return None;
                }
            }
            Some((String::from_utf8(self.b[start..self.i].to_vec()).expect("ASCII"), int))
        }

        fn hex4(&mut self) -> Option<u32> {
            let s = self.b.get(self.i..self.i + 4)?;
            if !s.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            self.i += 4;
            u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
        }

        /// A string, decoded.
        fn string(&mut self) -> Option<String> {
            self.expect(b'"')?;
            let mut out = String::new();
            loop {
                let start = self.i;
                while matches!(self.peek(), Some(c) if c != b'"' && c != b'\\' && c >= 0x20) {
                    self.i += 1;
                }
                out.push_str(std::str::from_utf8(&self.b[start..self.i]).ok()?);
                match self.peek()? {
                    b'"' => {
                        self.i += 1;
                        return Some(out);
                    }
                    b'\\' => {
                        self.i += 1;
                        let c = self.peek()?;
                        self.i += 1;
                        match c {
                            b'"' => out.push('"'),
                            b'\\' => out.push('\\'),
                            b'/' => out.push('/'),
                            b'b' => out.push('\u{8}'),
                            b'f' => out.push('\u{c}'),
                            b'n' => out.push('\n'),
                            b'r' => out.push('\r'),
                            b't' => out.push('\t'),
                            b'u' => {
                                let u = self.hex4()?;
                                let ch = if (0xD800..0xDC00).contains(&u)
                                    && self.b.get(self.i..self.i + 2) == Some(b"\\u")
                                {
                                    let save = self.i;
                                    self.i += 2;
                                    let lo = self.hex4()?;
                                    if (0xDC00..0xE000).contains(&lo) {
                                        char::from_u32(0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00))
                                    } else {
                                        self.i = save;
                                        None
                                    }
                                } else {
                                    char::from_u32(u)
                                };
                                out.push(ch.unwrap_or('\u{FFFD}'));
                            }
                            _ => return None,
                        }
                    }
                    _ => return None, // a control character
                }
            }
        }

        /// Skips one value of any depth, without recursion.
        fn skip_value(&mut self) -> Option<()> {
            let mut stack: Vec<u8> = Vec::new();
            'value: loop {
                self.ws();
                match self.peek()? {
                    b'{' => {
                        self.i += 1;
                        self.ws();
                        if self.peek() == Some(b'}') {
                            self.i += 1;
                        } else {
                            stack.push(b'{');
                            self.string()?;
                            self.ws();
                            self.expect(b':')?;
                            continue 'value;
                        }
                    }
                    b'[' => {
                        self.i += 1;
                        self.ws();
                        if self.peek() == Some(b']') {
                            self.i += 1;
                        } else {
                            stack.push(b'[');
                            continue 'value;
                        }
                    }
                    b'"' => {
                        self.string()?;
                    }
                    b't' => self.literal(b"true")?,
                    b'f' => self.literal(b"false")?,
                    b'n' => self.literal(b"null")?,
                    _ => {
                        self.number()?;
                    }
                }
                // After a value: close containers, or go on to the next element.
                loop {
                    let Some(&top) = stack.last() else { return Some(()) };
                    self.ws();
                    match (top, self.peek()?) {
                        (_, b',') => {
                            self.i += 1;
                            if top == b'{' {
                                self.ws();
                                self.string()?;
                                self.ws();
                                self.expect(b':')?;
                            }
                            continue 'value;
                        }
                        (b'{', b'}') | (b'[', b']') => {
                            self.i += 1;
                            stack.pop();
                        }
                        _ => return None,
                    }
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn oracle() {
            let m = top_level(r#" {"id": 7, "op":"p\u0069ng", "x": [1, {"a": [[]]}], "f": 1.5e3} "#).unwrap();
            assert_eq!(integer_id(&m), Some(7));
            assert_eq!(get(&m, "op"), vec![&Token::Str("ping".into())]);
            assert_eq!(get(&m, "f"), vec![&Token::Num("1.5e3".into())]);
            assert!(top_level("[1]").is_none());
            assert!(top_level(r#"{"id":1}x"#).is_none());
            assert!(top_level(r#"{"id":01}"#).is_none());
            assert!(top_level(r#"{"id":1,}"#).is_none());
            assert!(top_level("{\"a\":\"\u{1}\"}").is_none());
            assert!(top_level(r#"{"a":"\ud800"}"#).is_some());
            let deep = format!(r#"{{"id":1,"b":{}{}}}"#, "[".repeat(1000), "]".repeat(1000));
            assert_eq!(integer_id(&top_level(&deep).unwrap()), Some(1));
            assert!(is_json("[1, 2, {\"a\": null}]") && !is_json("[1, 2") && !is_json(""));
            assert_eq!(integer_id(&top_level(r#"{"id":9223372036854775808}"#).unwrap()), None);
        }
    }
}
