//! A minimal HTTP/1.1 client for the few API calls the bench makes (a chat's
//! view, `/metrics`): one GET per connection, `Connection: close`, so a whole
//! HTTP stack is not pulled in for two GETs a run. And the request reader of
//! the hook receivers the bench runs itself (kept-alive connections).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// No API call the bench makes should take longer on loopback.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Answers are small JSON or the metrics page; refuse anything absurd.
const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// An HTTP answer: status and body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// `GET path` on `addr`, with the api key as bearer when given.
pub async fn get(addr: SocketAddr, path: &str, api_key: Option<&str>) -> anyhow::Result<Answer> {
    tokio::time::timeout(HTTP_TIMEOUT, request(addr, "GET", path, api_key))
        .await
        .with_context(|| format!("GET {path} timed out"))?
}

async fn request(addr: SocketAddr, method: &str, path: &str, api_key: Option<&str>) -> anyhow::Result<Answer> {
    let mut stream = TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
    let auth = api_key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    (&mut stream).take(MAX_ANSWER as u64).read_to_end(&mut raw).await?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> anyhow::Result<Answer> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").context("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).context("headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("bad status line")?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = &raw[split + 4..];
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    Ok(Answer { status, body: String::from_utf8(body).context("body is not UTF-8")? })
}

/// Joins the chunks of a chunked body.
fn dechunk(mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").context("truncated chunk size")?;
        let size_text = std::str::from_utf8(&rest[..eol])?.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).context("bad chunk size")?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            bail!("truncated chunk");
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// One request a hook receiver read: its `Herald-Signature` and its body.
pub struct HookRequest {
    pub signature: String,
    pub body: Vec<u8>,
}

/// Reads the next request of a kept-alive HTTP/1.1 connection (headers, then
/// `Content-Length` bytes of body); `None` once the connection ends.
pub async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<HookRequest> {
    use tokio::io::AsyncBufReadExt;
    let (mut length, mut signature) = (0usize, String::new());
    let mut line = String::new();
    loop {
        line.clear();
        if read.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap_or(0),
                "herald-signature" => signature = v.trim().to_owned(),
                _ => {}
            }
        }
    }
    let mut body = vec![0u8; length];
    read.read_exact(&mut body).await.ok()?;
    Some(HookRequest { signature, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked() {
        let a = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((a.status, a.body.as_str()), (200, "{}"));
        let b = parse(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!((b.status, b.body.as_str()), (404, "abcde"));
    }
}
