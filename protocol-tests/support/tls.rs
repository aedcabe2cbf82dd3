//! A TLS client for the tests of redstalk's TLS listeners: rustls (ring) over a blocking
//! std socket, trusting a test CA, with or without a client certificate, and a socket
//! type that is either plain TCP or TLS, so the blocking clients of these tests
//! ([`super::client`], the protocol runner) speak both.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// A client configuration trusting the CA in `ca_pem`, presenting `cert` (the PEM
/// files of a certificate and its key) when given.
pub fn client_config(ca_pem: &str, cert: Option<(&str, &str)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_pem).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match cert {
        None => builder.with_no_client_auth(),
        Some((pem, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pem)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    Arc::new(config)
}

/// A connection to a beanstalk server: plain TCP or TLS.
pub enum Sock {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Sock {
    /// TLS to `addr` (for the name 127.0.0.1), handshake done within 10 s.
    pub fn tls(addr: SocketAddr, config: &Arc<ClientConfig>) -> io::Result<Sock> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(addr.ip().into());
        let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
        let mut s = StreamOwned::new(conn, tcp);
        s.sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        s.sock.set_read_timeout(None)?;
        Ok(Sock::Tls(Box::new(s)))
    }

    /// The TCP socket beneath (timeouts, shutdown).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Sock::Plain(s) => s,
            Sock::Tls(s) => &s.sock,
        }
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(t)
    }

    /// Stop sending: a TLS close_notify first, then the TCP half-close.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        if let Sock::Tls(s) = self {
            s.conn.send_close_notify();
            let _ = s.conn.complete_io(&mut s.sock);
        }
        self.tcp().shutdown(Shutdown::Write)
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.read(buf),
            Sock::Tls(s) => match s.read(buf) {
                // A peer that closes without close_notify: an end, as on plain TCP.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.write(buf),
            Sock::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Plain(s) => s.flush(),
            Sock::Tls(s) => s.flush(),
        }
    }
}
