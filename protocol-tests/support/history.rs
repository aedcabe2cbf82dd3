//! A history of beanstalk operations and the checker that judges it, for every fault
//! test (Jepsen's method: record what each client asked and was told, with when, then
//! check the whole history against what the protocol promises).
//!
//! Recording: a [`History`] is shared by the clients of a run; each connection is a
//! [`Session`] that sends one command at a time and records it as an [`Op`]: the call,
//! the connection, the reply (or none: the connection failed or the reply did not come
//! in time) and the times the request was sent and the reply read, on the test's
//! monotonic clock. A session whose connection failed is broken: the caller drops it.
//!
//! Checking ([`check`]): with the history and the final state (every id the history
//! names, peeked at the end, [`final_state`]), each of these counts is zero in a sound
//! run; an operation without a reply, or answered `INTERNAL_ERROR`, may have applied
//! either way, and the checker never counts against the server what it may have done:
//! - **lost**: a put answered `INSERTED <id>` whose job is gone at the end, with no
//!   delete of it that may have applied (answered `DELETED`, `INTERNAL_ERROR`, or not at
//!   all);
//! - **undone**: a delete answered `DELETED` whose job is there at the end, or is
//!   deleted, touched, released, buried or kicked successfully again by a command sent
//!   after that reply;
//! - **reserved after delete**: a reserve sent after a `DELETED` of the job it returned;
//! - **double held**: two connections told `RESERVED` for one job with holds that must
//!   overlap, whatever the moments the server granted them. A hold is known to last
//!   from its grant (between the reserve's send and its reply) until the last moment
//!   the server was seen serving its connection with the hold on (see [`hold_ends`]:
//!   a server may close a connection, freeing its jobs, before the client knows), and
//!   never past its TTR counted from the reserve's send (or a `TOUCHED` touch's);
//! - **wrong**: a job reserved or peeked with a body other than its put's, a body under
//!   two ids, a job no put explains, a job made by a put that was refused
//!   (`OUT_OF_MEMORY`, `DRAINING`, …), an id acknowledged twice.
//!
//! Bodies identify puts: every put of a run must carry a body of its own (a retried
//! put gets a new body), which is how a reserved job is traced to its put even when the
//! put's reply was lost.
//!
//! Invariants: ops are recorded in the order their replies were read (each session is
//! sequential, so per connection the order is the order sent); `start <= end`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{Client, Reply, put_request};

/// One connection of a run (unique within its [`History`]).
pub type ConnId = u64;

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Put {
        body: Vec<u8>,
        ttr: u32,
    },
    /// `reserve` or `reserve-with-timeout`.
    Reserve,
    Delete(u64),
    Release(u64),
    Bury(u64),
    /// `kick-job <id>`.
    Kick(u64),
    Touch(u64),
    /// The client closed its connection (its jobs go back to ready).
    Close,
    /// A session command (`list-tube-used`…): it changes no job, but its reply proves
    /// the server was serving the connection (so its holds were on) after it was sent.
    Session(String),
}

impl Call {
    /// The job the call names, if it names one.
    pub fn id(&self) -> Option<u64> {
        match self {
            Call::Delete(id)
            | Call::Release(id)
            | Call::Bury(id)
            | Call::Kick(id)
            | Call::Touch(id) => Some(*id),
            _ => None,
        }
    }

    /// The reply word that says the call did what it asked.
    fn success(&self) -> &'static str {
        match self {
            Call::Put { .. } => "INSERTED",
            Call::Reserve => "RESERVED",
            Call::Delete(_) => "DELETED",
            Call::Release(_) => "RELEASED",
            Call::Bury(_) => "BURIED",
            Call::Kick(_) => "KICKED",
            Call::Touch(_) => "TOUCHED",
            Call::Close | Call::Session(_) => "",
        }
    }
}

/// One operation: a call on one connection, its reply, and when.
#[derive(Clone, Debug)]
pub struct Op {
    pub conn: ConnId,
    pub call: Call,
    /// When the request was sent (before its first byte was written).
    pub start: Instant,
    /// When the reply was read, or the failure seen.
    pub end: Instant,
    /// `None`: no reply (the connection failed, or the reply did not come in time).
    pub reply: Option<Reply>,
}

impl Op {
    /// It did what it asked (`INSERTED`, `RESERVED`, `DELETED`, …).
    pub fn succeeded(&self) -> bool {
        self.reply
            .as_ref()
            .is_some_and(|r| r.word() == self.call.success())
    }

    /// It may have applied although its reply does not say so: no reply, or
    /// `INTERNAL_ERROR`.
    pub fn uncertain(&self) -> bool {
        self.reply
            .as_ref()
            .is_none_or(|r| r.line == "INTERNAL_ERROR")
    }

    /// The server answered, and not with `INTERNAL_ERROR`: it served this connection
    /// at some moment after `start`.
    pub fn served(&self) -> bool {
        !self.uncertain()
    }
}

/// The operations of a run, shared by its clients.
#[derive(Clone, Default)]
pub struct History {
    ops: Arc<Mutex<Vec<Op>>>,
    next_conn: Arc<AtomicU64>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// Record `op` (in the order replies are read).
    pub fn record(&self, op: Op) {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(op);
    }

    /// A new connection id.
    pub fn conn_id(&self) -> ConnId {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// A session on `stream`, recording into this history.
    pub fn session(&self, stream: TcpStream, name: &str) -> io::Result<Session> {
        Ok(Session {
            client: Client::from_stream(stream, name)?,
            conn: self.conn_id(),
            history: self.clone(),
            broken: false,
        })
    }

    /// Every op recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write every op, one a line (ms from the first op's send, connection, call,
    /// reply, duration), to `$REDSTALK_FAULTS_HISTORY/<name>.txt` when that variable names
    /// a directory: the whole run, for reading after a failure.
    pub fn dump(&self, name: &str) {
        let Some(dir) = std::env::var_os("REDSTALK_FAULTS_HISTORY") else {
            return;
        };
        let ops = self.ops();
        let Some(t0) = ops.iter().map(|o| o.start).min() else {
            return;
        };
        let mut out = String::new();
        for o in &ops {
            let call = match &o.call {
                Call::Put { body, ttr } => format!("put ttr {ttr} {:?}", show(body)),
                c => format!("{c:?}"),
            };
            out.push_str(&format!(
                "{:>8} conn {:>4} {call} -> {} ({} ms)\n",
                o.start.duration_since(t0).as_millis(),
                o.conn,
                o.reply.as_ref().map_or("(no reply)", |r| r.line.as_str()),
                o.end.duration_since(o.start).as_millis()
            ));
        }
        let file =
            std::path::Path::new(&dir).join(format!("{}.txt", name.replace([' ', '/'], "_")));
        if let Err(e) = std::fs::write(&file, out) {
            eprintln!("write {}: {e}", file.display());
        }
    }

    /// How many ops satisfy `f`.
    pub fn count(&self, f: impl Fn(&Op) -> bool) -> usize {
        self.ops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|o| f(o))
            .count()
    }
}

/// One recorded connection; see the module header.
pub struct Session {
    pub client: Client,
    pub conn: ConnId,
    history: History,
    /// A call got no reply: the connection's state is unknown; drop the session.
    pub broken: bool,
}

impl Session {
    /// Send `request` for `call`, read its reply within `timeout`, record both.
    pub fn call(&mut self, call: Call, request: &[u8], timeout: Duration) -> Option<Reply> {
        let start = Instant::now();
        let reply = self.client.try_call(request, timeout).ok();
        self.broken |= reply.is_none();
        self.history.record(Op {
            conn: self.conn,
            call,
            start,
            end: Instant::now(),
            reply: reply.clone(),
        });
        reply
    }

    pub fn put(&mut self, pri: u32, ttr: u32, body: &[u8], timeout: Duration) -> Option<Reply> {
        let call = Call::Put {
            body: body.to_vec(),
            ttr,
        };
        self.call(call, &put_request(pri, 0, ttr, body), timeout)
    }

    /// `reserve-with-timeout <secs>`.
    pub fn reserve(&mut self, secs: u32, timeout: Duration) -> Option<Reply> {
        let req = format!("reserve-with-timeout {secs}\r\n");
        self.call(Call::Reserve, req.as_bytes(), timeout)
    }

    pub fn delete(&mut self, id: u64, timeout: Duration) -> Option<Reply> {
        let req = format!("delete {id}\r\n");
        self.call(Call::Delete(id), req.as_bytes(), timeout)
    }

    pub fn release(&mut self, id: u64, pri: u32, delay: u32, timeout: Duration) -> Option<Reply> {
        let req = format!("release {id} {pri} {delay}\r\n");
        self.call(Call::Release(id), req.as_bytes(), timeout)
    }

    pub fn bury(&mut self, id: u64, pri: u32, timeout: Duration) -> Option<Reply> {
        let req = format!("bury {id} {pri}\r\n");
        self.call(Call::Bury(id), req.as_bytes(), timeout)
    }

    pub fn kick(&mut self, id: u64, timeout: Duration) -> Option<Reply> {
        let req = format!("kick-job {id}\r\n");
        self.call(Call::Kick(id), req.as_bytes(), timeout)
    }

    pub fn touch(&mut self, id: u64, timeout: Duration) -> Option<Reply> {
        let req = format!("touch {id}\r\n");
        self.call(Call::Touch(id), req.as_bytes(), timeout)
    }

    /// `list-tube-used`, recorded: proof that the server still serves this connection.
    pub fn ping(&mut self, timeout: Duration) -> Option<Reply> {
        let call = Call::Session("list-tube-used".into());
        self.call(call, b"list-tube-used\r\n", timeout)
    }

    /// An unrecorded command (`use`, `watch`, `stats`…: nothing the checker judges).
    pub fn plain(&mut self, line: &str, timeout: Duration) -> Option<Reply> {
        let req = format!("{line}\r\n");
        let reply = self.client.try_call(req.as_bytes(), timeout).ok();
        self.broken |= reply.is_none();
        reply
    }

    /// Close the connection, recorded (its held jobs may be freed from now on).
    pub fn close(self) {
        let now = Instant::now();
        let _ = self.client.socket().shutdown(std::net::Shutdown::Both);
        self.history.record(Op {
            conn: self.conn,
            call: Call::Close,
            start: now,
            end: now,
            reply: None,
        });
    }
}

/// Every job id the history names (acknowledged puts, reserves, id commands).
pub fn ids(ops: &[Op]) -> BTreeSet<u64> {
    ops.iter()
        .filter_map(|o| {
            o.call.id().or_else(|| match &o.call {
                Call::Put { .. } | Call::Reserve if o.succeeded() => o.reply.as_ref()?.id(),
                _ => None,
            })
        })
        .collect()
}

/// What is left at the end: id -> its body, or `None` when `peek` finds no such job.
pub type FinalState = BTreeMap<u64, Option<Vec<u8>>>;

/// `peek` every id of `ids` through `c` (pipelined, 200 at a time); an answer other
/// than `FOUND` / `NOT_FOUND` is an error (the final state must be certain).
pub fn final_state(c: &mut Client, ids: &BTreeSet<u64>) -> Result<FinalState, String> {
    let mut out = FinalState::new();
    let ids: Vec<u64> = ids.iter().copied().collect();
    for chunk in ids.chunks(200) {
        let req: String = chunk.iter().map(|id| format!("peek {id}\r\n")).collect();
        use std::io::Write;
        c.socket()
            .write_all(req.as_bytes())
            .map_err(|e| format!("peek: {e}"))?;
        for &id in chunk {
            let r = c
                .try_reply(Duration::from_secs(10))
                .map_err(|e| format!("peek {id}: {e}"))?;
            match r.word() {
                "FOUND" => out.insert(id, r.body),
                "NOT_FOUND" => out.insert(id, None),
                _ => return Err(format!("peek {id}: {:?}", r.line)),
            };
        }
    }
    Ok(out)
}

/// How the checker reads time.
#[derive(Clone, Copy, Debug)]
pub struct CheckConfig {
    /// Slack on every TTR: the server counts it on its own clock, from a moment the
    /// client only bounds, and returns a job at its deadline.
    pub ttr_slack: Duration,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            ttr_slack: Duration::from_millis(200),
        }
    }
}

/// What [`check`] found; every `Vec` is empty in a sound run.
#[derive(Debug, Default)]
pub struct Verdict {
    pub ops: usize,
    pub puts_acked: usize,
    /// Puts answered `INTERNAL_ERROR` or not at all.
    pub puts_uncertain: usize,
    /// ... of which a job was seen (reserved, or there at the end).
    pub puts_uncertain_seen: usize,
    pub reserves: usize,
    pub deletes_acked: usize,
    /// Ops answered `INTERNAL_ERROR`, and ops without a reply.
    pub internal_errors: usize,
    pub unanswered: usize,
    pub lost: Vec<u64>,
    pub undone: Vec<String>,
    pub reserved_after_delete: Vec<String>,
    pub double_held: Vec<String>,
    pub wrong: Vec<String>,
}

impl Verdict {
    /// One line of figures and counts.
    pub fn summary(&self) -> String {
        format!(
            "{} ops: {} puts acknowledged, {} uncertain ({} of them seen), {} reserves, \
             {} deletes acknowledged, {} INTERNAL_ERROR, {} unanswered; lost {}, undone {}, \
             reserved after delete {}, double held {}, wrong {}",
            self.ops,
            self.puts_acked,
            self.puts_uncertain,
            self.puts_uncertain_seen,
            self.reserves,
            self.deletes_acked,
            self.internal_errors,
            self.unanswered,
            self.lost.len(),
            self.undone.len(),
            self.reserved_after_delete.len(),
            self.double_held.len(),
            self.wrong.len(),
        )
    }

    pub fn is_sound(&self) -> bool {
        self.lost.is_empty()
            && self.undone.is_empty()
            && self.reserved_after_delete.is_empty()
            && self.double_held.is_empty()
            && self.wrong.is_empty()
    }

    /// Panic, naming `context` and the first findings, unless the run is sound.
    pub fn assert_sound(&self, context: &str) {
        let first = |v: &[String]| v[..v.len().min(5)].to_vec();
        assert!(
            self.is_sound(),
            "{context}: {}\nlost (first ids): {:?}\nundone: {:?}\nreserved after delete: \
             {:?}\ndouble held: {:?}\nwrong: {:?}",
            self.summary(),
            &self.lost[..self.lost.len().min(10)],
            first(&self.undone),
            first(&self.reserved_after_delete),
            first(&self.double_held),
            first(&self.wrong),
        );
    }
}

/// Judge `ops` against `end` (see the module header).
pub fn check(ops: &[Op], end: &FinalState, cfg: CheckConfig) -> Verdict {
    let mut v = Verdict {
        ops: ops.len(),
        internal_errors: ops
            .iter()
            .filter(|o| o.reply.as_ref().is_some_and(|r| r.line == "INTERNAL_ERROR"))
            .count(),
        unanswered: ops
            .iter()
            .filter(|o| o.reply.is_none() && o.call != Call::Close)
            .count(),
        ..Verdict::default()
    };
    let puts = Puts::index(ops, &mut v);
    v.reserves = ops
        .iter()
        .filter(|o| o.call == Call::Reserve && o.succeeded())
        .count();
    check_bodies(ops, end, &puts, &mut v);
    check_deletes(ops, end, &puts, &mut v);
    check_holds(ops, &puts, cfg, &mut v);
    v
}

/// The puts of a history, by body and by acknowledged id.
struct Puts<'a> {
    /// body -> (ttr, outcome) of the put that carried it.
    by_body: HashMap<&'a [u8], (u32, PutOutcome)>,
    /// id -> body of every `INSERTED <id>`.
    acked: BTreeMap<u64, &'a [u8]>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PutOutcome {
    Acked,
    Uncertain,
    Refused,
}

impl<'a> Puts<'a> {
    fn index(ops: &'a [Op], v: &mut Verdict) -> Puts<'a> {
        let mut p = Puts {
            by_body: HashMap::new(),
            acked: BTreeMap::new(),
        };
        for o in ops {
            let Call::Put { body, ttr } = &o.call else {
                continue;
            };
            let outcome = if o.succeeded() {
                PutOutcome::Acked
            } else if o.uncertain() {
                PutOutcome::Uncertain
            } else {
                PutOutcome::Refused
            };
            if p.by_body.insert(body, (*ttr, outcome)).is_some() {
                v.wrong.push(format!(
                    "two puts carried the body {:?}: the history cannot tell them apart",
                    show(body)
                ));
            }
            match outcome {
                PutOutcome::Acked => {
                    v.puts_acked += 1;
                    let id = o.reply.as_ref().and_then(Reply::id).unwrap_or(0);
                    if let Some(other) = p.acked.insert(id, body) {
                        v.wrong.push(format!(
                            "id {id} acknowledged twice ({:?} and {:?})",
                            show(other),
                            show(body)
                        ));
                    }
                }
                PutOutcome::Uncertain => v.puts_uncertain += 1,
                PutOutcome::Refused => {}
            }
        }
        p
    }

    /// The TTR of job `id`, by its acknowledged put or by the put of `body`.
    fn ttr(&self, id: u64, body: Option<&[u8]>) -> Option<u32> {
        let body = self.acked.get(&id).copied().or(body)?;
        self.by_body.get(body).map(|(ttr, _)| *ttr)
    }
}

/// Every body seen (reserved, or there at the end) is its put's, under one id.
fn check_bodies(ops: &[Op], end: &FinalState, puts: &Puts, v: &mut Verdict) {
    let reserved = ops
        .iter()
        .filter(|o| o.call == Call::Reserve && o.succeeded())
        .filter_map(|o| {
            let r = o.reply.as_ref()?;
            Some((r.id()?, r.body.as_deref().unwrap_or_default(), "reserved"))
        });
    let remaining = end
        .iter()
        .filter_map(|(id, b)| Some((*id, b.as_deref()?, "left at the end")));
    let mut id_of_body: HashMap<&[u8], u64> = HashMap::new();
    let mut uncertain_seen: BTreeSet<&[u8]> = BTreeSet::new();
    for (id, body, how) in reserved.chain(remaining) {
        if let Some(other) = id_of_body.insert(body, id)
            && other != id
        {
            v.wrong.push(format!(
                "body {:?} seen as job {other} and as job {id}",
                show(body)
            ));
        }
        match (puts.acked.get(&id), puts.by_body.get(body)) {
            (Some(put), _) if *put != body => v.wrong.push(format!(
                "job {id} {how} with body {:?}, put with {:?}",
                show(body),
                show(put)
            )),
            (Some(_), _) => {}
            (None, Some((_, PutOutcome::Uncertain))) => {
                uncertain_seen.insert(body);
            }
            (None, Some((_, PutOutcome::Refused))) => v.wrong.push(format!(
                "job {id} {how} was made by a put that was refused: {:?}",
                show(body)
            )),
            _ => v.wrong.push(format!(
                "job {id} {how} with body {:?}, which no put carried",
                show(body)
            )),
        }
    }
    v.puts_uncertain_seen = uncertain_seen.len();
}

/// No acknowledged put lost; no acknowledged delete undone; no reserve after one.
fn check_deletes(ops: &[Op], end: &FinalState, puts: &Puts, v: &mut Verdict) {
    let mut deleted: BTreeMap<u64, &Op> = BTreeMap::new();
    let mut may_be_deleted: BTreeSet<u64> = BTreeSet::new();
    for o in ops {
        let Call::Delete(id) = o.call else { continue };
        if o.succeeded() {
            v.deletes_acked += 1;
            if let Some(first) = deleted.get(&id) {
                v.undone.push(format!(
                    "job {id} answered DELETED twice (connections {} and {})",
                    first.conn, o.conn
                ));
            } else {
                deleted.insert(id, o);
            }
        }
        if o.succeeded() || o.uncertain() {
            may_be_deleted.insert(id);
        }
    }
    for (&id, &body) in &puts.acked {
        match end.get(&id) {
            Some(Some(_)) => {}
            _ if may_be_deleted.contains(&id) => {}
            Some(None) => v.lost.push(id),
            None => v.wrong.push(format!(
                "acknowledged job {id} ({:?}) is missing from the final state",
                show(body)
            )),
        }
    }
    for (&id, d) in &deleted {
        if matches!(end.get(&id), Some(Some(_))) {
            v.undone
                .push(format!("job {id} answered DELETED is there at the end"));
        }
        for o in ops.iter().filter(|o| o.start > d.end && o.succeeded()) {
            let seen = match &o.call {
                Call::Reserve => o.reply.as_ref().and_then(Reply::id) == Some(id),
                Call::Delete(_) => false, // counted above
                call => call.id() == Some(id),
            };
            if !seen {
                continue;
            }
            let what = format!(
                "job {id} answered DELETED (connection {}) then {:?} answered {:?} \
                 (connection {}, sent {} ms after)",
                d.conn,
                o.call,
                o.reply.as_ref().map(|r| r.line.as_str()).unwrap_or(""),
                o.conn,
                o.start.duration_since(d.end).as_millis()
            );
            if o.call == Call::Reserve {
                v.reserved_after_delete.push(what);
            } else {
                v.undone.push(what);
            }
        }
    }
}

/// One connection's hold of a job, from a `RESERVED`.
struct Hold<'a> {
    reserve: &'a Op,
    /// The earliest moment the hold may have ended.
    ends: Instant,
}

/// No two connections hold one job at once within its TTR.
fn check_holds(ops: &[Op], puts: &Puts, cfg: CheckConfig, v: &mut Verdict) {
    let mut by_conn: HashMap<ConnId, Vec<&Op>> = HashMap::new();
    for o in ops {
        by_conn.entry(o.conn).or_default().push(o);
    }
    for list in by_conn.values_mut() {
        list.sort_by_key(|o| o.start);
    }
    let mut holds: BTreeMap<u64, Vec<Hold>> = BTreeMap::new();
    for o in ops
        .iter()
        .filter(|o| o.call == Call::Reserve && o.succeeded())
    {
        let Some(r) = o.reply.as_ref() else { continue };
        let Some(id) = r.id() else { continue };
        let Some(ttr) = puts.ttr(id, r.body.as_deref()) else {
            continue; // a job no put explains: reported as wrong
        };
        // beanstalkd gives a TTR of 0 one second.
        let ttr = Duration::from_secs(u64::from(ttr.max(1)));
        let (alive, deadline) = hold_ends(o, id, ttr, &by_conn[&o.conn]);
        let deadline = deadline.checked_sub(cfg.ttr_slack).unwrap_or(o.start);
        let ends = alive.min(deadline).max(o.start);
        holds.entry(id).or_default().push(Hold { reserve: o, ends });
    }
    for (id, hs) in &holds {
        for (i, a) in hs.iter().enumerate() {
            for b in &hs[i + 1..] {
                if a.reserve.conn == b.reserve.conn {
                    continue;
                }
                // Neither order fits: B granted before A's hold could end, and A
                // granted before B's could.
                if b.reserve.end < a.ends && a.reserve.end < b.ends {
                    v.double_held.push(format!(
                        "job {id} held by connections {} (reserve answered at +{} ms) and \
                         {} (+{} ms) at once",
                        a.reserve.conn,
                        since(ops, a.reserve.end),
                        b.reserve.conn,
                        since(ops, b.reserve.end)
                    ));
                }
            }
        }
    }
}

/// The earliest moment the hold of `id` that reserve `r` began may have ended, given
/// what its connection did after (`conn_ops`, in the order sent).
///
/// A server may close a connection at any moment (a leader that lost its lease does),
/// which frees its jobs, and a client learns of it only when it next reads. So a hold
/// is known to last only until the last moment the server was seen serving its
/// connection: the send of the last op answered with anything but `INTERNAL_ERROR`
/// (the server served it at some moment after that, and a hold, once ended, never
/// comes back to the connection) — and at most until its TTR, counted from the
/// reserve's send or a `TOUCHED` touch's. The holder's own delete, release or bury of
/// the job ends it: if answered with success, at that op's send, else at the last
/// proof before it. A close, or a connection that failed, proves nothing.
fn hold_ends(r: &Op, id: u64, ttr: Duration, conn_ops: &[&Op]) -> (Instant, Instant) {
    let mut deadline = r.start + ttr;
    let mut alive = r.start;
    for o in conn_ops.iter().filter(|o| o.start >= r.end) {
        if o.start >= deadline || o.reply.is_none() {
            break;
        }
        let ends_hold = matches!(&o.call,
            Call::Delete(x) | Call::Release(x) | Call::Bury(x) if *x == id);
        if o.served() {
            if ends_hold && !o.succeeded() {
                break; // NOT_FOUND: the hold had ended already
            }
            alive = o.start;
            if o.call == Call::Touch(id) && o.succeeded() {
                deadline = deadline.max(o.start + ttr);
            }
        }
        if ends_hold {
            break;
        }
    }
    (alive, deadline)
}

/// Milliseconds from the history's first op to `t`.
fn since(ops: &[Op], t: Instant) -> u128 {
    let first = ops.iter().map(|o| o.start).min().unwrap_or(t);
    t.saturating_duration_since(first).as_millis()
}

fn show(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
    if body.len() > 40 {
        format!("{s}…")
    } else {
        s
    }
}
