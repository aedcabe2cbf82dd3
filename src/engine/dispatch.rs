//! Running one request: [`Engine::execute`] counts it, sends reserves to `reserve.rs`,
//! and runs every other command against the session and the store; it returns each
//! reply with its acknowledgement ([`Ack`]).
//!
//! Invariants: a command that can make a job ready in a tube (put, release, kick,
//! kick-job) awaits a serve pass for that tube before returning its reply, so a waiting
//! worker has its job before the producer reads `INSERTED`; one that creates an earlier
//! deadline (a delayed put or release, a reservation, a pause) hints the timer; one that
//! acts on the caller's reservation (release, bury, touch, a list command) first waits
//! for every deadline due by then to be applied ([`Engine::due_applied`]). A store
//! failure becomes `INTERNAL_ERROR`, logged (but a put refused by a full `-b` log is
//! `OUT_OF_MEMORY`, at once, as beanstalkd answers it); a reference change that fails
//! is undone first, so the session and the store's reference counts never disagree.

use std::sync::Arc;

use super::{Ack, Answer, Engine, Outcome, Session};
use crate::protocol::yaml;
use crate::protocol::{Command, Counter, Put, Rejection, Reply, Request, TubeName};
use crate::store::{
    Change, JobId, MIN_TTR_MS, NewJob, Store, StoreError, StoreResult, pause_length,
};
use crate::time::{millis, secs_as_ms};

/// What [`Engine::insert`] did.
pub(super) enum Inserted {
    Job(JobId),
    /// Draining (SIGUSR1): no job was made.
    Draining,
    /// The `-b` log's disk is full: no job was made.
    LogFull,
}

impl Engine {
    /// Run one request for `session`. A reply comes with its acknowledgement: a
    /// session's own commands (use, watch, ignore, the watch list) and rejected
    /// requests at once; a RESERVED once the store's changes before the reservation
    /// are durable; every other reply (store failures included) once the store's
    /// changes up to the moment it was made are.
    pub async fn execute(self: &Arc<Self>, session: &mut Session, req: Request) -> Outcome {
        session.client.note_request(&req, self.clock.now());
        match req {
            Request::Command(cmd) => self.command(session, cmd).await,
            Request::Put(put) => {
                self.counters.count(Counter::Put);
                let answer = self.put(session, put.into()).await;
                Outcome::Reply(self.or_failed(session, answer))
            }
            Request::Rejected(r) => {
                let reply = self.rejected(session, r).await;
                let reply = reply.unwrap_or_else(|err| self.failed(session, err));
                Outcome::Reply(Answer::now(reply))
            }
        }
    }

    /// Run one command: counted as the reference counts (every command with a
    /// counter, but a reserve-with-timeout only once its number reads), then routed by
    /// how its reply is acknowledged.
    async fn command(self: &Arc<Self>, session: &mut Session, cmd: Command) -> Outcome {
        if !matches!(cmd, Command::ReserveWithTimeout(_))
            && let Some(c) = cmd.counter()
        {
            self.counters.count(c);
        }
        let s = session;
        let ran = match cmd {
            Command::Quit => return Outcome::Quit,
            Command::Reserve => return self.reserve_or_failed(s, None).await,
            Command::ReserveWithTimeout(timeout) => match timeout.read_as(self.dialect) {
                // A number only 1.12 reads (the parser could not know which release
                // answers): BAD_FORMAT, not counted, as 1.13 answers it.
                None => Ran::Store(Ok(Reply::BadFormat)),
                Some(secs) => {
                    self.counters.count(Counter::ReserveWithTimeout);
                    return self.reserve_or_failed(s, secs).await;
                }
            },
            Command::ReserveJob(id) => {
                let answer = self.reserve_job(s, id).await;
                return Outcome::Reply(self.or_failed(s, answer));
            }
            Command::Use(tube) => Ran::Own(self.use_tube(s, tube).await),
            Command::Watch(tube) => Ran::Own(self.watch(s, tube).await),
            Command::Ignore(tube) => Ran::Own(self.ignore(s, tube).await),
            Command::ListTubeUsed => Ran::Own(Ok(Reply::Using(s.using.clone()))),
            Command::ListTubesWatched => {
                Ran::Own(Ok(Reply::Ok(yaml::tube_list(s.watching.iter()))))
            }
            Command::Delete(id) => Ran::Store(self.delete(s, id).await),
            Command::Release { id, pri, delay } => {
                Ran::Store(self.release(s, id, pri, secs_as_ms(delay)).await)
            }
            Command::Bury { id, pri } => Ran::Store(self.bury(s, id, pri).await),
            Command::Touch(id) => Ran::Store(self.touch(s, id).await),
            Command::Peek(id) => Ran::Store(self.store.peek(id).await.map(found_job)),
            Command::PeekReady => Ran::Store(self.store.peek_ready(&s.using).await.map(found_job)),
            Command::PeekDelayed => {
                Ran::Store(self.store.peek_delayed(&s.using).await.map(found_job))
            }
            Command::PeekBuried => {
                Ran::Store(self.store.peek_buried(&s.using).await.map(found_job))
            }
            Command::Kick(bound) => Ran::Store(self.kick(s, bound).await),
            Command::KickJob(id) => Ran::Store(self.kick_job(id).await),
            Command::StatsJob(id) => Ran::Store(self.stats_job(id).await),
            Command::StatsTube(tube) => Ran::Store(self.stats_tube(&tube).await),
            Command::Stats => Ran::Store(self.stats().await),
            Command::ListTubes => Ran::Store(self.list_tubes().await),
            Command::PauseTube { tube, delay } => {
                Ran::Store(self.pause(&tube, secs_as_ms(delay)).await)
            }
        };
        Outcome::Reply(match ran {
            Ran::Own(reply) => Answer::now(reply.unwrap_or_else(|err| self.failed(s, err))),
            Ran::Store(reply) => self.after_latest(reply.unwrap_or_else(|err| self.failed(s, err))),
        })
    }

    /// A reserve (`timeout`: with one), or INTERNAL_ERROR.
    async fn reserve_or_failed(
        self: &Arc<Self>,
        session: &mut Session,
        timeout: Option<u32>,
    ) -> Outcome {
        let outcome = self.reserve(session, timeout).await;
        outcome.unwrap_or_else(|err| Outcome::Reply(self.or_failed(session, Err(err))))
    }

    /// A store failure: logged, and answered INTERNAL_ERROR.
    pub(super) fn failed(&self, session: &Session, err: StoreError) -> Reply {
        tracing::warn!(
            %err,
            conn = session.id.0,
            "a command failed in the store and was answered INTERNAL_ERROR (clients may retry; check that the store is reachable)"
        );
        Reply::InternalError
    }

    /// The answer, or INTERNAL_ERROR once the store's changes so far are durable.
    pub(super) fn or_failed(&self, session: &Session, answer: StoreResult<Answer>) -> Answer {
        answer.unwrap_or_else(|err| self.after_latest(self.failed(session, err)))
    }

    async fn rejected(&self, session: &mut Session, r: Rejection) -> StoreResult<Reply> {
        match r {
            Rejection::UnknownCommand => {}
            Rejection::BadFormat { counted } => {
                if let Some(c) = counted {
                    self.counters.count(c);
                }
            }
            Rejection::JobTooBig => self.counters.count(Counter::Put),
            Rejection::OutOfMemory => {
                tracing::warn!(
                    conn = session.id.0,
                    "a put's body could not be allocated and was answered OUT_OF_MEMORY (raise the memory limit or lower -z)"
                );
                self.counters.count(Counter::Put);
                self.mark_producer(session);
            }
            Rejection::ExpectedCrlf => {
                // The reference made the job before reading its body: the id is used up.
                self.counters.count(Counter::Put);
                self.mark_producer(session);
                self.store.burn_id().await?;
            }
        }
        Ok(r.into())
    }

    pub(super) async fn put(&self, session: &mut Session, put: TimedPut) -> StoreResult<Answer> {
        self.mark_producer(session);
        let reply = match self.insert(session.using.clone(), put).await? {
            Inserted::Job(id) => Reply::Inserted(id),
            refused => return Ok(self.refused_answer(refused)),
        };
        Ok(self.after_latest(reply))
    }

    /// The answer to a put that made no job (draining, or a full `-b` log).
    pub(super) fn refused_answer(&self, refused: Inserted) -> Answer {
        match refused {
            Inserted::LogFull => {
                // No job was made, so the reply waits for no write (the log may be
                // slow to take the others' changes while the disk is full); it still
                // goes out with the replies beside it.
                Answer {
                    reply: Reply::OutOfMemory,
                    ack: Ack::After(Change::NONE),
                }
            }
            Inserted::Draining => self.after_latest(Reply::Draining),
            Inserted::Job(id) => self.after_latest(Reply::Inserted(id)),
        }
    }

    /// A put into `tube`, a client's or the operator API's: refused while draining (the
    /// id is used up, as the reference's is) or when a full `-b` log has no room; else
    /// the job is made, and a waiting reserve served (or the timer hinted, when
    /// delayed) before this returns.
    pub(super) async fn insert(&self, tube: TubeName, put: TimedPut) -> StoreResult<Inserted> {
        if self.is_draining() {
            self.store.burn_id().await?;
            return Ok(Inserted::Draining);
        }
        let now = self.clock.now();
        let job = new_job(tube.clone(), put);
        let delay_ms = job.delay_ms;
        let id = match self.store.put(job, now).await {
            Err(StoreError::LogFull) => return Ok(Inserted::LogFull),
            id => id?,
        };
        self.placed(tube, delay_ms, now).await;
        Ok(Inserted::Job(id))
    }

    /// A job was placed in `tube` at `now`, delayed by `delay_ms`: serve the tube's
    /// waiters, or hint the timer.
    pub(super) async fn placed(&self, tube: TubeName, delay_ms: u64, now: crate::store::Nanos) {
        if delay_ms > 0 {
            self.timer.hint(now + millis(delay_ms));
        } else {
            self.serve([tube]).await;
        }
    }

    /// `reserve-job`: a RESERVED acknowledged as its reservation says.
    async fn reserve_job(&self, s: &mut Session, id: JobId) -> StoreResult<Answer> {
        let now = self.clock.now();
        Ok(match self.store.reserve_job(s.id, id, now).await? {
            Some(job) => {
                self.mark_worker(s);
                self.hand_out(job)
            }
            None => self.after_latest(Reply::NotFound),
        })
    }

    /// `use`: a session's own command. Session commands change only the session (and
    /// the store's count of its references), so their replies never wait for a write.
    /// A reference change that fails is undone before INTERNAL_ERROR, so the session
    /// and the store's count of references never disagree; releasing a reference
    /// cannot fail visibly (the store reconciles it later).
    async fn use_tube(&self, s: &mut Session, tube: TubeName) -> StoreResult<Reply> {
        if tube != s.using {
            if let Err(err) = self.store.use_tube(&tube).await {
                let _ = self.store.unuse_tube(&tube).await;
                return Err(err);
            }
            let _ = self.store.unuse_tube(&s.using).await;
            s.using = tube;
            s.publish();
        }
        Ok(Reply::Using(s.using.clone()))
    }

    /// `watch`, a session's own command (see [`Engine::use_tube`]).
    async fn watch(&self, s: &mut Session, tube: TubeName) -> StoreResult<Reply> {
        if !s.watching.contains(&tube) {
            if let Err(err) = self.store.watch_tube(&tube).await {
                let _ = self.store.unwatch_tube(&tube).await;
                return Err(err);
            }
            s.watching.insert(tube);
            s.watch_list_changed();
            s.publish();
        }
        Ok(Reply::Watching(s.watching.len()))
    }

    /// `ignore`, a session's own command (see [`Engine::use_tube`]).
    async fn ignore(&self, s: &mut Session, tube: TubeName) -> StoreResult<Reply> {
        if s.watching.contains(&tube) {
            if s.watching.len() < 2 {
                return Ok(Reply::NotIgnored);
            }
            s.watching.remove(&tube);
            s.watch_list_changed();
            s.publish();
            let _ = self.store.unwatch_tube(&tube).await;
        }
        Ok(Reply::Watching(s.watching.len()))
    }

    async fn delete(&self, s: &Session, id: JobId) -> StoreResult<Reply> {
        let deleted = self.store.delete(s.id, id, self.clock.now()).await?;
        Ok(found(deleted, Reply::Deleted))
    }

    pub(super) async fn release(
        &self,
        s: &Session,
        id: JobId,
        pri: u32,
        delay_ms: u64,
    ) -> StoreResult<Reply> {
        let now = self.due_applied().await;
        let Some(tube) = self.store.release(s.id, id, pri, delay_ms, now).await? else {
            return Ok(Reply::NotFound);
        };
        if delay_ms > 0 {
            self.timer.hint(now + millis(delay_ms));
        } else {
            self.serve([tube]).await;
        }
        Ok(Reply::Released)
    }

    async fn bury(&self, s: &Session, id: JobId, pri: u32) -> StoreResult<Reply> {
        let now = self.due_applied().await;
        Ok(found(
            self.store.bury(s.id, id, pri, now).await?,
            Reply::Buried,
        ))
    }

    async fn touch(&self, s: &Session, id: JobId) -> StoreResult<Reply> {
        let now = self.due_applied().await;
        let touched = self.store.touch(s.id, id, now).await?.is_some();
        Ok(found(touched, Reply::Touched))
    }

    /// Now, once every deadline the timer knows to be due by now has been applied: for
    /// a command that acts on the caller's reservation (release, bury, touch, a list
    /// command), whose TTR may have passed. The reference expires a connection's reservations before
    /// its next command; here the timer's tick may run late (a loaded machine, a remote
    /// store), and without this wait the old holder could still touch a lapsed job.
    /// At once when nothing is due.
    pub(super) async fn due_applied(&self) -> crate::time::Nanos {
        let now = self.clock.now();
        self.timer.catch_up(now, &self.stop).await;
        now
    }

    async fn kick(&self, s: &Session, bound: u32) -> StoreResult<Reply> {
        let n = self.store.kick(&s.using, bound, self.clock.now()).await?;
        if n > 0 {
            self.serve([s.using.clone()]).await;
        }
        Ok(Reply::Kicked(n))
    }

    async fn kick_job(&self, id: JobId) -> StoreResult<Reply> {
        let Some(tube) = self.store.kick_job(id, self.clock.now()).await? else {
            return Ok(Reply::NotFound);
        };
        self.serve([tube]).await;
        Ok(Reply::KickedJob)
    }

    async fn stats_job(&self, id: JobId) -> StoreResult<Reply> {
        Ok(match self.job_stats(id, self.clock.now()).await? {
            Some(stats) => Reply::Ok(stats.to_yaml(self.dialect)),
            None => Reply::NotFound,
        })
    }

    async fn stats_tube(&self, tube: &TubeName) -> StoreResult<Reply> {
        Ok(match self.tube_stats(tube, self.clock.now()).await? {
            Some(stats) => Reply::Ok(stats.to_yaml(self.dialect)),
            None => Reply::NotFound,
        })
    }

    async fn stats(&self) -> StoreResult<Reply> {
        let stats = self.server_stats(self.clock.now()).await?;
        Ok(Reply::Ok(stats.to_yaml(self.dialect)))
    }

    async fn list_tubes(&self) -> StoreResult<Reply> {
        Ok(Reply::Ok(yaml::tube_list(&self.store.list_tubes().await?)))
    }

    pub(super) async fn pause(&self, tube: &TubeName, delay_ms: u64) -> StoreResult<Reply> {
        let now = self.clock.now();
        if !self.store.pause(tube, delay_ms, now).await? {
            return Ok(Reply::NotFound);
        }
        self.timer.hint(now + pause_length(delay_ms));
        Ok(Reply::Paused)
    }
}

/// The job a put into `tube` makes (its TTR raised to [`MIN_TTR_MS`]).
pub(super) fn new_job(tube: TubeName, put: TimedPut) -> NewJob {
    NewJob {
        tube,
        pri: put.pri,
        delay_ms: put.delay_ms,
        ttr_ms: put.ttr_ms.max(MIN_TTR_MS),
        body: put.body,
    }
}

/// A put's values as the engine takes them, durations in milliseconds: beanstalkd's
/// `put` (whole seconds, converted here), an extension's put or the operator API's.
pub struct TimedPut {
    pub pri: u32,
    pub delay_ms: u64,
    /// Raised to [`MIN_TTR_MS`] by the engine.
    pub ttr_ms: u64,
    pub body: bytes::Bytes,
}

impl From<Put> for TimedPut {
    fn from(put: Put) -> TimedPut {
        TimedPut {
            pri: put.pri,
            delay_ms: secs_as_ms(put.delay),
            ttr_ms: secs_as_ms(put.ttr),
            body: put.body,
        }
    }
}

/// A command's reply, by how it is acknowledged.
enum Ran {
    /// A session's own command: at once (it wrote nothing).
    Own(StoreResult<Reply>),
    /// Any other: once the store's changes so far are durable.
    Store(StoreResult<Reply>),
}

fn found(ok: bool, reply: Reply) -> Reply {
    if ok { reply } else { Reply::NotFound }
}

fn found_job(job: Option<(u64, bytes::Bytes)>) -> Reply {
    match job {
        Some((id, body)) => Reply::Found { id, body },
        None => Reply::NotFound,
    }
}
