//! Ids of workspaces, users and chats: 1 to 128 characters of `A-Z a-z 0-9 _ . : -`.

/// The longest id, in bytes (all allowed characters are ASCII).
pub const MAX_ID_LEN: usize = 128;

/// Whether `s` is a valid workspace, user or chat id.
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_valid_id("general"));
        assert!(is_valid_id("a.b:c-d_E9"));
        assert!(is_valid_id(&"x".repeat(128)));
        assert!(!is_valid_id(&"x".repeat(129)));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("é"));
    }
}
