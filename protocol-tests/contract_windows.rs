//! The Redis store's dedupe windows past their end (docs/EXTENSIONS.md, *Keys*;
//! docs/REDIS.md, `{P}:keywin`), checked in Redis itself, since a window past its end
//! already reads as gone through every store call:
//! - `ended_windows_are_swept_by_the_tick_uncounted`: windows past their end leave the
//!   namespace's window set and their tubes' `keys` hashes through ticks alone (no
//!   delete or put comes), without counting as evicted; windows still open are kept,
//!   and so is a live job's key that a stale window member names;
//! - `a_delete_over_the_cap_ends_ended_windows_before_evicting`: a delete that opens a
//!   window with `--key-windows-max` reached first drops the windows past their end
//!   (uncounted), and counts only a window it ends early.
//!
//! Both print the figures they read (window set size, `keys` hash size, evictions).

use redstalk::protocol::ext::{Key, KeyMode, Millis, PutKey};
use redstalk::store::keys::KeyState;
use redstalk::store::{KeyLimits, KeyOp, KeyOutcome, KeyedPut};

use super::*;

/// The window a short-lived key asks for (ms).
const SHORT_MS: u64 = 50;
/// How long the sweep may take to empty the window set (the store's sweep runs at most
/// every second; generous for a loaded machine).
const SWEEP_BOUND: Duration = Duration::from_secs(10);

/// A Redis store with a fresh prefix, its keys named as the tests read them.
struct Windows {
    s: AnyStore,
    redis: redis::aio::MultiplexedConnection,
    /// `{<prefix>}`, which starts every key of the store's namespace.
    tag: String,
    keywin: String,
    stats: String,
}

impl Windows {
    async fn start(url: &str, label: &str) -> Windows {
        let (store, prefix) = redis_store_with_prefix(url, label).await;
        let client = redis::Client::open(url).expect("redis url");
        let redis = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis");
        let tag = format!("{{{prefix}}}");
        Windows {
            s: AnyStore::Redis(store),
            redis,
            keywin: format!("{tag}:keywin"),
            stats: format!("{tag}:stats"),
            tag,
        }
    }

    fn keys_of(&self, tube: &str) -> String {
        format!("{}:t:{tube}:keys", self.tag)
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        cmd.query_async(&mut self.redis.clone())
            .await
            .expect("a Redis read")
    }

    /// (windows in the window set, entries in `tube`'s keys hash, windows evicted).
    async fn figures(&self, tube: &str) -> (u64, u64, u64) {
        let open = self.query(redis::cmd("ZCARD").arg(&self.keywin)).await;
        let keys = self.query(redis::cmd("HLEN").arg(self.keys_of(tube))).await;
        let evicted: Option<u64> = self
            .query(
                redis::cmd("HGET")
                    .arg(&self.stats)
                    .arg("key_windows_evicted"),
            )
            .await;
        (open, keys, evicted.unwrap_or(0))
    }

    /// A keyed job put in `tube` with a `window_ms` window, then deleted: its window
    /// opens.
    async fn open_window(&self, tube: &str, key: &str, window_ms: u64) -> JobId {
        let id = self.put(tube, key, window_ms).await;
        assert!(delete(&self.s, C1, id).await, "delete {key}");
        id
    }

    async fn put(&self, tube: &str, key: &str, window_ms: u64) -> JobId {
        let pk = PutKey {
            key: k(key),
            mode: KeyMode::Dedupe,
            window: Millis::new(window_ms).expect("a window"),
        };
        let job = new_job(tube, 0, 0, LONG, key);
        match self.s.put_keyed(job, &pk, now(&self.s)).await {
            Ok(KeyedPut::Inserted(id)) => id,
            other => panic!("put {key}: expected a new job, got {other:?}"),
        }
    }

    async fn find(&self, tube: &str, key: &str) -> KeyOutcome {
        self.s
            .by_key(C1, &t(tube), &k(key), KeyOp::Find, now(&self.s))
            .await
            .expect("find by key")
    }
}

fn k(key: &str) -> Key {
    Key::new(key.as_bytes()).expect("a key")
}

#[tokio::test]
async fn ended_windows_are_swept_by_the_tick_uncounted() {
    let Some(redis) = start_redis() else { return };
    let w = Windows::start(&redis.url(), "win-sweep").await;
    const ENDED: usize = 20;
    for i in 0..ENDED {
        w.open_window("w", &format!("short{i}"), SHORT_MS).await;
    }
    let mut open = Vec::new();
    for i in 0..3 {
        open.push(w.open_window("w", &format!("long{i}"), ms(LONG)).await);
    }
    let live = w.put("w", "live", SHORT_MS).await;
    // A member of the window set naming a live job's key (its window ended and the key
    // was taken again, the member left behind): ending it must not free the live key.
    let _: () = w
        .query(redis::cmd("ZADD").arg(&w.keywin).arg(0).arg("w\nlive"))
        .await;
    let before = w.figures("w").await;
    eprintln!("before the windows end: (window set, keys hash, evicted) = {before:?}");
    assert_eq!(before, (ENDED as u64 + 4, ENDED as u64 + 4, 0));

    tokio::time::sleep(Duration::from_millis(2 * SHORT_MS)).await;
    let started = Instant::now();
    let mut ticks = 0;
    let after = loop {
        w.s.tick(now(&w.s)).await.expect("tick");
        ticks += 1;
        let figures = w.figures("w").await;
        if figures.0 <= 3 {
            break figures;
        }
        assert!(
            started.elapsed() < SWEEP_BOUND,
            "after {ticks} ticks over {:?} the ended windows are still there: \
             (window set, keys hash, evicted) = {figures:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "after {ticks} ticks ({:?}): (window set, keys hash, evicted) = {after:?}",
        started.elapsed()
    );
    assert_eq!(
        after,
        (3, 4, 0),
        "the open windows and the live key stay; ending windows evicts none"
    );
    for (i, id) in open.iter().enumerate() {
        let found = w.find("w", &format!("long{i}")).await;
        assert_eq!(found, KeyOutcome::Found(*id, KeyState::Deleted), "long{i}");
    }
    assert_eq!(
        w.find("w", "live").await,
        KeyOutcome::Found(live, KeyState::Ready)
    );
    assert_eq!(w.find("w", "short0").await, KeyOutcome::NotFound);
}

#[tokio::test]
async fn a_delete_over_the_cap_ends_ended_windows_before_evicting() {
    let Some(redis) = start_redis() else { return };
    let w = Windows::start(&redis.url(), "win-cap").await;
    const MAX: u64 = 5;
    w.s.set_key_limits(KeyLimits {
        windows_max: MAX,
        ..KeyLimits::default()
    });
    for i in 0..MAX {
        w.open_window("c", &format!("short{i}"), SHORT_MS).await;
    }
    // Past their end, with no tick since: only the deletes below find them.
    tokio::time::sleep(Duration::from_millis(2 * SHORT_MS)).await;
    let mut open = Vec::new();
    for i in 0..MAX {
        open.push(w.open_window("c", &format!("long{i}"), ms(LONG)).await);
    }
    let figures = w.figures("c").await;
    eprintln!(
        "{MAX} ended and {MAX} open windows, at most {MAX}: (window set, keys hash, evicted) = {figures:?}"
    );
    assert_eq!(
        figures,
        (MAX, MAX, 0),
        "windows past their end make room uncounted"
    );
    for (i, id) in open.iter().enumerate() {
        let found = w.find("c", &format!("long{i}")).await;
        assert_eq!(found, KeyOutcome::Found(*id, KeyState::Deleted), "long{i}");
    }
    // One more: the open window nearest its end ends early, counted.
    w.open_window("c", "one-more", ms(LONG)).await;
    let figures = w.figures("c").await;
    eprintln!("one more open window: (window set, keys hash, evicted) = {figures:?}");
    assert_eq!(figures, (MAX, MAX, 1));
    assert_eq!(w.find("c", "long0").await, KeyOutcome::NotFound);
}
