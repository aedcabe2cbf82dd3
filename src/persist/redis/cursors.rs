//! Schedules' cursors in leader mode's batches and loads (docs/REDIS.md, *Schedules*):
//! one hash, [`Keys::schedule_cursors`], schedule name → `"<last_tick_ms> <last_job>
//! <fired> <deduped> <skipped>"` (decimals, one space apart: the shared mode's scripts
//! read and write the same text, so a namespace reopens in either mode).
//!
//! Invariant: a cut's cursors go into the same batch (one fenced script call, atomic in
//! Redis) as the jobs their ticks made, so Redis holds a tick's job and its cursor, or
//! neither. A batch is never split over several calls (`sink.rs` sends each cut as one
//! call), and a tick's body is never written ahead by the stager (a schedule's body is
//! below the large-put size, and `DurableStore::fire_tick` does not stage).

use super::call::{Args, Batch};
use crate::redis::RedisConn;
use crate::redis::cursor::{cursor_text, parse_cursor};
use crate::redis::keys::Keys;
use crate::store::memory::ScheduleRecord;
use crate::store::{Cursor, ScheduleName, StoreError};

/// The commands writing `records` (`HSET` of the changed cursors, `HDEL` of the
/// dropped ones), appended to `b`.
pub(super) fn cursor_commands(b: &mut Batch, keys: &Keys, records: &[ScheduleRecord]) {
    if records.is_empty() {
        return;
    }
    let (mut hset, mut hdel) = (Args::default(), Args::default());
    for r in records {
        let name = r.name.as_str().as_bytes();
        if r.gone {
            hdel.push(name);
        } else {
            hset.push(name);
            hset.push(cursor_text(&r.cursor).as_bytes());
        }
    }
    let key = keys.schedule_cursors();
    b.cmd("HSET", &key, &hset, 2);
    b.cmd("HDEL", &key, &hdel, 1);
}

/// Every cursor of the namespace (at most one per schedule, 10,000 at most); a field
/// that is not a schedule name, or a value that is not a cursor, is reported and left
/// out (that schedule starts over from its next tick).
pub(super) async fn read_cursors(
    conn: &RedisConn,
    keys: &Keys,
) -> Result<Vec<(ScheduleName, Cursor)>, StoreError> {
    let entries = super::load::scan_hash(conn.clone(), &keys.schedule_cursors(), 1_000).await?;
    let mut out = Vec::with_capacity(entries.len());
    for (field, value) in entries {
        let name = std::str::from_utf8(&field).ok().and_then(ScheduleName::new);
        match (name, parse_cursor(&value)) {
            (Some(name), Some(c)) => out.push((name, c)),
            _ => tracing::warn!(
                field = %String::from_utf8_lossy(&field),
                value = %String::from_utf8_lossy(&value),
                "a schedule cursor that does not read was left out"
            ),
        }
    }
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::persist::Sink;
    use crate::persist::redis::{RedisSink, load};
    use crate::protocol::TubeName;
    use crate::protocol::ext::{Key, KeyMode, Millis, PutKey};
    use crate::redis::testing::PrivateRedis;
    use crate::redis::{Connector, TlsFiles};
    use crate::store::keys::KeyState;
    use crate::store::memory::{CutLimit, MemoryStore, StoreCounters};
    use crate::store::{Fired, NANOS_PER_SEC, NewJob, Store, TickPut};
    use crate::util::SwapList;

    const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;

    fn tick(schedule: &str, tick_ms: u64, key: Option<&str>) -> TickPut {
        TickPut {
            schedule: ScheduleName::new(schedule).unwrap(),
            tick_ms,
            job: NewJob {
                tube: TubeName::new(b"cron").unwrap(),
                pri: 5,
                delay_ms: 0,
                ttr_ms: 60_000,
                body: Bytes::from(format!("{schedule}@{tick_ms}")),
            },
            key: key.map(|k| PutKey {
                key: Key::new(k.as_bytes()).unwrap(),
                mode: KeyMode::Dedupe,
                window: Millis::ZERO,
            }),
            skipped: 0,
        }
    }

    async fn write(store: &MemoryStore, sink: &mut RedisSink) {
        let cut = store.cut(CutLimit::default());
        let done = sink.start(&cut).await.unwrap().await;
        sink.finished(&done);
        done.unwrap();
    }

    /// A leader's ticks, written in its fenced batches to a private redis-server, come
    /// back at a takeover's load: every cursor as it was, every tick's job with it, the
    /// dropped cursor gone; a tick fired again there is stale.
    #[tokio::test]
    async fn a_new_leader_finds_the_cursors_and_their_jobs() {
        let Some(redis) = PrivateRedis::start_tcp("the leader-mode cursors test") else {
            return;
        };
        let url = redis.url().unwrap();
        let connector = Connector::new(&url, &TlsFiles::default(), None, "cur").unwrap();
        let conn = connector
            .managed("test", Duration::from_secs(5))
            .await
            .unwrap();
        let keys = Keys::new("cur");
        // The lease as an acquisition leaves it: its key holds this leader's token.
        let _: () = redis::cmd("SET")
            .arg(keys.leader())
            .arg("1|test|127.0.0.1:1")
            .query_async(&mut conn.clone())
            .await
            .unwrap();
        let mut sink = RedisSink::new(
            connector,
            conn.clone(),
            keys.clone(),
            keys.leader(),
            "1|test|127.0.0.1:1".into(),
            "test",
            SwapList::new(),
            StoreCounters::default(),
        );
        let store = MemoryStore::journaled();
        let mut made = Vec::new();
        for t in [tick("a", 1000, None), tick("k", 1000, Some("only-one"))] {
            let Fired::Made(id) = store.fire_tick(&t, NOW).await.unwrap() else {
                panic!("no job made");
            };
            made.push(id);
        }
        store
            .fire_tick(&tick("gone", 1000, None), NOW)
            .await
            .unwrap();
        write(&store, &mut sink).await;
        let Fired::Made(id) = store.fire_tick(&tick("a", 2000, None), NOW).await.unwrap() else {
            panic!("no job made");
        };
        made.push(id);
        assert_eq!(
            store
                .fire_tick(&tick("k", 2000, Some("only-one")), NOW)
                .await
                .unwrap(),
            Fired::Deduped(made[1], KeyState::Ready)
        );
        assert!(
            store
                .skip_to(&ScheduleName::new("s").unwrap(), 9000, 3)
                .await
                .unwrap()
        );
        store
            .drop_cursor(&ScheduleName::new("gone").unwrap())
            .await
            .unwrap();
        write(&store, &mut sink).await;
        let text: String = redis::cmd("HGET")
            .arg(keys.schedule_cursors())
            .arg("a")
            .query_async(&mut conn.clone())
            .await
            .unwrap();
        assert_eq!(text, format!("2000 {} 2 0 0", made[2]));

        let loaded = load(&conn, &keys).await.unwrap();
        let back = MemoryStore::restored(loaded.snapshot, NOW);
        let want = store.schedule_cursors().await.unwrap();
        assert_eq!(back.schedule_cursors().await.unwrap(), want);
        assert_eq!(
            want.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["a", "k", "s"]
        );
        for id in made {
            assert!(back.peek(id).await.unwrap().is_some(), "job {id} lost");
        }
        assert_eq!(
            back.fire_tick(&tick("a", 2000, None), NOW).await.unwrap(),
            Fired::Stale { last_tick_ms: 2000 }
        );
        drop(redis);
    }
}
