//! The sink `-b DIR` writes through: each cut is appended to the current `binlog.N`
//! as one `write()` (so a change is acknowledged once the OS has it), forced to the
//! disk per the fsync policy, and the log is kept bounded by compaction.
//!
//! The sink mirrors what the log holds live (each job's latest record, sharing its
//! body with the store; the file holding each job's body is in
//! [`LogFigures::job_files`], where `stats-job` reads it; the open dedupe windows), so
//! it knows the live bytes and can rewrite live jobs and windows without asking the
//! store.
//!
//! Compaction (`sink/compact.rs`): once the files hold more than 2 × live bytes + one
//! file, the live jobs and windows are rewritten, a chunk ahead of each batch, into a
//! new file, and the files before it are deleted. Commands never wait for more than
//! one chunk.
//!
//! A full disk (see `room`): puts are refused before they make a job; the other
//! batches go into the current file's reserve, past `-s` if need be (no new file is
//! started, no compaction begins or rewrites, while full).
//!
//! A cut's schedule cursors are written before its jobs (after only the compaction's
//! rewrites of older records): a write cut short then keeps a cursor without its
//! tick's job (a tick lost), never the job without its cursor (a tick fired twice).
//!
//! Invariants: the mirror (the cursors and retained records included) changes only
//! after a write succeeded; `live_bytes` is the sum of each mirrored job's, window's
//! and retained record's record length; a failed write is cut
//! off the file (or, if that fails too, the next write starts a new file), so no torn
//! record is ever followed by good ones in the same file; a new file that cannot be
//! started whole is removed again, so its number stays free for the next try.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use foldhash::HashMap;

use super::format::{self, HEADER_LEN};
use super::replay::{Replayed, file_path};
use super::room::Room;
use super::sync::Syncer;
use super::{BinlogConfig, BinlogError, Fsync};
use crate::persist::{Sink, SinkError};
use crate::protocol::TubeName;
use crate::store::keys::{Key, KeyRecord, KeySlot};
use crate::store::memory::{Cut, JobRecord, Stored, TubeRecord};
use crate::store::retention::Retained;
use crate::store::{Cursor, JobId, LogFigures, ScheduleName, StoreError};
use crate::util::lock;

mod compact;

use compact::{Compaction, Rewritten};

/// After a new file could not be started, the next try waits this long (one warning
/// per try, not one per batch).
const ROLL_RETRY: Duration = Duration::from_secs(1);
/// While the disk is full and nothing is written, how often to look for space.
const PROBE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct BinlogSink {
    config: BinlogConfig,
    out: Arc<File>,
    out_no: u64,
    out_len: u64,
    /// The current file ends in a failed write that could not be cut off: start a new
    /// file before the next write.
    roll_next: bool,
    /// No new file is tried before this (the last try failed).
    roll_after: Option<Instant>,
    /// Every log file on disk and its size, the current one included.
    files: BTreeMap<u64, u64>,
    /// Each live job's latest record (the file holding its body is in
    /// `figures.job_files`).
    jobs: HashMap<JobId, JobRecord>,
    tubes: HashMap<TubeName, TubeRecord>,
    /// Open dedupe windows (rewritten in chunks, as the jobs, by a compaction).
    windows: HashMap<(TubeName, Key), KeyRecord>,
    /// The cursors the log holds (written by this sink or read back): what a
    /// compaction rewrites. Never the store's unwritten ones, which may be ahead of
    /// their jobs.
    cursors: HashMap<ScheduleName, Cursor>,
    /// The retained records the log holds (rewritten in chunks by a compaction; as
    /// many as `--retain-jobs` allows, their bodies within `--retain-bytes`).
    retained: HashMap<JobId, Retained>,
    /// Bytes a log holding only the live jobs, the open windows and the retained
    /// records would take.
    live_bytes: u64,
    compaction: Option<Compaction>,
    buf: Vec<u8>,
    syncer: Option<Syncer>,
    /// The space held ahead of the current file's end.
    room: Room,
    /// `stats`'s `binlog-*` figures, the full flag and the jobs' files, kept current
    /// after each write (the record counts are kept only there).
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

/// Files that hold no record (a start that wrote nothing) would pile up over restarts:
/// they go now. The others give back what a run killed while writing them held
/// allocated beyond their end (the reserve, see `room`).
fn tidy_replayed(dir: &Path, files: &mut BTreeMap<u64, u64>) {
    files.retain(|&n, &mut size| {
        let path = file_path(dir, n);
        if size <= HEADER_LEN as u64 && std::fs::remove_file(&path).is_ok() {
            return false;
        }
        if let Err(err) = OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(size))
        {
            tracing::debug!(file = %path.display(), %err, "binlog: cannot trim a log file");
        }
        true
    });
}

fn lock_files(figures: &LogFigures) -> MutexGuard<'_, HashMap<JobId, u64>> {
    lock(&figures.job_files)
}

impl BinlogSink {
    pub(super) fn new(
        config: BinlogConfig,
        lock: File,
        replayed: Replayed,
        figures: Arc<LogFigures>,
    ) -> Result<BinlogSink, BinlogError> {
        let out_no = match replayed.files.keys().next_back() {
            None => 1,
            Some(&last) => last.checked_add(1).ok_or_else(|| {
                BinlogError::Exhausted(file_path(&config.dir, last).display().to_string())
            })?,
        };
        let out_path = file_path(&config.dir, out_no);
        let out = create(&config.dir, out_no, config.fsync)
            .map_err(BinlogError::io("start the log file", &out_path))?;
        let syncer = match config.fsync {
            Fsync::Every(every) => Some(
                Syncer::start(every, out.clone())
                    .map_err(BinlogError::io("start the fsync thread for", &out_path))?,
            ),
            _ => None,
        };
        let mut files = replayed.files;
        tidy_replayed(&config.dir, &mut files);
        files.insert(out_no, HEADER_LEN as u64);
        let mut room = Room::new(figures.clone(), HEADER_LEN as u64);
        // Started on a full disk: puts are refused from the first (the log goes on
        // with what it can write: an error here is the first write's to report).
        let _ = room.make(&out, HEADER_LEN as u64, 0);
        let mut jobs = HashMap::default();
        let mut job_files = HashMap::default();
        let mut live_bytes = 0;
        for (id, live) in replayed.jobs {
            live_bytes += format::job_len(&live.record) as u64;
            job_files.insert(id, live.file);
            jobs.insert(id, live.record);
        }
        // Windows are live data too: uncounted, a million of them would look like a
        // log of dead records and be compacted (and rewritten) over and over.
        live_bytes += replayed
            .windows
            .values()
            .map(|w| format::window_len(w) as u64)
            .sum::<u64>();
        // So are retained records, for the same reason.
        live_bytes += replayed
            .retained
            .values()
            .map(|r| format::retained_len(r) as u64)
            .sum::<u64>();
        *lock_files(&figures) = job_files;
        figures.max_size.store(config.file_size, Ordering::Relaxed);
        let sink = BinlogSink {
            config,
            out,
            out_no,
            out_len: HEADER_LEN as u64,
            roll_next: false,
            roll_after: None,
            files,
            jobs,
            tubes: replayed
                .tubes
                .into_iter()
                .map(|t| (t.name.clone(), t))
                .collect(),
            windows: replayed.windows,
            cursors: replayed.cursors,
            retained: replayed.retained,
            live_bytes,
            compaction: None,
            buf: Vec::new(),
            syncer,
            room,
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

    /// Bytes a log holding only the live jobs and the open windows would take (what
    /// compaction aims at).
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    fn dir(&self) -> &PathBuf {
        &self.config.dir
    }

    fn disk_bytes(&self) -> u64 {
        self.files.values().sum()
    }

    /// Start file `out_no + 1` and write to it from now on. With `reserve`, only if the
    /// disk gives its reserve too (else the log goes on in the current file).
    fn roll(&mut self, reserve: bool) -> std::io::Result<()> {
        let n = self.out_no.checked_add(1).ok_or_else(|| {
            std::io::Error::other("the current file has the highest number a file can have")
        })?;
        let out = create(self.dir(), n, self.config.fsync)?;
        // The reserve moves to the new file: the old one's goes back to the disk first
        // (nothing more is written there), so a small disk need not hold two.
        if !self.roll_next && self.out.set_len(self.out_len).is_ok() {
            self.room.switch(self.out_len);
        }
        let allocated = match self.room.reserve_in(&out, HEADER_LEN as u64) {
            Ok(end) => end,
            Err(err) if reserve => {
                drop(out);
                remove_unstarted(&file_path(self.dir(), n));
                // Back to the old file, with its reserve if the disk still gives it
                // (if not, the log is full from now on).
                let _ = self.room.make(&self.out, self.out_len, 0);
                return Err(err);
            }
            Err(_) => HEADER_LEN as u64,
        };
        if let Some(s) = &self.syncer {
            s.rolled(out.clone());
        }
        self.room.switch(allocated);
        self.out = out;
        self.out_no = n;
        self.out_len = HEADER_LEN as u64;
        self.files.insert(n, self.out_len);
        self.roll_next = false;
        self.roll_after = None;
        Ok(())
    }

    /// A roll that may wait ([`ROLL_RETRY`] after a failed one): whether it happened.
    fn try_roll(&mut self, why: &'static str) -> bool {
        if self.roll_after.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        match self.roll(true) {
            Ok(()) => true,
            Err(err) => {
                self.roll_after = Some(Instant::now() + ROLL_RETRY);
                tracing::warn!(
                    dir = %self.dir().display(),
                    %err,
                    "binlog: cannot start a new log file ({why}); the current one takes \
                     the writes meanwhile"
                );
                false
            }
        }
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
    fn apply(&mut self, cut: &Cut, written_with_body: &[bool], rewritten: Rewritten) {
        let mut files = lock_files(&self.figures);
        for (r, &with_body) in cut.jobs.iter().zip(written_with_body) {
            if with_body {
                files.insert(r.id, self.out_no);
            }
            // The latest record is what a compaction rewrites, so its length counts even
            // when it came without its body: a release in milliseconds makes a job put in
            // whole seconds 8 bytes longer, and its delete takes those off again.
            self.live_bytes += format::job_len(r) as u64;
            if let Some(old) = self.jobs.insert(r.id, r.clone()) {
                self.live_bytes -= format::job_len(&old) as u64;
            }
        }
        for g in &cut.gone {
            if let Some(old) = self.jobs.remove(&g.id) {
                self.live_bytes -= format::job_len(&old) as u64;
            }
            files.remove(&g.id);
        }
        for t in &cut.tubes {
            if t.kept {
                self.tubes.insert(t.name.clone(), t.clone());
            } else {
                self.tubes.remove(&t.name);
            }
        }
        for k in &cut.keys {
            let at = (k.tube.clone(), k.key.clone());
            if matches!(k.slot, KeySlot::Window { .. }) {
                self.live_bytes += format::window_len(k) as u64;
                if let Some(old) = self.windows.insert(at, k.clone()) {
                    self.live_bytes -= format::window_len(&old) as u64;
                }
            } else if let Some(old) = self.windows.remove(&at) {
                self.live_bytes -= format::window_len(&old) as u64;
            }
        }
        for s in &cut.schedules {
            if s.gone {
                self.cursors.remove(&s.name);
            } else {
                self.cursors.insert(s.name.clone(), s.cursor);
            }
        }
        for r in &cut.retained {
            self.live_bytes += format::retained_len(r) as u64;
            if let Some(old) = self.retained.insert(r.id, r.clone()) {
                self.live_bytes -= format::retained_len(&old) as u64;
            }
        }
        for id in &cut.retained_gone {
            if let Some(old) = self.retained.remove(id) {
                self.live_bytes -= format::retained_len(&old) as u64;
            }
        }
        if let Some(c) = self.compaction.as_mut() {
            c.consumed(rewritten, &mut files, self.out_no);
        }
    }
}

impl Drop for BinlogSink {
    fn drop(&mut self) {
        // What the current file holds allocated beyond its end goes back to the disk
        // (after kill -9, the next start does this).
        if !self.roll_next {
            let _ = self.out.set_len(self.out_len);
        }
    }
}

/// Create `DIR/binlog.N` with its header (and make its name durable unless `-F`). A
/// file that cannot be started whole is removed again, so that a later try finds its
/// name free; so is one that an earlier run left holding no record.
fn create(dir: &Path, n: u64, fsync: Fsync) -> std::io::Result<Arc<File>> {
    let path = file_path(dir, n);
    let open = || OpenOptions::new().create_new(true).append(true).open(&path);
    let mut f = match open() {
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            let left = std::fs::metadata(&path).is_ok_and(|m| m.len() <= HEADER_LEN as u64);
            if !left {
                return Err(err);
            }
            std::fs::remove_file(&path)?;
            open()?
        }
        r => r?,
    };
    let started = f.write_all(&format::header()).and_then(|()| match fsync {
        Fsync::Never => Ok(()),
        _ => File::open(dir)?.sync_all(),
    });
    if let Err(err) = started {
        drop(f);
        remove_unstarted(&path);
        return Err(err);
    }
    Ok(Arc::new(f))
}

/// Remove a log file that was created but not started (it holds no record).
fn remove_unstarted(path: &Path) {
    if let Err(err) = std::fs::remove_file(path) {
        tracing::warn!(
            file = %path.display(),
            %err,
            "binlog: cannot remove a log file that could not be started (it holds no \
             record; the next try removes it)"
        );
    }
}

impl BinlogSink {
    /// Write one cut whole: append it, sync as the policy says, compact.
    pub(crate) async fn write(&mut self, cut: &Cut) -> Result<(), SinkError> {
        if self.roll_next {
            // Nothing may follow the torn write at the current file's end.
            self.roll(false)
                .map_err(io_err("binlog: start a new file"))?;
        }
        self.buf.clear();
        let rewritten = self.encode_rewrites();
        for s in &cut.schedules {
            format::put_schedule(&mut self.buf, s);
        }
        let mut with_body = Vec::with_capacity(cut.jobs.len());
        for r in &cut.jobs {
            // A replaced job (`Stored::Unknown`) has a new body.
            let body = !self.jobs.contains_key(&r.id) || r.was == Stored::Unknown;
            format::put_job(&mut self.buf, r, body);
            with_body.push(body);
        }
        for g in &cut.gone {
            format::put_gone(&mut self.buf, g.id);
        }
        for r in &cut.retained {
            format::put_retained(&mut self.buf, r);
        }
        // Only what the log holds needs a removal (a record kept and evicted between
        // two cuts never reached it).
        for id in &cut.retained_gone {
            if self.retained.contains_key(id) {
                format::put_retained_gone(&mut self.buf, *id);
            }
        }
        for t in &cut.tubes {
            format::put_tube(&mut self.buf, t);
        }
        // Live keys are in their jobs' records: only windows, and their ends, here.
        for k in &cut.keys {
            let open = matches!(k.slot, KeySlot::Window { .. });
            if open || self.windows.contains_key(&(k.tube.clone(), k.key.clone())) {
                format::put_window(&mut self.buf, k);
            }
        }
        format::put_counters(&mut self.buf, &cut.counters);
        // A batch is never split between files: roll first when it would overflow.
        // While the disk is full, the batch goes on in the current file (past `-s`).
        if self.out_len > HEADER_LEN as u64
            && self.out_len + self.buf.len() as u64 > self.config.file_size
            && !self.room.is_full()
        {
            self.try_roll("-s reached");
        }
        // Nothing is written unless it fits (in the reserve, while the disk is full).
        self.room
            .make(&self.out, self.out_len, self.buf.len() as u64)
            .map_err(io_err("binlog: write"))?;
        if let Err(err) = self.append().await {
            // Cut the torn write off, so later records are not stranded behind it.
            if self.out.set_len(self.out_len).is_err() {
                self.roll_next = true;
            }
            self.room.failed(&err, self.out_len);
            return Err(io_err("binlog: write")(err));
        }
        self.out_len += self.buf.len() as u64;
        self.room.wrote(self.out_len);
        self.files.insert(self.out_no, self.out_len);
        self.apply(cut, &with_body, rewritten);
        // A record per job written or deleted, compaction's rewrites included (the
        // reference counts its own records so); changes that coalesced in memory
        // before the write (a job put and deleted) are no record.
        let written = (cut.jobs.len() + cut.gone.len()) as u64 + rewritten.job_records;
        self.figures
            .records_written
            .fetch_add(written, Ordering::Relaxed);
        self.figures
            .records_migrated
            .fetch_add(rewritten.job_records, Ordering::Relaxed);
        self.compact().await;
        self.publish();
        Ok(())
    }
}

impl Sink for BinlogSink {
    /// Writes cannot overlap (one file, in order): the whole write is done here.
    type Pending = std::future::Ready<Result<(), SinkError>>;

    async fn start(&mut self, cut: &Cut) -> Result<Self::Pending, SinkError> {
        Ok(std::future::ready(self.write(cut).await))
    }

    fn name(&self) -> &'static str {
        "binlog"
    }

    fn probe_every(&self) -> Option<Duration> {
        self.room.can_probe().then_some(PROBE_EVERY)
    }

    fn probe(&mut self) {
        self.room.probe(&self.out, self.out_len);
    }
}
