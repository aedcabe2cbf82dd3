//! One client connection: read bytes, decode requests, run them through the engine in
//! order, and write the replies.
//!
//! Ownership: the task running [`serve`] owns the socket, both buffers, the codec and
//! the session. Pipelined requests are all run from one read and their replies written
//! together with one write. A blocked reserve holds back the requests after it (as in
//! the reference); meanwhile the socket is still read, up to
//! [`MAX_BUFFERED_WHILE_WAITING`], only to notice a hang-up (which answers TIMED_OUT).
//!
//! Durability: with a persisted store (Redis leader mode, `-b`), each reply comes from
//! the engine with its acknowledgement; one that waits for a change is held back
//! (`acks.rs`) until the store says that change is durable; the replies of one read
//! wait together, for one batch (group commit). If that fails, those replies become
//! INTERNAL_ERROR in place (the change may still be persisted later: at-least-once, as
//! with any timeout), and the others stand; a job whose RESERVED became INTERNAL_ERROR
//! is given back at once (its client does not know it holds it).
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

use super::acks::PendingAcks;
use super::hello::{self, First};
use crate::engine::{Answer, Engine, Outcome, Session, Waiting};
use crate::protocol::ServerCodec;

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
fn take_spare() -> BytesMut {
    SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default()
}

/// Keep an emptied buffer for the next connection that needs one (bounded).
fn keep_spare(mut buf: BytesMut) {
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

/// A client's byte stream plus a readiness wait, so that an idle connection can wait
/// for input without holding a read buffer.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// Resolves when the socket may be readable (possibly spuriously).
    fn readable(&self) -> impl Future<Output = std::io::Result<()>>;
}

impl ClientStream for TcpStream {
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> {
        TcpStream::readable(self)
    }
}

impl ClientStream for UnixStream {
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> {
        UnixStream::readable(self)
    }
}

/// Serve one connection until it ends. `peer` names the client in the logs; `first` is
/// what was already read from it; with `greeting` (this instance's id, in leader mode)
/// a relay greeting as its first line is answered.
pub async fn serve<S: ClientStream>(
    engine: Arc<Engine>,
    stream: S,
    peer: &str,
    shutdown: CancellationToken,
    greeting: Option<Arc<str>>,
    first: BytesMut,
) {
    let session = engine.connect().await;
    engine.note_peer(session.id, peer);
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
        acks: PendingAcks::default(),
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
    /// The replies in `wbuf` that wait for their acknowledgement.
    acks: PendingAcks,
}

impl<S: ClientStream> Connection<S> {
    async fn run(&mut self, session: &mut Session, shutdown: &CancellationToken) -> End {
        let mut eof = false;
        loop {
            if self.answer_greeting(session) {
                let _ = self.flush().await;
                return End::Checked;
            }
            if let Some(end) = self.run_buffered(session, &mut eof, shutdown).await {
                return end;
            }
            if self.flush_for(session).await.is_err() || eof {
                return End::Closed;
            }
            if let Some(end) = self.read_more(shutdown).await {
                return end;
            }
        }
    }

    /// Run every complete request already buffered (once the first bytes are known to
    /// be the client's), encoding each reply into `wbuf`. `Some` when the connection
    /// must end.
    async fn run_buffered(
        &mut self,
        session: &mut Session,
        eof: &mut bool,
        shutdown: &CancellationToken,
    ) -> Option<End> {
        while self.greeting.is_none() {
            let req = match self.codec.decode(&mut self.rbuf) {
                Ok(Some(req)) => req,
                Ok(None) => break,
                Err(_) => return Some(End::Closed),
            };
            tracing::debug!(conn = session.id.0, ?req, "request");
            let answer = match self.engine.execute(session, req).await {
                Outcome::Reply(answer) => answer,
                Outcome::Quit => {
                    let _ = self.flush_for(session).await;
                    return Some(End::Closed);
                }
                Outcome::Wait(mut waiting) => {
                    if self.flush_for(session).await.is_err() {
                        return Some(End::Closed);
                    }
                    match self.wait(&mut waiting, eof, shutdown).await {
                        Some(answer) => answer,
                        None if shutdown.is_cancelled() => return Some(End::Shutdown),
                        None => return Some(End::Closed),
                    }
                }
            };
            tracing::debug!(conn = session.id.0, reply = ?answer.reply, ack = ?answer.ack, "reply");
            self.push(answer);
            if self.wbuf.len() >= WRITE_FLUSH_AT && self.flush_for(session).await.is_err() {
                return Some(End::Closed);
            }
        }
        None
    }

    /// Encode a reply into `wbuf`, noting it if it waits for its acknowledgement.
    fn push(&mut self, answer: Answer) {
        if self.wbuf.capacity() == 0 {
            self.wbuf = take_spare();
        }
        let start = self.wbuf.len();
        answer.reply.encode(&mut self.wbuf);
        self.acks
            .note(start..self.wbuf.len(), &answer.reply, answer.ack);
    }

    /// Wait for more input and read it. An idle connection holds no buffers: they are
    /// released while it waits and taken again only once the client has sent
    /// something (thousands of idle clients would otherwise pin a read chunk each, and
    /// the allocator keeps that memory after they leave). `Some` when the connection
    /// must end.
    async fn read_more(&mut self, shutdown: &CancellationToken) -> Option<End> {
        if self.rbuf.is_empty() {
            keep_spare(std::mem::take(&mut self.rbuf));
        }
        keep_spare(std::mem::take(&mut self.wbuf));
        tokio::select! {
            ready = self.stream.readable() => if ready.is_err() {
                return Some(End::Closed);
            },
            _ = shutdown.cancelled() => return Some(End::Shutdown),
        }
        if self.rbuf.capacity() == 0 {
            self.rbuf = take_spare();
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
                Ok(0) | Err(_) => Some(End::Closed),
                Ok(_) => None,
            },
            _ = shutdown.cancelled() => Some(End::Shutdown),
        }
    }

    /// While the first bytes are undecided: answer a relay greeting (this instance
    /// leads), or find they are the client's. True when the greeting was only a check
    /// (the connection then ends).
    fn answer_greeting(&mut self, session: &Session) -> bool {
        let Some(me) = &self.greeting else {
            return false;
        };
        let mut checked = false;
        match hello::first_line(&self.rbuf) {
            First::Undecided => return false,
            First::Client => {}
            First::Greeting { from, len, check } => {
                tracing::debug!(from, check, "another instance greets this leader");
                if !check {
                    self.engine.note_relayed(session.id, from);
                }
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
    ) -> Option<Answer> {
        loop {
            let can_read = !*eof && self.rbuf.len() < MAX_BUFFERED_WHILE_WAITING;
            if can_read {
                self.rbuf.reserve(READ_CHUNK);
            }
            tokio::select! {
                answer = waiting.wait() => return Some(answer),
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

    /// Flush, then give back the jobs whose RESERVED did not go out (see `acks.rs`).
    async fn flush_for(&mut self, session: &Session) -> std::io::Result<()> {
        let flushed = self.flush().await;
        let unsent = self.acks.take_unsent();
        if !unsent.is_empty() {
            self.engine.give_back(session, &unsent).await;
        }
        flushed
    }

    /// Write `wbuf` once its replies may go out (see `acks.rs`).
    async fn flush(&mut self) -> std::io::Result<()> {
        // Checked here, not only in `settle`: most flushes wait for nothing (every
        // flush in memory mode), and skipping the call spares its future.
        if self.acks.waiting_for().is_some() {
            self.acks.settle(&self.engine, &mut self.wbuf).await;
        }
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }
}
