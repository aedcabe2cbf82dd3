//! Keyed jobs in shared mode (docs/EXTENSIONS.md, *Keys*; docs/REDIS.md): a keyed put
//! (`put_key.lua`) and the commands by key (`by_key.lua`; a flush frees its jobs' keys
//! in `flush.lua`), each one script call on the used tube's keys, whose `keys` hash
//! maps a key to its job (or to a deleted job while its window is open, the window's
//! end in the namespace's `keywin` set).
//!
//! Invariants: a script finds a key, checks its job's state and writes in one call
//! (O(1) in the tube's size); a reservation this instance holds is released from
//! `held` when a command by key deletes or buries it; the most windows open at once
//! (`windows_max`) is handed to every script that may open one.

use std::sync::atomic::Ordering;

use redis::Value;

use super::RedisStore;
use super::decode::{Decode, fields, text};
use crate::protocol::TubeName;
use crate::protocol::ext::{Key, KeyMode, PutKey};
use crate::store::keys::{KeyLimits, KeyOp, KeyOutcome, KeyState, KeyedPut};
use crate::store::{ConnId, JobId, Nanos, NewJob, StoreResult};

/// A key's job's state as the scripts name it (`key_lookup`); `None` for ''.
pub(super) fn key_state(word: &[u8]) -> Result<Option<KeyState>, String> {
    Ok(match word {
        b"" => None,
        b"READY" => Some(KeyState::Ready),
        b"RESERVED" => Some(KeyState::Reserved),
        b"DELAYED" => Some(KeyState::Delayed),
        b"BURIED" => Some(KeyState::Buried),
        b"DELETED" => Some(KeyState::Deleted),
        other => return Err(format!("bad state {:?}", String::from_utf8_lossy(other))),
    })
}

/// A keyed script's reply: what happened, and the key's job's id and state.
#[derive(Debug)]
pub struct KeyReply {
    what: Vec<u8>,
    id: JobId,
    state: Option<KeyState>,
}

impl Decode for KeyReply {
    fn decode(v: Value) -> Result<Self, String> {
        let [what, id, state] = fields(v)?;
        let id = match text(&id)? {
            b"" => 0,
            digits => std::str::from_utf8(digits)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad id {id:?}"))?,
        };
        let state = key_state(text(&state)?)?;
        Ok(KeyReply {
            what: text(&what)?.to_vec(),
            id,
            state,
        })
    }
}

impl KeyReply {
    /// The key's job's id and state; an error names a reply without them.
    fn found(&self) -> Result<(JobId, KeyState), String> {
        self.state
            .map(|s| (self.id, s))
            .ok_or_else(|| format!("{:?} without a state", String::from_utf8_lossy(&self.what)))
    }

    fn put(self) -> Result<KeyedPut, String> {
        Ok(match &self.what[..] {
            b"inserted" => KeyedPut::Inserted(self.id),
            b"existing" => KeyedPut::Existing(self.id, self.found()?.1),
            b"replaced" => KeyedPut::Replaced(self.id, self.found()?.1),
            b"conflict" => KeyedPut::Conflict(self.id, self.found()?.1),
            other => return Err(format!("put_key: {:?}", String::from_utf8_lossy(other))),
        })
    }

    fn outcome(self) -> Result<KeyOutcome, String> {
        Ok(match &self.what[..] {
            b"not_found" => KeyOutcome::NotFound,
            b"done" => KeyOutcome::Done(self.id),
            b"found" => {
                let (id, state) = self.found()?;
                KeyOutcome::Found(id, state)
            }
            b"conflict" => {
                let (id, state) = self.found()?;
                KeyOutcome::Conflict(id, state)
            }
            other => return Err(format!("by_key: {:?}", String::from_utf8_lossy(other))),
        })
    }
}

impl RedisStore {
    pub(super) fn windows_max(&self) -> u64 {
        self.windows_max.load(Ordering::Relaxed)
    }

    pub(super) fn set_windows_max(&self, limits: KeyLimits) {
        self.windows_max
            .store(limits.windows_max, Ordering::Relaxed);
    }

    pub(super) async fn put_keyed_in(
        &self,
        job: NewJob,
        key: &PutKey,
        _now: Nanos,
    ) -> StoreResult<KeyedPut> {
        let mode = match key.mode {
            KeyMode::Dedupe => "dedupe",
            KeyMode::Replace => "replace",
        };
        let mut call = self.run.on_tube(|s| &s.put_key, &[], job.tube.as_str());
        call.arg(job.pri)
            .arg(job.delay_ms)
            .arg(job.ttr_ms)
            .arg(&job.body[..])
            .arg(key.key.as_str())
            .arg(mode)
            .arg(key.window.as_millis())
            .arg(self.ret_arg0());
        let reply = call.run().await?;
        reply
            .put()
            .map_err(|e| crate::store::StoreError::bad_reply("put_key", e))
    }

    pub(super) async fn by_key_in(
        &self,
        conn: ConnId,
        tube: &TubeName,
        key: &Key,
        op: KeyOp,
        _now: Nanos,
    ) -> StoreResult<KeyOutcome> {
        let (name, n) = match op {
            KeyOp::Find => ("find", 0),
            KeyOp::Delete => ("delete", 0),
            KeyOp::Kick => ("kick", 0),
            KeyOp::Bury { pri } => ("bury", u64::from(pri)),
            KeyOp::Retime { delay_ms } => ("retime", delay_ms),
        };
        // The owner tokens of this connection's reservations start so (reclaim.rs).
        let mine = format!("{}:{}:", self.instance, conn.0);
        let mut call = self.run.on_tube(|s| &s.by_key, &[], tube.as_str());
        call.arg(key.as_str())
            .arg(name)
            .arg(mine)
            .arg(n)
            .arg(self.windows_max())
            .arg(self.ret_arg(conn));
        let outcome = call
            .run()
            .await?
            .outcome()
            .map_err(|e| crate::store::StoreError::bad_reply("by_key", e))?;
        if let (KeyOp::Delete | KeyOp::Bury { .. }, KeyOutcome::Done(id)) = (op, outcome) {
            self.held.unhold(conn, id);
        }
        Ok(outcome)
    }
}
