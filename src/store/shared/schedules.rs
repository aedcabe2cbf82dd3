//! Schedules in shared mode (store/schedule.rs; docs/REDIS.md, *Schedules*): a tick
//! fired by `fire.lua`, a cursor advanced without a job by `skip.lua`, the cursors read
//! and dropped with plain commands on the namespace's cursor hash.
//!
//! Invariants: a tick's cursor check, its job and the cursor's advance are one script
//! call, so instances firing the same tick at once make one job and the others get
//! [`Fired::Stale`]; a tick's body always travels in the script's arguments (a large
//! one is refused before any call, never put in two steps); the cursor hash is one key
//! of the namespace (its hash tag), so every call stays in one Redis Cluster slot; a
//! cursor field that is not five decimals is a `BadReply` naming its schedule, never
//! read as zeros.

use redis::Value;

use super::RedisStore;
use super::decode::{Decode, count, text};
use super::keys::key_state;
use crate::redis::cursor::parse_cursor;
use crate::store::schedule::{Cursor, Fired, ScheduleName, TickPut};
use crate::store::{JobId, LARGE_BODY, StoreError, StoreResult};

/// What `fire.lua` or `skip.lua` answered.
#[derive(Debug, PartialEq, Eq)]
pub enum TickReply {
    Made(JobId),
    Deduped(JobId, crate::store::keys::KeyState),
    Stale(u64),
    Early,
    Skipped,
    /// The schedule's cursor field held this text, not a cursor: nothing done.
    BadCursor(String),
}

impl Decode for TickReply {
    fn decode(v: Value) -> Result<Self, String> {
        let Value::Array(items) = v else {
            return Err(format!("expected an array, got {v:?}"));
        };
        let Some((what, rest)) = items.split_first() else {
            return Err("an empty array".into());
        };
        let reply = match (text(what)?, rest) {
            (b"made", [id]) => TickReply::Made(count(id)?),
            (b"deduped", [id, state]) => {
                let state = key_state(text(state)?)?.ok_or("deduped without a state")?;
                TickReply::Deduped(count(id)?, state)
            }
            (b"stale", [last]) => TickReply::Stale(count(last)?),
            (b"early", []) => TickReply::Early,
            (b"skipped", []) => TickReply::Skipped,
            (b"bad", [raw]) => TickReply::BadCursor(String::from_utf8_lossy(text(raw)?).into()),
            (other, rest) => {
                return Err(format!(
                    "{:?} with {} fields",
                    String::from_utf8_lossy(other),
                    rest.len()
                ));
            }
        };
        Ok(reply)
    }
}

fn bad_cursor(op: &'static str, name: &str, raw: &str) -> StoreError {
    StoreError::bad_reply(op, format!("the cursor of schedule {name} is {raw:?}"))
}

impl RedisStore {
    pub(super) async fn fire_tick_in(&self, tick: &TickPut) -> StoreResult<Fired> {
        let job = &tick.job;
        if job.body.len() >= LARGE_BODY {
            return Err(StoreError::BodyTooLarge {
                op: "fire_tick",
                len: job.body.len(),
            });
        }
        // A schedule's key always dedupes (TickPut): the mode is not passed.
        let (key, window) = tick
            .key
            .as_ref()
            .map_or(("", 0), |k| (k.key.as_str(), k.window.as_millis()));
        let cursors = self.run.keys().schedule_cursors();
        let mut call = self
            .run
            .on_tube(|s| &s.fire, &[&cursors], job.tube.as_str());
        call.arg(job.pri)
            .arg(job.delay_ms)
            .arg(job.ttr_ms)
            .arg(&job.body[..])
            .arg(key)
            .arg(window)
            .arg(tick.schedule.as_str())
            .arg(tick.tick_ms)
            .arg(tick.skipped)
            .arg(self.ret_arg0());
        match call.run().await? {
            TickReply::Made(id) => Ok(Fired::Made(id)),
            TickReply::Deduped(id, state) => Ok(Fired::Deduped(id, state)),
            TickReply::Stale(last_tick_ms) => Ok(Fired::Stale { last_tick_ms }),
            TickReply::Early => Ok(Fired::Early),
            TickReply::BadCursor(raw) => Err(bad_cursor("fire", tick.schedule.as_str(), &raw)),
            TickReply::Skipped => Err(StoreError::bad_reply("fire", "a skip's answer")),
        }
    }

    pub(super) async fn skip_to_in(
        &self,
        name: &ScheduleName,
        tick_ms: u64,
        skipped: u64,
    ) -> StoreResult<bool> {
        let cursors = self.run.keys().schedule_cursors();
        let mut call = self.run.call(|s| &s.skip, &[&cursors], &[] as &[&str]);
        call.arg(name.as_str()).arg(tick_ms).arg(skipped);
        match call.run().await? {
            TickReply::Skipped => Ok(true),
            TickReply::Stale(_) => Ok(false),
            TickReply::BadCursor(raw) => Err(bad_cursor("skip", name.as_str(), &raw)),
            other => Err(StoreError::bad_reply("skip", format!("{other:?}"))),
        }
    }

    pub(super) async fn schedule_cursors_in(&self) -> StoreResult<Vec<(ScheduleName, Cursor)>> {
        const OP: &str = "HGETALL sched:cursor";
        let fields: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(self.run.keys().schedule_cursors())
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis(OP, e))?;
        let mut cursors = fields
            .iter()
            .map(|(name, value)| {
                let name_text = String::from_utf8_lossy(name);
                let parsed = ScheduleName::new(&name_text).ok_or_else(|| {
                    StoreError::bad_reply(OP, format!("{name_text:?} is not a schedule name"))
                })?;
                let cursor = parse_cursor(value)
                    .ok_or_else(|| bad_cursor(OP, &name_text, &String::from_utf8_lossy(value)))?;
                Ok((parsed, cursor))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        cursors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(cursors)
    }

    pub(super) async fn drop_cursor_in(&self, name: &ScheduleName) -> StoreResult<()> {
        redis::cmd("HDEL")
            .arg(self.run.keys().schedule_cursors())
            .arg(name.as_str())
            .query_async::<i64>(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("HDEL sched:cursor", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_replies_decode_to_their_kind() {
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let cases = [
            (vec![s("made"), s("12")], TickReply::Made(12)),
            (
                vec![s("deduped"), s("9"), s("RESERVED")],
                TickReply::Deduped(9, crate::store::keys::KeyState::Reserved),
            ),
            (vec![s("stale"), s("1000")], TickReply::Stale(1000)),
            (vec![s("early")], TickReply::Early),
            (vec![s("skipped")], TickReply::Skipped),
            (vec![s("bad"), s("x y")], TickReply::BadCursor("x y".into())),
        ];
        for (reply, want) in cases {
            assert_eq!(TickReply::decode(Value::Array(reply)), Ok(want));
        }
        for bad in [
            vec![],
            vec![s("made")],
            vec![s("deduped"), s("9"), s("")],
            vec![s("stale"), s("-1")],
            vec![s("what")],
        ] {
            assert!(TickReply::decode(Value::Array(bad)).is_err());
        }
    }
}
