//! The `files` scenario's embedded backend: a real herald started for the run keeps the files
//! beside its store and serves their URLs itself, so every byte goes through it. Each file is
//! declared through the server API (`POST .../files`), uploaded to the URL herald signed,
//! attached by messages (10 per message), and downloaded from the URLs a fetch gives. Reports the
//! transfers as the S3 backend does, plus what they cost herald: its CPU per upload and per
//! download (from `/proc/PID/stat`) and its resident memory, before and at its peak.

use std::time::Duration;

use anyhow::Context;
use herald::files::UploadTarget;
use serde_json::{Value, json};

use super::files::{FilesArgs, bytes, download_all, round1, upload_all};
use crate::server::Server;

const MIB: f64 = 1024.0 * 1024.0;

/// One run against a herald of its own.
pub async fn run_once(args: &FilesArgs, run: u32) -> anyhow::Result<Value> {
    let size = args.size_kib * 1024;
    let max = format!("--max-file-bytes={}", size.max(1));
    let server = Server::open(&args.target, &[max]).await?;
    let out = measure(&server, args, run, size).await;
    server.stop().await?;
    out
}

async fn measure(server: &Server, args: &FilesArgs, run: u32, size: u64) -> anyhow::Result<Value> {
    let key = server.api_key.clone().context("the embedded backend needs the server's api key")?;
    let api = Api { base: format!("http://{}", server.addr), key, client: reqwest::Client::new() };
    let ws = &args.target.workspace;
    let chat = format!("files-{run}");
    api.call("PUT", &format!("/v1/workspaces/{ws}/chats/{chat}"), json!({})).await?;
    let pid = server.pid;
    let rss_before = crate::machine::rss_kib(pid).unwrap_or(0);

    let cpu = crate::peer::cpu_s(pid).unwrap_or(0.0);
    let mut targets = Vec::with_capacity(args.files);
    let mut ids = Vec::with_capacity(args.files);
    for i in 0..args.files {
        let declare = json!({"user": "uploader", "name": format!("file {i}.bin"), "type": "application/octet-stream", "size": size});
        let up = api.call("POST", &format!("/v1/workspaces/{ws}/chats/{chat}/files"), declare).await?;
        ids.push(up["file"].as_str().context("upload answer without a file")?.to_string());
        let headers = up["headers"]
            .as_object()
            .map(|h| h.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect());
        targets.push(UploadTarget {
            url: up["url"].as_str().context("upload answer without a url")?.to_string(),
            method: "PUT",
            headers: headers.unwrap_or_default(),
        });
    }
    let declare_cpu_ms = (crate::peer::cpu_s(pid).unwrap_or(0.0) - cpu) * 1e3 / args.files as f64;

    let peak = Peak::watch(pid);
    let body = bytes(size);
    let cpu = crate::peer::cpu_s(pid).unwrap_or(0.0);
    let uploads = upload_all(&targets, &body).await;
    let upload_cpu_ms = (crate::peer::cpu_s(pid).unwrap_or(0.0) - cpu) * 1e3 / args.files as f64;

    for batch in ids.chunks(10) {
        let message = json!({"type": "message", "user": "uploader", "body": {"text": "files"}, "files": batch});
        api.call("POST", &format!("/v1/workspaces/{ws}/chats/{chat}/events"), message).await?;
    }
    let page =
        api.call("GET", &format!("/v1/workspaces/{ws}/chats/{chat}/events?after=0&limit=500"), Value::Null).await?;
    let urls: Vec<String> = page["events"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["files"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["url"].as_str().map(str::to_string))
        .collect();
    anyhow::ensure!(urls.len() == args.files, "{} of {} files came back with URLs", urls.len(), args.files);

    let cpu = crate::peer::cpu_s(pid).unwrap_or(0.0);
    let downloads = download_all(&urls, size).await;
    let download_cpu_ms = (crate::peer::cpu_s(pid).unwrap_or(0.0) - cpu) * 1e3 / args.files as f64;
    let rss_peak = peak.stop().await;

    let total_mib = (args.files as u64 * size) as f64 / MIB;
    let (up, down) = (uploads.latencies.summary(), downloads.latencies.summary());
    Ok(json!({
        "backend": "local",
        "declare_cpu_ms": round1(declare_cpu_ms * 10.0) / 10.0,
        "upload_mib_s": round1(total_mib / uploads.wall_s),
        "upload_p50_ms": up.p50_ms,
        "upload_p99_ms": up.p99_ms,
        "upload_cpu_ms": round1(upload_cpu_ms * 10.0) / 10.0,
        "download_mib_s": round1(total_mib / downloads.wall_s),
        "download_p50_ms": down.p50_ms,
        "download_p99_ms": down.p99_ms,
        "download_cpu_ms": round1(download_cpu_ms * 10.0) / 10.0,
        "rss_before_mib": round1(rss_before as f64 / 1024.0),
        "rss_peak_mib": round1(rss_peak as f64 / 1024.0),
        "failed": uploads.failed + downloads.failed,
        "failures": {"first": uploads.first_error.or(downloads.first_error)},
    }))
}

/// The server API with its key.
struct Api {
    base: String,
    key: String,
    client: reqwest::Client,
}

impl Api {
    async fn call(&self, method: &str, path: &str, body: Value) -> anyhow::Result<Value> {
        let mut req = self.client.request(method.parse()?, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if !body.is_null() {
            req = req.header("Content-Type", "application/json").body(body.to_string());
        }
        let res = req.send().await.with_context(|| format!("{method} {path}"))?;
        let status = res.status();
        let text = res.text().await?;
        anyhow::ensure!(status.is_success(), "{method} {path}: {status} {text}");
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// The server's resident memory at its highest, sampled every 10 ms while it runs.
struct Peak {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<u64>,
}

impl Peak {
    fn watch(pid: u32) -> Peak {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut peak = 0;
            loop {
                peak = peak.max(crate::machine::rss_kib(pid).unwrap_or(0));
                tokio::select! {
                    _ = &mut stopped => return peak,
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
            }
        });
        Peak { stop, task }
    }

    async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.unwrap_or(0)
    }
}
