//! Clients for tests that reach herald through a TLS proxy: a WebSocket over
//! `wss://` and an HTTPS GET, each trusting only a test CA (see
//! [`super::pg::TestPki`]), with the ring provider herald itself uses.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_tungstenite::Connector;

use super::{Client, WAIT};

/// A TLS client that trusts the CA certificate (PEM) at `ca` and nothing else.
pub fn client_config(ca: &Path) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read the test CA") {
        roots.add(cert.expect("a PEM certificate")).expect("a usable CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A WebSocket client over `wss://` (the certificate checked against `ca`).
pub async fn connect_wss(url: &str, ca: &Path) -> Client {
    let connector = Connector::Rustls(client_config(ca));
    let connect = tokio_tungstenite::connect_async_tls_with_config(url, None, false, Some(connector));
    let (ws, _) = tokio::time::timeout(WAIT, connect).await.expect("wss connect in time").expect("wss connect");
    Client::over(ws)
}

/// `GET path` over HTTPS to `addr`, verifying the certificate for `host`;
/// returns the status and the body.
pub async fn https_get(addr: SocketAddr, host: &str, path: &str, ca: &Path) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from(host.to_string()).expect("a server name");
    let connector = tokio_rustls::TlsConnector::from(client_config(ca));
    let mut tls = tokio::time::timeout(WAIT, connector.connect(name, tcp)).await.expect("TLS in time").expect("TLS");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    // A peer that closes without close_notify still sent a whole answer.
    let _ = tokio::time::timeout(WAIT, tls.read_to_end(&mut buf)).await.expect("answer in time");
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, body)
}
