//! Turning a cut into the commands of one batch (appended to its fenced script call,
//! `crate::redis::fenced_script`, through `call.rs`), in the shared mode's schema
//! (docs/REDIS.md).
//!
//! A tube's set changes are grouped into one variadic command per set and operation
//! (`ZADD ready pri id pri id ...`), so Redis' cost per batch grows with the jobs in it,
//! not with a fixed cost per job. ZREMs come before ZADDs: a job of unknown standing
//! is removed from every state's set, then added to its own. Each changed job is one
//! `HSET` of its hash: its metadata, with its tube when Redis may not hold it (a new
//! job, a moved one, one of unknown standing) and its body when Redis may lack it; the
//! batch's deleted jobs are one `DEL` of their hashes. A job moved to another tube
//! (same id) is removed from the old tube's sets and its hash names the new one.
//! What Redis already holds ([`Written`], `written.rs`) spares commands. A cut is always
//! one call, never split: schedules' cursors (`cursors.rs`) and their ticks' jobs are
//! therefore applied together or not at all, and so are deleted jobs and their
//! retained records (`retained.rs`).

use std::time::Instant;

use foldhash::HashMap;

use super::call::{Args, Batch};
use super::figures::TUBE_FIELDS;
use super::record::meta_of;
use super::written::Written;
use crate::protocol::TubeName;
use crate::redis::keys::{Keys, NsKey, TubeKey};
use crate::redis::{US, meta};
use crate::store::JobState;
use crate::store::memory::{Cut, Gone, JobRecord, StoreCounters, Stored, TubeRecord};
use crate::util::SwapList;

/// The set a job in `state` sits in; also the index of its arguments in [`TubeOps`].
fn set_of(state: JobState) -> TubeKey {
    match state {
        JobState::Ready => TubeKey::Ready,
        JobState::Delayed => TubeKey::Delayed,
        JobState::Reserved => TubeKey::Reserved,
        JobState::Buried => TubeKey::Buried,
    }
}

/// The four sets, in [`TubeOps`]' order.
const SETS: [TubeKey; 4] = [
    TubeKey::Ready,
    TubeKey::Delayed,
    TubeKey::Reserved,
    TubeKey::Buried,
];

/// One tube's set changes, grouped by set and operation.
#[derive(Debug, Default)]
struct TubeOps {
    zadd: [Args; 4],
    zrem: [Args; 4],
    /// In [`Builder::touched`] (until the next batch clears it).
    touched: bool,
}

impl TubeOps {
    fn clear(&mut self) {
        self.touched = false;
        for a in self.zadd.iter_mut().chain(self.zrem.iter_mut()) {
            a.clear();
        }
    }

    /// Take `id` out of the set(s) persistence may have it in, unless it stays there.
    fn unset(&mut self, id: u64, was: Stored, now_in: Option<JobState>) {
        match was {
            Stored::Never | Stored::BodyOnly => {}
            Stored::As(s) if Some(s) == now_in => {}
            Stored::As(s) => self.zrem[set_of(s) as usize].member(id),
            Stored::Unknown => {
                for set in &mut self.zrem {
                    set.member(id);
                }
            }
        }
    }
}

/// Builds the batch of one cut; reuses its buffers from batch to batch.
#[derive(Debug, Default)]
pub struct Builder {
    tubes: HashMap<TubeName, TubeOps>,
    /// The tubes this batch's jobs touched, in the order first touched: the only
    /// entries of `tubes` a batch clears and writes (the map keeps up to 1,024 tubes'
    /// buffers for reuse, and a batch must not cost that many).
    touched: Vec<TubeName>,
    /// The metadata of each of the cut's jobs, in the cut's order.
    metas: Args,
    /// The hashes of the batch's deleted jobs.
    gone: Args,
    /// The ids of bodies written ahead whose jobs this batch writes or deletes (out of
    /// the namespace's `ahead` set; also those of unknown standing, which may be such).
    ahead: Args,
    meta_buf: Vec<u8>,
    /// A job's key, named once per job written (reused).
    key_buf: String,
    fields: Args,
    changed_fields: Vec<(usize, u64)>,
}

/// `tube`'s buffers, noted as touched by this batch the first time.
fn touch<'a>(
    tubes: &'a mut HashMap<TubeName, TubeOps>,
    touched: &mut Vec<TubeName>,
    tube: &TubeName,
) -> &'a mut TubeOps {
    let ops = tubes.entry(tube.clone()).or_default();
    if !ops.touched {
        ops.touched = true;
        touched.push(tube.clone());
    }
    ops
}

/// `HSET` of a tube's meta hash: the `changed` fields (nothing when none).
fn meta_command(b: &mut Batch, key: &str, f: &mut Args, changed: &[(usize, u64)]) {
    f.clear();
    for &(i, v) in changed {
        f.push(TUBE_FIELDS[i].as_bytes());
        f.num(v);
    }
    b.cmd("HSET", key, f, 2);
}

impl Builder {
    /// The batch writing `cut`, its commands appended to `call`; `written` is updated as if it lands (the caller
    /// forgets it when it does not). Jobs first (their sets a tube at a time, then their
    /// hashes), then the tubes' figures and the tube list, then the
    /// namespace counters.
    pub fn build(
        &mut self,
        call: redis::Cmd,
        keys: &Keys,
        owner: &str,
        cut: &Cut,
        written: &mut Written,
    ) -> Batch {
        let mut b = Batch::new(call);
        self.group_jobs(keys, owner, &cut.jobs, &cut.gone, &cut.moved);
        self.job_commands(&mut b, keys, &cut.jobs);
        self.tube_commands(&mut b, keys, &cut.tubes, written);
        super::keyed::key_commands(&mut b, keys, &cut.keys);
        // In this same call as the jobs the ticks made: one batch, one atomic script.
        super::cursors::cursor_commands(&mut b, keys, &cut.schedules);
        // In this same call as the deletes whose records they are.
        super::retained::retained_commands(&mut b, keys, cut, &mut written.retained);
        self.counter_commands(&mut b, keys, cut.counters, written);
        b
    }

    /// The cut's job changes: set changes grouped by tube, set and operation, each
    /// job's metadata, the deleted jobs' hashes (into the reused buffers, emptied first).
    fn group_jobs(
        &mut self,
        keys: &Keys,
        owner: &str,
        jobs: &[JobRecord],
        gone: &[Gone],
        moved: &[Gone],
    ) {
        for tube in self.touched.drain(..) {
            if let Some(ops) = self.tubes.get_mut(&tube) {
                ops.clear();
            }
        }
        // Tubes that had no changes for a while are dropped from the reused map.
        if self.tubes.len() > 1024 {
            self.tubes.clear();
        }
        self.metas.clear();
        self.gone.clear();
        self.ahead.clear();
        for r in jobs {
            self.meta_buf.clear();
            meta::encode(&meta_of(r), owner, &mut self.meta_buf);
            self.metas.push(&self.meta_buf);
            if matches!(r.was, Stored::BodyOnly | Stored::Unknown) {
                self.ahead.num(r.id);
            }
            let ops = touch(&mut self.tubes, &mut self.touched, &r.tube);
            ops.unset(r.id, r.was, Some(r.state));
            let score = match r.state {
                JobState::Ready => u64::from(r.pri),
                JobState::Delayed | JobState::Reserved => r.at / US,
                JobState::Buried => r.at,
            };
            let set = &mut ops.zadd[set_of(r.state) as usize];
            set.num(score);
            set.member(r.id);
        }
        for g in gone {
            let ops = touch(&mut self.tubes, &mut self.touched, &g.tube);
            ops.unset(g.id, g.was, None);
            keys.job_into(&mut self.key_buf, g.id);
            self.gone.push(self.key_buf.as_bytes());
            if matches!(g.was, Stored::BodyOnly | Stored::Unknown) {
                self.ahead.num(g.id);
            }
        }
        // A moved job leaves its old tube's sets; its hash, naming the new tube, is
        // written with its record in `jobs`, in this same transaction.
        for g in moved {
            let ops = touch(&mut self.tubes, &mut self.touched, &g.tube);
            ops.unset(g.id, g.was, None);
        }
    }

    /// The commands of the grouped job changes: per tube, its sets (ZREMs before
    /// ZADDs); then each job's hash, the deleted jobs' hashes, and the bodies written
    /// ahead that their jobs now hold out of the `ahead` set.
    fn job_commands(&mut self, b: &mut Batch, keys: &Keys, jobs: &[JobRecord]) {
        for tube in &self.touched {
            let Some(ops) = self.tubes.get(tube) else {
                continue;
            };
            let k = keys.tube(tube.as_str());
            for (set, members) in SETS.iter().zip(&ops.zrem) {
                b.cmd("ZREM", k.get(*set), members, 1);
            }
            for (set, pairs) in SETS.iter().zip(&ops.zadd) {
                b.cmd("ZADD", k.get(*set), pairs, 2);
            }
        }
        for (i, r) in jobs.iter().enumerate() {
            // Redis holds the tube of a job it holds in a set: it was written with it,
            // and a move rewrites it (the moved job's record is not `As`).
            let tube = (!matches!(r.was, Stored::As(_))).then(|| r.tube.as_str().as_bytes());
            let body = r.needs_body().then_some(&r.body[..]);
            keys.job_into(&mut self.key_buf, r.id);
            b.job(&self.key_buf, tube, &self.metas, i, body);
        }
        b.keys("DEL", &self.gone);
        b.cmd("ZREM", keys.ns(NsKey::Ahead), &self.ahead, 1);
    }

    /// The commands of the cut's tubes (a kept tube's changed figures, an earlier due
    /// entry, its place in the tube list; a dropped tube's keys and entries gone), then
    /// the figures held back whose time came.
    fn tube_commands(
        &mut self,
        b: &mut Batch,
        keys: &Keys,
        cut_tubes: &[TubeRecord],
        written: &mut Written,
    ) {
        let now = Instant::now();
        let mut tubes = written.tubes.take().unwrap_or_default();
        for t in cut_tubes {
            if t.kept {
                self.kept_tube(b, keys, t, written, now);
                self.listed(b, keys, &t.name, &mut tubes);
            } else {
                self.dropped_tube(b, keys, &t.name, written);
                self.unlisted(b, keys, &t.name, &mut tubes);
            }
        }
        self.figures_due(b, keys, written, now);
        written.tubes = Some(tubes);
    }

    /// A kept tube's figures that are to be written now, and its due entry if it must
    /// come earlier.
    fn kept_tube(
        &mut self,
        b: &mut Batch,
        keys: &Keys,
        t: &TubeRecord,
        written: &mut Written,
        now: Instant,
    ) {
        let k = keys.tube(t.name.as_str());
        let figures = [
            t.total_jobs,
            t.cmd_delete,
            t.cmd_pause,
            t.pause / US,
            t.pause_until / US,
        ];
        let f = &mut self.fields;
        let fields = &mut self.changed_fields;
        written.figures.take(&t.name, figures, now, fields);
        meta_command(b, k.get(TubeKey::Meta), f, fields);
        if let Some(due) = t.next_due.map(|d| d / US)
            && written.lower_due(&t.name, due)
        {
            f.clear();
            f.num(due);
            f.push(t.name.as_str().as_bytes());
            b.cmd("ZADD", keys.ns(NsKey::Due), f, 2);
        }
    }

    /// Tube `name` in the tube list (`tubes`, as Redis holds it), appended if missing.
    fn listed(
        &mut self,
        b: &mut Batch,
        keys: &Keys,
        name: &TubeName,
        tubes: &mut SwapList<TubeName>,
    ) {
        if tubes.contains(name) {
            return;
        }
        tubes.insert(name.clone());
        let f = &mut self.fields;
        f.clear();
        f.push(name.as_str().as_bytes());
        b.cmd("RPUSH", keys.ns(NsKey::Tubes), f, 1);
        f.clear();
        f.push(name.as_str().as_bytes());
        f.num(tubes.len() as u64 - 1);
        b.cmd("HSET", keys.ns(NsKey::Tubepos), f, 2);
    }

    /// A dropped tube's keys and due entry deleted.
    fn dropped_tube(&mut self, b: &mut Batch, keys: &Keys, name: &TubeName, written: &mut Written) {
        written.dropped(name);
        let k = keys.tube(name.as_str());
        // Its keys outlive it (a window guards a job that ran; keyed.rs).
        for key in TubeKey::ALL.iter().filter(|k| !TubeKey::KEPT.contains(k)) {
            b.bare("DEL", k.get(*key));
        }
        let f = &mut self.fields;
        f.clear();
        f.push(name.as_str().as_bytes());
        b.cmd("ZREM", keys.ns(NsKey::Due), f, 1);
    }

    /// Tube `name` out of the tube list (`tubes`, as Redis holds it), if there.
    fn unlisted(
        &mut self,
        b: &mut Batch,
        keys: &Keys,
        name: &TubeName,
        tubes: &mut SwapList<TubeName>,
    ) {
        let Some(pos) = tubes.position(name) else {
            return;
        };
        let ns = |k: NsKey| keys.ns(k);
        let f = &mut self.fields;
        // The reference's list removal: the last tube moves into the hole.
        let last = tubes.as_slice().last().cloned();
        tubes.remove(name);
        if let Some(last) = last.filter(|l| l != name) {
            f.clear();
            f.num(pos as u64);
            f.push(last.as_str().as_bytes());
            b.cmd("LSET", ns(NsKey::Tubes), f, 2);
            f.clear();
            f.push(last.as_str().as_bytes());
            f.num(pos as u64);
            b.cmd("HSET", ns(NsKey::Tubepos), f, 2);
        }
        b.bare("RPOP", ns(NsKey::Tubes));
        f.clear();
        f.push(name.as_str().as_bytes());
        b.cmd("HDEL", ns(NsKey::Tubepos), f, 1);
    }

    /// Figures held back whose time came, of tubes this cut did not carry.
    fn figures_due(&mut self, b: &mut Batch, keys: &Keys, written: &mut Written, now: Instant) {
        for (name, figures) in written.figures.due_now(now) {
            written
                .figures
                .take(&name, figures, now, &mut self.changed_fields);
            let k = keys.tube(name.as_str());
            meta_command(
                b,
                k.get(TubeKey::Meta),
                &mut self.fields,
                &self.changed_fields,
            );
        }
    }

    /// The namespace counters to write now (`counters.rs` says which and when).
    fn counter_commands(
        &mut self,
        b: &mut Batch,
        keys: &Keys,
        c: StoreCounters,
        written: &mut Written,
    ) {
        let ns = |k: NsKey| keys.ns(k);
        let w = written.counters.take(c, Instant::now());
        let f = &mut self.fields;
        if let Some(ids) = w.ids {
            f.clear();
            f.num(ids);
            b.cmd("SET", ns(NsKey::Ids), f, 1);
        }
        if let Some(seq) = w.seq {
            f.clear();
            f.num(seq);
            b.cmd("SET", ns(NsKey::Seq), f, 1);
        }
        if let Some([total_jobs, job_timeouts]) = w.stats {
            f.clear();
            f.push(b"total_jobs");
            f.num(total_jobs);
            f.push(b"job_timeouts");
            f.num(job_timeouts);
            b.cmd("HSET", ns(NsKey::Stats), f, 2);
        }
    }
}

#[cfg(test)]
mod tests;
