//! Running one request: [`Engine::execute`] counts it, sends reserves to `reserve.rs`,
//! and runs every other command against the session and the store; it returns each
//! reply with its acknowledgement ([`Ack`]).
//!
//! Invariants: a command that can make a job ready in a tube (put, release, kick,
//! kick-job) awaits a serve pass for that tube before returning its reply, so a waiting
//! worker has its job before the producer reads `INSERTED`; one that creates an earlier
//! deadline (a delayed put or release, a reservation, a pause) hints the timer. A store
//! failure becomes `INTERNAL_ERROR`, logged (but a put refused by a full `-b` log is
//! `OUT_OF_MEMORY`, at once, as beanstalkd answers it); a reference change that fails
//! is undone first, so the session and the store's reference counts never disagree.

use std::sync::Arc;

use super::{Ack, Answer, Engine, Outcome, Session};
use crate::protocol::yaml;
use crate::protocol::{Command, Counter, Put, Rejection, Reply, Request, TubeName};
use crate::store::{
    Change, JobId, NANOS_PER_SEC, NewJob, Store, StoreError, StoreResult, pause_length,
};

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
        let cmd = match req {
            Request::Command(cmd) => cmd,
            Request::Put(put) => {
                self.counters.count(Counter::Put);
                let answer = self.put(session, put).await;
                return Outcome::Reply(self.or_failed(session, answer));
            }
            Request::Rejected(r) => {
                let reply = self.rejected(session, r).await;
                let reply = reply.unwrap_or_else(|err| self.failed(session, err));
                return Outcome::Reply(Answer::now(reply));
            }
        };
        match cmd {
            Command::Quit => Outcome::Quit,
            Command::Reserve => {
                self.counters.count(Counter::Reserve);
                let outcome = self.reserve(session, None).await;
                outcome.unwrap_or_else(|err| Outcome::Reply(self.or_failed(session, Err(err))))
            }
            Command::ReserveWithTimeout(timeout) => match timeout.read_as(self.dialect) {
                // A number only 1.12 reads (the parser could not know which release
                // answers): BAD_FORMAT, not counted, as 1.13 answers it.
                None => Outcome::Reply(self.after_latest(Reply::BadFormat)),
                Some(secs) => {
                    self.counters.count(Counter::ReserveWithTimeout);
                    let outcome = self.reserve(session, secs).await;
                    outcome.unwrap_or_else(|err| Outcome::Reply(self.or_failed(session, Err(err))))
                }
            },
            Command::ReserveJob(id) => {
                let answer = self.reserve_job(session, id).await;
                Outcome::Reply(self.or_failed(session, answer))
            }
            Command::Use(_)
            | Command::Watch(_)
            | Command::Ignore(_)
            | Command::ListTubeUsed
            | Command::ListTubesWatched => {
                if let Some(c) = cmd.counter() {
                    self.counters.count(c);
                }
                let reply = self.session_command(session, cmd).await;
                Outcome::Reply(Answer::now(
                    reply.unwrap_or_else(|err| self.failed(session, err)),
                ))
            }
            cmd => {
                if let Some(c) = cmd.counter() {
                    self.counters.count(c);
                }
                let reply = self.command(session, cmd).await;
                let reply = reply.unwrap_or_else(|err| self.failed(session, err));
                Outcome::Reply(self.after_latest(reply))
            }
        }
    }

    /// A store failure: logged, and answered INTERNAL_ERROR.
    fn failed(&self, session: &Session, err: StoreError) -> Reply {
        tracing::warn!(
            %err,
            conn = session.id.0,
            "a command failed in the store and was answered INTERNAL_ERROR (clients may retry; check that the store is reachable)"
        );
        Reply::InternalError
    }

    /// The answer, or INTERNAL_ERROR once the store's changes so far are durable.
    fn or_failed(&self, session: &Session, answer: StoreResult<Answer>) -> Answer {
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

    async fn put(&self, session: &mut Session, put: Put) -> StoreResult<Answer> {
        self.mark_producer(session);
        let reply = match self.insert(session.using.clone(), put).await? {
            Inserted::Job(id) => Reply::Inserted(id),
            Inserted::Draining => Reply::Draining,
            Inserted::LogFull => {
                // No job was made, so the reply waits for no write (the log may be
                // slow to take the others' changes while the disk is full); it still
                // goes out with the replies beside it.
                return Ok(Answer {
                    reply: Reply::OutOfMemory,
                    ack: Ack::After(Change::NONE),
                });
            }
        };
        Ok(self.after_latest(reply))
    }

    /// A put into `tube`, a client's or the operator API's: refused while draining (the
    /// id is used up, as the reference's is) or when a full `-b` log has no room; else
    /// the job is made, and a waiting reserve served (or the timer hinted, when
    /// delayed) before this returns.
    pub(super) async fn insert(&self, tube: TubeName, put: Put) -> StoreResult<Inserted> {
        if self.is_draining() {
            self.store.burn_id().await?;
            return Ok(Inserted::Draining);
        }
        let now = self.clock.now();
        let job = NewJob {
            tube: tube.clone(),
            pri: put.pri,
            delay_secs: put.delay,
            ttr_secs: put.ttr.max(1),
            body: put.body,
        };
        let id = match self.store.put(job, now).await {
            Err(StoreError::LogFull) => return Ok(Inserted::LogFull),
            id => id?,
        };
        if put.delay > 0 {
            self.timer.hint(now + u64::from(put.delay) * NANOS_PER_SEC);
        } else {
            self.serve([tube]).await;
        }
        Ok(Inserted::Job(id))
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

    /// A session's own commands: they change only the session (and the store's count
    /// of its references), so their replies never wait for a write.
    async fn session_command(&self, s: &mut Session, cmd: Command) -> StoreResult<Reply> {
        Ok(match cmd {
            // A reference change that fails is undone before INTERNAL_ERROR, so the
            // session and the store's count of references never disagree; releasing a
            // reference cannot fail visibly (the store reconciles it later).
            Command::Use(tube) => {
                if tube != s.using {
                    if let Err(err) = self.store.use_tube(&tube).await {
                        let _ = self.store.unuse_tube(&tube).await;
                        return Err(err);
                    }
                    let _ = self.store.unuse_tube(&s.using).await;
                    s.using = tube;
                    s.publish();
                }
                Reply::Using(s.using.clone())
            }
            Command::Watch(tube) => {
                if !s.watching.contains(&tube) {
                    if let Err(err) = self.store.watch_tube(&tube).await {
                        let _ = self.store.unwatch_tube(&tube).await;
                        return Err(err);
                    }
                    s.watching.insert(tube);
                    s.watch_list_changed();
                    s.publish();
                }
                Reply::Watching(s.watching.len())
            }
            Command::Ignore(tube) => {
                if s.watching.contains(&tube) {
                    if s.watching.len() < 2 {
                        return Ok(Reply::NotIgnored);
                    }
                    s.watching.remove(&tube);
                    s.watch_list_changed();
                    s.publish();
                    let _ = self.store.unwatch_tube(&tube).await;
                }
                Reply::Watching(s.watching.len())
            }
            Command::ListTubeUsed => Reply::Using(s.using.clone()),
            Command::ListTubesWatched => Reply::Ok(yaml::tube_list(s.watching.iter())),
            // Not a session's own command (see `execute`).
            _ => Reply::InternalError,
        })
    }

    async fn command(&self, s: &mut Session, cmd: Command) -> StoreResult<Reply> {
        let now = self.clock.now();
        Ok(match cmd {
            Command::Delete(id) => found(self.store.delete(s.id, id).await?, Reply::Deleted),
            Command::Release { id, pri, delay } => {
                match self.store.release(s.id, id, pri, delay, now).await? {
                    Some(tube) => {
                        if delay > 0 {
                            self.timer.hint(now + u64::from(delay) * NANOS_PER_SEC);
                        } else {
                            self.serve([tube]).await;
                        }
                        Reply::Released
                    }
                    None => Reply::NotFound,
                }
            }
            Command::Bury { id, pri } => {
                found(self.store.bury(s.id, id, pri).await?, Reply::Buried)
            }
            Command::Touch(id) => found(
                self.store.touch(s.id, id, now).await?.is_some(),
                Reply::Touched,
            ),
            Command::Peek(id) => found_job(self.store.peek(id).await?),
            Command::PeekReady => found_job(self.store.peek_ready(&s.using).await?),
            Command::PeekDelayed => found_job(self.store.peek_delayed(&s.using).await?),
            Command::PeekBuried => found_job(self.store.peek_buried(&s.using).await?),
            Command::Kick(bound) => {
                let n = self.store.kick(&s.using, bound, now).await?;
                if n > 0 {
                    self.serve([s.using.clone()]).await;
                }
                Reply::Kicked(n)
            }
            Command::KickJob(id) => match self.store.kick_job(id, now).await? {
                Some(tube) => {
                    self.serve([tube]).await;
                    Reply::KickedJob
                }
                None => Reply::NotFound,
            },
            Command::StatsJob(id) => match self.job_stats(id, now).await? {
                Some(stats) => Reply::Ok(stats.to_yaml(self.dialect)),
                None => Reply::NotFound,
            },
            Command::StatsTube(tube) => match self.tube_stats(&tube, now).await? {
                Some(stats) => Reply::Ok(stats.to_yaml(self.dialect)),
                None => Reply::NotFound,
            },
            Command::Stats => Reply::Ok(self.server_stats(now).await?.to_yaml(self.dialect)),
            Command::ListTubes => Reply::Ok(yaml::tube_list(&self.store.list_tubes().await?)),
            Command::PauseTube { tube, delay } => {
                if self.store.pause(&tube, delay, now).await? {
                    self.timer.hint(now + pause_length(delay));
                    Reply::Paused
                } else {
                    Reply::NotFound
                }
            }
            // Handled by `execute`.
            Command::Quit
            | Command::Reserve
            | Command::ReserveWithTimeout(_)
            | Command::ReserveJob(_)
            | Command::Use(_)
            | Command::Watch(_)
            | Command::Ignore(_)
            | Command::ListTubeUsed
            | Command::ListTubesWatched => Reply::InternalError,
        })
    }
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
