//! What Redis runs for shared mode's hot path, in its own figures (`INFO commandstats`,
//! which counts each command a script runs by its name), against a private
//! redis-server:
//! - in a namespace that never held a large body (its mark `{P}:small`, docs/REDIS.md),
//!   a reserve reads its job's hash once and never asks a body's length (`HSTRLEN`);
//! - a delete by the job's holder in a tube this instance watches does not read the
//!   tube's references (the tube stays while it is watched; it goes with the watch);
//! - a large body removes the mark, and from then on a reserve asks each body's length
//!   first, so the large one is read apart and every body is served whole; so does a
//!   namespace without the mark (one an earlier version made).

use super::*;

/// The commands Redis ran between two readings, by name (only those run).
fn ran(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn count(ran: &BTreeMap<String, u64>, name: &str) -> u64 {
    ran.get(name).copied().unwrap_or(0)
}

/// `n` jobs put into `tube`, each reserved and deleted by C1 (its body checked), one
/// after another. -> what Redis ran meanwhile.
async fn cycles(s: &AnyStore, url: &str, tube: &str, n: usize) -> BTreeMap<String, u64> {
    let before = calls_by_command(url).await;
    for i in 0..n {
        let b = format!("cycle {i}");
        let id = put(s, tube, 1, 0, LONG, &b).await;
        let r = reserve(s, C1, &[tube]).await.expect("a ready job");
        assert_eq!((r.id, &r.body[..]), (id, b.as_bytes()));
        assert!(delete(s, C1, id).await);
    }
    ran(&before, &calls_by_command(url).await)
}

#[tokio::test]
async fn a_cycle_in_a_watched_tube_reads_each_job_once() {
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let (store, prefix) = redis_store_with_prefix(&url, "hot-path").await;
    let s = AnyStore::Redis(store);
    let w = t("w");
    s.watch_tube(&w).await.expect("watch");
    const N: usize = 20;
    let ran = cycles(&s, &url, "w", N).await;
    eprintln!("{N} cycles in a watched tube ran {ran:?}");
    assert_eq!(
        count(&ran, "hstrlen"),
        0,
        "no body length asked while the namespace holds no large body"
    );
    assert_eq!(
        count(&ran, "hmget"),
        2 * N as u64,
        "each job's hash read once by its reserve and once by its delete; the tube's \
         references never"
    );
    assert_eq!(script_calls_of(&ran), 3 * N as u64);
    assert!(list(&s).await.contains(&"w".to_string()), "watched");
    s.unwatch_tube(&w).await.expect("unwatch");
    assert!(tube_info(&s, "w").await.is_none(), "gone with its watch");

    // The same in a tube nobody here refers to: the delete reads its references.
    let ran = cycles(&s, &url, "u", N).await;
    assert_eq!(count(&ran, "hmget"), 3 * N as u64, "{ran:?}");
    assert!(tube_info(&s, "u").await.is_none(), "gone with its last job");

    // A large body: the mark goes with it, every body's length is asked from then on,
    // and each body is served whole.
    let mut c = redis::Client::open(url.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let mark = format!("{{{prefix}}}:small");
    let marked = |c: &mut redis::aio::MultiplexedConnection| {
        let mut c = c.clone();
        let mark = mark.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(mark)
                .query_async::<bool>(&mut c)
                .await
                .expect("EXISTS")
        }
    };
    assert!(marked(&mut c).await, "a fresh namespace has the mark");
    let large: String = "L".repeat(redstalk::store::LARGE_BODY + 3);
    let id = put(&s, "w", 1, 0, LONG, &large).await;
    assert!(!marked(&mut c).await, "a large body removes the mark");
    let r = reserve(&s, C1, &["w"]).await.expect("the large job");
    assert!(r.id == id && r.body == large.as_bytes(), "served whole");
    assert!(delete(&s, C1, id).await);
    let ran = cycles(&s, &url, "w", N).await;
    assert_eq!(count(&ran, "hstrlen"), N as u64, "{ran:?}");

    // A namespace without the mark (as an earlier version made it) asks lengths too.
    let (old, old_prefix) = redis_store_with_prefix(&url, "unmarked").await;
    let old = AnyStore::Redis(old);
    let _: () = redis::cmd("DEL")
        .arg(format!("{{{old_prefix}}}:small"))
        .query_async(&mut c)
        .await
        .expect("DEL");
    let ran = cycles(&old, &url, "w", N).await;
    assert_eq!(count(&ran, "hstrlen"), N as u64, "{ran:?}");
}

/// An instance whose references Redis dropped (taken for dead while it stalled, before
/// its next heartbeat restores them) deletes a job of a tube it watches: the delete
/// leaves the tube to the watch, so the watch's end (an `ignore`, or its connection's
/// close) destroys it, though Redis had no count of it to lower.
#[tokio::test]
async fn a_watch_ending_after_its_count_was_dropped_still_destroys_the_tube() {
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let (store, prefix) = redis_store_with_prefix(&url, "dropped-refs").await;
    let s = AnyStore::Redis(store);
    let (r, q) = (t("r"), t("q"));
    let mut held = Vec::new();
    for tube in [&r, &q] {
        s.watch_tube(tube).await.expect("watch");
        let id = put(&s, tube.as_str(), 1, 0, LONG, "x").await;
        assert_eq!(
            reserve(&s, C1, &[tube.as_str()]).await.map(|j| j.id),
            Some(id)
        );
        held.push(id);
    }

    // What `reap` does to a dead instance's references.
    let mut c = redis::Client::open(url.as_str())
        .expect("redis url")
        .get_connection()
        .expect("connect to redis");
    let hashes: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{prefix}}}:refs:*"))
        .query(&mut c)
        .expect("KEYS");
    assert_eq!(hashes.len(), 1, "this instance's reference hash");
    let _: () = redis::cmd("DEL").arg(&hashes).query(&mut c).expect("DEL");
    for tube in ["r", "q"] {
        let _: () = redis::cmd("HSET")
            .arg(format!("{{{prefix}}}:t:{tube}:meta"))
            .arg("watching")
            .arg(0)
            .query(&mut c)
            .expect("HSET");
    }

    for (tube, id) in ["r", "q"].into_iter().zip(held) {
        assert!(delete(&s, C1, id).await);
        assert!(
            tube_info(&s, tube).await.is_some(),
            "{tube} still watched here"
        );
    }
    s.unwatch_tube(&r).await.expect("unwatch");
    assert!(
        tube_info(&s, "r").await.is_none(),
        "an ignore destroys the empty tube"
    );
    s.close(C1, std::slice::from_ref(&q), None, true, now(&s))
        .await
        .expect("close");
    assert!(
        tube_info(&s, "q").await.is_none(),
        "a close destroys the empty tube"
    );
}
