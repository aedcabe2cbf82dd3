//! A producer/worker load on real server processes that keeps a ledger of every job,
//! so a test can crash a process (redstalk or its Redis) in the middle of it and then
//! prove that no acknowledged job was lost and none was deleted twice
//! ([`Ledger::audit`]).
//!
//! Producers put jobs with unique bodies; workers `reserve-with-timeout` and `delete`
//! them. Every outcome is recorded: a put answered `INSERTED <id>` is acknowledged; a
//! put answered `INTERNAL_ERROR` or not answered at all may or may not have been stored
//! (Redis may have run the script before the reply was lost), so it is only counted; a
//! delete that got no definite answer may or may not have happened. Every operation is
//! bounded by a timeout. A connection that fails is dropped and re-opened to the current
//! target, which a test moves with [`Load::retarget`] when it restarts the server on
//! another port.

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::client::{Client, Reply};

/// The shape of a load.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub producers: usize,
    pub workers: usize,
    /// The tube every producer uses and every worker watches (alone).
    pub tube: String,
    /// The TTR of every job: how soon a job held by a vanished worker comes back.
    pub ttr: u32,
    /// The bound on every reply; a reply that takes longer is a failure of the server.
    pub reply_timeout: Duration,
}

/// Everything that happened to the jobs of a load.
#[derive(Debug, Default)]
pub struct Ledger {
    /// id -> body of every put answered `INSERTED <id>`.
    pub acked: BTreeMap<u64, Vec<u8>>,
    /// Bodies of puts answered `INTERNAL_ERROR`: they may exist.
    pub put_failed: Vec<Vec<u8>>,
    /// Bodies of puts whose connection failed before the reply: they may exist.
    pub put_unanswered: Vec<Vec<u8>>,
    /// Every `DELETED` received: the id and the body that was reserved under it.
    pub deleted: Vec<(u64, Vec<u8>)>,
    /// Jobs whose delete was sent but never definitely answered (the connection failed,
    /// or it answered `INTERNAL_ERROR` and then `NOT_FOUND`): they may be gone.
    pub delete_uncertain: Vec<(u64, Vec<u8>)>,
    /// Deletes answered `NOT_FOUND` at the first attempt: the reservation had lapsed
    /// (TTR) and the job went back to ready, to be reserved again.
    pub lapsed: usize,
    /// `INTERNAL_ERROR` replies to any command.
    pub internal_errors: usize,
    /// Connections that failed (refused, closed, reset) and were re-opened.
    pub io_errors: usize,
    /// Replies or failures no rule allows (a test fails on any).
    pub surprises: Vec<String>,
}

/// What [`Ledger::audit`] found.
#[derive(Debug, Default)]
pub struct Audit {
    pub acknowledged: usize,
    /// Acknowledged jobs deleted by a worker that received `DELETED`.
    pub deleted: usize,
    /// Acknowledged jobs not deleted and still there (`peek <id>` finds the body).
    pub found: usize,
    /// Acknowledged jobs that are gone after a delete that was sent but not answered.
    pub delete_unanswered: usize,
    /// Acknowledged jobs neither deleted nor found: lost.
    pub lost: Vec<u64>,
    /// Ids that received `DELETED` more than once.
    pub deleted_twice: Vec<u64>,
    /// Bodies that came back wrong, or jobs no put can explain.
    pub wrong: Vec<String>,
    /// Puts without `INSERTED` (error or no reply), and how many of those a worker
    /// nevertheless reserved (they existed).
    pub unacknowledged: usize,
    pub unacknowledged_seen: usize,
}

impl Audit {
    /// One line of figures.
    pub fn summary(&self) -> String {
        format!(
            "acknowledged {}, deleted {}, found {}, delete unanswered {}, lost {}; \
             unacknowledged puts {} (seen by a worker: {}); deleted twice {}",
            self.acknowledged,
            self.deleted,
            self.found,
            self.delete_unanswered,
            self.lost.len(),
            self.unacknowledged,
            self.unacknowledged_seen,
            self.deleted_twice.len(),
        )
    }

    /// No acknowledged job lost, none deleted twice, every body intact.
    pub fn assert_sound(&self, context: &str) {
        let first = |v: &[u64]| v[..v.len().min(10)].to_vec();
        assert!(
            self.lost.is_empty(),
            "{context}: acknowledged jobs lost: {} of {}, first ids {:?}\n{}",
            self.lost.len(),
            self.acknowledged,
            first(&self.lost),
            self.summary()
        );
        assert!(
            self.deleted_twice.is_empty(),
            "{context}: jobs deleted twice: {:?}\n{}",
            first(&self.deleted_twice),
            self.summary()
        );
        assert!(
            self.wrong.is_empty(),
            "{context}: {:?}\n{}",
            &self.wrong[..self.wrong.len().min(10)],
            self.summary()
        );
    }
}

impl Ledger {
    /// Account for every acknowledged job: deleted by a worker that was told so, or
    /// still there (`peek <id>` through `c` returns its body), or gone after a delete
    /// that was sent without an answer. Anything else is lost. Also checks that no id
    /// was deleted twice and that every reserved body is the one put under that id.
    pub fn audit(&self, c: &mut Client) -> Audit {
        let mut a = Audit {
            acknowledged: self.acked.len(),
            unacknowledged: self.put_failed.len() + self.put_unanswered.len(),
            ..Audit::default()
        };
        let unacked: HashMap<&[u8], ()> = self
            .put_failed
            .iter()
            .chain(&self.put_unanswered)
            .map(|b| (b.as_slice(), ()))
            .collect();
        let mut deletes: BTreeMap<u64, usize> = BTreeMap::new();
        // Bodies are unique per put: one seen under two ids is a duplicated job.
        let mut id_of_body: HashMap<&[u8], u64> = HashMap::new();
        for (id, body) in self.deleted.iter().chain(&self.delete_uncertain) {
            if let Some(other) = id_of_body.insert(body, *id)
                && other != *id
            {
                a.wrong.push(format!(
                    "body {:?} reserved as job {other} and as job {id}",
                    String::from_utf8_lossy(body)
                ));
            }
            match self.acked.get(id) {
                Some(put) if put != body => a.wrong.push(format!(
                    "job {id} reserved with body {:?}, put with {:?}",
                    String::from_utf8_lossy(body),
                    String::from_utf8_lossy(put)
                )),
                Some(_) => {}
                None if unacked.contains_key(body.as_slice()) => a.unacknowledged_seen += 1,
                None => a.wrong.push(format!(
                    "job {id} with body {:?} was never put",
                    String::from_utf8_lossy(body)
                )),
            }
        }
        for (id, _) in &self.deleted {
            *deletes.entry(*id).or_default() += 1;
        }
        a.deleted_twice = deletes
            .iter()
            .filter(|&(_, &n)| n > 1)
            .map(|(&id, _)| id)
            .collect();
        let uncertain: HashMap<u64, ()> = self
            .delete_uncertain
            .iter()
            .map(|(id, _)| (*id, ()))
            .collect();
        for (id, body) in &self.acked {
            if deletes.contains_key(id) {
                a.deleted += 1;
                continue;
            }
            let r = c.cmd(&format!("peek {id}"));
            if r.word() == "FOUND" {
                if r.body.as_ref() == Some(body) {
                    a.found += 1;
                } else {
                    a.wrong
                        .push(format!("peek {id}: {:?} with another body", r.line));
                }
            } else if r.line != "NOT_FOUND" {
                a.wrong.push(format!("peek {id}: {:?}", r.line));
            } else if uncertain.contains_key(id) {
                a.delete_unanswered += 1;
            } else {
                a.lost.push(*id);
            }
        }
        a
    }

    /// Unacknowledged puts plus everything else a worker or producer counted, in one
    /// line.
    pub fn counts(&self) -> String {
        format!(
            "{} puts acknowledged, {} answered INTERNAL_ERROR, {} unanswered; {} DELETED, \
             {} deletes unanswered, {} reservations lapsed; {} INTERNAL_ERROR replies in \
             all, {} failed connections",
            self.acked.len(),
            self.put_failed.len(),
            self.put_unanswered.len(),
            self.deleted.len(),
            self.delete_uncertain.len(),
            self.lapsed,
            self.internal_errors,
            self.io_errors,
        )
    }
}

struct Shared {
    cfg: LoadConfig,
    target: Mutex<SocketAddr>,
    ledger: Mutex<Ledger>,
    stop_producers: AtomicBool,
    stop_workers: AtomicBool,
}

impl Shared {
    fn note(&self, f: impl FnOnce(&mut Ledger)) {
        f(&mut self.ledger.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn target(&self) -> SocketAddr {
        *self.target.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection whose first command (`setup`) succeeded, or `None` (counted) after
    /// a short pause, to be retried by the caller's loop.
    fn open(&self, name: &str, setup: &[(String, String)]) -> Option<Client> {
        let ok = Client::try_connect(self.target(), name)
            .ok()
            .and_then(|mut c| {
                setup
                    .iter()
                    .all(
                        |(cmd, want)| match c.try_call(cmd.as_bytes(), self.cfg.reply_timeout) {
                            Ok(r) if &r.line == want => true,
                            Ok(r) if r.line == "INTERNAL_ERROR" => {
                                self.note(|l| l.internal_errors += 1);
                                false
                            }
                            Ok(r) => {
                                self.note(|l| {
                                    l.surprises.push(format!("{name}: {cmd:?}: {:?}", r.line))
                                });
                                false
                            }
                            Err(e) => {
                                self.failed(name, cmd, &e);
                                false
                            }
                        },
                    )
                    .then_some(c)
            });
        if ok.is_none() {
            thread::sleep(Duration::from_millis(20));
        }
        ok
    }

    /// A connection failed: counted, and a hang (no reply within the bound) is a
    /// surprise, since the server must answer or close.
    fn failed(&self, name: &str, what: &str, e: &std::io::Error) {
        self.note(|l| {
            l.io_errors += 1;
            if e.kind() == ErrorKind::TimedOut {
                l.surprises.push(format!("{name}: {what:?} hung: {e}"));
            }
        });
    }
}

/// A running load; see the module header.
pub struct Load {
    shared: Arc<Shared>,
    producers: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    started: Instant,
}

impl Load {
    /// Start the producer and worker threads against `addr`.
    pub fn start(addr: SocketAddr, cfg: LoadConfig) -> Load {
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            target: Mutex::new(addr),
            ledger: Mutex::new(Ledger::default()),
            stop_producers: AtomicBool::new(false),
            stop_workers: AtomicBool::new(false),
        });
        let producers = (0..cfg.producers)
            .map(|p| {
                let shared = shared.clone();
                thread::spawn(move || produce(&shared, p))
            })
            .collect();
        let workers = (0..cfg.workers)
            .map(|w| {
                let shared = shared.clone();
                thread::spawn(move || work(&shared, w))
            })
            .collect();
        Load {
            shared,
            producers,
            workers,
            started: Instant::now(),
        }
    }

    /// New connections go to `addr` (a restarted server).
    pub fn retarget(&self, addr: SocketAddr) {
        *self.shared.target.lock().unwrap_or_else(|e| e.into_inner()) = addr;
    }

    /// Look at the ledger as it is now.
    pub fn ledger<R>(&self, f: impl FnOnce(&Ledger) -> R) -> R {
        f(&self.shared.ledger.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Poll every 5 ms until `cond` holds on the ledger; panics after `timeout` with
    /// the ledger's counts and `context()` (e.g. the server's log). Returns the wait.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        context: impl Fn() -> String,
        cond: impl Fn(&Ledger) -> bool,
    ) -> Duration {
        let start = Instant::now();
        while !self.ledger(&cond) {
            assert!(
                start.elapsed() < timeout,
                "{what}: not within {timeout:?}: {}\n{}",
                self.ledger(Ledger::counts),
                context()
            );
            thread::sleep(Duration::from_millis(5));
        }
        start.elapsed()
    }

    /// The load the failover tests run: 4 producers and 4 workers on tube `load`, TTR
    /// 5 s, replies awaited 5 s.
    pub fn for_failover(addr: SocketAddr) -> Load {
        Load::start(
            addr,
            LoadConfig {
                producers: 4,
                workers: 4,
                tube: "load".into(),
                ttr: 5,
                reply_timeout: Duration::from_secs(5),
            },
        )
    }

    /// After a failover: let 200 more puts be acknowledged (within 30 s), stop, check
    /// that `srv` still runs, and audit what the ledger says against it.
    pub fn finish(mut self, srv: &mut super::ServerProc, log: &super::Log) -> (Ledger, Audit) {
        let acked_after = self.ledger(|l| l.acked.len());
        self.wait_until(
            "the load goes on",
            Duration::from_secs(30),
            || log.tail(),
            |l| l.acked.len() > acked_after + 200,
        );
        self.stop_producers();
        let ledger = self.stop();
        assert!(srv.is_running(), "redstalk died: {}", log.tail());
        let mut c = Client::connect(srv.addr, "auditor");
        let audit = ledger.audit(&mut c);
        (ledger, audit)
    }

    /// Time since the load started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stop putting (the workers go on).
    pub fn stop_producers(&mut self) {
        self.shared.stop_producers.store(true, Ordering::SeqCst);
        for p in self.producers.drain(..) {
            p.join().expect("producer thread");
        }
    }

    /// Stop everything; the ledger.
    pub fn stop(mut self) -> Ledger {
        self.stop_producers();
        self.shared.stop_workers.store(true, Ordering::SeqCst);
        for w in self.workers.drain(..) {
            w.join().expect("worker thread");
        }
        std::mem::take(&mut *self.shared.ledger.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Poll `stats-tube <tube>` through `c` until no job is ready, reserved or delayed in it
/// (a tube that no longer exists is empty), within `timeout`; the time it took.
pub fn wait_drained(c: &mut Client, tube: &str, timeout: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        let r = c.cmd(&format!("stats-tube {tube}"));
        let left: Vec<(String, String)> = match r.word() {
            "NOT_FOUND" => Vec::new(),
            "OK" => super::client::parse_dict(&r.text())
                .into_iter()
                .filter(|(k, v)| {
                    matches!(
                        k.as_str(),
                        "current-jobs-ready" | "current-jobs-reserved" | "current-jobs-delayed"
                    ) && v != "0"
                })
                .collect(),
            _ => vec![("reply".into(), r.line.clone())],
        };
        if left.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "tube {tube} not drained within {timeout:?}: {left:?}"
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn produce(shared: &Shared, p: usize) {
    let name = format!("producer{p}");
    let setup = [(
        format!("use {}\r\n", shared.cfg.tube),
        format!("USING {}", shared.cfg.tube),
    )];
    let mut conn: Option<Client> = None;
    let mut seq = 0usize;
    while !shared.stop_producers.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = shared.open(&name, &setup);
            continue;
        };
        seq += 1;
        // Unique, and with bytes a text protocol could mangle.
        let mut body = format!("{}-p{p}-{seq}\r\n\0", shared.cfg.tube).into_bytes();
        body.extend((0..(seq * 7) % 300).map(|i| (i * 31 + p) as u8));
        match c.try_put(0, 0, shared.cfg.ttr, &body, shared.cfg.reply_timeout) {
            Ok(r) => match (r.word(), r.id()) {
                ("INSERTED", Some(id)) => shared.note(|l| {
                    if let Some(old) = l.acked.insert(id, body) {
                        l.surprises.push(format!(
                            "id {id} acknowledged twice (first for {:?})",
                            String::from_utf8_lossy(&old)
                        ));
                    }
                }),
                ("INTERNAL_ERROR", _) => {
                    shared.note(|l| {
                        l.internal_errors += 1;
                        l.put_failed.push(body);
                    });
                    thread::sleep(Duration::from_millis(20));
                }
                _ => shared.note(|l| l.surprises.push(format!("{name}: put: {:?}", r.line))),
            },
            Err(e) => {
                shared.failed(&name, "put", &e);
                shared.note(|l| l.put_unanswered.push(body));
                conn = None;
            }
        }
    }
}

fn work(shared: &Shared, w: usize) {
    let name = format!("worker{w}");
    let tube = &shared.cfg.tube;
    let setup = if tube == "default" {
        Vec::new()
    } else {
        vec![
            (format!("watch {tube}\r\n"), "WATCHING 2".to_string()),
            ("ignore default\r\n".into(), "WATCHING 1".into()),
        ]
    };
    let mut conn: Option<Client> = None;
    while !shared.stop_workers.load(Ordering::SeqCst) {
        let Some(c) = conn.as_mut() else {
            conn = shared.open(&name, &setup);
            continue;
        };
        // A short timeout, so a stop is noticed within a second.
        let r = match c.try_call(b"reserve-with-timeout 1\r\n", shared.cfg.reply_timeout) {
            Ok(r) => r,
            Err(e) => {
                shared.failed(&name, "reserve", &e);
                conn = None;
                continue;
            }
        };
        match (r.word(), r.id()) {
            ("RESERVED", Some(id)) => {
                let body = r.body.unwrap_or_default();
                if !delete(shared, &name, c, id, body) {
                    conn = None;
                }
            }
            ("TIMED_OUT", _) => {}
            ("INTERNAL_ERROR", _) => {
                shared.note(|l| l.internal_errors += 1);
                thread::sleep(Duration::from_millis(20));
            }
            _ => shared.note(|l| l.surprises.push(format!("{name}: reserve: {}", show(&r)))),
        }
    }
}

/// Delete a reserved job, retrying while the server answers `INTERNAL_ERROR`. False
/// when the connection failed (the caller drops it).
fn delete(shared: &Shared, name: &str, c: &mut Client, id: u64, body: Vec<u8>) -> bool {
    let req = format!("delete {id}\r\n");
    let mut errors = 0;
    loop {
        match c.try_call(req.as_bytes(), shared.cfg.reply_timeout) {
            Ok(r) if r.line == "DELETED" => {
                shared.note(|l| l.deleted.push((id, body)));
                return true;
            }
            // After an error the first attempt may have deleted it after all.
            Ok(r) if r.line == "NOT_FOUND" && errors > 0 => {
                shared.note(|l| l.delete_uncertain.push((id, body)));
                return true;
            }
            Ok(r) if r.line == "NOT_FOUND" => {
                shared.note(|l| l.lapsed += 1);
                return true;
            }
            // Given up only when the load stops (the job is then accounted as uncertain).
            Ok(r) if r.line == "INTERNAL_ERROR" && shared.stop_workers.load(Ordering::SeqCst) => {
                shared.note(|l| {
                    l.internal_errors += 1;
                    l.delete_uncertain.push((id, body));
                });
                return true;
            }
            Ok(r) if r.line == "INTERNAL_ERROR" => {
                errors += 1;
                shared.note(|l| l.internal_errors += 1);
                thread::sleep(Duration::from_millis(20));
            }
            Ok(r) => {
                shared.note(|l| l.surprises.push(format!("{name}: {req:?}: {}", show(&r))));
                return true;
            }
            Err(e) => {
                shared.failed(name, "delete", &e);
                shared.note(|l| l.delete_uncertain.push((id, body)));
                return false;
            }
        }
    }
}

fn show(r: &Reply) -> String {
    match &r.body {
        Some(b) => format!("{:?} + {} body bytes", r.line, b.len()),
        None => format!("{:?}", r.line),
    }
}
