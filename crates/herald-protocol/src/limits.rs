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
