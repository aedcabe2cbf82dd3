//! The TLS side of the Redis options: the PEM files of `--redis-tls-ca`,
//! `--redis-tls-cert` and `--redis-tls-key` read into redis-rs' certificates, and the
//! certificate problems rustls names obscurely, said plainly.
//!
//! Invariant: errors name the option and the file, never a key's content.

use std::path::PathBuf;

use redis::{ClientTlsConfig, RedisError, TlsCertificates};

use super::TargetError;

/// The TLS files of `--redis-tls-ca`, `--redis-tls-cert` and `--redis-tls-key` (PEM).
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// Trust only this CA (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// A client certificate, with its key.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// A TLS handshake with Redis that failed on the server's certificate in a way rustls
/// names only by its inner webpki error: said plainly, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum CertificateProblem {
    #[error(
        "the Redis server presents a CA certificate (one that may sign others) as its own \
         certificate, which TLS clients refuse (CaUsedAsEndEntity): issue a server \
         certificate from that CA, for the name or address redstalk connects to, give it \
         to Redis (tls-cert-file, tls-key-file), and keep the CA for --redis-tls-ca"
    )]
    CaUsedAsServerCertificate {
        #[source]
        source: rustls::Error,
    },
}

impl CertificateProblem {
    /// The problem `err` (an attempt to connect) is, if it is one of these: looked for
    /// by value along its sources (redis-rs keeps an I/O error behind an `Arc`, and the
    /// I/O error keeps rustls' error as its inner error, which `source` skips).
    pub fn of(err: &RedisError) -> Option<CertificateProblem> {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = next {
            if let Some(
                tls @ rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)),
            ) = rustls_error(e)
                && other.0.downcast_ref::<webpki::Error>()
                    == Some(&webpki::Error::CaUsedAsEndEntity)
            {
                return Some(CertificateProblem::CaUsedAsServerCertificate {
                    source: tls.clone(),
                });
            }
            next = e.source();
        }
        None
    }

    /// `err`, or the plain account of it when it is one of these problems (the
    /// original stays its source).
    pub fn explain(err: RedisError) -> RedisError {
        match CertificateProblem::of(&err) {
            Some(problem) => std::io::Error::new(std::io::ErrorKind::InvalidData, problem).into(),
            None => err,
        }
    }
}

/// The rustls error `e` is, or holds as an I/O error's inner error, directly or behind
/// the `Arc` redis-rs wraps its errors' causes in.
fn rustls_error<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    type ArcError = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let e: &(dyn std::error::Error + 'static) = match e.downcast_ref::<ArcError>() {
        Some(shared) => &**shared,
        None => e,
    };
    e.downcast_ref::<rustls::Error>().or_else(|| {
        e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    })
}

/// The PEM files read, or `None` when no TLS file was given.
pub(super) fn certificates(tls: &TlsFiles) -> Result<Option<TlsCertificates>, TargetError> {
    let read = |what, path: &PathBuf| {
        std::fs::read(path).map_err(|source| TargetError::File {
            what,
            path: path.display().to_string(),
            source,
        })
    };
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("--redis-tls-cert", cert)?,
            client_key: read("--redis-tls-key", key)?,
        }),
        (None, None) => None,
        _ => return Err(TargetError::HalfClientCert),
    };
    let root_cert = tls
        .ca
        .as_ref()
        .map(|ca| read("--redis-tls-ca", ca))
        .transpose()?;
    if client_tls.is_none() && root_cert.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}
