//! Unit tests of the binlog sink and replay, in process: a journaled memory store's cuts
//! written through the sink, read back; compaction keeps the log bounded and loses
//! nothing (dedupe windows included, which count as live); damage keeps every record
//! before it; schedules' cursors are written before their ticks' jobs and live through
//! compaction and restarts.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::{BinlogConfig, Fsync, open};
use crate::protocol::TubeName;
use crate::protocol::ext::{Key, KeyMode, Millis, PutKey};
use crate::store::keys::KeyState;
use crate::store::memory::CutLimit;
use crate::store::{
    ConnId, Cursor, Fired, JobState, KeyedPut, LogFigures, MemoryStore, NANOS_PER_SEC, NewJob,
    ScheduleName, Store, TickPut,
};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const C1: ConnId = ConnId(1);

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn job(t: &str, pri: u32, delay: u32, body: &[u8]) -> NewJob {
    NewJob {
        tube: tube(t),
        pri,
        delay_ms: crate::time::secs_as_ms(delay),
        ttr_ms: 60_000,
        body: Bytes::copy_from_slice(body),
    }
}

fn config(dir: &Path, file_size: u64) -> BinlogConfig {
    BinlogConfig {
        dir: dir.to_path_buf(),
        fsync: Fsync::Never,
        file_size,
    }
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("redstalk-binlog-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Open `dir`, restore a store from it, and hand both over.
fn reopen(dir: &Path, file_size: u64) -> (MemoryStore, super::BinlogSink) {
    let (s, sink, _) = reopen_with_figures(dir, file_size);
    (s, sink)
}

/// [`reopen`], and the `binlog-*` figures the sink keeps.
fn reopen_with_figures(
    dir: &Path,
    file_size: u64,
) -> (MemoryStore, super::BinlogSink, Arc<LogFigures>) {
    let opened = open(config(dir, file_size)).unwrap();
    let figures = opened.figures.clone();
    (
        MemoryStore::restored(opened.snapshot, NOW),
        opened.sink,
        figures,
    )
}

/// The figure `field` of `figures` now.
fn figure(figures: &LogFigures, field: fn(&LogFigures) -> &AtomicU64) -> u64 {
    field(figures).load(Ordering::Relaxed)
}

async fn flush(s: &MemoryStore, sink: &mut super::BinlogSink) {
    let cut = s.cut(CutLimit::default());
    sink.write(&cut).await.unwrap();
}

#[tokio::test]
async fn every_state_comes_back_and_churn_stays_bounded() {
    let dir = tempdir("bounded");
    let file_size = 64 << 10;
    let (s, mut sink) = reopen(&dir, file_size);
    // A few old jobs stay alive throughout, one in each state.
    let ready = s.put(job("old", 3, 0, b"ready"), NOW).await.unwrap();
    let delayed = s.put(job("old", 4, 500, b"delayed"), NOW).await.unwrap();
    let buried_a = s.put(job("old", 5, 0, b"buried-a"), NOW).await.unwrap();
    let buried_b = s.put(job("old", 6, 0, b"buried-b"), NOW).await.unwrap();
    for id in [buried_a, buried_b] {
        s.reserve_job(C1, id, NOW).await.unwrap();
        s.bury(C1, id, 9, 0).await.unwrap();
    }
    s.pause(&tube("old"), 300_000, NOW).await.unwrap();
    flush(&s, &mut sink).await;
    let mut peak = 0;
    for round in 0..2_000u64 {
        for _ in 0..20 {
            let id = s.put(job("churn", 1, 0, &[b'x'; 200]), NOW).await.unwrap();
            if round % 3 == 0 {
                flush(&s, &mut sink).await;
            }
            s.delete(C1, id, NOW).await.unwrap();
        }
        flush(&s, &mut sink).await;
        peak = peak.max(disk(&dir));
    }
    let live = sink.live_bytes();
    println!(
        "binlog churn: 40000 jobs put and deleted, 4 kept: peak disk {peak} bytes, live {live} \
         bytes, file size {file_size}"
    );
    assert!(
        peak <= 2 * live + 3 * file_size,
        "disk {peak} > 2 x live {live} + 3 files"
    );
    let reserved = s.put(job("old", 7, 0, b"reserved"), NOW).await.unwrap();
    s.reserve_job(C1, reserved, NOW).await.unwrap();
    flush(&s, &mut sink).await;
    drop(sink);
    let (back, _sink) = reopen(&dir, file_size);
    let state = |id| {
        let back = &back;
        async move { back.job_info(id, NOW).await.unwrap().map(|j| j.state) }
    };
    assert_eq!(state(ready).await, Some(JobState::Ready));
    assert_eq!(state(delayed).await, Some(JobState::Delayed));
    assert_eq!(state(buried_a).await, Some(JobState::Buried));
    assert_eq!(state(reserved).await, Some(JobState::Ready));
    assert_eq!(
        back.peek_buried(&tube("old"))
            .await
            .unwrap()
            .map(|(id, _)| id),
        Some(buried_a),
        "buried order"
    );
    assert_eq!(back.peek(delayed).await.unwrap().unwrap().1, "delayed");
    let info = back.tube_info(&tube("old"), NOW).await.unwrap().unwrap();
    assert!(info.pause > 0, "the pause survives");
    let next = back.put(job("old", 1, 0, b"n"), NOW).await.unwrap();
    assert_eq!(next, reserved + 1, "ids continue");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_damaged_tail_keeps_every_record_before_it() {
    let dir = tempdir("damage");
    let (s, mut sink) = reopen(&dir, 1 << 20);
    let mut ids = Vec::new();
    for i in 0..50u32 {
        ids.push(s.put(job("d", i, 0, b"payload"), NOW).await.unwrap());
        flush(&s, &mut sink).await;
    }
    drop(sink);
    let file = dir.join("binlog.1");
    let whole = std::fs::read(&file).unwrap();
    for cut_at in [whole.len() - 1, whole.len() / 2, 17, 16] {
        std::fs::write(&file, &whole[..cut_at]).unwrap();
        // A fresh directory per cut: each open starts a new file of its own.
        for n in 2..10 {
            let _ = std::fs::remove_file(dir.join(format!("binlog.{n}")));
        }
        let (back, _sink) = reopen(&dir, 1 << 20);
        let found = back.totals().await.unwrap().ready;
        assert!(found as usize <= ids.len());
        // Every job whose record ends before the cut is there.
        for (i, &id) in ids.iter().enumerate() {
            let present = back.peek(id).await.unwrap().is_some();
            if present {
                continue;
            }
            assert!(
                ids[i..].iter().all(|&later| {
                    futures_util::FutureExt::now_or_never(back.peek(later))
                        .and_then(|r| r.ok())
                        .flatten()
                        .is_none()
                }),
                "cut at {cut_at}: job {id} missing but a later one kept"
            );
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A log file with a header of format `version` and no record.
fn header_file(path: &Path, version: u32) {
    let mut h = super::format::header().to_vec();
    h[8..12].copy_from_slice(&version.to_le_bytes());
    std::fs::write(path, h).unwrap();
}

/// An error with its sources, as `{:#}` prints it at start.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

#[tokio::test]
async fn a_file_with_the_last_number_refuses_to_start_without_wrapping() {
    let dir = tempdir("last-number");
    std::fs::create_dir_all(&dir).unwrap();
    let last = dir.join(format!("binlog.{}", u64::MAX));
    header_file(&last, super::format::VERSION);
    let mut rec = Vec::new();
    super::format::put_gone(&mut rec, 1);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(&rec)
        .unwrap();
    let err = open(config(&dir, 1 << 20)).err().expect("refused");
    let text = chain(&err);
    println!("start on binlog.{}: {text}", u64::MAX);
    assert!(matches!(err, super::BinlogError::Exhausted(_)), "{text}");
    assert!(text.contains(&last.display().to_string()), "{text}");
    assert!(!dir.join("binlog.0").exists(), "wrapped to binlog.0");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn names_other_than_binlog_n_are_not_read_and_stop_nothing() {
    let dir = tempdir("names");
    let (s, mut sink) = reopen(&dir, 1 << 20);
    let id = s.put(job("t", 1, 0, b"kept"), NOW).await.unwrap();
    flush(&s, &mut sink).await;
    drop(sink);
    // Names beanstalkd's scan would also pass over (or whose number names another file).
    let odd = [
        "binlog.01",
        "binlog.+40",
        "binlog.1.bak",
        "binlog.",
        "binlog.99999999999999999999",
    ];
    for name in odd {
        std::fs::write(dir.join(name), b"not read").unwrap();
    }
    let (back, _sink) = reopen(&dir, 1 << 20);
    assert_eq!(back.peek(id).await.unwrap().unwrap().1, "kept");
    for name in odd {
        assert_eq!(
            std::fs::read(dir.join(name)).unwrap(),
            b"not read",
            "{name} touched"
        );
    }
    assert!(
        dir.join("binlog.2").exists(),
        "the next file follows binlog.1"
    );
    assert!(!dir.join("binlog.41").exists(), "binlog.+40 taken as 40");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_newer_format_version_is_named_as_such() {
    let dir = tempdir("newer");
    std::fs::create_dir_all(&dir).unwrap();
    header_file(&dir.join("binlog.1"), super::format::VERSION + 1);
    let err = open(config(&dir, 1 << 20)).err().expect("refused");
    let text = chain(&err);
    println!("a version {} file: {text}", super::format::VERSION + 1);
    assert!(
        matches!(err, super::BinlogError::NewerVersion { found, .. } if found == super::format::VERSION + 1),
        "{text}"
    );
    assert!(text.contains("newer version"), "{text}");
    assert!(!text.contains("not a redstalk binlog"), "{text}");
    // Not redstalk's at all: still refused as foreign.
    std::fs::write(dir.join("binlog.1"), [7u8; 16]).unwrap();
    let err = open(config(&dir, 1 << 20)).err().expect("refused");
    assert!(
        matches!(err, super::BinlogError::Foreign(_)),
        "{}",
        chain(&err)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_os_error_is_printed_once() {
    let dir = tempdir("os-error");
    std::fs::create_dir_all(&dir).unwrap();
    // A directory below a plain file cannot be made.
    let file = dir.join("plain");
    std::fs::write(&file, b"").unwrap();
    let err = open(config(&file.join("log"), 1 << 20))
        .err()
        .expect("refused");
    let text = chain(&err);
    println!("-b below a plain file: {text}");
    let os = std::io::Error::from_raw_os_error(libc::ENOTDIR).to_string();
    assert_eq!(text.matches(&os).count(), 1, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `binlog-records-written` counts the records written: a job put and deleted before
/// its batch is written is no record; put and deleted across two writes, two.
#[tokio::test]
async fn records_written_counts_what_reaches_the_log() {
    let dir = tempdir("records");
    let (s, mut sink, figures) = reopen_with_figures(&dir, 1 << 20);
    let written = || figure(&figures, |f| &f.records_written);
    let id = s.put(job("t", 1, 0, b"x"), NOW).await.unwrap();
    s.delete(C1, id, NOW).await.unwrap();
    flush(&s, &mut sink).await;
    assert_eq!(written(), 0, "a put and its delete in one write");
    let id = s.put(job("t", 1, 0, b"x"), NOW).await.unwrap();
    flush(&s, &mut sink).await;
    s.delete(C1, id, NOW).await.unwrap();
    flush(&s, &mut sink).await;
    assert_eq!(written(), 2, "a put and its delete in two writes");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Dedupe windows are live data: many open windows (no live job) do not make the log
/// compact at every write, a compaction rewrites them a chunk at a time (no file grows
/// far past `-s`), and after compactions and a restart each key still dedupes to its
/// deleted job.
#[tokio::test]
async fn open_windows_count_as_live_and_survive_compaction() {
    const KEYS: usize = 20_000;
    const PER_FLUSH: usize = 100;
    let dir = tempdir("windows");
    let file_size = 64 << 10;
    let (s, mut sink, figures) = reopen_with_figures(&dir, file_size);
    let oldest = || figure(&figures, |f| &f.oldest_index);
    let pk = |i: usize| PutKey {
        key: Key::new(format!("k-{i:05}").as_bytes()).unwrap(),
        mode: KeyMode::Dedupe,
        window: Millis::new(3_600_000).unwrap(),
    };
    let (mut compactions, mut last_oldest, mut peak_file) = (0, oldest(), 0);
    let mut ids = Vec::with_capacity(KEYS);
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(PER_FLUSH) {
        let mut batch = Vec::new();
        for &i in chunk {
            let put = s.put_keyed(job("keys", 1, 0, b"body"), &pk(i), NOW).await;
            let Ok(KeyedPut::Inserted(id)) = put else {
                panic!("key {i}: a new key makes a job: {put:?}");
            };
            batch.push(id);
        }
        flush(&s, &mut sink).await;
        for &id in &batch {
            assert!(s.delete(C1, id, NOW).await.unwrap());
        }
        ids.extend(batch);
        flush(&s, &mut sink).await;
        // A compaction ends by deleting the files before its own: the oldest advances.
        if oldest() != last_oldest {
            compactions += 1;
            last_oldest = oldest();
        }
        for e in std::fs::read_dir(&dir).unwrap() {
            peak_file = peak_file.max(e.unwrap().metadata().unwrap().len());
        }
    }
    let live = sink.live_bytes();
    println!(
        "binlog windows: {KEYS} keyed puts and deletes ({} flushes), windows open: \
         {compactions} compactions, live {live} bytes, largest file {peak_file} bytes, \
         disk {} bytes, file size {file_size}",
        2 * KEYS / PER_FLUSH,
        disk(&dir)
    );
    assert!(compactions >= 1, "no compaction ran");
    assert!(!dir.join("binlog.1").exists(), "the first file was kept");
    assert!(
        compactions <= 20,
        "{compactions} compactions: the windows are not counted as live"
    );
    assert!(
        peak_file <= 4 * file_size,
        "a file of {peak_file} bytes (-s {file_size}): the windows were not rewritten \
         in chunks"
    );
    drop(sink);
    let (back, _sink) = reopen(&dir, file_size);
    for (i, &id) in ids.iter().enumerate() {
        let put = back
            .put_keyed(job("keys", 1, 0, b"again"), &pk(i), NOW)
            .await;
        assert_eq!(
            put.unwrap(),
            KeyedPut::Existing(id, KeyState::Deleted),
            "key {i} after compaction and restart"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A change of state written without the body can change the job's record length (a
/// release in milliseconds of a job put in whole seconds): the live bytes follow it,
/// and are back to none once the job is deleted.
#[tokio::test]
async fn a_record_that_changes_length_keeps_live_bytes_true() {
    let dir = tempdir("length");
    let (s, mut sink) = reopen(&dir, 1 << 20);
    let id = s.put(job("t", 1, 0, b"x"), NOW).await.unwrap();
    flush(&s, &mut sink).await;
    let whole = sink.live_bytes();
    s.reserve_job(C1, id, NOW).await.unwrap();
    s.release(C1, id, 1, 1500, NOW).await.unwrap();
    flush(&s, &mut sink).await;
    assert_eq!(
        sink.live_bytes(),
        whole + 8,
        "a delay in milliseconds: 8 more"
    );
    s.delete(C1, id, NOW).await.unwrap();
    flush(&s, &mut sink).await;
    assert_eq!(sink.live_bytes(), 0, "no live job");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tick(schedule: &str, tick_ms: u64) -> TickPut {
    TickPut {
        schedule: ScheduleName::new(schedule).unwrap(),
        tick_ms,
        job: job("cron", 1, 0, b"tick"),
        key: None,
        skipped: 0,
    }
}

async fn cursor_of(s: &MemoryStore, schedule: &str) -> Option<Cursor> {
    let all = s.schedule_cursors().await.unwrap();
    all.into_iter()
        .find(|(n, _)| n.as_str() == schedule)
        .map(|(_, c)| c)
}

/// A cut's cursor is written before its job: wherever a write of the cut is cut short,
/// the log read back holds the tick's job only with its cursor (never a tick to fire
/// twice); cut right after the cursor, the cursor stays and the job is lost.
#[tokio::test]
async fn a_torn_cut_may_keep_a_cursor_without_its_job_never_the_reverse() {
    let dir = tempdir("torn-tick");
    let (s, mut sink) = reopen(&dir, 1 << 20);
    s.fire_tick(&tick("t", 1000), NOW).await.unwrap();
    flush(&s, &mut sink).await;
    let file = dir.join("binlog.1");
    let before = std::fs::metadata(&file).unwrap().len() as usize;
    let Fired::Made(second) = s.fire_tick(&tick("t", 2000), NOW).await.unwrap() else {
        panic!("no job made");
    };
    flush(&s, &mut sink).await;
    drop(sink);
    let whole = std::fs::read(&file).unwrap();
    // The cursor's record: frame, kind, name length and name, five u64.
    let cursor_end = before + super::format::FRAME_LEN + 1 + 1 + 1 + 5 * 8;
    let mut kept_cursor_only = false;
    for cut_at in before..=whole.len() {
        std::fs::write(&file, &whole[..cut_at]).unwrap();
        for n in 2..4 {
            let _ = std::fs::remove_file(dir.join(format!("binlog.{n}")));
        }
        let (back, _sink) = reopen(&dir, 1 << 20);
        let job = back.peek(second).await.unwrap().is_some();
        let c = cursor_of(&back, "t").await.unwrap();
        if job {
            assert_eq!(
                c.last_tick_ms, 2000,
                "cut at {cut_at}: a job without its cursor"
            );
        }
        if cut_at == cursor_end {
            assert!(!job && c.last_tick_ms == 2000 && c.last_job == second);
            let again = back.fire_tick(&tick("t", 2000), NOW).await.unwrap();
            assert_eq!(again, Fired::Stale { last_tick_ms: 2000 });
            kept_cursor_only = true;
        }
    }
    assert!(kept_cursor_only);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Cursors live through compactions and restarts: one written once and never again
/// (its record only in a file a compaction deletes), one that keeps ticking (its
/// newest record wins), one dropped (gone for good).
#[tokio::test]
async fn cursors_survive_compaction_and_restarts() {
    let dir = tempdir("cursors");
    let file_size = 16 << 10;
    let (mut s, mut sink, mut figures) = reopen_with_figures(&dir, file_size);
    s.fire_tick(&tick("once", 500), NOW).await.unwrap();
    s.fire_tick(&tick("dropped", 500), NOW).await.unwrap();
    flush(&s, &mut sink).await;
    s.drop_cursor(&ScheduleName::new("dropped").unwrap())
        .await
        .unwrap();
    let mut t = 0;
    for restart in 0..2 {
        let first = figure(&figures, |f| &f.oldest_index);
        let mut rounds = 0;
        while figure(&figures, |f| &f.oldest_index) == first || rounds < 50 {
            rounds += 1;
            assert!(rounds < 5_000, "restart {restart}: no compaction ran");
            t += 1000;
            let Fired::Made(id) = s.fire_tick(&tick("often", t), NOW).await.unwrap() else {
                panic!("no job made");
            };
            flush(&s, &mut sink).await;
            s.delete(C1, id, NOW).await.unwrap();
            flush(&s, &mut sink).await;
        }
        drop(sink);
        let (back, again, _) = reopen_with_figures(&dir, file_size);
        assert!(!dir.join("binlog.1").exists(), "the first file was kept");
        assert_eq!(
            cursor_of(&back, "once").await.map(|c| c.last_tick_ms),
            Some(500)
        );
        let often = cursor_of(&back, "often").await.unwrap();
        assert_eq!((often.last_tick_ms, often.fired), (t, t / 1000));
        assert_eq!(cursor_of(&back, "dropped").await, None);
        // The restarted store goes on where the last one stopped.
        drop((back, again));
        let (next, next_sink, next_figures) = reopen_with_figures(&dir, file_size);
        (s, sink, figures) = (next, next_sink, next_figures);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
