//! Reading `-b DIR` back at start: every `binlog.N` file in number order, each record
//! applied over the ones before it, into the live jobs, tubes and counters.
//!
//! Damage: reading a file stops at its first record that is cut short, fails its
//! checksum or does not decode; that is reported (file, offset, why, bytes ignored)
//! and every record before it is kept. The next file is read as usual (a file is only
//! followed by another after its writer rolled over, so records in later files are
//! newer). A file whose header is not redstalk's is refused: it is not ours to read,
//! nor to delete at the next compaction; nor is one of a newer format version. A name
//! other than `binlog.N` (canonical decimal `N`) is not read, with a warning.
//!
//! Schedules' cursors: the last record of each name wins (a removal forgets it). A
//! cut writes its cursors before its jobs, so a torn cut may keep a cursor whose job
//! it lost (that tick is not fired again), never a job whose cursor it lost.
//!
//! Retained records (a deleted job's record kept by retention): the last record of
//! each id wins, an eviction forgets it. All are handed to the store, which holds them
//! until the engine sets the retention limits; those beyond them are evicted then, and
//! that eviction is logged like any other.
//!
//! Invariant: a job's `file` is the file holding its last record *with its body*;
//! compaction relies on it to know which jobs still live in old files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use foldhash::HashMap;

use super::BinlogError;
use super::format::{self, Damage, HEADER_LEN, Header, Record};
use crate::protocol::TubeName;
use crate::store::keys::{Key, KeyRecord, KeySlot};
use crate::store::memory::{JobRecord, StoreCounters, TubeRecord};
use crate::store::retention::Retained;
use crate::store::{Cursor, JobId, ScheduleName};

/// A live job as the log holds it.
#[derive(Debug, Clone)]
pub struct Live {
    pub record: JobRecord,
    /// The file with the job's last record that carries its body.
    pub file: u64,
}

/// What the log holds, folded.
#[derive(Debug, Default)]
pub struct Replayed {
    pub jobs: HashMap<JobId, Live>,
    /// Kept tubes, in the order they first appeared.
    pub tubes: Vec<TubeRecord>,
    pub counters: StoreCounters,
    /// Open dedupe windows by tube and key (past ones too: the restore drops them).
    pub windows: HashMap<(TubeName, Key), KeyRecord>,
    /// Schedules' cursors, each as its last record left it.
    pub cursors: HashMap<ScheduleName, Cursor>,
    /// Retained records, each as its last record left it.
    pub retained: HashMap<JobId, Retained>,
    /// Every file found: its number and size.
    pub files: BTreeMap<u64, u64>,
    pub records: u64,
    /// Files that ended in damage (each reported with a warning).
    pub damaged_files: usize,
}

/// `DIR/binlog.N`.
pub fn file_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("binlog.{n}"))
}

/// The number a log file's name gives, when it is one this version writes: `binlog.N`,
/// `N` in decimal, without sign or leading zero (so each number has one name).
fn file_number(suffix: &str) -> Option<u64> {
    let canonical = !suffix.is_empty()
        && suffix.bytes().all(|b| b.is_ascii_digit())
        && (suffix == "0" || !suffix.starts_with('0'));
    canonical.then(|| suffix.parse().ok()).flatten()
}

/// The numbers of the `binlog.N` files in `dir`, ascending. Any other name that starts
/// with `binlog.` (`binlog.01`, `binlog.+4`, `binlog.1.bak`) is not read, with a
/// warning: beanstalkd does not read such a file either.
pub fn list_files(dir: &Path) -> Result<Vec<u64>, BinlogError> {
    let io = BinlogError::io("read the directory", dir);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(&io)? {
        let name = entry.map_err(&io)?.file_name();
        let name = name.to_string_lossy();
        let Some(suffix) = name.strip_prefix("binlog.") else {
            continue;
        };
        match file_number(suffix) {
            Some(n) => out.push(n),
            None => tracing::warn!(
                file = %dir.join(&*name).display(),
                "binlog: ignoring {name}: not a name redstalk gives a log file (binlog.N, N \
                 a decimal number without sign or leading zero), so its records are not read"
            ),
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Read every file of `dir`.
pub fn replay(dir: &Path) -> Result<Replayed, BinlogError> {
    let mut out = Replayed::default();
    let mut tube_index: HashMap<TubeName, usize> = HashMap::default();
    let mut tubes: Vec<Option<TubeRecord>> = Vec::new();
    for n in list_files(dir)? {
        let path = file_path(dir, n);
        let data =
            bytes::Bytes::from(std::fs::read(&path).map_err(BinlogError::io("read", &path))?);
        out.files.insert(n, data.len() as u64);
        match format::read_header(&data) {
            Header::Ours => {}
            // Created but its header not written whole: an empty file.
            Header::Short => {
                if !data.is_empty() {
                    report(&path, 0, &Damage::Torn, data.len());
                    out.damaged_files += 1;
                }
                continue;
            }
            Header::Newer(found) => {
                return Err(BinlogError::NewerVersion {
                    file: path.display().to_string(),
                    found,
                });
            }
            Header::Foreign => return Err(BinlogError::Foreign(path.display().to_string())),
        }
        let mut at = HEADER_LEN;
        while at < data.len() {
            let (record, len) = match format::next(&data, at) {
                Ok(r) => r,
                Err(damage) => {
                    report(&path, at, &damage, data.len() - at);
                    out.damaged_files += 1;
                    break;
                }
            };
            at += len;
            out.records += 1;
            match record {
                Record::Job { job, with_body } => apply_job(&mut out.jobs, job, with_body, n),
                Record::Gone(id) => {
                    out.jobs.remove(&id);
                }
                Record::Tube(t) => {
                    let i = *tube_index.entry(t.name.clone()).or_insert_with(|| {
                        tubes.push(None);
                        tubes.len() - 1
                    });
                    tubes[i] = t.kept.then_some(t);
                }
                Record::Window(k) => {
                    let at = (k.tube.clone(), k.key.clone());
                    match k.slot {
                        KeySlot::Window { .. } => out.windows.insert(at, k),
                        _ => out.windows.remove(&at),
                    };
                }
                Record::Schedule(r) if r.gone => {
                    out.cursors.remove(&r.name);
                }
                Record::Schedule(r) => {
                    out.cursors.insert(r.name, r.cursor);
                }
                Record::Retained(r) => {
                    out.retained.insert(r.id, *r);
                }
                Record::RetainedGone(id) => {
                    out.retained.remove(&id);
                }
                Record::Counters(c) => {
                    out.counters = StoreCounters {
                        last_id: c.last_id.max(out.counters.last_id),
                        ..c
                    }
                }
            }
        }
    }
    out.tubes = tubes.into_iter().flatten().collect();
    Ok(out)
}

fn apply_job(jobs: &mut HashMap<JobId, Live>, job: JobRecord, with_body: bool, file: u64) {
    if with_body {
        jobs.insert(job.id, Live { record: job, file });
        return;
    }
    // A state change: the body stays from the job's earlier record. One whose earlier
    // record is gone (compacted away after the job was deleted) is no job.
    if let Some(live) = jobs.get_mut(&job.id) {
        let body = std::mem::take(&mut live.record.body);
        live.record = JobRecord { body, ..job };
    }
}

fn report(path: &Path, offset: usize, damage: &Damage, ignored: usize) {
    tracing::warn!(
        file = %path.display(),
        offset,
        ignored_bytes = ignored,
        "binlog damaged: {damage}; every record before offset {offset} of {} is kept, \
         the {ignored} bytes from there on are ignored",
        path.display()
    );
}
