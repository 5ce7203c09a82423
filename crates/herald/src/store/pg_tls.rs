//! TLS to PostgreSQL with rustls (the `ring` provider, the one the NATS
//! client already brings): a `MakeTlsConnect` for tokio-postgres that
//! verifies the server's certificate chain and host name against the
//! shard's roots (see [`super::shard_spec::Roots`]).
//!
//! Not here: deciding whether a shard uses TLS (`shard_spec`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use super::shard_spec::{Roots, SpecError};

/// The ALPN protocol PostgreSQL 17 asks for; older servers ignore it.
const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// Builds the TLS client of a shard; reads the roots once, here.
pub(crate) fn client(roots: &Roots) -> Result<RustlsConnect, SpecError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| SpecError::new(format!("sslrootcert {}: {e}", path.display())))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(SpecError::new(format!("sslrootcert {}: no usable CA certificate in it", path.display())));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "a system root certificate could not be read");
            }
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(SpecError::new(
                    "no system root certificates found: give the shard's CA as sslrootcert=PATH".into(),
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SpecError::new(format!("TLS setup: {e}")))?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(RustlsConnect { config: Arc::new(config) })
}

/// Makes one TLS connector per connection attempt, for the host tried.
#[derive(Clone)]
pub(crate) struct RustlsConnect {
    config: Arc<ClientConfig>,
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnector;
    type Error = InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnector, InvalidDnsNameError> {
        // An IP address is checked against the certificate's IP names, a host name against its DNS names.
        let server = ServerName::try_from(host.to_string())?;
        Ok(RustlsConnector { config: self.config.clone(), server })
    }
}

/// The handshake with one server.
pub(crate) struct RustlsConnector {
    config: Arc<ClientConfig>,
    server: ServerName<'static>,
}

/// A failed handshake: an untrusted certificate, a wrong host name, no common protocol.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HandshakeError(io::Error);

impl<S> TlsConnect<S> for RustlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = HandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream<S>, HandshakeError>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move { connector.connect(self.server, stream).await.map(RustlsStream).map_err(HandshakeError) })
    }
}

/// Whether `e` is a failed TLS setup (an untrusted certificate, a server
/// without TLS under `require`), not a server that cannot be reached.
pub(crate) fn is_tls_failure(e: &tokio_postgres::Error) -> bool {
    // tokio-postgres keeps its error kinds private; a handshake of ours that
    // failed is our type, a server that refused TLS is only its text.
    std::error::Error::source(e).is_some_and(|cause| cause.is::<HandshakeError>())
        || e.to_string() == "error performing TLS handshake"
}

/// A TLS connection to a shard.
pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    /// No channel binding: SCRAM runs without `tls-server-end-point`. The
    /// certificate is verified, which is what binding would add against a
    /// man in the middle holding a certificate we do not trust.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
