//! The engine in process, against the memory store, on tokio's paused clock: nothing
//! sleeps for real, so a timing boundary (a timeout, a delay, a TTR, a pause, the
//! DEADLINE_SOON margin) is asserted to the millisecond, and a claim race is set up
//! step by step instead of hoped for.
//!
//! [`Client`] speaks the wire protocol to [`Engine::execute`] (through the real codec,
//! and the real reply encoder) without a socket. Time moves only through [`advance`]
//! (which lets the timer and serve tasks run before returning) or when every task
//! waits on a timer (tokio then jumps to the next one, which is how a test measures
//! exactly when a wait ended).
//!
//! Files: `reserve.rs` (immediate answers, timeouts, DEADLINE_SOON), `waiters.rs`
//! (hand-over order and claim races), `timing.rs` (delays, TTR, pause-tube), `late.rs`
//! (a store that answers late, as Redis does: the windows a round trip opens),
//! `acks.rs` (which change each reply is acknowledged after), `clients.rs` (the
//! operator's listing of connections, and which jobs a connection still holds), `extensions.rs` (the protocol extensions).

mod acks;
mod batches;
mod clients;
mod extensions;
mod late;
mod reserve;
mod timing;
mod waiters;

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::Decoder;

use super::{Answer, Engine, EngineConfig, Outcome, Session, Waiting};
use crate::protocol::{Frame, FrameCodec, Reply};
use crate::store::lagging::LaggingStore;
use crate::store::{AnyStore, MemoryStore};

/// A fresh engine on `store` (its timer and serve tasks running).
fn engine_on(store: AnyStore) -> Arc<Engine> {
    engine_speaking(store, true)
}

/// A fresh engine on `store`, with the protocol extensions on or off.
fn engine_speaking(store: AnyStore, extensions: bool) -> Arc<Engine> {
    engine_keyed(store, extensions, Default::default())
}

/// A fresh engine on `store`, with the protocol extensions on or off and `keys`' bounds
/// on dedupe windows.
fn engine_keyed(store: AnyStore, extensions: bool, keys: crate::store::KeyLimits) -> Arc<Engine> {
    Engine::start(
        store,
        EngineConfig {
            max_job_size: 65_535,
            memory: None,
            dialect: Default::default(),
            extensions,
            keys,
            policies: None,
            schedules: None,
            retention: Default::default(),
        },
    )
}

/// A fresh engine on a memory store.
fn engine() -> Arc<Engine> {
    engine_on(AnyStore::Memory(MemoryStore::new()))
}

/// A fresh engine on a journaled memory store (as a persisted store numbers its
/// changes, with nothing to wait for): its answers show the acknowledgements a
/// persisted store's replies get.
fn journaled_engine() -> Arc<Engine> {
    engine_on(AnyStore::Memory(MemoryStore::journaled()))
}

/// A fresh engine on a memory store whose answers arrive `lag` late (`read_lag` for the
/// timer's reads of its next deadline).
fn lagging_engine(lag: Duration, read_lag: Duration) -> Arc<Engine> {
    engine_on(AnyStore::Lagging(
        LaggingStore::new(lag).with_read_lag(read_lag),
    ))
}

/// One connection, without a socket.
struct Client {
    engine: Arc<Engine>,
    session: Option<Session>,
    codec: FrameCodec,
}

impl Client {
    async fn connect(engine: &Arc<Engine>) -> Client {
        Client {
            engine: engine.clone(),
            session: Some(engine.connect().await),
            codec: FrameCodec::new(engine.max_job_size(), engine.grammar()),
        }
    }

    /// Run one request given in wire form (the CRLF after a command line is added).
    async fn run(&mut self, request: &str) -> Outcome {
        let mut buf = BytesMut::from(request);
        if !request.ends_with("\r\n") {
            buf.extend_from_slice(b"\r\n");
        }
        let frame = self
            .codec
            .decode(&mut buf)
            .unwrap()
            .unwrap_or_else(|| panic!("incomplete request {request:?}"));
        assert!(buf.is_empty(), "more than one request in {request:?}");
        let session = self.session.as_mut().unwrap();
        match frame {
            Frame::Standard(req) => self.engine.execute(session, req).await,
            Frame::Extension(ext) => self.engine.execute_extension(session, *ext).await,
        }
    }

    /// Run a request that must be answered at once; its answer.
    async fn answer(&mut self, request: &str) -> Answer {
        match self.run(request).await {
            Outcome::Reply(a) => a,
            Outcome::Wait(_) => panic!("{request:?} blocked"),
            Outcome::Quit => panic!("{request:?} quit"),
        }
    }

    /// Run a request that must be answered at once; its reply in wire form, without
    /// the final CRLF.
    async fn cmd(&mut self, request: &str) -> String {
        match self.run(request).await {
            Outcome::Reply(r) => text(&r),
            Outcome::Wait(_) => panic!("{request:?} blocked"),
            Outcome::Quit => panic!("{request:?} quit"),
        }
    }

    /// Run a reserve that must block.
    async fn block(&mut self, request: &str) -> Waiting {
        match self.run(request).await {
            Outcome::Wait(w) => w,
            Outcome::Reply(r) => panic!("{request:?} did not block: {}", text(&r)),
            Outcome::Quit => panic!("{request:?} quit"),
        }
    }

    /// `put` with `pri`, `delay`, `ttr` and `body`; the reply.
    async fn put_with(&mut self, pri: u32, delay: u32, ttr: u32, body: &str) -> String {
        let req = format!("put {pri} {delay} {ttr} {}\r\n{body}\r\n", body.len());
        self.cmd(&req).await
    }

    /// `put 0 0 60 body`; the new job's id.
    async fn put(&mut self, body: &str) -> u64 {
        id_of(&self.put_with(0, 0, 60, body).await, "INSERTED")
    }

    /// The value of `key` in the YAML answer of `request` (a `stats*` command).
    async fn stat(&mut self, request: &str, key: &str) -> String {
        let reply = self.cmd(request).await;
        yaml_value(&reply, key).unwrap_or_else(|| panic!("no {key} in {reply:?}"))
    }

    /// The state of job `id` as `stats-job` names it.
    async fn state(&mut self, id: u64) -> String {
        self.stat(&format!("stats-job {id}"), "state").await
    }

    /// The connection closes (its reservations go back to ready).
    async fn close(mut self) {
        if let Some(s) = self.session.take() {
            self.engine.disconnect(s, true).await;
        }
    }
}

/// Something that holds a reply: a reply, or an answer (a reply and its ack).
trait HasReply {
    fn reply(&self) -> &Reply;
}

impl HasReply for Reply {
    fn reply(&self) -> &Reply {
        self
    }
}

impl HasReply for Answer {
    fn reply(&self) -> &Reply {
        &self.reply
    }
}

/// A reply in wire form without the final CRLF.
fn text(reply: &impl HasReply) -> String {
    let mut buf = BytesMut::new();
    reply.reply().encode(&mut buf);
    let s = String::from_utf8(buf.to_vec()).unwrap();
    s.strip_suffix("\r\n").unwrap().to_string()
}

/// The wire form of `RESERVED id body` (as [`text`] gives it).
fn reserved(id: u64, body: &str) -> String {
    format!("RESERVED {id} {}\r\n{body}", body.len())
}

/// The id in a reply such as `INSERTED 7` or `RESERVED 7 5…`.
fn id_of(reply: &str, word: &str) -> u64 {
    let rest = reply
        .strip_prefix(word)
        .unwrap_or_else(|| panic!("expected {word}, got {reply:?}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

fn yaml_value(reply: &str, key: &str) -> Option<String> {
    reply.lines().find_map(|l| {
        let (k, v) = l.split_once(": ")?;
        (k == key).then(|| v.trim_matches('"').to_string())
    })
}

/// Drive a blocked reserve to its answer in a task of its own, as the connection does
/// (`Waiting::finish` after the wait: a reserve-batch's fill).
fn spawn_wait(mut w: Waiting) -> JoinHandle<String> {
    tokio::spawn(async move {
        let answer = w.wait().await;
        text(&w.finish(answer).await)
    })
}

/// Like [`spawn_wait`], and also how long (on the paused clock) the wait took.
fn spawn_timed_wait(mut w: Waiting) -> JoinHandle<(String, Duration)> {
    let start = Instant::now();
    tokio::spawn(async move {
        let answer = w.wait().await;
        let reply = text(&w.finish(answer).await);
        (reply, start.elapsed())
    })
}

/// Let every task that can run do so (the timer, the serve task, spawned waits).
pub(in crate::engine) async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// Move the paused clock on by `ms` and let every task react.
pub(in crate::engine) async fn advance(ms: u64) {
    tokio::time::advance(Duration::from_millis(ms)).await;
    settle().await;
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn harness_sees_a_plain_round_trip() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.put_with(5, 0, 10, "hello").await, "INSERTED 1");
    assert_eq!(c.cmd("peek-ready").await, "FOUND 1 5\r\nhello");
    assert_eq!(c.state(1).await, "ready");
    assert_eq!(c.cmd("use other").await, "USING other");
}
