//! Ids of workspaces, users and chats: 1 to 128 characters of `A-Z a-z 0-9 _ . : -`,
//! and the words every refusal of an id uses to say so. Not here: which
//! error code a refusal carries (the caller's).

/// The longest id, in bytes (all allowed characters are ASCII).
pub const MAX_ID_LEN: usize = 128;

/// What a valid id is, in the words a `bad_request` answer uses: a client
/// told only "invalid id" cannot tell which of its characters was refused.
pub const ID_RULE: &str = "1 to 128 characters of A-Z a-z 0-9 _ . : -";

/// Whether `s` is a valid workspace, user or chat id.
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// What a user id is (v1.2): a workspace or chat id's characters, and `@` and `+`, so that an
/// email address can be one.
pub const USER_ID_RULE: &str = "1 to 128 characters of A-Z a-z 0-9 _ . : - @ +";

/// Whether `s` is a valid user id (see [`USER_ID_RULE`]).
pub fn is_valid_user_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-' | b'@' | b'+'))
}

/// The message refusing an invalid user id: `what` (`"user"`, `"sub"`) `must be` [`USER_ID_RULE`].
pub fn invalid_user_id(what: &str) -> String {
    format!("{what} must be {USER_ID_RULE}")
}

/// The message refusing an invalid id: `what` (`"chat"`, `"workspace and
/// user"`, ...) `must be` [`ID_RULE`].
pub fn invalid_id(what: &str) -> String {
    format!("{what} must be {ID_RULE}")
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
        assert!(!is_valid_id("a@b.c"));
        assert!(is_valid_user_id("ann+chat@example.com"));
        assert!(!is_valid_user_id("a b@c"));
        assert!(!is_valid_user_id(""));
    }

    #[test]
    fn the_rule_names_the_length_and_every_allowed_character() {
        let allowed: String = ID_RULE.split(" of ").nth(1).unwrap().split(' ').collect();
        assert_eq!(allowed, "A-Za-z0-9_.:-");
        assert!(ID_RULE.starts_with(&format!("1 to {MAX_ID_LEN} ")));
        let every = ('A'..='Z').chain('a'..='z').chain('0'..='9').chain("_.:-".chars()).collect::<String>();
        assert!(is_valid_id(&every[..MAX_ID_LEN.min(every.len())]));
        assert_eq!(invalid_id("chat"), "chat must be 1 to 128 characters of A-Z a-z 0-9 _ . : -");
    }
}
