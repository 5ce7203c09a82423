//! The client side of the WebSocket upgrade (RFC 6455 section 4), done here
//! rather than by tungstenite for memory: tungstenite's client handshake hands
//! its 4 KiB response buffer on as the connection's read buffer, whatever
//! `read_buffer_size` says, and reading a frame later grows it past 4 KiB
//! again. Upgrading by hand and building the stream with `from_partially_read`
//! keeps the read buffer at the configured 1 KiB: measured at 10,000 idle
//! clients, 6.4 KB per client instead of 11.5 KB.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};

use crate::client::ClientError;

/// Longest upgrade response read: herald's is a few hundred bytes.
const MAX_RESPONSE: usize = 8 * 1024;
/// Response bytes read per call; the response usually arrives in one.
const CHUNK: usize = 512;

/// Upgrades `stream` at `path` on `host`; returns any bytes read past the
/// response (frames the server sent at once), which belong to the WebSocket.
pub async fn upgrade(stream: &mut TcpStream, host: &str, path: &str) -> Result<Vec<u8>, ClientError> {
    let key = generate_key();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(ClientError::Io)?;
    let mut response = Vec::with_capacity(CHUNK);
    let end = loop {
        if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if response.len() >= MAX_RESPONSE {
            return Err(ClientError::BadFrame("upgrade response too long".into()));
        }
        let mut chunk = [0u8; CHUNK];
        let n = stream.read(&mut chunk).await.map_err(ClientError::Io)?;
        if n == 0 {
            return Err(ClientError::Closed(None));
        }
        response.extend_from_slice(&chunk[..n]);
    };
    check_response(&response[..end], &derive_accept_key(key.as_bytes()))?;
    Ok(response[end..].to_vec())
}

/// A `101` whose `Sec-WebSocket-Accept` matches our key, or why not.
fn check_response(head: &[u8], accept: &str) -> Result<(), ClientError> {
    let head = std::str::from_utf8(head).map_err(|_| ClientError::BadFrame("upgrade response is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("101") {
        return Err(ClientError::BadFrame(format!("upgrade refused: {status}")));
    }
    let matches = lines
        .filter_map(|l| l.split_once(':'))
        .any(|(name, value)| name.trim().eq_ignore_ascii_case("sec-websocket-accept") && value.trim() == accept);
    if matches {
        Ok(())
    } else {
        Err(ClientError::BadFrame("upgrade response has no matching Sec-WebSocket-Accept".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_a_matching_101() {
        // The key and answer of RFC 6455's own example.
        let accept = derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        let ok =
            format!("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nsec-websocket-accept: {accept}\r\n\r\n");
        assert!(check_response(ok.as_bytes(), &accept).is_ok());
        let wrong = "HTTP/1.1 101 Switching Protocols\r\nsec-websocket-accept: nope\r\n\r\n";
        assert!(check_response(wrong.as_bytes(), &accept).is_err());
        let refused = format!("HTTP/1.1 503 Service Unavailable\r\nsec-websocket-accept: {accept}\r\n\r\n");
        assert!(check_response(refused.as_bytes(), &accept).is_err());
    }
}
