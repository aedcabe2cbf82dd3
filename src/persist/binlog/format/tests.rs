//! Unit tests of the binlog's record format: every record kind round-trips and its
//! length is exact; the millisecond kind only where needed; dead letters and keyed
//! jobs and windows keep their fields; schedule cursors and their removal
//! round-trip; a truncated or flipped frame is damage.

use super::encode::{frame, put_name};
use super::*;
use crate::protocol::TubeName;
use crate::store::keys::{JobKey, Key, KeySlot};
use crate::store::memory::Stored;
use crate::store::policy::{DeadCause, DeadReason};
use crate::store::{Cursor, ScheduleName};

fn job(id: u64, body: &[u8]) -> JobRecord {
    JobRecord {
        id,
        tube: TubeName::new(b"emails").unwrap(),
        pri: 7,
        delay_ms: 3000,
        ttr_ms: 60_000,
        state: JobState::Delayed,
        created: 1_700_000_000_000_000_000,
        at: 1_700_000_003_000_000_000,
        owner: 0,
        reserves: 1,
        timeouts: 2,
        releases: 3,
        buries: 4,
        kicks: 5,
        key: None,
        dead: None,
        body: Bytes::copy_from_slice(body),
        was: Stored::Never,
    }
}

#[test]
fn records_round_trip_and_lengths_are_exact() {
    let mut out = Vec::new();
    let j = job(42, b"hello");
    let n = put_job(&mut out, &j, true);
    assert_eq!(n, job_len(&j));
    put_job(&mut out, &j, false);
    put_gone(&mut out, 42);
    let t = TubeRecord {
        name: TubeName::new(b"t").unwrap(),
        kept: true,
        total_jobs: 1,
        cmd_delete: 2,
        cmd_pause: 3,
        pause: 4,
        pause_until: 5,
        next_due: None,
    };
    put_tube(&mut out, &t);
    let c = StoreCounters {
        last_id: 9,
        bury_seq: 8,
        total_jobs: 7,
        job_timeouts: 6,
    };
    put_counters(&mut out, &c);
    let cursor = ScheduleRecord {
        name: ScheduleName::new("nightly-report.v2").unwrap(),
        cursor: Cursor {
            last_tick_ms: 1_700_000_000_000,
            last_job: 42,
            fired: u64::MAX,
            deduped: 3,
            skipped: 4,
        },
        gone: false,
        jobs: Vec::new(),
    };
    let at = out.len();
    put_schedule(&mut out, &cursor);
    assert_eq!(out[at + FRAME_LEN], KIND_SCHEDULE);
    let dropped = ScheduleRecord {
        cursor: Cursor::default(),
        gone: true,
        ..cursor.clone()
    };
    let at = out.len();
    put_schedule(&mut out, &dropped);
    assert_eq!(out[at + FRAME_LEN], KIND_SCHEDULE_GONE);
    let out = Bytes::from(out);
    let mut at = 0;
    let mut got = Vec::new();
    while at < out.len() {
        let (r, n) = next(&out, at).unwrap();
        got.push(r);
        at += n;
    }
    let bodyless = JobRecord {
        body: Bytes::new(),
        ..j.clone()
    };
    assert_eq!(
        got,
        vec![
            Record::Job {
                job: j,
                with_body: true
            },
            Record::Job {
                job: bodyless,
                with_body: false
            },
            Record::Gone(42),
            Record::Tube(t),
            Record::Counters(c),
            Record::Schedule(cursor),
            Record::Schedule(dropped),
        ]
    );
}

#[test]
fn only_a_job_in_milliseconds_takes_the_millisecond_kind() {
    let whole = job(1, b"x");
    let ms = JobRecord {
        delay_ms: 1500,
        ..job(2, b"y")
    };
    let ttr_ms = JobRecord {
        ttr_ms: 60_001,
        ..job(3, b"z")
    };
    for (j, kind) in [(whole, KIND_JOB), (ms, KIND_JOB_MS), (ttr_ms, KIND_JOB_MS)] {
        round_trips_as(j, kind);
    }
}

/// `j` with its body is written as a record of `kind`, of `job_len`'s length, and read
/// back whole.
fn round_trips_as(j: JobRecord, kind: u8) {
    let mut out = Vec::new();
    assert_eq!(put_job(&mut out, &j, true), job_len(&j));
    assert_eq!(out[FRAME_LEN], kind, "job {}", j.id);
    let (got, _) = next(&Bytes::from(out), 0).unwrap();
    assert_eq!(
        got,
        Record::Job {
            job: j,
            with_body: true
        }
    );
}

#[test]
fn a_dead_letter_keeps_its_reason_with_or_without_a_key() {
    let reason = DeadReason {
        cause: DeadCause::Timeouts,
        count: 3,
        limit: 3,
    };
    let dead = JobRecord {
        state: JobState::Buried,
        dead: Some(reason),
        ..job(5, b"d")
    };
    let keyed = JobRecord {
        key: Some(JobKey {
            key: Key::new(b"order-9").unwrap(),
            window_ms: 0,
        }),
        ..dead.clone()
    };
    for j in [dead, keyed] {
        round_trips_as(j, KIND_JOB_DEAD);
    }
}

#[test]
fn a_keyed_job_and_windows_round_trip() {
    let key = Key::new(b"order-1").unwrap();
    let keyed = JobRecord {
        key: Some(JobKey {
            key: key.clone(),
            window_ms: 60_000,
        }),
        ..job(4, b"k")
    };
    let window = KeyRecord {
        tube: TubeName::new(b"emails").unwrap(),
        key,
        slot: KeySlot::Window { id: 4, until: 99 },
    };
    let ended = KeyRecord {
        slot: KeySlot::Free,
        ..window.clone()
    };
    let mut out = Vec::new();
    assert_eq!(put_job(&mut out, &keyed, true), job_len(&keyed));
    assert_eq!(out[FRAME_LEN], KIND_JOB_KEYED);
    assert_eq!(put_window(&mut out, &window), window_len(&window));
    assert_eq!(put_window(&mut out, &ended), window_len(&ended));
    let out = Bytes::from(out);
    let (mut at, mut got) = (0, Vec::new());
    while at < out.len() {
        let (r, n) = next(&out, at).unwrap();
        got.push(r);
        at += n;
    }
    assert_eq!(
        got,
        vec![
            Record::Job {
                job: keyed,
                with_body: true
            },
            Record::Window(window),
            Record::Window(ended),
        ]
    );
}

#[test]
fn a_whole_second_job_keeps_the_first_layout() {
    // Written field by field as version 1 wrote a job (seconds as u32), before
    // milliseconds: still read, as 3000 and 60000 ms.
    let mut out = Vec::new();
    frame(&mut out, |o| {
        o.push(KIND_JOB);
        o.extend_from_slice(&9u64.to_le_bytes());
        o.push(state_byte(JobState::Delayed));
        for v in [7u32, 3, 60] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for v in [1_700_000_000_000_000_000u64, 1_700_000_003_000_000_000] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for v in [1u32, 2, 3, 4, 5] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        put_name(o, &TubeName::new(b"emails").unwrap());
        o.push(1);
        o.extend_from_slice(&1u32.to_le_bytes());
        o.push(b'b');
    });
    let mut now = Vec::new();
    put_job(&mut now, &job(9, b"b"), true);
    assert_eq!(out, now, "a whole-second job is written as before");
    let (got, _) = next(&Bytes::from(out), 0).unwrap();
    assert_eq!(
        got,
        Record::Job {
            job: job(9, b"b"),
            with_body: true
        }
    );
}

#[test]
fn every_cut_and_every_flipped_byte_is_damage() {
    let mut out = Vec::new();
    put_job(&mut out, &job(1, b"body"), true);
    for cut in 0..out.len() {
        let short = Bytes::copy_from_slice(&out[..cut]);
        assert!(next(&short, 0).is_err(), "cut at {cut} read");
    }
    for i in 0..out.len() {
        let mut bad = out.clone();
        bad[i] ^= 0x10;
        assert!(next(&Bytes::from(bad), 0).is_err(), "flip at {i} read");
    }
}
