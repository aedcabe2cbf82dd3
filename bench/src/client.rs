//! One beanstalk connection with pipelined requests, plain or TLS (with a token sent
//! first, for a listener that asks for one).
//!
//! Commands are appended to a write buffer ([`Conn::put`], [`Conn::command`]) and sent
//! together by [`Conn::flush`]; replies come back in order through [`Conn::read_reply`].
//! Nothing here knows about scenarios: it frames the text protocol, that is all.
//!
//! How connections are made (TLS, token) is set once at start ([`configure`]) for
//! every connection of the run.

use std::io::Write as _;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};

use anyhow::{Context, Result, bail};
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf,
};
use tokio::net::TcpStream;

/// How every connection of the run is made.
struct Dial {
    tls: Option<tokio_rustls::TlsConnector>,
    token: Option<String>,
}

static DIAL: OnceLock<Dial> = OnceLock::new();

/// Connect over TLS trusting the CA in `ca` (PEM) when given, and send `auth <token>`
/// first when given. Call once, before any connection.
pub fn configure(ca: Option<&std::path::Path>, token: Option<String>) -> Result<()> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let tls = match ca {
        None => None,
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).context("reading --tls-ca")? {
                roots.add(cert.context("reading --tls-ca")?)?;
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        }
    };
    let _ = DIAL.set(Dial { tls, token });
    Ok(())
}

/// A connection's bytes: plain TCP or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A reply line (and body, where the protocol sends one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Inserted(u64),
    /// `BURIED <id>` after a put: the server ran out of memory for its queue.
    BuriedOnPut(u64),
    Reserved {
        id: u64,
        body: Vec<u8>,
    },
    Deleted,
    TimedOut,
    DeadlineSoon,
    Using(String),
    Watching(u64),
    /// `OK <bytes>` and its data (the YAML of the stats commands).
    Ok(Vec<u8>),
    NotFound,
    /// Any other line, such as `INTERNAL_ERROR`, `DRAINING`, `OUT_OF_MEMORY`.
    Other(String),
}

impl Reply {
    /// The reply as one short line, for error messages.
    pub fn describe(&self) -> String {
        match self {
            Reply::Inserted(id) => format!("INSERTED {id}"),
            Reply::BuriedOnPut(id) => format!("BURIED {id}"),
            Reply::Reserved { id, body } => format!("RESERVED {id} {}", body.len()),
            Reply::Deleted => "DELETED".into(),
            Reply::TimedOut => "TIMED_OUT".into(),
            Reply::DeadlineSoon => "DEADLINE_SOON".into(),
            Reply::Using(t) => format!("USING {t}"),
            Reply::Watching(n) => format!("WATCHING {n}"),
            Reply::Ok(d) => format!("OK {}", d.len()),
            Reply::NotFound => "NOT_FOUND".into(),
            Reply::Other(l) => l.clone(),
        }
    }
}

/// A connection to a beanstalk server.
pub struct Conn {
    stream: BufReader<Stream>,
    wbuf: Vec<u8>,
    line: Vec<u8>,
}

impl Conn {
    /// Connect to `addr` (`host:port`) with TCP_NODELAY, as beanstalk clients do.
    pub async fn connect(addr: &str) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let dial = DIAL.get();
        let stream = match dial.and_then(|d| d.tls.as_ref()) {
            None => Stream::Plain(stream),
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .context("the server's name for TLS")?;
                let tls = tls.connect(name, stream).await.context("TLS handshake")?;
                Stream::Tls(Box::new(tls))
            }
        };
        let mut conn = Conn {
            stream: BufReader::with_capacity(64 * 1024, stream),
            wbuf: Vec::with_capacity(16 * 1024),
            line: Vec::with_capacity(128),
        };
        if let Some(token) = dial.and_then(|d| d.token.as_ref()) {
            match conn.call(&format!("auth {token}")).await? {
                Reply::Other(l) if l == "AUTHENTICATED" => {}
                other => bail!("auth answered {}", other.describe()),
            }
        }
        Ok(conn)
    }

    /// Queue `put <pri> <delay> <ttr> <len>` and a body of `len` bytes written in place by
    /// `fill` (no intermediate buffer). `delay` is written as it displays: whole seconds,
    /// or `<n>ms` (redstalk's milliseconds, [`crate::scenario::timers::Written`]).
    pub fn put_with(
        &mut self,
        pri: u32,
        delay: impl std::fmt::Display,
        ttr: u32,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>),
    ) {
        let _ = write!(self.wbuf, "put {pri} {delay} {ttr} {len}\r\n");
        let before = self.wbuf.len();
        fill(&mut self.wbuf);
        debug_assert_eq!(self.wbuf.len() - before, len);
        self.wbuf.extend_from_slice(b"\r\n");
    }

    /// Queue a command line (without its CRLF).
    pub fn command(&mut self, line: &str) {
        self.wbuf.extend_from_slice(line.as_bytes());
        self.wbuf.extend_from_slice(b"\r\n");
    }

    /// Queue `delete <id>`.
    pub fn delete(&mut self, id: u64) {
        let _ = write!(self.wbuf, "delete {id}\r\n");
    }

    /// Send everything queued.
    pub async fn flush(&mut self) -> Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.stream
            .get_mut()
            .write_all(&self.wbuf)
            .await
            .context("writing to the server")?;
        self.wbuf.clear();
        Ok(())
    }

    /// Queue one command, send it, and read its reply.
    pub async fn call(&mut self, line: &str) -> Result<Reply> {
        self.command(line);
        self.flush().await?;
        self.read_reply().await
    }

    /// Read the next reply.
    pub async fn read_reply(&mut self) -> Result<Reply> {
        self.line.clear();
        let n = self
            .stream
            .read_until(b'\n', &mut self.line)
            .await
            .context("reading a reply")?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        let Some(text) = self.line.strip_suffix(b"\r\n") else {
            bail!(
                "reply line without CRLF: {:?}",
                String::from_utf8_lossy(&self.line)
            );
        };
        let text = std::str::from_utf8(text).context("reply line is not UTF-8")?;
        let head = parse_line(text)?;
        Ok(match head {
            Head::Done(reply) => reply,
            Head::Reserved { id, len } => Reply::Reserved {
                id,
                body: self.read_body(len).await?,
            },
            Head::Ok { len } => Reply::Ok(self.read_body(len).await?),
        })
    }

    async fn read_body(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut body = vec![0; len + 2];
        self.stream
            .read_exact(&mut body)
            .await
            .context("reading a reply body")?;
        if !body.ends_with(b"\r\n") {
            bail!("reply body of {len} bytes not followed by CRLF");
        }
        body.truncate(len);
        Ok(body)
    }
}

/// A parsed reply line: complete, or announcing a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Done(Reply),
    Reserved { id: u64, len: usize },
    Ok { len: usize },
}

fn parse_line(text: &str) -> Result<Head> {
    let mut words = text.split(' ');
    let first = words.next().unwrap_or("");
    let num = |w: Option<&str>| -> Result<u64> {
        w.and_then(|w| w.parse().ok())
            .with_context(|| format!("malformed reply {text:?}"))
    };
    Ok(match first {
        "INSERTED" => Head::Done(Reply::Inserted(num(words.next())?)),
        "BURIED" => match words.next() {
            Some(id) => Head::Done(Reply::BuriedOnPut(num(Some(id))?)),
            None => Head::Done(Reply::Other(text.to_string())),
        },
        "RESERVED" => {
            let id = num(words.next())?;
            let len = num(words.next())?;
            Head::Reserved {
                id,
                len: usize::try_from(len).context("body length")?,
            }
        }
        "OK" => Head::Ok {
            len: usize::try_from(num(words.next())?).context("body length")?,
        },
        "DELETED" => Head::Done(Reply::Deleted),
        "TIMED_OUT" => Head::Done(Reply::TimedOut),
        "DEADLINE_SOON" => Head::Done(Reply::DeadlineSoon),
        "USING" => Head::Done(Reply::Using(words.next().unwrap_or("").to_string())),
        "WATCHING" => Head::Done(Reply::Watching(num(words.next())?)),
        "NOT_FOUND" => Head::Done(Reply::NotFound),
        _ => Head::Done(Reply::Other(text.to_string())),
    })
}

/// The `key: value` pairs of a stats YAML document.
pub fn parse_stats(yaml: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(yaml)
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_lines() {
        assert_eq!(
            parse_line("INSERTED 7").unwrap(),
            Head::Done(Reply::Inserted(7))
        );
        assert_eq!(
            parse_line("BURIED 9").unwrap(),
            Head::Done(Reply::BuriedOnPut(9))
        );
        assert_eq!(
            parse_line("BURIED").unwrap(),
            Head::Done(Reply::Other("BURIED".into()))
        );
        assert_eq!(
            parse_line("RESERVED 3 16").unwrap(),
            Head::Reserved { id: 3, len: 16 }
        );
        assert_eq!(parse_line("OK 120").unwrap(), Head::Ok { len: 120 });
        assert_eq!(
            parse_line("USING bench-1").unwrap(),
            Head::Done(Reply::Using("bench-1".into()))
        );
        assert_eq!(
            parse_line("INTERNAL_ERROR").unwrap(),
            Head::Done(Reply::Other("INTERNAL_ERROR".into()))
        );
        assert!(parse_line("INSERTED x").is_err());
    }

    #[test]
    fn stats_yaml() {
        let s = parse_stats(b"---\nname: default\ncurrent-jobs-ready: 3\n");
        assert_eq!(s[1], ("current-jobs-ready".into(), "3".into()));
    }
}
