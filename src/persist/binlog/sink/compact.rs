//! The sink's compaction: keeping the log bounded by rewriting what is live into new
//! files and deleting the old ones.
//!
//! Once the files hold more than 2 × live bytes + one file, the sink rolls to a new file
//! `K`, writes every tube and every schedule cursor the log holds there, and then, ahead
//! of each batch's own records, rewrites a bounded [`Chunk`] of the windows open and the
//! retained records held when it began and of the jobs whose bodies are in files before
//! `K` (the rewrite goes first, so the batch's newer records win at
//! replay). When none is left, files before `K` are deleted (after an fsync of every
//! file since `K`, unless `-F`).
//!
//! Invariants: a batch carries at most one chunk of rewrites, so commands never wait for
//! more than one; none begins or rewrites while the disk is full; a job, window or
//! retained record is no longer pending only once the batch carrying it was written; no
//! old file is deleted before every pending job, window and retained record was
//! rewritten and (unless `-F`) the new
//! files were synced.

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use foldhash::HashMap;

use super::super::Fsync;
use super::super::format;
use super::super::replay::file_path;
use super::{BinlogSink, lock_files};
use crate::protocol::TubeName;
use crate::store::JobId;
use crate::store::keys::Key;
use crate::store::memory::ScheduleRecord;

/// A compaction rewrites at most this much per batch (windows and jobs together), so
/// no batch waits long for it and no write buffer grows past about this.
const REWRITE_RECORDS: usize = 2_000;
const REWRITE_BYTES: usize = 1 << 20;

#[derive(Debug)]
pub(super) struct Compaction {
    /// The first file of the compacted log: everything before it goes at the end.
    from: u64,
    /// Jobs that may still have their bodies in files before `from`.
    pending: Vec<JobId>,
    /// Windows open when the compaction began (their records are in files before
    /// `from`), still to rewrite. One that ends meanwhile is skipped; one reopened
    /// meanwhile is rewritten again, harmlessly (its latest record, once more).
    windows: Vec<(TubeName, Key)>,
    /// Retained records held when the compaction began, still to rewrite. One evicted
    /// meanwhile is skipped (its removal is in a newer file, or it never needs one).
    retained: Vec<JobId>,
    tubes_written: bool,
    started: Instant,
    disk_before: u64,
}

/// What one batch carried of a compaction.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Rewritten {
    /// Pending jobs consumed (rewritten, or found gone or moved already).
    jobs: usize,
    /// Pending windows consumed (rewritten, or found ended).
    windows: usize,
    /// Pending retained records consumed (rewritten, or found evicted).
    retained: usize,
    /// Job records written (`binlog-records-*` count jobs' records only).
    pub(super) job_records: u64,
}

/// A compaction's share of one batch: [`REWRITE_RECORDS`] records or
/// [`REWRITE_BYTES`], whichever comes first.
#[derive(Debug, Default)]
struct Chunk {
    records: usize,
    bytes: usize,
}

impl Chunk {
    fn is_full(&self) -> bool {
        self.records >= REWRITE_RECORDS || self.bytes >= REWRITE_BYTES
    }

    fn add(&mut self, bytes: usize) {
        self.records += 1;
        self.bytes += bytes;
    }
}

impl Compaction {
    /// After a batch carrying `rewritten` was written to file `out_no`: the tubes are
    /// in the new log, and the consumed windows and jobs are no longer pending (each
    /// rewritten job's body is now in `out_no`).
    pub(super) fn consumed(
        &mut self,
        rewritten: Rewritten,
        files: &mut HashMap<JobId, u64>,
        out_no: u64,
    ) {
        self.tubes_written = true;
        let keep = self.windows.len() - rewritten.windows;
        self.windows.truncate(keep);
        let keep = self.retained.len() - rewritten.retained;
        self.retained.truncate(keep);
        let keep = self.pending.len() - rewritten.jobs;
        for id in self.pending.drain(keep..) {
            if let Some(file) = files.get_mut(&id).filter(|f| **f < self.from) {
                *file = out_no;
            }
        }
    }
}

impl BinlogSink {
    /// Append the compaction's share of this batch to `buf`: the tubes at its start,
    /// then one [`Chunk`] of the pending windows and old jobs (none while the disk is
    /// full: the reserve is for clients' changes).
    pub(super) fn encode_rewrites(&mut self) -> Rewritten {
        let mut done = Rewritten::default();
        let Some(c) = self.compaction.as_mut() else {
            return done;
        };
        if !c.tubes_written {
            for t in self.tubes.values() {
                format::put_tube(&mut self.buf, t);
            }
            // The cursors as written before (the batch's own newer ones follow and win
            // at replay); at most one record per schedule, 10,000 at most.
            for (name, cursor) in &self.cursors {
                format::put_schedule(
                    &mut self.buf,
                    &ScheduleRecord {
                        name: name.clone(),
                        cursor: *cursor,
                        gone: false,
                        jobs: Vec::new(),
                    },
                );
            }
        }
        if self.room.is_full() {
            return done;
        }
        let mut chunk = Chunk::default();
        for at in c.windows.iter().rev() {
            if chunk.is_full() {
                break;
            }
            done.windows += 1;
            if let Some(w) = self.windows.get(at) {
                chunk.add(format::put_window(&mut self.buf, w));
            }
        }
        for id in c.retained.iter().rev() {
            if chunk.is_full() {
                break;
            }
            done.retained += 1;
            if let Some(r) = self.retained.get(id) {
                chunk.add(format::put_retained(&mut self.buf, r));
            }
        }
        let files = lock_files(&self.figures);
        for id in c.pending.iter().rev() {
            if chunk.is_full() {
                break;
            }
            done.jobs += 1;
            let old = files.get(id).is_some_and(|&f| f < c.from);
            if let Some(job) = self.jobs.get(id).filter(|_| old) {
                chunk.add(format::put_job(&mut self.buf, job, true));
                done.job_records += 1;
            }
        }
        done
    }

    /// Begin a compaction when the log holds too much that is dead; finish one that
    /// has rewritten every old job and window.
    pub(super) async fn compact(&mut self) {
        if let Some(c) = &self.compaction {
            if !c.pending.is_empty()
                || !c.windows.is_empty()
                || !c.retained.is_empty()
                || !c.tubes_written
            {
                return;
            }
            if self.config.fsync != Fsync::Never {
                // The rewritten jobs must be on the disk before their old records go:
                // every file since the compaction began (a roll may have come between).
                let paths: Vec<PathBuf> = self
                    .files
                    .range(c.from..)
                    .map(|(&n, _)| file_path(self.dir(), n))
                    .collect();
                let synced = tokio::task::spawn_blocking(move || {
                    paths
                        .iter()
                        .try_for_each(|p| File::open(p).and_then(|f| f.sync_data()))
                })
                .await;
                if !matches!(synced, Ok(Ok(()))) {
                    tracing::warn!(
                        "binlog: fsync before deleting compacted files failed; keeping them"
                    );
                    return;
                }
            }
            let Some(c) = self.compaction.take() else {
                return;
            };
            let old: Vec<u64> = self.files.range(..c.from).map(|(&n, _)| n).collect();
            for n in old {
                let path = file_path(self.dir(), n);
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        self.files.remove(&n);
                    }
                    Err(err) => {
                        tracing::warn!(file = %path.display(), %err, "binlog: cannot delete a compacted file")
                    }
                }
            }
            tracing::info!(
                before_bytes = c.disk_before,
                after_bytes = self.disk_bytes(),
                live_bytes = self.live_bytes,
                ms = c.started.elapsed().as_millis() as u64,
                "binlog compacted"
            );
            return;
        }
        let disk = self.disk_bytes();
        // A full disk has no room for the compacted copy.
        if disk <= 2 * self.live_bytes + self.config.file_size || self.room.is_full() {
            return;
        }
        if !self.try_roll("to begin a compaction") {
            return;
        }
        let from = self.out_no;
        let pending = lock_files(&self.figures)
            .iter()
            .filter(|&(_, &f)| f < from)
            .map(|(&id, _)| id)
            .collect();
        self.compaction = Some(Compaction {
            from,
            pending,
            windows: self.windows.keys().cloned().collect(),
            retained: self.retained.keys().copied().collect(),
            tubes_written: false,
            started: Instant::now(),
            disk_before: disk,
        });
    }
}
