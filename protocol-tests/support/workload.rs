//! A beanstalk workload recorded into a [`History`] (support/history.rs), for fault
//! tests judged by the history checker: producers put jobs with bodies of their own;
//! workers reserve them and then, at random, delete, release, bury-then-kick, or touch-
//! then-delete them, pausing a little while they hold a job so that holds span time.
//!
//! Clients are grouped in *sides*: each side connects through a [`Connect`] of its own
//! (for example from a network namespace of its own, to one instance), so that a fault
//! can cut one side's clients off and not the other's. A client whose connection
//! failed, or that could not connect, waits a little and connects again; a put that
//! failed is never retried with the same body (the checker tells puts apart by body).
//! Every reply is bounded by the configured timeout.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::history::{Call, CheckConfig, History, Session, Verdict, check, final_state};
use super::rng::Rng;

/// Opens a new connection to the side's server.
pub type Connect = Arc<dyn Fn() -> io::Result<TcpStream> + Send + Sync>;

/// One group of clients.
#[derive(Clone)]
pub struct Side {
    pub name: String,
    pub connect: Connect,
    pub producers: usize,
    pub workers: usize,
    /// How long each worker holds a job before it acts on it (asking `list-tube-used`
    /// every 250 ms meanwhile, which proves its hold still stands); zero: a few ms.
    pub hold: Duration,
}

impl Side {
    /// `producers` and `workers` connecting through `connect`, holding jobs briefly.
    pub fn new(name: &str, connect: Connect, producers: usize, workers: usize) -> Side {
        Side {
            name: name.into(),
            connect,
            producers,
            workers,
            hold: Duration::ZERO,
        }
    }
}

#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// The tube every producer uses and every worker watches (alone).
    pub tube: String,
    /// Every job's TTR.
    pub ttr: u32,
    /// The bound on every reply.
    pub reply_timeout: Duration,
    /// Bytes added to every body (beyond its unique ~20-200).
    pub body_pad: usize,
    /// A producer's pause after each put (puts far outrun reserves otherwise, and
    /// every job put is looked at again at the end).
    pub pace: Duration,
    pub seed: u64,
}

impl WorkloadConfig {
    /// Tube `faults`, TTR 5 s, replies awaited 5 s, 5 ms between a producer's puts.
    pub fn new(seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            tube: "faults".into(),
            ttr: 5,
            reply_timeout: Duration::from_secs(5),
            pace: Duration::from_millis(5),
            body_pad: 0,
            seed,
        }
    }
}

struct Shared {
    cfg: WorkloadConfig,
    history: History,
    stop_producers: AtomicBool,
    stop_workers: AtomicBool,
}

/// A running workload; see the module header.
pub struct Workload {
    shared: Arc<Shared>,
    producers: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    pub started: Instant,
}

impl Workload {
    pub fn start(sides: &[Side], cfg: WorkloadConfig) -> Workload {
        let shared = Arc::new(Shared {
            cfg,
            history: History::new(),
            stop_producers: AtomicBool::new(false),
            stop_workers: AtomicBool::new(false),
        });
        let (mut producers, mut workers) = (Vec::new(), Vec::new());
        for side in sides {
            for i in 0..side.producers {
                let (shared, side) = (shared.clone(), side.clone());
                producers.push(thread::spawn(move || produce(&shared, &side, i)));
            }
            for i in 0..side.workers {
                let (shared, side) = (shared.clone(), side.clone());
                workers.push(thread::spawn(move || work(&shared, &side, i)));
            }
        }
        Workload {
            shared,
            producers,
            workers,
            started: Instant::now(),
        }
    }

    pub fn history(&self) -> &History {
        &self.shared.history
    }

    /// Puts answered `INSERTED` so far.
    pub fn acked(&self) -> usize {
        self.history()
            .count(|o| matches!(o.call, Call::Put { .. }) && o.succeeded())
    }

    /// Deletes answered `DELETED` so far.
    pub fn deleted(&self) -> usize {
        self.history()
            .count(|o| matches!(o.call, Call::Delete(_)) && o.succeeded())
    }

    /// Poll every 10 ms until `cond` holds; panics after `timeout` with `context()`.
    /// Returns the wait.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        context: impl Fn() -> String,
        cond: impl Fn(&Workload) -> bool,
    ) -> Duration {
        let start = Instant::now();
        while !cond(self) {
            assert!(
                start.elapsed() < timeout,
                "{what}: not within {timeout:?} ({} acknowledged puts, {} deletes)\n{}",
                self.acked(),
                self.deleted(),
                context()
            );
            thread::sleep(Duration::from_millis(10));
        }
        start.elapsed()
    }

    /// Wait until `more` puts and deletes were acknowledged beyond those so far.
    pub fn wait_progress(
        &self,
        more: usize,
        timeout: Duration,
        context: impl Fn() -> String,
    ) -> Duration {
        let (p, d) = (self.acked(), self.deleted());
        self.wait_until("the workload makes progress", timeout, context, |w| {
            w.acked() >= p + more && w.deleted() >= d + more
        })
    }

    /// Stop putting; the workers go on.
    pub fn stop_producers(&mut self) {
        self.shared.stop_producers.store(true, Ordering::SeqCst);
        for p in self.producers.drain(..) {
            p.join().expect("producer thread");
        }
    }

    /// Stop everything (each client closes its connection, recorded); the history.
    pub fn stop(mut self) -> History {
        self.stop_producers();
        self.shared.stop_workers.store(true, Ordering::SeqCst);
        for w in self.workers.drain(..) {
            w.join().expect("worker thread");
        }
        self.shared.history.clone()
    }
}

impl Shared {
    /// A session on a new connection of `side` with `setup` answered as expected, or
    /// `None` after a short pause.
    fn open(&self, side: &Side, name: &str, setup: &[(String, String)]) -> Option<Session> {
        let opened = (side.connect)()
            .and_then(|s| self.history.session(s, name))
            .ok()
            .and_then(|mut s| {
                setup
                    .iter()
                    .all(|(line, want)| {
                        s.plain(line, self.cfg.reply_timeout)
                            .is_some_and(|r| &r.line == want)
                    })
                    .then_some(s)
            });
        if opened.is_none() {
            thread::sleep(Duration::from_millis(50));
        }
        opened
    }
}

fn produce(shared: &Shared, side: &Side, i: usize) {
    let name = format!("{}-producer{i}", side.name);
    let tube = &shared.cfg.tube;
    let setup = [(format!("use {tube}"), format!("USING {tube}"))];
    let mut session: Option<Session> = None;
    let mut seq = 0usize;
    while !shared.stop_producers.load(Ordering::SeqCst) {
        let Some(s) = session.as_mut() else {
            session = shared.open(side, &name, &setup);
            continue;
        };
        seq += 1;
        // Unique, and with bytes a text protocol could mangle.
        let mut body = format!("{name}-{seq}\r\n\0").into_bytes();
        body.extend((0..(seq * 7) % 200 + shared.cfg.body_pad).map(|k| (k * 31 + i) as u8));
        // One priority: jobs go out in the order of their ids, so a job one client
        // holds is the first another gets if the server lets it go.
        let reply = s.put(0, shared.cfg.ttr, &body, shared.cfg.reply_timeout);
        match reply {
            Some(r) if r.word() == "INSERTED" => thread::sleep(shared.cfg.pace),
            Some(_) => thread::sleep(Duration::from_millis(20)),
            None => session = None,
        }
        if session.as_ref().is_some_and(|s| s.broken) {
            session = None;
        }
    }
    if let Some(s) = session {
        s.close();
    }
}

fn work(shared: &Shared, side: &Side, i: usize) {
    let name = format!("{}-worker{i}", side.name);
    let tube = &shared.cfg.tube;
    let setup = [
        (format!("watch {tube}"), "WATCHING 2".to_string()),
        ("ignore default".to_string(), "WATCHING 1".to_string()),
    ];
    let side_seed = side
        .name
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31) + u64::from(b));
    let mut rng = Rng::new(shared.cfg.seed ^ ((i as u64 + 1) * 0x9e37_79b9) ^ side_seed);
    let mut session: Option<Session> = None;
    let t = shared.cfg.reply_timeout;
    while !shared.stop_workers.load(Ordering::SeqCst) {
        let Some(s) = session.as_mut() else {
            session = shared.open(side, &name, &setup);
            continue;
        };
        match s.reserve(1, t) {
            Some(r) if r.word() == "RESERVED" => {
                if let Some(id) = r.id()
                    && hold(s, side.hold, t)
                {
                    handle(s, id, &mut rng, t);
                }
            }
            Some(r) if r.line == "INTERNAL_ERROR" => thread::sleep(Duration::from_millis(20)),
            _ => {}
        }
        if s.broken {
            session = None;
        }
    }
    if let Some(s) = session {
        s.close();
    }
}

/// Hold a job for `d`, asking `list-tube-used` every 250 ms; false when the session
/// broke meanwhile.
fn hold(s: &mut Session, d: Duration, t: Duration) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(250).min(until - Instant::now()));
        s.ping(t);
        if s.broken {
            return false;
        }
    }
    true
}

/// What a worker does with a job it holds.
fn handle(s: &mut Session, id: u64, rng: &mut Rng, t: Duration) {
    thread::sleep(Duration::from_millis(rng.below(15)));
    let ok = |r: Option<super::client::Reply>, want: &str| r.is_some_and(|r| r.line == want);
    match rng.below(10) {
        0 => {
            s.release(id, 1, 0, t);
        }
        1 => {
            if ok(s.bury(id, 5, t), "BURIED") {
                s.kick(id, t);
            }
        }
        2 => {
            if ok(s.touch(id, t), "TOUCHED") {
                thread::sleep(Duration::from_millis(rng.below(15)));
                s.delete(id, t);
            }
        }
        _ => {
            s.delete(id, t);
        }
    }
}

/// Read the final state through a new connection from `connect` (retried for up to
/// 30 s while the server cannot answer for certain) and check `history` against it.
pub fn judge(history: &History, connect: &Connect) -> Verdict {
    let ops = history.ops();
    let ids = super::history::ids(&ops);
    let start = Instant::now();
    let end = loop {
        let attempt = connect()
            .map_err(|e| e.to_string())
            .and_then(|s| {
                super::client::Client::from_stream(s, "auditor").map_err(|e| e.to_string())
            })
            .and_then(|mut c| final_state(&mut c, &ids));
        match attempt {
            Ok(end) => break end,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "cannot read the final state: {e}"
                );
                thread::sleep(Duration::from_millis(100));
            }
        }
    };
    check(&ops, &end, CheckConfig::default())
}

/// The durations of the ops that satisfy `f`, as "p50 / max ms (n)".
pub fn spread(history: &History, f: impl Fn(&super::history::Op) -> bool) -> String {
    let mut d: Vec<Duration> = history
        .ops()
        .iter()
        .filter(|o| f(o))
        .map(|o| o.end - o.start)
        .collect();
    if d.is_empty() {
        return "none".into();
    }
    d.sort();
    format!(
        "p50 {} ms, max {} ms ({})",
        d[d.len() / 2].as_millis(),
        d[d.len() - 1].as_millis(),
        d.len()
    )
}
