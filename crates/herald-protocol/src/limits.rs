//! The limits of the protocol: v1's defaults (servers may be configured otherwise), and the fixed
//! limits and defaults of v1.1 and v1.2's ops.

/// Largest WebSocket frame (and message) a server accepts: close 1009 beyond it.
pub const FRAME_LIMIT: usize = 64 * 1024;
/// Largest serialized `body` of an event: `too_large` beyond it.
pub const BODY_LIMIT: usize = 16 * 1024;
/// Time from the upgrade to a valid `hello`.
pub const HELLO_TIMEOUT_MS: u64 = 10_000;
/// Interval of server pings, announced to clients as `heartbeat_ms`.
pub const HEARTBEAT_MS: u64 = 25_000;
/// A connection on which nothing arrives for this long is closed.
pub const IDLE_TIMEOUT_MS: u64 = 60_000;
/// Sustained requests per second per connection.
pub const REQUEST_RATE: u32 = 100;
/// Requests a connection may send at once above the sustained rate.
pub const REQUEST_BURST: u32 = 200;
/// Default and largest `limit` of `fetch`.
pub const FETCH_DEFAULT: u32 = 100;
pub const FETCH_MAX: u32 = 500;
/// Default and largest `limit` of `inbox` (v1.1).
pub const INBOX_DEFAULT: u32 = 50;
pub const INBOX_MAX: u32 = 200;
/// Default and largest `limit` of `members` (v1.2).
pub const MEMBERS_DEFAULT: u32 = 100;
pub const MEMBERS_MAX: u32 = 1_000;
/// Default and largest `limit` of `threads` (v1.2).
pub const THREADS_DEFAULT: u32 = 20;
pub const THREADS_MAX: u32 = 100;
/// Default and largest `limit` of the HTTP API's chat list (v1.2).
pub const CHATS_DEFAULT: u32 = 100;
pub const CHATS_MAX: u32 = 1_000;
/// The longest chat profile `name`, in characters (v1.2).
pub const PROFILE_NAME_MAX: usize = 200;
/// The longest chat profile `image` URL, in characters (v1.2).
pub const PROFILE_IMAGE_MAX: usize = 2_000;
/// Largest serialized chat profile `data` (v1.2).
pub const PROFILE_DATA_LIMIT: usize = 4 * 1024;
/// The most distinct users one `send` or `edit` mentions (v1.2).
pub const MENTIONS_MAX: usize = 50;
/// The most pinned messages in one chat (v1.2): the next pin is `bad_request`.
pub const PINS_MAX: usize = 50;
/// The most users `reactions` lists per emoji (v1.2).
pub const REACTION_USERS_MAX: usize = 100;
/// Appends to one stream are pushed at most once per this interval (v1.2).
pub const APPEND_PUSH_INTERVAL_MS: u64 = 40;
/// A stream with no `append` for this long is ended by the server (v1.2) ...
pub const STREAM_IDLE_MS: u64 = 60_000;
/// ... within this long of its last append.
pub const STREAM_END_WITHIN_MS: u64 = 90_000;
/// v1.2: files attached to one message, at most.
pub const FILES_MAX: usize = 10;
/// v1.2: a file's name, in characters, at most.
pub const FILE_NAME_MAX: usize = 255;
/// v1.2: the default largest file, in bytes (`--max-file-bytes`).
pub const FILE_BYTES_DEFAULT: u64 = 25 * 1024 * 1024;
/// Default and largest `limit` of `search` (v1.2).
pub const SEARCH_DEFAULT: u32 = 20;
pub const SEARCH_MAX: u32 = 100;
/// The longest `search` query, in characters (v1.2).
pub const SEARCH_QUERY_MAX: usize = 200;

/// A size as people read it in an error message: `25 MiB (26214400 bytes)`, `16 KiB (16384
/// bytes)`, `1.5 KiB (1536 bytes)`, or `900 bytes` below a KiB. The exact count stays, for
/// whoever compares it with a length.
pub fn size_in_words(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit {
            let tenths = bytes * 10 / unit;
            let amount = if tenths.is_multiple_of(10) {
                format!("{}", tenths / 10)
            } else {
                format!("{}.{}", tenths / 10, tenths % 10)
            };
            return format!("{amount} {name} ({bytes} bytes)");
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::size_in_words;

    #[test]
    fn sizes_read_as_people_say_them_with_the_exact_count() {
        assert_eq!(size_in_words(26_214_400), "25 MiB (26214400 bytes)");
        assert_eq!(size_in_words(16 * 1024), "16 KiB (16384 bytes)");
        assert_eq!(size_in_words(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(size_in_words(900), "900 bytes");
        assert_eq!(size_in_words(3 << 30), "3 GiB (3221225472 bytes)");
    }
}
