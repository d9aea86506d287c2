//! TLS with rustls (no OpenSSL), both ways. Towards the masters: which certificate
//! authorities are trusted, and the client certificate shown to masters that run with
//! `tls-auth-clients yes`. Towards clients: the listener's certificate and, for mutual TLS, the
//! authorities that sign client certificates.
//!
//! Files are read at start-up, so a missing or malformed file is a configuration error the
//! operator sees before anything is served; the listener's files are read again on `SIGHUP`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Where a master's TLS connection is opened and which name its certificate must carry.
#[derive(Clone)]
pub struct TlsTarget {
    /// Shared client configuration (roots and client certificate).
    pub connector: TlsConnector,
    /// Name sent as SNI and checked against the master's certificate.
    pub name: ServerName<'static>,
}

impl fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTarget")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The files that make up the proxy's TLS client configuration.
#[derive(Debug, Default, Clone, Copy)]
pub struct ClientFiles<'a> {
    /// PEM bundle of trusted authorities; `None` trusts the system's store.
    pub ca_cert: Option<&'a str>,
    /// PEM client certificate chain (with `key`).
    pub cert: Option<&'a str>,
    /// PEM private key of `cert`.
    pub key: Option<&'a str>,
}

/// Builds the TLS client configuration; errors name the file and what is wrong with it.
pub fn connector(files: ClientFiles<'_>) -> Result<TlsConnector, String> {
    let provider = Arc::new(crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match files.ca_cert {
        Some(path) => {
            let certs = read_certs(path)?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("{path}: no usable CA certificate"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(
                    "no system CA certificates found: set backend_tls_ca_cert_file".to_string(),
                );
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match (files.cert, files.key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(Path::new(key))
                .map_err(|e| format!("{key}: no private key read ({e})"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{cert}: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err("backend_tls_cert_file and backend_tls_key_file go together".to_string());
        }
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Builds the client listener's TLS configuration from `tls_cert_file`, `tls_key_file` and, for
/// mutual TLS, `tls_ca_cert_file`; errors name the file and what is wrong with it.
pub fn acceptor(config: &crate::config::Config) -> Result<TlsAcceptor, String> {
    let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_key_file) else {
        return Err("tls_listen needs tls_cert_file and tls_key_file".to_string());
    };
    let provider = Arc::new(crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &config.tls_ca_cert_file {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(read_certs(ca)?);
            if added == 0 {
                return Err(format!("{ca}: no usable CA certificate"));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{ca}: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let chain = read_certs(cert)?;
    let key_der = PrivateKeyDer::from_pem_file(Path::new(key))
        .map_err(|e| format!("{key}: no private key read ({e})"))?;
    let server = builder
        .with_single_cert(chain, key_der)
        .map_err(|e| format!("{cert}: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// The name checked on a master's certificate: an IP address or a DNS name.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string()).map_err(|e| format!("bad TLS server name '{host}': {e}"))
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(Path::new(path))
        .map_err(|e| format!("{path}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no PEM certificate found"));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_named() {
        let Err(err) = connector(ClientFiles {
            ca_cert: Some("/nonexistent/ca.pem"),
            ..ClientFiles::default()
        }) else {
            panic!("a missing CA file is an error");
        };
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        assert!(server_name("127.0.0.1").is_ok());
        assert!(server_name("redis.example").is_ok());
        assert!(server_name("bad name").is_err());
    }
}
