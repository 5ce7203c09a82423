//! The `files` scenario (v1.2): F files of S bytes uploaded at once, checked
//! complete, downloaded at once, then deleted, through the URLs a files
//! backend ([`Blobs`]) signs. With S3 the bytes go straight between the
//! clients and the bucket and never through herald: herald's part is
//! signing (CPU µs per upload URL and per download URL, timed on this
//! thread over many signings) and the HEAD that tells whether an upload is
//! complete (its latency, herald to the bucket). The clients are this
//! process's, one HTTP connection per file at once.
//!
//! Backends plug in at [`Backend`]: a `Blobs` to sign with, and whatever
//! serves its URLs kept up while the run lasts; [`transfer`] takes only the
//! signed targets and URLs. `s3`: versitygw on loopback through
//! `scripts/s3.sh`, or an existing bucket (`--s3-url`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, ValueEnum};
use futures_util::future::join_all;
use herald::files::s3::S3Blobs;
use herald::files::{Blobs, FileKey, FileMeta, UploadTarget, UrlWindow};
use serde::Serialize;
use serde_json::{Value, json};

use crate::latency::Latencies;
use crate::report::{self, Column, RunArgs, col};
use crate::server::TargetArgs;

/// Signings timed for the per-URL cost: enough that the clock's resolution
/// and one cold cache line do not show.
const SIGNINGS: u32 = 20_000;
/// An upload URL's life, as herald gives it (the contract's at least 10 minutes).
const UPLOAD_VALID_MS: i64 = 600_000;
const MIB: f64 = 1024.0 * 1024.0;

/// Where the files go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// An S3-compatible bucket: versitygw started through scripts/s3.sh, or `--s3-url`.
    S3,
    /// The embedded default: a herald started for the run keeps and serves the files itself.
    Local,
}

/// `herald-bench files`.
#[derive(Debug, Args, Serialize)]
pub struct FilesArgs {
    /// Files uploaded (and then downloaded) at once.
    #[arg(long, default_value_t = 200)]
    pub files: usize,
    /// Each file's size in KiB.
    #[arg(long, default_value_t = 1024)]
    pub size_kib: u64,
    #[arg(long, value_enum, default_value = "s3")]
    pub backend: BackendKind,
    /// An existing bucket, as `--files-s3` takes it, instead of a versitygw of the run's own.
    #[arg(long)]
    #[serde(skip)]
    pub s3_url: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// For backends served by herald; `s3` starts no herald.
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("sign_upload_us", "sign upload µs"),
    col("sign_download_us", "sign download µs"),
    col("upload_mib_s", "upload MiB/s"),
    col("upload_p99_ms", "upload p99 ms"),
    col("complete_p50_ms", "complete p50 ms"),
    col("download_mib_s", "download MiB/s"),
    col("download_p99_ms", "download p99 ms"),
    col("upload_cpu_ms", "herald CPU ms/upload"),
    col("download_cpu_ms", "herald CPU ms/download"),
    col("rss_peak_mib", "herald RSS peak MiB"),
    col("failed", "failed"),
];

pub async fn run(args: FilesArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(args.files > 0, "--files must be positive");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("files", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

async fn run_once(args: &FilesArgs, run: u32) -> anyhow::Result<Value> {
    if args.backend == BackendKind::Local {
        return super::files_local::run_once(args, run).await;
    }
    let backend = Backend::open(args).await?;
    let blobs = backend.blobs.as_ref();
    let size = args.size_kib * 1024;
    let now = now_ms();
    let chat = format!("files-{}-{run}-{now}", std::process::id());
    let metas: Vec<FileMeta> = (0..args.files).map(|i| meta(&chat, i, size)).collect();

    let (sign_upload_us, sign_download_us) = signing_cost(blobs, &metas[0], now);

    let targets: Vec<UploadTarget> = metas.iter().map(|m| blobs.upload(m, now, now + UPLOAD_VALID_MS)).collect();
    let urls: Vec<String> = metas.iter().map(|m| blobs.download_url(m, UrlWindow::at(now))).collect();
    let body = bytes(size);
    let uploads = upload_all(&targets, &body).await;

    let checks = join_all(metas.iter().map(|m| async move {
        let t = Instant::now();
        (blobs.complete(m).await, t.elapsed())
    }))
    .await;
    let mut complete_lat = Latencies::default();
    let mut incomplete = 0;
    for (done, took) in checks {
        complete_lat.record(took);
        incomplete += usize::from(!matches!(done, Ok(true)));
    }

    let downloads = download_all(&urls, size).await;
    let deleted = join_all(metas.iter().map(|m| blobs.delete(&m.key))).await;
    let undeleted = deleted.iter().filter(|d| d.is_err()).count();

    let total_mib = (args.files as u64 * size) as f64 / MIB;
    let (up, down, complete) = (uploads.latencies.summary(), downloads.latencies.summary(), complete_lat.summary());
    Ok(json!({
        "backend": blobs.kind(),
        "sign_upload_us": sign_upload_us,
        "sign_download_us": sign_download_us,
        "upload_mib_s": round1(total_mib / uploads.wall_s),
        "upload_p50_ms": up.p50_ms,
        "upload_p99_ms": up.p99_ms,
        "complete_p50_ms": complete.p50_ms,
        "complete_p99_ms": complete.p99_ms,
        "download_mib_s": round1(total_mib / downloads.wall_s),
        "download_p50_ms": down.p50_ms,
        "download_p99_ms": down.p99_ms,
        "failed": uploads.failed + incomplete + downloads.failed + undeleted,
        "failures": {
            "total": uploads.failed + incomplete + downloads.failed + undeleted,
            "by_stage": {"upload": uploads.failed, "complete": incomplete, "download": downloads.failed, "delete": undeleted},
            "first": uploads.first_error.or(downloads.first_error),
        },
    }))
}

/// A backend under test: what signs, and what serves the URLs (kept alive
/// with it; stopped when it drops).
pub struct Backend {
    pub blobs: Arc<dyn Blobs>,
    _server: Option<S3Process>,
}

impl Backend {
    async fn open(args: &FilesArgs) -> anyhow::Result<Backend> {
        match args.backend {
            BackendKind::Local => anyhow::bail!("the embedded backend is measured through a herald of its own"),
            BackendKind::S3 => {
                let (url, server) = match &args.s3_url {
                    Some(url) => (url.clone(), None),
                    None => {
                        let server = S3Process::start()?;
                        (server.url.clone(), Some(server))
                    }
                };
                let blobs = S3Blobs::from_url(&url)?;
                blobs.check().await?;
                Ok(Backend { blobs: Arc::new(blobs), _server: server })
            }
        }
    }
}

/// versitygw through `scripts/s3.sh` (built there once), in a folder of its own.
struct S3Process {
    url: String,
    dir: tempfile::TempDir,
}

fn s3_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3.sh")
}

impl S3Process {
    fn start() -> anyhow::Result<S3Process> {
        let dir = tempfile::tempdir()?;
        let out = Command::new(s3_script()).arg("start").arg(dir.path()).output().context("run scripts/s3.sh")?;
        anyhow::ensure!(out.status.success(), "s3.sh start: {}", String::from_utf8_lossy(&out.stderr).trim());
        let url = String::from_utf8(out.stdout)?.trim().to_string();
        Ok(S3Process { url, dir })
    }
}

impl Drop for S3Process {
    fn drop(&mut self) {
        let _ = Command::new(s3_script()).arg("stop").arg(self.dir.path()).output();
    }
}

/// CPU µs per upload URL and per download URL, on this thread.
fn signing_cost(blobs: &dyn Blobs, file: &FileMeta, now: i64) -> (f64, f64) {
    let t = thread_cpu_s();
    for i in 0..SIGNINGS {
        std::hint::black_box(blobs.upload(file, now + i64::from(i), now + UPLOAD_VALID_MS));
    }
    let upload = (thread_cpu_s() - t) * 1e6 / f64::from(SIGNINGS);
    let t = thread_cpu_s();
    for i in 0..SIGNINGS {
        std::hint::black_box(blobs.download_url(file, UrlWindow::at(now + i64::from(i) * 3_600_000)));
    }
    let download = (thread_cpu_s() - t) * 1e6 / f64::from(SIGNINGS);
    (round3(upload), round3(download))
}

/// What one phase of transfers did.
pub struct Transfers {
    pub wall_s: f64,
    pub latencies: Latencies,
    pub failed: usize,
    pub first_error: Option<String>,
}

/// All uploads at once, each as a browser sends it: the target's method and headers.
pub async fn upload_all(targets: &[UploadTarget], body: &bytes::Bytes) -> Transfers {
    let client = http_client(targets.len());
    transfer(targets.iter().map(|t| {
        let mut req = client.request(t.method.parse().unwrap_or(reqwest::Method::PUT), &t.url);
        for (k, v) in &t.headers {
            req = req.header(k, v);
        }
        let req = req.body(body.clone());
        async move {
            let resp = req.send().await.map_err(|e| format!("upload: {e}"))?;
            match resp.status().as_u16() {
                200..=299 => Ok(()),
                s => Err(format!("upload answered {s}")),
            }
        }
    }))
    .await
}

/// All downloads at once; each must give `size` bytes.
pub async fn download_all(urls: &[String], size: u64) -> Transfers {
    let client = http_client(urls.len());
    transfer(urls.iter().map(|u| {
        let req = client.get(u);
        async move {
            let resp = req.send().await.map_err(|e| format!("download: {e}"))?;
            let status = resp.status().as_u16();
            let got = resp.bytes().await.map_err(|e| format!("download body: {e}"))?;
            match (status, got.len() as u64) {
                (200, n) if n == size => Ok(()),
                (s, n) => Err(format!("download answered {s} with {n} bytes")),
            }
        }
    }))
    .await
}

async fn transfer<F>(requests: impl Iterator<Item = F>) -> Transfers
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    let results = join_all(requests.map(|r| async move {
        let t = Instant::now();
        (r.await, t.elapsed())
    }))
    .await;
    let wall_s = started.elapsed().as_secs_f64();
    let mut out = Transfers { wall_s, latencies: Latencies::default(), failed: 0, first_error: None };
    for (result, took) in results {
        out.latencies.record(took);
        if let Err(e) = result {
            out.failed += 1;
            out.first_error.get_or_insert(e);
        }
    }
    out
}

/// One pooled connection per request at once, so none waits for another.
fn http_client(at_once: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(at_once)
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .expect("an HTTP client without TLS settings builds")
}

fn meta(chat: &str, i: usize, size: u64) -> FileMeta {
    FileMeta {
        key: FileKey { ws: "bench".into(), chat: chat.into(), id: format!("f{i:022}") },
        name: format!("file {i}.bin"),
        mime: "application/octet-stream".into(),
        size,
    }
}

pub(super) fn bytes(size: u64) -> bytes::Bytes {
    (0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub(super) fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
