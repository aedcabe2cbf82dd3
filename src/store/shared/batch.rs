//! The shared mode's batches and flush (docs/EXTENSIONS.md): a `reserve-batch` is one
//! call of `reserve_batch.lua` over the watched tubes, a list command one call of
//! `batch.lua` over the tubes its ids are in, a flush step one call of `flush.lua` on
//! the tube.
//!
//! A `reserve-batch` reserves under one owner token: a call whose answer is lost is
//! undone whole by the reclaim of that token, as a lost `reserve` is; so is a batch one
//! of whose large bodies cannot be read (every tube it reserved in is handed to the
//! reclaim), since none of it was answered.
//!
//! Invariants: as the single commands, an id this connection holds is sent with its
//! owner token and tube from `held` (no lookup); any other id of a `delete-batch` is
//! resolved in one lookup (`tubes_of`), and an id of the old namespace never acts in a
//! fresh one (the lookup checks the generation around it); `held` follows every reply as the single commands make it.
//! Other ids are missing without a call (release, touch and bury act only on what the
//! connection holds).

use foldhash::HashMap;

use super::decode::{Decode, Reservation, count, fields};
use super::held::Held;
use super::store_impl::watched_tube;
use super::{RedisStore, policy_args};
use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};
use crate::store::{BatchDone, ConnId, FlushStep, JobId, Reserved, StoreError, StoreResult};

/// The tubes of a call over several, each named once, numbered from 1 in the order
/// first met: the key groups of the call, and the index its arguments name them by.
#[derive(Default)]
pub(super) struct TubeGroups<'a> {
    pub tubes: Vec<&'a TubeName>,
    index: HashMap<&'a TubeName, usize>,
}

impl<'a> TubeGroups<'a> {
    /// `tube`'s index, adding it if new.
    pub fn at(&mut self, tube: &'a TubeName) -> usize {
        *self.index.entry(tube).or_insert_with(|| {
            self.tubes.push(tube);
            self.tubes.len()
        })
    }

    /// The names, in index order.
    pub fn names(&self) -> Vec<&str> {
        self.tubes.iter().map(|t| t.as_str()).collect()
    }
}

/// What `flush.lua` answers.
#[derive(Debug)]
pub(super) struct Flushed {
    deleted: u64,
    upto: u64,
    /// The reserved jobs it deleted (their holders, if here, forget them).
    held: Vec<u64>,
}

impl Decode for Flushed {
    fn decode(v: redis::Value) -> Result<Self, String> {
        let [deleted, upto, held] = fields(v)?;
        Ok(Flushed {
            deleted: count(&deleted)?,
            upto: count(&upto)?,
            held: Vec::<u64>::decode(held)?,
        })
    }
}

/// What `reserve_batch.lua` answers: the reservations, in the order successive
/// reserves would have made them, and the DAMAGED report of a job it dropped ('' when
/// none; that job ended the batch).
#[derive(Debug)]
pub(super) struct BatchReserved {
    jobs: Vec<Reservation>,
    damaged: String,
}

impl Decode for BatchReserved {
    fn decode(v: redis::Value) -> Result<Self, String> {
        let [jobs, damaged] = fields(v)?;
        let jobs = match jobs {
            redis::Value::Array(items) => items
                .into_iter()
                .map(Reservation::decode)
                .collect::<Result<_, _>>()?,
            other => return Err(format!("expected an array of reservations, got {other:?}")),
        };
        let damaged = match damaged {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            other => return Err(format!("expected a DAMAGED report or '', got {other:?}")),
        };
        Ok(BatchReserved { jobs, damaged })
    }
}

impl RedisStore {
    /// `reserve-batch`: up to `max` jobs of the `watched` tubes in one call.
    pub(super) async fn reserve_batch(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
    ) -> StoreResult<Vec<Reserved>> {
        let (owner, call) = self.reserve_call(
            conn,
            "reserve-batch",
            |s| &s.reserve_batch,
            watched,
            Some(max),
        )?;
        let batch = match call.run().await {
            Ok(b) => b,
            Err(err) => {
                // The script may still run (a timeout does not cancel it).
                self.attempts.failed(watched, &owner, &err);
                return Err(err);
            }
        };
        if !batch.damaged.is_empty() {
            tracing::error!("{}", batch.damaged);
        }
        let mut placed = Vec::with_capacity(batch.jobs.len());
        for r in batch.jobs {
            placed.push((watched_tube(watched, r.tube_index, "reserve_batch")?, r));
        }
        let mut bodies = Vec::with_capacity(placed.len());
        for (tube, r) in &mut placed {
            match self.reserved_body(tube, &owner, r, call.generation()).await {
                Ok(body) => bodies.push(body),
                Err(err) => {
                    for (tube, _) in &placed {
                        self.attempts.unanswered(tube, &owner);
                    }
                    return Err(err);
                }
            }
        }
        Ok(placed
            .into_iter()
            .zip(bodies)
            .map(|((tube, r), body)| self.reserved(conn, tube, owner.clone(), r, body))
            .collect())
    }

    /// [`crate::store::Store::batch`] in shared mode.
    pub(super) async fn batch_ids(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
    ) -> StoreResult<BatchDone> {
        self.check_conn(conn, "batch")?;
        let held: Vec<Option<Held>> = ids.iter().map(|&id| self.held.get(conn, id)).collect();
        let looked_up = match op {
            BatchOp::Delete => self.tube_lookup(ids, &held).await?,
            _ => HashMap::default(),
        };
        let (word, pri, delay) = match op {
            BatchOp::Delete => ("delete", 0, 0),
            BatchOp::Release { pri, delay } => ("release", pri, delay.as_millis()),
            BatchOp::Touch => ("touch", 0, 0),
            BatchOp::Bury { pri } => ("bury", pri, 0),
        };
        // Each id's tube and owner token, or nothing (missing without asking Redis).
        let targets: Vec<Option<(&TubeName, &str)>> = ids
            .iter()
            .zip(&held)
            .map(|(id, h)| match h {
                Some(h) => Some((&h.tube, h.owner.as_str())),
                None => looked_up.get(id).map(|t| (t, "")),
            })
            .collect();
        let mut groups = TubeGroups::default();
        let at: Vec<Option<usize>> = targets
            .iter()
            .map(|t| t.map(|(tube, _)| groups.at(tube)))
            .collect();
        let replies = if groups.tubes.is_empty() {
            Vec::new()
        } else {
            let names = groups.names();
            // A release ends reservations: the tubes' rules, and a spread per id sent.
            let (rules, spreads) = match op {
                BatchOp::Release { .. } => {
                    let policies = self.policies();
                    let sent = targets.iter().flatten().map(|(t, _)| t.as_str());
                    (
                        policy_args::rules(&policies, &names),
                        policy_args::spreads(&policies, sent),
                    )
                }
                _ => (String::new(), String::new()),
            };
            let mut call = self.run.call(|s| &s.batch, &[], &names);
            call.arg(self.run.origin()).arg((
                word,
                pri,
                delay,
                names.join("\n"),
                self.windows_max(),
            ));
            call.arg((rules, spreads)).arg(self.ret_arg(conn));
            for ((id, target), at) in ids.iter().zip(&targets).zip(&at) {
                if let (Some((_, owner)), Some(at)) = (target, at) {
                    call.arg((*id, *owner, *at));
                }
            }
            call.run().await?
        };
        let (now_us, results) = replies.split_first().map_or((0, &[][..]), |(n, r)| (*n, r));
        let mut results = results.iter();
        let mut done = BatchDone::default();
        for (i, &id) in ids.iter().enumerate() {
            let result = match targets[i] {
                Some(_) => *results
                    .next()
                    .ok_or_else(|| StoreError::bad_reply("batch", "fewer results than ids"))?,
                None => 0,
            };
            if result == 0 {
                done.missing.push(id);
            }
            self.follow(conn, op, id, held[i].clone(), result, now_us, &mut done);
        }
        Ok(done)
    }

    /// `held` after one id of a batch answered `result`, as the single command keeps
    /// it; a released tube noted as woken.
    #[allow(clippy::too_many_arguments)]
    fn follow(
        &self,
        conn: ConnId,
        op: BatchOp,
        id: JobId,
        held: Option<Held>,
        result: u64,
        now_us: u64,
        done: &mut BatchDone,
    ) {
        let Some(held) = held else { return };
        match op {
            BatchOp::Touch if result > 0 => {
                let deadline = self.local_time(result, now_us);
                self.held.hold(conn, id, Held { deadline, ..held });
            }
            BatchOp::Delete if result == 0 => {}
            BatchOp::Release { delay, .. } if result > 0 && delay.is_zero() => {
                self.held.unhold(conn, id);
                if !done.woken.contains(&held.tube) {
                    done.woken.push(held.tube);
                }
            }
            _ => self.held.unhold(conn, id),
        }
    }

    /// The tubes of the ids not `held` ([`RedisStore::tubes_of`]).
    async fn tube_lookup(
        &self,
        ids: &[JobId],
        held: &[Option<Held>],
    ) -> StoreResult<HashMap<JobId, TubeName>> {
        let unknown: Vec<JobId> = ids
            .iter()
            .zip(held)
            .filter(|(_, h)| h.is_none())
            .map(|(id, _)| *id)
            .collect();
        if unknown.is_empty() {
            return Ok(HashMap::default());
        }
        let tubes = self.tubes_of(&unknown).await?;
        Ok(unknown
            .into_iter()
            .zip(tubes)
            .filter_map(|(id, tube)| Some((id, tube?)))
            .collect())
    }

    /// [`crate::store::Store::flush_step`] in shared mode.
    pub(super) async fn flush_tube_step(
        &self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
    ) -> StoreResult<FlushStep> {
        let names: Vec<&str> = [
            (states.ready, "ready"),
            (states.delayed, "delayed"),
            (states.reserved, "reserved"),
            (states.buried, "buried"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        let upto = upto.map_or(String::new(), |id| id.to_string());
        let flushed: Flushed = self
            .run
            .on_tube(|s| &s.flush, &[], tube.as_str())
            .arg((names.join(","), max, upto))
            .arg(self.ret_arg0())
            .run()
            .await?;
        // A flushed reservation of this instance's is no longer held: its holder
        // learns it at its next command (NOT_FOUND), and no DEADLINE_SOON comes of it.
        self.held.forget_jobs(&flushed.held);
        Ok(FlushStep {
            deleted: flushed.deleted,
            upto: flushed.upto,
            more: flushed.deleted == max as u64,
        })
    }
}
