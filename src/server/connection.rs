//! One client connection: read bytes, decode requests, run them through the engine in
//! order, and write the replies.
//!
//! Ownership: the task running [`serve`] owns the socket, both buffers, the codec and
//! the session. Pipelined requests are all run from one read and their replies written
//! together with one write. A blocked reserve holds back the requests after it (as in
//! the reference); meanwhile the socket is still read, up to
//! [`MAX_BUFFERED_WHILE_WAITING`], only to notice a hang-up (which answers TIMED_OUT).
//!
//! Durability: with a persisted store (Redis leader mode, `-b`), a reply that depends
//! on the store's state is written only once the store says the changes it saw are
//! durable; the replies of one read wait together, for one batch (group commit). If
//! that fails, those replies become INTERNAL_ERROR in place (the change may still be
//! persisted later: at-least-once, as with any timeout), and the others stand; a job
//! whose RESERVED became INTERNAL_ERROR is given back at once (its client does not know
//! it holds it).
//!
//! Leader mode: the first line of a connection may be a standby's relay greeting
//! (`super::hello`); it is answered here (this instance leads) and never reaches the
//! engine, and the rest of the connection is the relayed client's.
//!
//! Bounds: the read buffer holds at most one read chunk beyond what the codec keeps (a
//! line window; a put body moves into the codec's own buffer as it arrives, growing
//! with it up to the job size limit); the write buffer is flushed once
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

use super::hello::{self, First};
use crate::engine::{Engine, Outcome, Session, Waiting};
use crate::protocol::{Reply, ServerCodec};
use crate::store::JobId;

const READ_CHUNK: usize = 16 * 1024;
/// A read in the middle of a body: larger, since each costs a turn of the runtime.
const BODY_READ_CHUNK: usize = 32 * 1024;
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
    /// Another instance checked whom this address reaches (leader mode): answered,
    /// and no client's connection.
    Checked,
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

/// Serve one connection until it ends. `peer` names the client in the logs; `first` is
/// what was already read from it; with `greeting` (this instance's id, in leader mode)
/// a relay greeting as its first line is answered.
pub async fn serve<S: Socket>(
    engine: Arc<Engine>,
    stream: S,
    peer: &str,
    shutdown: CancellationToken,
    greeting: Option<Arc<str>>,
    first: BytesMut,
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
        rbuf: first,
        wbuf: BytesMut::new(),
        greeting,
        codec: ServerCodec::new(engine.max_job_size()),
        ticket: 0,
        unsettled: Vec::new(),
        abandoned: Vec::new(),
    };
    let end = match guard.session.as_mut() {
        Some(session) => conn.run(session, &shutdown).await,
        None => End::Closed,
    };
    if let Some(session) = guard.session.take() {
        match end {
            End::Checked => engine.disconnect_uncounted(session).await,
            End::Closed | End::Shutdown => engine.disconnect(session, end == End::Closed).await,
        }
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
    /// Until the first bytes tell: this instance's id, to answer a relay greeting.
    greeting: Option<Arc<str>>,
    codec: ServerCodec,
    /// The store change the replies in `wbuf` depend on (0: none).
    ticket: u64,
    /// Where in `wbuf` those replies are, and the job of each that is a RESERVED.
    unsettled: Vec<(std::ops::Range<usize>, Option<JobId>)>,
    /// Jobs whose RESERVED was replaced by INTERNAL_ERROR: given back after the flush.
    abandoned: Vec<JobId>,
}

impl<S: Socket> Connection<S> {
    async fn run(&mut self, session: &mut Session, shutdown: &CancellationToken) -> End {
        let mut eof = false;
        loop {
            if self.answer_greeting() {
                let _ = self.flush().await;
                return End::Checked;
            }
            // Run every complete request already buffered (once the first bytes are
            // known to be the client's).
            while self.greeting.is_none() {
                let req = match self.codec.decode(&mut self.rbuf) {
                    Ok(Some(req)) => req,
                    Ok(None) => break,
                    Err(_) => return End::Closed,
                };
                tracing::debug!(conn = session.id.0, ?req, "request");
                let settles = Engine::settles(&req);
                let reply = match self.engine.execute(session, req).await {
                    Outcome::Reply(r) => r,
                    Outcome::Quit => {
                        let _ = self.flush_for(session).await;
                        return End::Closed;
                    }
                    Outcome::Wait(mut waiting) => {
                        if self.flush_for(session).await.is_err() {
                            return End::Closed;
                        }
                        match self.wait(&mut waiting, &mut eof, shutdown).await {
                            Some(r) => {
                                session.settled_by = waiting.settled_by();
                                r
                            }
                            None if shutdown.is_cancelled() => return End::Shutdown,
                            None => return End::Closed,
                        }
                    }
                };
                tracing::debug!(conn = session.id.0, ?reply, "reply");
                if self.wbuf.capacity() == 0 {
                    self.wbuf = take_buffer();
                }
                let start = self.wbuf.len();
                reply.encode(&mut self.wbuf);
                // A reply waits for the latest change unless it says it depends on less.
                let settled_by = session.settled_by.take();
                if settles {
                    let change = settled_by.unwrap_or_else(|| self.engine.last_change());
                    // Even a reply that depends on no new change is checked against
                    // the lease when it is a RESERVED of a persisting store.
                    if change > 0 || settled_by.is_some() {
                        self.ticket = self.ticket.max(change);
                        let reserved = match &reply {
                            Reply::Reserved { id, .. } => Some(*id),
                            _ => None,
                        };
                        self.unsettled.push((start..self.wbuf.len(), reserved));
                    }
                }
                if self.wbuf.len() >= WRITE_FLUSH_AT && self.flush_for(session).await.is_err() {
                    return End::Closed;
                }
            }
            if self.flush_for(session).await.is_err() || eof {
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
            // In the middle of a body, one read per turn, as beanstalkd's event loop
            // reads: a large body arriving chunk after chunk would otherwise keep the one
            // thread for many reads at a time (tokio lets a task run ~128 ready
            // operations before it must yield), and every other client's command waits.
            let chunk = if self.codec.is_between_commands() {
                READ_CHUNK
            } else {
                tokio::task::yield_now().await;
                BODY_READ_CHUNK
            };
            self.rbuf.reserve(chunk);
            tokio::select! {
                read = self.stream.read_buf(&mut self.rbuf) => match read {
                    Ok(0) | Err(_) => return End::Closed,
                    Ok(_) => {}
                },
                _ = shutdown.cancelled() => return End::Shutdown,
            }
        }
    }

    /// While the first bytes are undecided: answer a relay greeting (this instance
    /// leads), or find they are the client's. True when the greeting was only a check
    /// (the connection then ends).
    fn answer_greeting(&mut self) -> bool {
        let Some(me) = &self.greeting else {
            return false;
        };
        let mut checked = false;
        match hello::first_line(&self.rbuf) {
            First::Undecided => return false,
            First::Client => {}
            First::Greeting { from, len, check } => {
                tracing::debug!(from, check, "another instance greets this leader");
                let _ = self.rbuf.split_to(len);
                hello::answer(&mut self.wbuf, true, me);
                checked = check;
            }
        }
        self.greeting = None;
        checked
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

    /// Wait until the replies in `wbuf` may be sent; those whose change did not become
    /// durable in time are replaced by INTERNAL_ERROR.
    async fn settle(&mut self) {
        if self.unsettled.is_empty() {
            return;
        }
        let ticket = std::mem::take(&mut self.ticket);
        let ranges = std::mem::take(&mut self.unsettled);
        if let Err(err) = self.engine.durable(ticket).await {
            tracing::warn!(
                %err,
                "replies answered INTERNAL_ERROR: their changes were not persisted in time \
                 (they may still be; clients may retry)"
            );
            let mut out = BytesMut::with_capacity(self.wbuf.len());
            let mut at = 0;
            for (r, reserved) in ranges {
                out.extend_from_slice(&self.wbuf[at..r.start]);
                Reply::InternalError.encode(&mut out);
                at = r.end;
                self.abandoned.extend(reserved);
            }
            out.extend_from_slice(&self.wbuf[at..]);
            self.wbuf = out;
        }
    }

    /// Flush, then give back the jobs whose RESERVED did not go out (see `settle`).
    async fn flush_for(&mut self, session: &Session) -> std::io::Result<()> {
        let flushed = self.flush().await;
        if !self.abandoned.is_empty() {
            let ids = std::mem::take(&mut self.abandoned);
            self.engine.give_back(session, &ids).await;
        }
        flushed
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        self.settle().await;
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }
}
