//! One client connection: read bytes, decode requests, run them through the engine in
//! order, and write the replies.
//!
//! Ownership: the task running [`serve`] owns the socket, both buffers, the codec and
//! the session. Pipelined requests are all run from one read and their replies written
//! together with one write. A blocked reserve holds back the requests after it (as in
//! the reference); meanwhile the socket is still read, up to
//! [`MAX_BUFFERED_WHILE_WAITING`], only to notice a hang-up (which answers TIMED_OUT).
//!
//! Bounds: the read buffer holds at most one read chunk beyond what the codec keeps (a
//! line window, or one body up to the job size limit); the write buffer is flushed once
//! it passes [`WRITE_FLUSH_AT`], so it holds at most that plus one reply. An idle
//! connection (nothing buffered, waiting for the client) holds neither buffer: it
//! hands them to a small per-thread stock of spare buffers, from which the next
//! connection with something to do takes them, so request/reply traffic does not
//! allocate buffers per request either.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, Outcome, Session, Waiting};
use crate::protocol::{Reply, ServerCodec};

const READ_CHUNK: usize = 16 * 1024;
/// While a reserve waits, stop reading once this much is buffered, so a client that
/// keeps pipelining is held back by TCP flow control rather than by our memory.
pub const MAX_BUFFERED_WHILE_WAITING: usize = 64 * 1024;
pub const WRITE_FLUSH_AT: usize = 64 * 1024;
/// How many spare buffers a thread keeps, and the largest one it keeps (a buffer that
/// grew for a big job body is freed instead).
const SPARE_BUFFERS: usize = 64;
const SPARE_CAPACITY_MAX: usize = 4 * READ_CHUNK;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer: a spare one if there is one.
fn take_buffer() -> BytesMut {
    SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default()
}

/// Keep an emptied buffer for the next connection that needs one (bounded).
fn give_back(mut buf: BytesMut) {
    if buf.capacity() == 0 || buf.capacity() > SPARE_CAPACITY_MAX {
        return;
    }
    buf.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_BUFFERS {
            s.push(buf);
        }
    });
}

/// How a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The client closed, quit, or the socket failed: its jobs go back to ready.
    Closed,
    /// The server is shutting down: jobs stay reserved until their TTR.
    Shutdown,
}

/// A client socket: the byte stream plus a readiness wait, so that an idle connection
/// can wait for input without holding a read buffer.
pub trait Socket: AsyncRead + AsyncWrite + Unpin {
    /// Resolves when the socket may be readable (possibly spuriously).
    fn readable(&self) -> impl Future<Output = std::io::Result<()>>;
}

impl Socket for TcpStream {
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> {
        TcpStream::readable(self)
    }
}

impl Socket for UnixStream {
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> {
        UnixStream::readable(self)
    }
}

/// Serve one connection until it ends. `peer` names the client in the logs.
pub async fn serve<S: Socket>(
    engine: Arc<Engine>,
    stream: S,
    peer: &str,
    shutdown: CancellationToken,
) {
    let session = engine.connect().await;
    let conn_id = session.id.0;
    tracing::info!(conn = conn_id, peer, "connection opened");
    let mut guard = SessionGuard {
        engine: engine.clone(),
        session: Some(session),
    };
    let mut conn = Connection {
        engine: engine.clone(),
        stream,
        rbuf: BytesMut::new(),
        wbuf: BytesMut::new(),
        codec: ServerCodec::new(engine.max_job_size()),
    };
    let end = match guard.session.as_mut() {
        Some(session) => conn.run(session, &shutdown).await,
        None => End::Closed,
    };
    if let Some(session) = guard.session.take() {
        engine.disconnect(session, end == End::Closed).await;
    }
    tracing::info!(conn = conn_id, peer, ?end, "connection closed");
}

/// Returns the session to the engine if the connection task unwinds.
struct SessionGuard {
    engine: Arc<Engine>,
    session: Option<Session>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let engine = self.engine.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { engine.disconnect(session, true).await });
            }
        }
    }
}

struct Connection<S> {
    engine: Arc<Engine>,
    stream: S,
    rbuf: BytesMut,
    wbuf: BytesMut,
    codec: ServerCodec,
}

impl<S: Socket> Connection<S> {
    async fn run(&mut self, session: &mut Session, shutdown: &CancellationToken) -> End {
        let mut eof = false;
        loop {
            // Run every complete request already buffered.
            loop {
                let req = match self.codec.decode(&mut self.rbuf) {
                    Ok(Some(req)) => req,
                    Ok(None) => break,
                    Err(_) => return End::Closed,
                };
                tracing::debug!(conn = session.id.0, ?req, "request");
                let reply = match self.engine.execute(session, req).await {
                    Outcome::Reply(r) => r,
                    Outcome::Quit => {
                        let _ = self.flush().await;
                        return End::Closed;
                    }
                    Outcome::Wait(mut waiting) => {
                        if self.flush().await.is_err() {
                            return End::Closed;
                        }
                        match self.wait(&mut waiting, &mut eof, shutdown).await {
                            Some(r) => r,
                            None if shutdown.is_cancelled() => return End::Shutdown,
                            None => return End::Closed,
                        }
                    }
                };
                tracing::debug!(conn = session.id.0, ?reply, "reply");
                if self.wbuf.capacity() == 0 {
                    self.wbuf = take_buffer();
                }
                reply.encode(&mut self.wbuf);
                if self.wbuf.len() >= WRITE_FLUSH_AT && self.flush().await.is_err() {
                    return End::Closed;
                }
            }
            if self.flush().await.is_err() || eof {
                return End::Closed;
            }
            // An idle connection holds no buffers: they are released here and taken
            // again only once the client has sent something. Thousands of idle clients
            // would otherwise pin a read chunk each (and the allocator keeps that memory
            // after they leave).
            if self.rbuf.is_empty() {
                give_back(std::mem::take(&mut self.rbuf));
            }
            give_back(std::mem::take(&mut self.wbuf));
            tokio::select! {
                ready = self.stream.readable() => if ready.is_err() {
                    return End::Closed;
                },
                _ = shutdown.cancelled() => return End::Shutdown,
            }
            if self.rbuf.capacity() == 0 {
                self.rbuf = take_buffer();
            }
            self.rbuf.reserve(READ_CHUNK);
            tokio::select! {
                read = self.stream.read_buf(&mut self.rbuf) => match read {
                    Ok(0) | Err(_) => return End::Closed,
                    Ok(_) => {}
                },
                _ = shutdown.cancelled() => return End::Shutdown,
            }
        }
    }

    /// Drive a blocked reserve while watching the socket for a hang-up. `None` when the
    /// connection must end (read error or shutdown).
    async fn wait(
        &mut self,
        waiting: &mut Waiting,
        eof: &mut bool,
        shutdown: &CancellationToken,
    ) -> Option<Reply> {
        loop {
            let can_read = !*eof && self.rbuf.len() < MAX_BUFFERED_WHILE_WAITING;
            if can_read {
                self.rbuf.reserve(READ_CHUNK);
            }
            tokio::select! {
                reply = waiting.wait() => return Some(reply),
                read = self.stream.read_buf(&mut self.rbuf), if can_read => match read {
                    Ok(0) => {
                        *eof = true;
                        return Some(waiting.hang_up().await);
                    }
                    Ok(_) => {}
                    Err(_) => return None,
                },
                _ = shutdown.cancelled() => return None,
            }
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }
}
