//! Where files live and how large they may be: the flags, declared once.
//! Not here: opening a backend (`server`), the S3 URL's rules (`s3.rs`).

use clap::Args;

/// The largest file accepted by default: 25 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = herald_protocol::limits::FILE_BYTES_DEFAULT;

/// Files: their backend and their size limit.
#[derive(Debug, Clone, Args)]
pub struct FilesSettings {
    /// Largest file an `upload` may declare, in bytes.
    #[arg(long, env = "HERALD_MAX_FILE_BYTES", default_value_t = DEFAULT_MAX_FILE_BYTES)]
    pub max_file_bytes: u64,
    /// Keep files in an S3-compatible bucket instead of beside the embedded
    /// store: `http(s)://ACCESS_KEY:SECRET_KEY@host:port/BUCKET?region=R`
    /// (path-style; the keys may instead come from `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY`; region `us-east-1` when not given). Clients
    /// upload to and download from the bucket directly. Every node of a
    /// cell must name the same bucket.
    #[arg(long, env = "HERALD_FILES_S3", hide_env_values = true)]
    pub files_s3: Option<String>,
    /// A file no message attached is deleted this long after its upload, in ms (tests shorten it).
    #[arg(long, env = "HERALD_FILES_ORPHAN_MS", default_value_t = DEFAULT_ORPHAN_MS, hide = true)]
    pub files_orphan_ms: u64,
}

/// A file no message attached is deleted after a day.
pub const DEFAULT_ORPHAN_MS: u64 = 24 * 3_600_000;
