//! Large bodies (at least [`LARGE_BODY`](crate::store::LARGE_BODY) bytes) in the
//! shared mode are kept out of Lua, both ways. Redis copies a script's arguments into Lua and out again, serving
//! nobody meanwhile (about 90 ms of its one thread per 32 MiB body, against 10 us for a
//! plain `SET` of it); so the id is taken and the body written by plain commands, then
//! the `put` script makes the job around the body already there.
//!
//! The body goes ahead into field `b` of the job's hash (`{P}:j:<id>`), its id into
//! the namespace's `ahead` set with the time written (`NsKey::Ahead`), in one
//! transaction; the put script writes the rest of the hash and takes the id out of the
//! set.
//!
//! Invariants: both plain writes are fenced by the namespace's generation (a fresh
//! namespace must never receive a body under an id it hands out itself), on a connection
//! of the put's own (its WATCH is connection state), and the script is made for the
//! same generation. Until the script ran the job has no metadata, no tube and is in no
//! set: no client sees it (an id lookup finds no tube), as in beanstalkd, where a put
//! takes effect once its body is in. A script that surely did not apply removes the body
//! again; one whose answer was lost (it may exist) leaves it, as does a crash in between
//! (a body without a job, under an id nobody will take again): the timer's sweep
//! (`ahead.lua`, ticks.rs) removes such a body once [`AHEAD_STALE_MS`] old.
//!
//! Reads: `reserve`, `reserve-job` and `peek` answer a large body's length instead of
//! the body (`body_for_reply` in the prelude); it is then read by a plain `HGET` on a
//! connection of its own (a large reply on the shared connection would hold up every
//! reply behind it), in one transaction with the generation, so the body of another
//! namespace is never served.

use std::sync::Arc;

use bytes::Bytes;
use redis::Value;

use super::RedisStore;
use super::decode::{BodyReply, Peeked, Reservation};
use crate::protocol::TubeName;
use crate::redis::fenced::{FenceError, Fenced, body_ahead};
use crate::redis::keys::{JOB_BODY, NsKey};
use crate::redis::{CallError, RESPONSE_TIMEOUT, US};
use crate::store::{JobId, NewJob, StoreError, StoreResult};

/// How old (ms, Redis' clock) a body written ahead of its job must be before the
/// timer's sweep removes it when its job was never made: far past any put's call (the
/// script's call times out long before), so a put still on its way is never robbed.
pub(super) const AHEAD_STALE_MS: u64 = 60_000;

impl RedisStore {
    /// Put `job`, whose body is large; see the module header.
    pub(super) async fn put_large(&self, job: NewJob) -> StoreResult<JobId> {
        let keys = self.run.keys();
        let generation = self.run.namespace().current();
        let mut fenced = Fenced::new(
            "put (large body)",
            self.connector.clone(),
            keys.ns(NsKey::Generation).to_string(),
            generation.to_string(),
        );
        // Before the script, whatever happened, the job was not made.
        let fence = |e: FenceError| match e {
            FenceError::Fenced => {
                self.run.namespace().lost(&generation);
                StoreError::NamespaceLost { op: "put" }
            }
            FenceError::Failed(e) => StoreError::NotApplied {
                op: "put (large body)",
                source: Some(Box::new(e)),
            },
        };
        let mut take = redis::cmd("INCR");
        take.arg(keys.ns(NsKey::Ids));
        let id = match fenced.send_one(take).await.map_err(fence)? {
            Value::Int(n) if n > 0 => n as u64,
            other => {
                return Err(StoreError::bad_reply(
                    "put (large body)",
                    format!("INCR answered {other:?}"),
                ));
            }
        };
        // The store's clock is Redis' (read at connect), as the sweep's is.
        let now_ms = self.clock.now() / (1000 * US);
        fenced
            .send_all(body_ahead(keys, id, &job.body, now_ms))
            .await
            .map_err(fence)?;
        let mut call = self.run.on_tube(|s| &s.put, &[], job.tube.as_str());
        if *call.generation() != generation {
            return Err(StoreError::NamespaceLost { op: "put" });
        }
        call.arg((job.pri, job.delay_ms, job.ttr_ms, ""))
            .arg(self.ret_arg0())
            .arg(id);
        let made = call.run().await;
        if let Err(StoreError::NotApplied { .. }) = &made {
            let mut undo = redis::cmd("DEL");
            undo.arg(keys.job(id));
            let mut unnote = redis::cmd("ZREM");
            unnote.arg(keys.ns(NsKey::Ahead)).arg(id);
            if let Err(e) = fenced.send_all([undo, unnote]).await {
                tracing::warn!(id, error = %e, "a large put failed and its body could not be removed");
            }
        }
        made
    }

    /// A script's body reply for job `id`, made whole (a call made for `generation`);
    /// `None`: the job has no body any more.
    async fn whole_body(
        &self,
        id: JobId,
        body: BodyReply,
        generation: &Arc<str>,
    ) -> StoreResult<Option<Bytes>> {
        if let BodyReply::Here(b) = body {
            return Ok(Some(b));
        }
        let op = "read large body";
        let mut conn = self
            .connector
            .single(RESPONSE_TIMEOUT)
            .await
            .map_err(CallError::connect)?;
        let (now, body): (Option<String>, Option<Vec<u8>>) = redis::pipe()
            .atomic()
            .get(self.run.keys().ns(NsKey::Generation))
            .hget(self.run.keys().job(id), JOB_BODY)
            .query_async(&mut conn)
            .await
            .map_err(|e| StoreError::redis(op, e))?;
        if now.as_deref() != Some(&**generation) {
            self.run.namespace().lost(generation);
            return Err(StoreError::NamespaceLost { op });
        }
        Ok(body.map(Bytes::from))
    }

    /// A peek's answer with its body read whole; a job whose large body is gone by then
    /// was deleted meanwhile: not found.
    pub(super) async fn peeked(
        &self,
        peeked: Option<Peeked>,
        generation: &Arc<str>,
    ) -> StoreResult<Option<(JobId, Bytes)>> {
        let Some(p) = peeked else {
            return Ok(None);
        };
        let body = self.whole_body(p.id, p.body, generation).await?;
        Ok(body.map(|b| (p.id, b)))
    }

    /// A reservation's body read whole. The reservation is made: when its body cannot
    /// be read, it is undone like a reservation whose answer was lost.
    pub(super) async fn reserved_body(
        &self,
        tube: &TubeName,
        owner: &str,
        r: &mut Reservation,
        generation: &Arc<str>,
    ) -> StoreResult<Bytes> {
        let body = std::mem::replace(&mut r.body, BodyReply::Apart);
        let read = self.whole_body(r.id, body, generation).await;
        let why: crate::store::BoxError = match read {
            Ok(Some(b)) => return Ok(b),
            Ok(None) => "the job's large body vanished".into(),
            Err(e) => Box::new(e),
        };
        self.attempts.unanswered(tube, owner);
        // The reservation was made (and is undone later): it may have applied.
        Err(StoreError::TimedOut {
            op: "reserve (large body)",
            source: Some(why),
        })
    }
}
