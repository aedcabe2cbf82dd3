//! The shared mode's side of the operator API: a tube's jobs in one state from a
//! cursor (`list.lua`), one job's entry (`job_entry.lua`) and changes in place
//! (`edit.lua`: move, priority, delay, bury), each one script call, and the typed
//! reading of their replies.
//!
//! Invariants: a listing call finds its cursor's place by rank (O(log² n)) and reads
//! at most `scan` + 1 members from there, and a search reads at most [`SEARCH_BYTES`]
//! of bodies a call (the page then ends early, with its cursor), so page 1,000 costs
//! what page 1 costs and no call blocks Redis for long; an edit is one script, so it
//! applies whole or not at all, and which states take it is decided by
//! [`Edit::allowed_in`] alone (the script is handed the list).
//!
//! Units: a cursor's primary key is a ready job's priority, a buried job's bury
//! sequence, and a delayed or reserved job's due time in nanoseconds (Redis keeps
//! microseconds: the key is the score × 1,000, exact both ways).

use redis::Value;

use super::RedisStore;
use super::decode::{Decode, JobFigures, count, fields, string};
use crate::protocol::TubeName;
use crate::redis::US;
use crate::store::keys::Key;
use crate::store::policy::DeadReason;
use crate::store::{
    Edit, Edited, JobEntry, JobId, JobState, ListKey, ListPage, ListQuery, ReservedBy, StoreResult,
};

/// The most body bytes one call of a search reads in Redis (a body is read whole, so
/// a call reads at least one).
pub const SEARCH_BYTES: u64 = 8 << 20;

/// Every state, for the list of those an edit is allowed in.
const STATES: [JobState; 4] = [
    JobState::Ready,
    JobState::Reserved,
    JobState::Delayed,
    JobState::Buried,
];

/// A job's entry as the scripts answer it (see `admin_entry` in the prelude); the
/// tube and the holder's instance are filled in by the store.
pub struct EntryReply {
    id: JobId,
    score: u64,
    body_size: u64,
    owner: String,
    /// A keyed job's key (the job's KEY field; empty: none).
    key: Option<Key>,
    /// Why a dead letter rule buried it.
    dead: Option<DeadReason>,
    figures: JobFigures,
}

impl Decode for EntryReply {
    fn decode(v: Value) -> Result<Self, String> {
        let Value::Array(mut items) = v else {
            return Err(format!("expected a job entry, got {v:?}"));
        };
        if items.len() < 6 {
            return Err(format!("expected a job entry, got {} fields", items.len()));
        }
        let figures = JobFigures::decode(Value::Array(items.split_off(6)))?;
        let [id, score, body_size, owner, key, dead] = fields(Value::Array(items))?;
        let key = match string(&key, "a job's key")?.as_str() {
            "" => None,
            k => Some(Key::new(k.as_bytes()).ok_or_else(|| format!("a bad job key {k:?}"))?),
        };
        let dead = match string(&dead, "a dead letter reason")?.as_str() {
            "" => None,
            d => Some(
                DeadReason::decode(d).ok_or_else(|| format!("a bad dead letter reason {d:?}"))?,
            ),
        };
        Ok(EntryReply {
            id: count(&id)?,
            score: count(&score)?,
            body_size: count(&body_size)?,
            owner: string(&owner, "an owner token")?,
            key,
            dead,
            figures,
        })
    }
}

/// A page of a listing as `list.lua` answers it.
pub struct Listed {
    scanned: u64,
    /// The score and member of the last job looked at, when more follow.
    next: Option<(u64, JobId)>,
    entries: Vec<EntryReply>,
}

impl Decode for Listed {
    fn decode(v: Value) -> Result<Self, String> {
        let [scanned, score, member, entries] = fields(v)?;
        let next = match string(&score, "a cursor score")?.as_str() {
            "" => None,
            _ => Some((count(&score)?, count(&member)?)),
        };
        let Value::Array(entries) = entries else {
            return Err(format!("expected the listed jobs, got {entries:?}"));
        };
        Ok(Listed {
            scanned: count(&scanned)?,
            next,
            entries: entries
                .into_iter()
                .map(EntryReply::decode)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// What `edit.lua` answers.
pub enum EditReply {
    NotFound,
    Conflict(JobState),
    Done { ready: bool, entry: EntryReply },
}

fn state_of(name: &str) -> Result<JobState, String> {
    STATES
        .into_iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| format!("unknown job state {name:?}"))
}

impl Decode for EditReply {
    fn decode(v: Value) -> Result<Self, String> {
        let Value::Array(mut items) = v else {
            return Err(format!("expected an edit's answer, got {v:?}"));
        };
        let what = match items.first() {
            Some(w) => string(w, "an edit's outcome")?,
            None => return Err("an empty edit answer".into()),
        };
        match (what.as_str(), items.len()) {
            ("not_found", 1) => Ok(EditReply::NotFound),
            ("conflict", 2) => Ok(EditReply::Conflict(state_of(&string(
                &items[1],
                "a job state",
            )?)?)),
            ("done", 3) => {
                let entry = EntryReply::decode(items.remove(2))?;
                Ok(EditReply::Done {
                    ready: count(&items[1])? == 1,
                    entry,
                })
            }
            (other, n) => Err(format!("unexpected edit answer {other:?} of {n} fields")),
        }
    }
}

/// A delayed or reserved job's score is a time (us in Redis, ns in a key).
fn timed(state: JobState) -> bool {
    matches!(state, JobState::Delayed | JobState::Reserved)
}

impl RedisStore {
    /// A script's entry as the store's: the holder named by its owner token
    /// ("<instance>:<conn>:<attempt>"; this instance's own as `None`).
    fn entry_of(&self, e: EntryReply, tube: TubeName) -> JobEntry {
        let info = e.figures.into_info(e.id, tube);
        let holder = (info.state == JobState::Reserved)
            .then(|| {
                let mut parts = e.owner.rsplitn(3, ':');
                let (_, conn, instance) = (parts.next(), parts.next()?, parts.next()?);
                Some(ReservedBy {
                    instance: (instance != self.instance).then(|| instance.to_string()),
                    conn: conn.parse().ok()?,
                })
            })
            .flatten();
        let primary = if timed(info.state) {
            e.score * US
        } else {
            e.score
        };
        JobEntry {
            key: ListKey { primary, id: e.id },
            body_size: e.body_size,
            holder,
            info,
            job_key: e.key,
            dead: e.dead,
            history: None,
        }
    }

    pub(super) async fn admin_list(&self, q: &ListQuery) -> StoreResult<ListPage> {
        let mut call = self.run.on_tube(|s| &s.list, &[], q.tube.as_str());
        call.arg(q.state.name());
        match q.after {
            Some(k) if timed(q.state) => call.arg((k.primary / US, k.id)),
            Some(k) => call.arg((k.primary, k.id)),
            None => call.arg(("", "")),
        };
        let needle = q.contains.as_deref().unwrap_or_default();
        call.arg((q.limit, q.scan, u8::from(q.contains.is_some())))
            .arg(needle)
            .arg(SEARCH_BYTES);
        let listed = call.run().await?;
        let next = listed.next.map(|(score, id)| ListKey {
            primary: if timed(q.state) { score * US } else { score },
            id,
        });
        Ok(ListPage {
            jobs: listed
                .entries
                .into_iter()
                .map(|e| self.entry_of(e, q.tube.clone()))
                .collect(),
            scanned: listed.scanned,
            next,
        })
    }

    pub(super) async fn admin_job_entry(&self, id: JobId) -> StoreResult<Option<JobEntry>> {
        let Some(found) = self.on_job(|s| &s.job_entry, id).run().await? else {
            return Ok(None);
        };
        let mut entry = self.entry_of(found.reply, found.tube);
        entry.history = self.live_history(id).await?;
        Ok(Some(entry))
    }

    pub(super) async fn admin_edit(&self, id: JobId, edit: &Edit) -> StoreResult<Edited> {
        let Some(tube) = self.job_tube(id).await? else {
            return Ok(Edited::NotFound);
        };
        let (op, value, to) = match edit {
            Edit::Move(to) => ("move", to.to_string(), Some(to)),
            Edit::Pri(p) => ("pri", p.to_string(), None),
            Edit::Delay(d) => ("delay", d.to_string(), None),
            Edit::Bury => ("bury", String::new(), None),
        };
        let allowed: String = STATES
            .into_iter()
            .filter(|s| edit.allowed_in(*s))
            .fold(",".to_string(), |acc, s| acc + s.name() + ",");
        let mut tubes = vec![tube.as_str()];
        tubes.extend(to.map(|t| t.as_str()));
        let mut call = self.run.call(|s| &s.edit, &[], &tubes);
        call.arg(self.run.origin())
            .arg(tube.as_str())
            .arg(id)
            .arg(op)
            .arg(value)
            .arg(allowed)
            .arg(self.ret_arg0());
        Ok(match call.run().await? {
            EditReply::NotFound => Edited::NotFound,
            EditReply::Conflict(state) => Edited::Conflict(state),
            EditReply::Done { ready, entry } => {
                let now_in = to.cloned().unwrap_or(tube);
                Edited::Done {
                    ready_in: ready.then(|| now_in.clone()),
                    entry: self.entry_of(entry, now_in),
                }
            }
        })
    }
}
