//! The sink `-b DIR` writes through: each cut is appended to the current `binlog.N`
//! as one `write()` (so a change is acknowledged once the OS has it), forced to the
//! disk per the fsync policy, and the log is kept bounded by compaction.
//!
//! The sink mirrors what the log holds live (each job's latest record, sharing its
//! body with the store, and the file holding that body), so it knows the live bytes
//! and can rewrite live jobs without asking the store.
//!
//! Compaction: once the files hold more than 2 × live bytes + one file, the sink rolls
//! to a new file `K`, writes every tube there, and then, ahead of each batch's own
//! records, rewrites a bounded chunk of the jobs whose bodies are in files before `K`
//! (the rewrite goes first, so the batch's newer records win at replay). When none is
//! left, files before `K` are deleted (after an fsync of `K`, unless `-F`). Commands
//! never wait for more than one chunk.
//!
//! Invariants: the mirror changes only after a write succeeded; a failed write is cut
//! off the file (or, if that fails too, the next write starts a new file), so no torn
//! record is ever followed by good ones in the same file.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use foldhash::HashMap;

use super::format::{self, HEADER_LEN};
use super::replay::{Live, Replayed, file_path};
use super::sync::Syncer;
use super::{BinlogConfig, BinlogError, Fsync};
use crate::persist::{Sink, SinkError};
use crate::protocol::TubeName;
use crate::store::memory::{Cut, TubeRecord};
use crate::store::{JobId, LogFigures, StoreError};

/// A compaction rewrites at most this much per batch, so no batch waits long for it.
const REWRITE_RECORDS: usize = 2_000;
const REWRITE_BYTES: usize = 1 << 20;

#[derive(Debug)]
struct Compaction {
    /// The first file of the compacted log: everything before it goes at the end.
    from: u64,
    /// Jobs that may still have their bodies in files before `from`.
    pending: Vec<JobId>,
    tubes_written: bool,
    started: Instant,
    disk_before: u64,
}

#[derive(Debug)]
pub struct BinlogSink {
    config: BinlogConfig,
    out: Arc<File>,
    out_no: u64,
    out_len: u64,
    /// Start a new file before the next write (a failed write could not be cut off,
    /// or a compaction begins).
    roll_next: bool,
    /// Every log file on disk and its size, the current one included.
    files: BTreeMap<u64, u64>,
    jobs: HashMap<JobId, Live>,
    tubes: HashMap<TubeName, TubeRecord>,
    /// Bytes a log holding only the live jobs would take.
    live_bytes: u64,
    compaction: Option<Compaction>,
    buf: Vec<u8>,
    syncer: Option<Syncer>,
    /// `stats`'s `binlog-*` figures, kept current after each write (the record
    /// counts are kept only there).
    figures: Arc<LogFigures>,
    /// Held for the sink's life: the directory's lock.
    _lock: File,
}

fn io_err(op: &'static str) -> impl Fn(std::io::Error) -> SinkError {
    move |e| {
        // Nothing of the batch is in the log: a torn write is cut off (or stranded in a
        // file no later record follows).
        SinkError::Failed(StoreError::NotApplied {
            op,
            source: Some(Box::new(e)),
        })
    }
}

impl BinlogSink {
    pub(super) fn new(
        config: BinlogConfig,
        lock: File,
        replayed: Replayed,
        figures: Arc<LogFigures>,
    ) -> Result<BinlogSink, BinlogError> {
        let out_no = replayed.files.keys().next_back().map_or(1, |n| n + 1);
        let out = create(&config.dir, out_no, config.fsync).map_err(|e| {
            BinlogError::Io(file_path(&config.dir, out_no).display().to_string(), e)
        })?;
        let syncer = match config.fsync {
            Fsync::Every(every) => Some(
                Syncer::start(every, out.clone())
                    .map_err(|e| BinlogError::Io("fsync thread".into(), e))?,
            ),
            _ => None,
        };
        let mut files = replayed.files;
        // Files that hold no record (a start that wrote nothing) would pile up over
        // restarts: they go now.
        files.retain(|&n, &mut size| {
            size > HEADER_LEN as u64 || std::fs::remove_file(file_path(&config.dir, n)).is_err()
        });
        files.insert(out_no, HEADER_LEN as u64);
        let live_bytes = replayed
            .jobs
            .values()
            .map(|l| format::job_len(&l.record) as u64)
            .sum();
        figures.max_size.store(config.file_size, Ordering::Relaxed);
        let sink = BinlogSink {
            config,
            out,
            out_no,
            out_len: HEADER_LEN as u64,
            roll_next: false,
            files,
            jobs: replayed.jobs,
            tubes: replayed
                .tubes
                .into_iter()
                .map(|t| (t.name.clone(), t))
                .collect(),
            live_bytes,
            compaction: None,
            buf: Vec::new(),
            syncer,
            figures,
            _lock: lock,
        };
        sink.publish();
        Ok(sink)
    }

    /// Make `stats` show which files the log has now.
    fn publish(&self) {
        let f = &self.figures;
        let oldest = self.files.keys().next().copied().unwrap_or(self.out_no);
        f.oldest_index.store(oldest, Ordering::Relaxed);
        f.current_index.store(self.out_no, Ordering::Relaxed);
    }

    /// Bytes a log holding only the live jobs would take (what compaction aims at).
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    fn dir(&self) -> &PathBuf {
        &self.config.dir
    }

    fn disk_bytes(&self) -> u64 {
        self.files.values().sum()
    }

    /// Start file `out_no + 1` and write to it from now on.
    fn roll(&mut self) -> std::io::Result<()> {
        let n = self.out_no + 1;
        let out = create(self.dir(), n, self.config.fsync)?;
        if let Some(s) = &self.syncer {
            s.rolled(out.clone());
        }
        self.out = out;
        self.out_no = n;
        self.out_len = HEADER_LEN as u64;
        self.files.insert(n, self.out_len);
        self.roll_next = false;
        Ok(())
    }

    /// Append the compaction's share of this batch to `buf`: the tubes at its start,
    /// then a bounded chunk of old jobs. Returns how many pending jobs it consumed, and
    /// how many job records it wrote.
    fn encode_rewrites(&mut self) -> (usize, u64) {
        let Some(c) = self.compaction.as_mut() else {
            return (0, 0);
        };
        if !c.tubes_written {
            for t in self.tubes.values() {
                format::put_tube(&mut self.buf, t);
            }
        }
        let (mut records, mut bytes, mut consumed) = (0, 0, 0);
        for id in c.pending.iter().rev() {
            if records >= REWRITE_RECORDS || bytes >= REWRITE_BYTES {
                break;
            }
            consumed += 1;
            if let Some(live) = self.jobs.get(id).filter(|l| l.file < c.from) {
                bytes += format::put_job(&mut self.buf, &live.record, true);
                records += 1;
            }
        }
        (consumed, records as u64)
    }

    /// Write `buf` at the end of the current file (and to the disk, with `-f 0`).
    async fn append(&mut self) -> std::io::Result<()> {
        if self.config.fsync != Fsync::Always {
            (&*self.out).write_all(&self.buf)?;
            if let Some(s) = &self.syncer {
                s.mark_dirty();
            }
            return Ok(());
        }
        let file = self.out.clone();
        let buf = std::mem::take(&mut self.buf);
        let (buf, result) = tokio::task::spawn_blocking(move || {
            let r = (&*file).write_all(&buf).and_then(|()| file.sync_data());
            (buf, r)
        })
        .await
        .map_err(std::io::Error::other)?;
        self.buf = buf;
        result
    }

    /// After a successful write: what the log now holds.
    fn apply(&mut self, cut: &Cut, written_with_body: &[bool], consumed: usize) {
        for (r, &with_body) in cut.jobs.iter().zip(written_with_body) {
            let file = if with_body {
                self.live_bytes += format::job_len(r) as u64;
                self.out_no
            } else {
                self.jobs.get(&r.id).map_or(self.out_no, |l| l.file)
            };
            let old = self.jobs.insert(
                r.id,
                Live {
                    record: r.clone(),
                    file,
                },
            );
            if let (Some(old), true) = (old, with_body) {
                self.live_bytes -= format::job_len(&old.record) as u64;
            }
        }
        for g in &cut.gone {
            if let Some(old) = self.jobs.remove(&g.id) {
                self.live_bytes -= format::job_len(&old.record) as u64;
            }
        }
        for t in &cut.tubes {
            if t.kept {
                self.tubes.insert(t.name.clone(), t.clone());
            } else {
                self.tubes.remove(&t.name);
            }
        }
        if let Some(c) = self.compaction.as_mut() {
            c.tubes_written = true;
            let keep = c.pending.len() - consumed;
            for id in c.pending.drain(keep..) {
                if let Some(live) = self.jobs.get_mut(&id).filter(|l| l.file < c.from) {
                    live.file = self.out_no;
                }
            }
        }
    }

    /// Begin a compaction when the log holds too much that is dead; finish one that
    /// has rewritten every old job.
    async fn compact(&mut self) {
        if let Some(c) = &self.compaction {
            if !c.pending.is_empty() || !c.tubes_written {
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
        if disk <= 2 * self.live_bytes + self.config.file_size {
            return;
        }
        let from = self.out_no + 1;
        self.compaction = Some(Compaction {
            from,
            pending: self
                .jobs
                .iter()
                .filter(|(_, l)| l.file < from)
                .map(|(&id, _)| id)
                .collect(),
            tubes_written: false,
            started: Instant::now(),
            disk_before: disk,
        });
        self.roll_next = true;
    }
}

/// Create `DIR/binlog.N` with its header (and make its name durable unless `-F`).
fn create(dir: &std::path::Path, n: u64, fsync: Fsync) -> std::io::Result<Arc<File>> {
    let mut f = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(file_path(dir, n))?;
    f.write_all(&format::header())?;
    if fsync != Fsync::Never {
        File::open(dir)?.sync_all()?;
    }
    Ok(Arc::new(f))
}

impl Sink for BinlogSink {
    async fn write(&mut self, cut: &Cut) -> Result<(), SinkError> {
        if self.roll_next {
            self.roll().map_err(io_err("binlog: start a new file"))?;
        }
        self.buf.clear();
        let (consumed, rewritten) = self.encode_rewrites();
        let mut with_body = Vec::with_capacity(cut.jobs.len());
        for r in &cut.jobs {
            let body = !self.jobs.contains_key(&r.id);
            format::put_job(&mut self.buf, r, body);
            with_body.push(body);
        }
        for g in &cut.gone {
            format::put_gone(&mut self.buf, g.id);
        }
        for t in &cut.tubes {
            format::put_tube(&mut self.buf, t);
        }
        format::put_counters(&mut self.buf, &cut.counters);
        // A batch is never split between files: roll first when it would overflow.
        if self.out_len > HEADER_LEN as u64
            && self.out_len + self.buf.len() as u64 > self.config.file_size
        {
            self.roll().map_err(io_err("binlog: start a new file"))?;
        }
        if let Err(err) = self.append().await {
            // Cut the torn write off, so later records are not stranded behind it.
            if self.out.set_len(self.out_len).is_err() {
                self.roll_next = true;
            }
            return Err(io_err("binlog: write")(err));
        }
        self.out_len += self.buf.len() as u64;
        self.files.insert(self.out_no, self.out_len);
        self.apply(cut, &with_body, consumed);
        // A record per job written or deleted, compaction's rewrites included (the
        // reference counts its own records so).
        let written = (cut.jobs.len() + cut.gone.len()) as u64 + rewritten;
        self.figures
            .records_written
            .fetch_add(written, Ordering::Relaxed);
        self.figures
            .records_migrated
            .fetch_add(rewritten, Ordering::Relaxed);
        self.compact().await;
        self.publish();
        Ok(())
    }

    fn name(&self) -> &'static str {
        "binlog"
    }
}
