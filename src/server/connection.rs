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
//! Access (docs/SECURITY.md): a connection of a listener that is not open carries its
//! identity's grant ([`ConnAuth`]); before each request reaches the engine the grant
//! is taken again from a reloaded roles file if there was a reload (one atomic load),
//! and checked: a refused request is answered FORBIDDEN and never runs; an identity
//! the roles no longer name is answered UNAUTHORIZED and closed. On a token listener a
//! second `auth <token>` line re-authenticates (a wrong one closes). A connection of
//! an open listener has no grant: one branch per request.
//!
//! Leader mode: the first line of a connection may be a standby's relay greeting
//! (`super::hello`); it is answered here (`super::greeting`: this instance leads) and
//! never reaches the engine, and the rest of the connection is the relayed client's,
//! under the identity the standby proved it holds.
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
use super::admit::{ConnAuth, LINE_MAX};
use super::greeting::{self, Greeted, Greeting};
use crate::access::{Grant, Note, Verdict};
use crate::engine::{Answer, Engine, Outcome, Session, Waiting};
use crate::protocol::{Frame, FrameCodec, Reply};
use crate::store::Store;

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

impl ClientStream for tokio_rustls::server::TlsStream<TcpStream> {
    /// rustls may already hold decrypted bytes that the socket no longer shows as
    /// readable: then at once, else when the socket is.
    fn readable(&self) -> impl Future<Output = std::io::Result<()>> {
        let (tcp, tls) = self.get_ref();
        let buffered = !tls.wants_read();
        async move {
            if buffered {
                Ok(())
            } else {
                tcp.readable().await
            }
        }
    }
}

/// Serve one connection until it ends. `peer` names the client in the logs; `first` is
/// what was already read from it; with `greeting` (in leader mode) a relay greeting as
/// its first line is answered; `auth`: its access (`None`: it may do everything).
pub async fn serve<S: ClientStream>(
    engine: Arc<Engine>,
    stream: S,
    peer: &str,
    shutdown: CancellationToken,
    greeting: Option<Greeting>,
    first: BytesMut,
    auth: Option<ConnAuth>,
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
        codec: FrameCodec::new(engine.max_job_size(), engine.grammar())
            .with_budget(engine.memory_budget()),
        acks: PendingAcks::default(),
        auth: auth.map(Box::new),
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
    /// Until the first bytes tell: what answers a relay greeting.
    greeting: Option<Greeting>,
    codec: FrameCodec,
    /// The replies in `wbuf` that wait for their acknowledgement.
    acks: PendingAcks,
    /// Its access, if it is not an open listener's.
    auth: Option<Box<ConnAuth>>,
}

/// What the access check says of one request.
enum Checked {
    Run(Note),
    Refused,
    /// The identity is gone from the roles file: close.
    Revoked,
}

impl<S: ClientStream> Connection<S> {
    async fn run(&mut self, session: &mut Session, shutdown: &CancellationToken) -> End {
        let mut eof = false;
        loop {
            if let Some(g) = &self.greeting {
                let (stream, rbuf) = (&mut self.stream, &mut self.rbuf);
                match greeting::answer(stream, rbuf, g, &self.engine, session).await {
                    None => {}
                    Some(Greeted::Client) => self.greeting = None,
                    Some(Greeted::Relayed(auth)) => {
                        self.greeting = None;
                        self.auth = auth.map(Box::new);
                    }
                    Some(Greeted::Done) => return End::Checked,
                }
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
            match self.auth_line(session) {
                Some(true) => continue,
                Some(false) => {
                    let _ = self.flush_for(session).await;
                    return Some(End::Closed);
                }
                // Half an `auth` line: wait for the rest.
                None if self.takes_tokens()
                    && self.codec.is_between_commands()
                    && self.rbuf.starts_with(b"auth ") =>
                {
                    break;
                }
                None => {}
            }
            let frame = match self.codec.decode(&mut self.rbuf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => return Some(End::Closed),
            };
            tracing::debug!(conn = session.id.0, ?frame, "request");
            let note = match self.checked(session, &frame).await {
                Checked::Run(note) => note,
                Checked::Refused => {
                    self.push(Answer::now(Reply::Forbidden));
                    continue;
                }
                Checked::Revoked => {
                    self.push(Answer::now(Reply::Unauthorized));
                    let _ = self.flush_for(session).await;
                    return Some(End::Closed);
                }
            };
            // beanstalkd's requests take the engine's standard path, untouched.
            let outcome = match frame {
                Frame::Standard(req) => self.engine.execute(session, req).await,
                Frame::Extension(ext) => self.engine.execute_extension(session, *ext).await,
            };
            let answer = match outcome {
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
            if let Some(auth) = &mut self.auth {
                let (using, watching) = (&session.using, session.watching.as_slice());
                auth.grant.after(note, &answer.reply, using, watching);
                if let Some(ids) = auth.grant.held_to_check() {
                    let still = self.engine.still_held(session.id, &ids).await;
                    auth.grant.checked_held(still);
                }
            }
            self.push(answer);
            if self.wbuf.len() >= WRITE_FLUSH_AT && self.flush_for(session).await.is_err() {
                return Some(End::Closed);
            }
        }
        None
    }

    fn takes_tokens(&self) -> bool {
        self.auth.as_ref().is_some_and(|a| a.takes_tokens)
    }

    /// A second `auth <token>` line at the head of the buffer, on a token listener:
    /// `Some(true)` when it was answered AUTHENTICATED (the connection now has that
    /// token's identity), `Some(false)` when UNAUTHORIZED (the connection is to be
    /// closed), `None` when there is none (or not yet a whole one).
    fn auth_line(&mut self, session: &Session) -> Option<bool> {
        let auth = self.auth.as_mut()?;
        if !auth.takes_tokens
            || !self.codec.is_between_commands()
            || !self.rbuf.starts_with(b"auth ")
        {
            return None;
        }
        let window = &self.rbuf[..self.rbuf.len().min(LINE_MAX)];
        let end = match window.windows(2).position(|w| w == b"\r\n") {
            Some(end) => end,
            None if self.rbuf.len() >= LINE_MAX => {
                auth.security.figures.auth_failed("line_too_long");
                self.push(Answer::now(Reply::Unauthorized));
                return Some(false);
            }
            None => return None,
        };
        let line = self.rbuf.split_to(end + 2);
        let token = &line[5..end];
        let (using, watching) = (&session.using, session.watching.as_slice());
        match auth.security.control.check_token(auth.ip, token) {
            Ok(grant) => {
                tracing::info!(
                    conn = session.id.0,
                    identity = %grant.identity().name,
                    role = %grant.identity().role.name,
                    "authenticated again"
                );
                auth.grant.replace(grant, using, watching);
                self.push(Answer::now(Reply::Authenticated));
                Some(true)
            }
            Err(refused) => {
                tracing::info!(
                    conn = session.id.0,
                    reason = refused.reason(),
                    "auth failed"
                );
                auth.security.figures.auth_failed(refused.reason());
                self.push(Answer::now(Reply::Unauthorized));
                Some(false)
            }
        }
    }

    /// The access check of `frame` (always run, for a connection without a grant).
    async fn checked(&mut self, session: &Session, frame: &Frame) -> Checked {
        let Some(auth) = self.auth.as_mut() else {
            return Checked::Run(Note::Nothing);
        };
        let (using, watching) = (&session.using, session.watching.as_slice());
        if !auth.grant.refresh(&auth.security.control, using, watching) {
            tracing::info!(
                conn = session.id.0,
                identity = %auth.grant.identity().name,
                "the roles file no longer names this identity; closing"
            );
            auth.security.figures.auth_failed("revoked");
            return Checked::Revoked;
        }
        let (verdict, note) = match frame {
            Frame::Standard(req) => (auth.grant.check(req), Grant::note(req)),
            Frame::Extension(ext) => (auth.grant.check_extension(ext), Grant::note_extension(ext)),
        };
        let allowed = match verdict {
            Verdict::Allow => true,
            Verdict::Refuse => false,
            Verdict::IfTube(id) => {
                let now = self.engine.clock.now();
                let tube = match self.engine.store.job_info(id, now).await {
                    Ok(info) => info.map(|i| i.tube),
                    // The command itself will meet the store's trouble and say so.
                    Err(_) => None,
                };
                auth.grant.may_read_tube(tube.as_ref().map(|t| t.as_str()))
            }
        };
        if !allowed {
            let role = &auth.grant.role().name;
            tracing::debug!(conn = session.id.0, role = %role, ?frame, "refused by the role");
            auth.security.figures.refused(role);
            return Checked::Refused;
        }
        Checked::Run(note)
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

    /// Drive a blocked reserve while watching the socket for a hang-up. `None` when the
    /// connection must end (read error or shutdown).
    async fn wait(
        &mut self,
        waiting: &mut Waiting,
        eof: &mut bool,
        shutdown: &CancellationToken,
    ) -> Option<Answer> {
        let answer = loop {
            let can_read = !*eof && self.rbuf.len() < MAX_BUFFERED_WHILE_WAITING;
            if can_read {
                self.rbuf.reserve(READ_CHUNK);
            }
            tokio::select! {
                answer = waiting.wait() => break answer,
                read = self.stream.read_buf(&mut self.rbuf), if can_read => match read {
                    Ok(0) => {
                        *eof = true;
                        break waiting.hang_up().await;
                    }
                    Ok(_) => {}
                    Err(_) => return None,
                },
                _ = shutdown.cancelled() => return None,
            }
        };
        // Outside the select: a reserve-batch's fill reserves, and must not be dropped.
        Some(waiting.finish(answer).await)
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
            // A TLS stream may keep the end of what it took when the socket was full
            // (AsyncWrite promises delivery only after a flush); a no-op on a socket.
            self.stream.flush().await?;
            self.wbuf.clear();
        }
        Ok(())
    }
}
