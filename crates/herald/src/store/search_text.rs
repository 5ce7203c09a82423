//! Search's matcher (protocol v1.2), shared by both backends: a message's searchable text, the
//! case folding both sides go through, the query's terms, and the character n-grams the index
//! keeps. Plain functions, no SQL, no I/O.
//!
//! The index is an inverted index of case-folded unigrams and bigrams taken inside each
//! whitespace-separated word of a message's text. A query term of one character is found by its
//! unigram, a longer one by any of its bigrams; every candidate the index gives is then checked by
//! substring match on its folded text ([`matches`]). That handles what tokenizers do not: a term
//! anywhere in a word (`서버` in `서버가`), scripts written without spaces (Japanese, Chinese),
//! and terms of one or two characters, identically on every backend.
//!
//! Folding: Rust's `char::to_lowercase` (Unicode's full lowercase mapping, which agrees with
//! simple case folding for every letter but a few) and final sigma folded to sigma, so `Σ`, `σ`
//! and `ς` match each other. Chosen over a folding crate: no new dependency, and the cases that
//! differ (`ß` against `ss`, Cherokee) do not change whether a term is found in practice. No
//! Unicode normalization: text is compared as sent.
//!
//! Not here: where the index lives (`sqlite/search*.rs`, `postgres/search*.rs`) or the order of
//! results (`search.rs`).

use std::collections::BTreeSet;

use serde_json::Value;
use serde_json::value::RawValue;

/// The case-folded form of `s`.
pub fn fold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            'ς' => out.push('σ'),
            c => out.extend(c.to_lowercase()),
        }
    }
    out
}

/// A message's searchable text, folded: every string value in its body (nested ones included),
/// one per line, so that no term is found across two values.
pub fn body_text(body: &RawValue) -> String {
    let Ok(value) = serde_json::from_str::<Value>(body.get()) else {
        return String::new();
    };
    let mut strings = Vec::new();
    collect_strings(&value, &mut strings);
    fold(&strings.join("\n"))
}

fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_strings(i, out)),
        _ => {}
    }
}

/// The query's terms: its whitespace-separated words, folded, without duplicates. Empty when the
/// query has none (a `bad_request`).
pub fn terms(query: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    query.split_whitespace().map(fold).filter(|t| seen.insert(t.clone())).collect()
}

/// The grams the index keeps for a folded text: each character, and each pair of adjacent
/// characters, of each word.
pub fn grams(folded: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for word in folded.split_whitespace() {
        let chars: Vec<char> = word.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            out.insert(c.to_string());
            if let Some(next) = chars.get(i + 1) {
                out.insert([*c, *next].iter().collect());
            }
        }
    }
    out
}

/// The grams any message containing folded `term` has: its unigram for one character, its
/// bigrams otherwise. An index lookup of any one of them gives every candidate.
pub fn term_grams(term: &str) -> Vec<String> {
    let chars: Vec<char> = term.chars().collect();
    if chars.len() == 1 {
        return vec![term.to_owned()];
    }
    let mut out: Vec<String> = chars.windows(2).map(|w| w.iter().collect()).collect();
    out.sort();
    out.dedup();
    out
}

/// Whether folded `text` contains every one of `terms`.
pub fn matches(text: &str, terms: &[String]) -> bool {
    terms.iter().all(|t| text.contains(t.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.into()).unwrap()
    }

    #[test]
    fn the_protocols_examples_match() {
        let korean = body_text(&raw(r#"{"text":"서버가 다운됐어요"}"#));
        assert!(matches(&korean, &terms("서버")));
        assert!(matches(&body_text(&raw(r#"{"text":"Heralds unite"}"#)), &terms("HERALD")));
        let japanese = body_text(&raw(r#"{"text":"東京都でサーバーが落ちた"}"#));
        assert!(matches(&japanese, &terms("サーバー 東京")));
        assert!(!matches(&japanese, &terms("サーバー 大阪")));
        let nested = body_text(&raw(r#"{"a":[{"b":"Nested ΣΊΣΥΦΟΣ"}],"n":5}"#));
        assert!(matches(&nested, &terms("σίσυφος")), "{nested}");
        assert!(terms(" \t\n").is_empty());
        assert_eq!(terms("a A b"), vec!["a", "b"]);
    }

    #[test]
    fn values_are_not_joined_into_one_word() {
        let text = body_text(&raw(r#"{"a":"foo","b":"bar"}"#));
        assert!(!matches(&text, &terms("foobar")));
        assert!(!grams(&text).contains("ob"));
    }

    proptest! {
        /// Any substring of a word of a text is found through the index: one of its grams is among
        /// the text's grams, and the text matches it.
        #[test]
        fn every_infix_is_found(words in proptest::collection::vec("[a-zA-Z가-힣ぁ-ん一-龥ΣσςΑ-Ω]{1,12}", 1..6),
                                pick in 0usize..6, from in 0usize..12, len in 1usize..12) {
            let text = fold(&words.join(" "));
            let word: Vec<char> = fold(&words[pick % words.len()]).chars().collect();
            let from = from % word.len();
            let end = (from + len).min(word.len());
            let term: String = word[from..end].iter().collect();
            let indexed = grams(&text);
            let needed = term_grams(&term);
            prop_assert!(needed.iter().all(|g| indexed.contains(g)), "{term} in {text}");
            prop_assert!(matches(&text, &terms(&term.to_uppercase())), "{term} in {text}");
        }

        /// Folding is idempotent, so stored text and query terms meet in the same form.
        #[test]
        fn folding_is_idempotent(s in "\\PC{0,40}") {
            let once = fold(&s);
            prop_assert_eq!(fold(&once), once);
        }

        /// A term never spans whitespace.
        #[test]
        fn terms_hold_no_whitespace(q in "\\PC{0,60}") {
            for t in terms(&q) {
                prop_assert!(!t.is_empty() && !t.chars().any(char::is_whitespace));
            }
        }
    }
}
