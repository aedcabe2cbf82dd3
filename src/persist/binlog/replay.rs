//! Reading `-b DIR` back at start: every `binlog.N` file in number order, each record
//! applied over the ones before it, into the live jobs, tubes and counters.
//!
//! Damage: reading a file stops at its first record that is cut short, fails its
//! checksum or does not decode; that is reported (file, offset, why, bytes ignored)
//! and every record before it is kept. The next file is read as usual (a file is only
//! followed by another after its writer rolled over, so records in later files are
//! newer). A file whose header is not redstalk's is refused: it is not ours to read,
//! nor to delete at the next compaction.
//!
//! Invariant: a job's `file` is the file holding its last record *with its body*;
//! compaction relies on it to know which jobs still live in old files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use foldhash::HashMap;

use super::BinlogError;
use super::format::{self, Damage, HEADER_LEN, Record};
use crate::protocol::TubeName;
use crate::store::JobId;
use crate::store::memory::{Counters, JobRecord, TubeRecord};

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
    pub counters: Counters,
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

/// The numbers of the `binlog.N` files in `dir`, ascending.
pub fn list_files(dir: &Path) -> Result<Vec<u64>, BinlogError> {
    let io = |e| BinlogError::Io(dir.display().to_string(), e);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix("binlog."))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        out.push(n);
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
        let data = bytes::Bytes::from(
            std::fs::read(&path).map_err(|e| BinlogError::Io(path.display().to_string(), e))?,
        );
        out.files.insert(n, data.len() as u64);
        match format::check_header(&data) {
            Ok(()) => {}
            // Created but its header not written whole: an empty file.
            Err(Damage::Torn) => {
                if !data.is_empty() {
                    report(&path, 0, &Damage::Torn, data.len());
                    out.damaged_files += 1;
                }
                continue;
            }
            Err(_) => return Err(BinlogError::Foreign(path.display().to_string())),
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
                Record::Counters(c) => {
                    out.counters = Counters {
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
