//! TLS on the beanstalk port: the server certificate (`--tls-cert`, `--tls-key`) and the
//! CA client certificates must chain to (`--tls-client-ca`), read into rustls (ring
//! provider, TLS 1.2 and 1.3), reloaded on SIGHUP; a client certificate's names (its
//! identity); and a failed handshake's reason, for the metrics and the log.
//!
//! Invariants: the configurations in force are swapped whole by a reload that read
//! every file, so a handshake uses one consistent set; a reload that fails on any file
//! keeps the set in force; errors name the option and the file, never a key's content.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::policy::AuthMode;

/// The files of `--tls-cert`, `--tls-key`, `--tls-client-ca` (PEM).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{what} {path}: {reason}")]
    File {
        what: &'static str,
        path: String,
        reason: String,
    },
    #[error("the TLS configuration was refused: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("--tls-client-ca {path}: {reason}")]
    ClientCa { path: String, reason: String },
}

/// The configurations in force: one per way of asking for a client certificate.
#[derive(Debug)]
struct Configs {
    /// No client certificate asked for.
    plain: Arc<ServerConfig>,
    /// Required (`auth=cert`); only with a client CA.
    required: Option<Arc<ServerConfig>>,
    /// Asked for, optional (`auth=token-or-cert`); only with a client CA.
    optional: Option<Arc<ServerConfig>>,
}

/// The TLS of every TLS listener of the process.
#[derive(Debug)]
pub struct Tls {
    files: CertFiles,
    configs: RwLock<Configs>,
}

impl Tls {
    /// Read the files; an error stops the start.
    pub fn load(files: CertFiles) -> Result<Arc<Tls>, TlsError> {
        let configs = read(&files)?;
        Ok(Arc::new(Tls {
            files,
            configs: RwLock::new(configs),
        }))
    }

    /// Read the files again (SIGHUP); on an error the configurations in force stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let configs = read(&self.files)?;
        *self.configs.write().unwrap_or_else(|e| e.into_inner()) = configs;
        Ok(())
    }

    /// Whether client certificates can be checked (a client CA was given).
    pub fn verifies_clients(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The acceptor for a listener of `auth` (taken per connection, so a reload counts
    /// from the next handshake on); `None` when that needs a client CA and none was
    /// given (the start refuses such a listener first).
    pub fn acceptor(&self, auth: AuthMode) -> Option<TlsAcceptor> {
        let c = self.configs.read().unwrap_or_else(|e| e.into_inner());
        let config = match auth {
            AuthMode::Cert => c.required.clone()?,
            AuthMode::TokenOrCert => c.optional.clone()?,
            AuthMode::None | AuthMode::Token | AuthMode::Relay => c.plain.clone(),
        };
        Some(TlsAcceptor::from(config))
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(files: &CertFiles) -> Result<Configs, TlsError> {
    let file_err = |what, path: &PathBuf, reason: String| TlsError::File {
        what,
        path: path.display().to_string(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| file_err("--tls-cert", &files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err(
            "--tls-cert",
            &files.cert,
            "no certificate in it (PEM)".into(),
        ));
    }
    // The key's own error may quote nothing of it: only its kind is shown.
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        let reason = match e {
            rustls::pki_types::pem::Error::Io(io) => io.to_string(),
            _ => "no private key in it (PEM: PKCS#8, PKCS#1 or SEC1)".to_string(),
        };
        file_err("--tls-key", &files.key, reason)
    })?;
    let builder =
        || ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions();
    let plain = builder()?
        .with_no_client_auth()
        .with_single_cert(certs.clone(), key.clone_key())?;
    let (mut required, mut optional) = (None, None);
    if let Some(ca) = &files.client_ca {
        let ca_err = |reason: String| TlsError::ClientCa {
            path: ca.display().to_string(),
            reason,
        };
        let mut roots = RootCertStore::empty();
        let found: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| ca_err(e.to_string()))?;
        let (added, _) = roots.add_parsable_certificates(found);
        if added == 0 {
            return Err(ca_err("no CA certificate in it (PEM)".into()));
        }
        let roots = Arc::new(roots);
        let verifier = |optional: bool| {
            let b = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
            let b = if optional {
                b.allow_unauthenticated()
            } else {
                b
            };
            b.build().map_err(|e| ca_err(e.to_string()))
        };
        required = Some(Arc::new(
            builder()?
                .with_client_cert_verifier(verifier(false)?)
                .with_single_cert(certs.clone(), key.clone_key())?,
        ));
        optional = Some(Arc::new(
            builder()?
                .with_client_cert_verifier(verifier(true)?)
                .with_single_cert(certs, key)?,
        ));
    }
    Ok(Configs {
        plain: Arc::new(plain),
        required,
        optional,
    })
}

/// The names of a client certificate (`der`), its identity: the subject's common
/// names, then its DNS, e-mail and URI subject alternative names, in order.
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                    names.push((*s).to_string());
                }
                _ => {}
            }
        }
    }
    names
}

/// Why a handshake failed, as a metric label: what the operator can tell apart.
pub fn handshake_failure(err: &std::io::Error) -> &'static str {
    use rustls::{CertificateError, Error};
    let tls = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<Error>());
    match tls {
        Some(Error::InvalidCertificate(c)) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired_cert",
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "cert_not_yet_valid"
            }
            CertificateError::UnknownIssuer | CertificateError::BadSignature => "unknown_ca",
            CertificateError::Revoked => "revoked_cert",
            _ => "bad_cert",
        },
        Some(Error::NoCertificatesPresented) => "no_client_cert",
        Some(Error::InvalidMessage(_)) => "not_tls",
        Some(Error::PeerIncompatible(_)) => "incompatible",
        Some(Error::AlertReceived(_)) => "client_alert",
        Some(_) => "tls_error",
        None => match err.kind() {
            std::io::ErrorKind::TimedOut => "timeout",
            _ => "closed",
        },
    }
}
