//! A memory store's job record as leader mode writes it into the Redis metadata format
//! (`crate::redis::meta`), and back: where the record's one time (`at`) goes for each
//! state, and the time unit (the record's nanoseconds, the format's microseconds).

use bytes::Bytes;

use crate::protocol::TubeName;
use crate::redis::US;
use crate::redis::meta::{Meta, MetaState};
use crate::store::keys::{JobKey, Key};
use crate::store::memory::{JobRecord, Stored};
use crate::store::{JobId, JobState};

fn state_of(s: JobState) -> MetaState {
    match s {
        JobState::Ready => MetaState::Ready,
        JobState::Reserved => MetaState::Reserved,
        JobState::Delayed => MetaState::Delayed,
        JobState::Buried => MetaState::Buried,
    }
}

fn job_state(s: MetaState) -> JobState {
    match s {
        MetaState::Ready => JobState::Ready,
        MetaState::Reserved => JobState::Reserved,
        MetaState::Delayed => JobState::Delayed,
        MetaState::Buried => JobState::Buried,
    }
}

/// The metadata of `r`: its `at` is a delayed job's due time, a reserved one's TTR
/// deadline, a ready one's "ready since", and a buried one's place in the buried FIFO.
pub fn meta_of(r: &JobRecord) -> Meta {
    let (due_us, bury_seq, ready_us) = match r.state {
        JobState::Delayed | JobState::Reserved => (r.at / US, 0, None),
        JobState::Ready => (0, 0, Some(r.at / US)),
        JobState::Buried => (0, r.at, None),
    };
    Meta {
        pri: r.pri,
        delay_ms: r.delay_ms,
        ttr_ms: r.ttr_ms,
        created_us: r.created / US,
        state: state_of(r.state),
        due_us,
        reserves: r.reserves,
        timeouts: r.timeouts,
        releases: r.releases,
        buries: r.buries,
        kicks: r.kicks,
        bury_seq,
        ready_us,
        key: r
            .key
            .as_ref()
            .map(|k| (k.key.as_str().to_string(), k.window_ms)),
        dead: r.dead,
    }
}

/// Job `id` of `tube` read back, as the memory store will hold it (persisted in its
/// state; held by nobody: a reserved job's holder died with the previous leader).
pub fn record_of(id: JobId, tube: &TubeName, m: Meta, body: Bytes) -> JobRecord {
    let created = m.created_us * US;
    let at = match m.state {
        MetaState::Delayed | MetaState::Reserved => m.due_us * US,
        // A job written before READY existed has waited since its creation, as far as
        // anyone can tell.
        MetaState::Ready => m.ready_us.map_or(created, |r| r * US),
        MetaState::Buried => m.bury_seq,
    };
    let state = job_state(m.state);
    JobRecord {
        id,
        tube: tube.clone(),
        pri: m.pri,
        delay_ms: m.delay_ms,
        ttr_ms: m.ttr_ms,
        state,
        created,
        at,
        owner: 0,
        reserves: m.reserves,
        timeouts: m.timeouts,
        releases: m.releases,
        buries: m.buries,
        kicks: m.kicks,
        key: m.key.and_then(|(key, window_ms)| {
            Some(JobKey {
                key: Key::new(key.as_bytes())?,
                window_ms,
            })
        }),
        dead: m.dead,
        body,
        was: Stored::As(state),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::meta;

    fn record(state: JobState, at: u64) -> JobRecord {
        JobRecord {
            id: 7,
            tube: TubeName::new(b"t").unwrap(),
            pri: 4_294_967_295,
            delay_ms: 3000,
            ttr_ms: 60_000,
            state,
            created: 1_700_000_000_123_456_000,
            at,
            owner: 0,
            reserves: 1,
            timeouts: 2,
            releases: 3,
            buries: 4,
            kicks: 5,
            key: None,
            dead: None,
            body: Bytes::from_static(b"hello"),
            was: Stored::Never,
        }
    }

    #[test]
    fn every_state_round_trips_through_the_format() {
        for (state, at) in [
            (JobState::Ready, 1_700_000_001_000_000_000),
            (JobState::Delayed, 1_700_000_009_000_000_000),
            (JobState::Reserved, 1_700_000_060_000_000_000),
            (JobState::Buried, 42),
        ] {
            let r = record(state, at);
            let mut bytes = Vec::new();
            meta::encode(&meta_of(&r), "leader:1", &mut bytes);
            let read = meta::decode(r.id, &bytes).unwrap();
            let back = record_of(r.id, &r.tube, read, r.body.clone());
            assert_eq!(
                back,
                JobRecord {
                    was: Stored::As(state),
                    ..r
                }
            );
        }
    }

    #[test]
    fn a_ready_job_without_its_ready_time_has_waited_since_its_creation() {
        let mut m = meta_of(&record(JobState::Ready, 1_700_000_001_000_000_000));
        m.ready_us = None;
        let back = record_of(7, &TubeName::new(b"t").unwrap(), m, Bytes::new());
        assert_eq!(back.at, back.created);
    }
}
