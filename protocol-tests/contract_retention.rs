//! The store contract's checks of retention (docs/RETENTION.md), run like every other
//! check on the memory, durable and Redis stores (see `store_contract.rs`):
//! - `retention_history`: a job's events (put, each reserve and release with its
//!   connection, a bury, a kick, an edit, the delete and who deleted it) are in its
//!   entry while it lives and in its record after the delete, in order, with the
//!   figures `stats-job` last showed and the body when bodies are kept; `job_info` of
//!   the deleted job is gone as in beanstalkd; the list and the figures show it;
//! - `retention_by_key`: a keyed job's record is found by (tube, key), the newest of
//!   two with the same key first, and not in another tube;
//! - `retention_bounds`: the count bound keeps the newest records, the bytes bound
//!   cuts by the records' size, the age bound hides records deleted before
//!   `now - keep`; listing pages newest first from a cursor and by tube; a record
//!   without bodies keeps the body's size only;
//! - `retention_closes_timeouts_and_flush`: a holder's close, a lapsed TTR (one real
//!   2.1 s sleep), a list delete and a flush are events too, and a flushed job is
//!   retained;
//! - `retention_off`: without limits nothing is recorded or kept.

use redstalk::protocol::ext::{BatchOp, FlushStates, KeyMode, Millis, PutKey};
use redstalk::store::retention::{EventKind, Retained, RetainedQuery, RetentionLimits};
use redstalk::store::{Edit, Edited, KeyedPut};

use super::*;

fn limits(max_jobs: usize, max_bytes: usize, bodies: bool) -> RetentionLimits {
    RetentionLimits {
        keep_ms: 3_600_000,
        max_jobs,
        max_bytes,
        bodies,
    }
}

/// The kept events as (kind, conn).
fn events(history: &redstalk::store::retention::History) -> Vec<(EventKind, u64)> {
    history.events().map(|e| (e.kind, e.conn)).collect()
}

async fn retained(s: &AnyStore, id: JobId) -> Option<Retained> {
    s.retained(id, now(s)).await.expect("retained")
}

async fn listed(s: &AnyStore, query: RetainedQuery) -> Vec<JobId> {
    s.list_retained(&query, now(s))
        .await
        .expect("list_retained")
        .iter()
        .map(|r| r.id)
        .collect()
}

fn query(limit: usize) -> RetainedQuery {
    RetainedQuery {
        before: None,
        limit,
        tube: None,
    }
}

async fn keyed(s: &AnyStore, tube: &str, key: &str, body: &str) -> JobId {
    let put = PutKey {
        key: redstalk::protocol::ext::Key::new(key.as_bytes()).expect("a key"),
        mode: KeyMode::Dedupe,
        window: Millis::new(0).expect("a window"),
    };
    match s
        .put_keyed(new_job(tube, 5, 0, LONG, body), &put, now(s))
        .await
        .expect("put_keyed")
    {
        KeyedPut::Inserted(id) => id,
        other => panic!("a new job expected, got {other:?}"),
    }
}

pub(super) async fn retention_history(s: &AnyStore) {
    s.set_retention(limits(1_000, 1 << 20, true));
    let start_ms = now(s) / 1_000_000;
    let id = put(s, "rh", 7, 0, LONG, "the body").await;
    assert_eq!(reserve(s, C1, &["rh"]).await.map(|r| r.id), Some(id));
    assert!(release(s, C1, id, 8, 0).await.is_some());
    assert!(reserve_job(s, C2, id).await.is_some());
    assert!(bury(s, C2, id, 9).await);
    assert_eq!(s.kick(&t("rh"), 1, now(s)).await.expect("kick"), 1);
    let edited = s.edit(id, &Edit::Pri(3), now(s)).await.expect("edit");
    assert!(matches!(edited, Edited::Done { .. }), "{edited:?}");
    assert_eq!(reserve(s, C2, &["rh"]).await.map(|r| r.id), Some(id));
    let live = s
        .job_entry(id, now(s))
        .await
        .expect("job_entry")
        .expect("the job lives");
    let so_far = vec![
        (EventKind::Put, 0),
        (EventKind::Reserve, 1),
        (EventKind::Release, 1),
        (EventKind::Reserve, 2),
        (EventKind::Bury, 2),
        (EventKind::Kick, 0),
        (EventKind::Edit, 0),
        (EventKind::Reserve, 2),
    ];
    assert_eq!(
        events(live.history.as_ref().expect("a live job's history")),
        so_far
    );
    assert!(retained(s, id).await.is_none(), "not retained while alive");

    assert!(!delete(s, C1, id).await, "held by C2");
    assert!(delete(s, C2, id).await);
    assert!(s.job_info(id, now(s)).await.expect("job_info").is_none());
    let r = retained(s, id).await.expect("the deleted job's record");
    let mut all = so_far;
    all.push((EventKind::Delete, 2));
    assert_eq!(events(&r.history), all);
    assert_eq!(r.history.dropped(), 0);
    let times: Vec<u64> = r.history.events().map(|e| e.at_ms).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(times[0] + 1 >= start_ms, "{times:?} from {start_ms}");
    assert_eq!(r.deleted_ms, *times.last().expect("events"));
    assert_eq!((r.tube.as_str(), r.key.as_ref()), ("rh", None));
    assert_eq!(r.figures.pri, 3);
    assert_eq!(r.figures.ttr_ms, ms(LONG));
    assert_eq!(
        (
            r.figures.reserves,
            r.figures.releases,
            r.figures.buries,
            r.figures.kicks,
            r.figures.timeouts
        ),
        (3, 1, 1, 1, 0)
    );
    assert_eq!(r.body_len, 8);
    assert_eq!(r.body.as_deref(), Some(&b"the body"[..]));
    assert_eq!(listed(s, query(10)).await, vec![id]);
    let figures = s.retention_figures().await.expect("figures");
    assert_eq!(figures.records, 1);
    assert!(figures.bytes >= 8, "{figures:?}");
    assert!(!delete(s, C2, id).await, "deleted once");
    assert_eq!(listed(s, query(10)).await, vec![id]);
}

pub(super) async fn retention_by_key(s: &AnyStore) {
    s.set_retention(limits(1_000, 1 << 20, false));
    let first = keyed(s, "rk", "order-1234", "one").await;
    assert!(delete(s, C1, first).await);
    let found = s
        .retained_by_key(&t("rk"), &key("order-1234"), now(s))
        .await
        .expect("retained_by_key")
        .expect("found by key");
    assert_eq!(found.id, first);
    assert_eq!(found.key, Some(key("order-1234")));
    assert_eq!(found.body, None, "bodies not kept");
    assert_eq!(found.body_len, 3);
    let second = keyed(s, "rk", "order-1234", "two!").await;
    assert_ne!(second, first);
    assert!(delete(s, C1, second).await);
    let newest = s
        .retained_by_key(&t("rk"), &key("order-1234"), now(s))
        .await
        .expect("retained_by_key");
    assert_eq!(newest.map(|r| r.id), Some(second));
    let elsewhere = s
        .retained_by_key(&t("rk-other"), &key("order-1234"), now(s))
        .await
        .expect("retained_by_key");
    assert!(elsewhere.is_none());
    assert_eq!(retained(s, first).await.map(|r| r.id), Some(first));
}

fn key(k: &str) -> redstalk::protocol::ext::Key {
    redstalk::protocol::ext::Key::new(k.as_bytes()).expect("a key")
}

pub(super) async fn retention_bounds(s: &AnyStore) {
    s.set_retention(limits(3, 1 << 20, false));
    let mut ids = Vec::new();
    for n in 0..5 {
        let tube = if n % 2 == 0 { "rb-even" } else { "rb-odd" };
        let id = put(s, tube, 1, 0, LONG, "x").await;
        assert!(delete(s, C1, id).await);
        ids.push(id);
    }
    assert!(retained(s, ids[0]).await.is_none(), "the oldest went first");
    assert!(retained(s, ids[1]).await.is_none());
    assert_eq!(
        listed(s, query(10)).await,
        vec![ids[4], ids[3], ids[2]],
        "newest first"
    );
    assert_eq!(listed(s, query(2)).await, vec![ids[4], ids[3]]);
    let third = retained(s, ids[3]).await.expect("kept");
    let next = RetainedQuery {
        before: Some((third.deleted_ms, third.id)),
        limit: 10,
        tube: None,
    };
    assert_eq!(listed(s, next).await, vec![ids[2]]);
    let even = RetainedQuery {
        tube: Some(t("rb-even")),
        ..query(10)
    };
    assert_eq!(listed(s, even).await, vec![ids[4], ids[2]]);
    assert_eq!(s.retention_figures().await.expect("figures").records, 3);

    // Age: a record is not answered once `keep` has passed since its delete.
    let later = now(s) + 3_601 * NANOS_PER_SEC;
    assert!(s.retained(ids[4], later).await.expect("retained").is_none());
    let page = s.list_retained(&query(10), later).await.expect("list");
    assert!(page.is_empty(), "{:?}", page.len());

    // Bytes: with bodies kept, one large body pushes the older records out.
    s.set_retention(limits(1_000, 4_096, true));
    let small = put(s, "rb-bytes", 1, 0, LONG, "small").await;
    assert!(delete(s, C1, small).await);
    assert_eq!(
        retained(s, small).await.and_then(|r| r.body),
        Some(Bytes::from_static(b"small"))
    );
    let big_body = "B".repeat(3_800);
    let big = put(s, "rb-bytes", 1, 0, LONG, &big_body).await;
    assert!(delete(s, C1, big).await);
    assert!(retained(s, small).await.is_none(), "evicted by bytes");
    assert_eq!(retained(s, big).await.map(|r| r.body_len), Some(3_800));
    let figures = s.retention_figures().await.expect("figures");
    assert!(figures.bytes <= 4_096, "{figures:?}");
}

pub(super) async fn retention_closes_timeouts_and_flush(s: &AnyStore) {
    s.set_retention(limits(1_000, 1 << 20, false));
    let closed = put(s, "rc", 1, 0, LONG, "c").await;
    assert!(reserve_job(s, C1, closed).await.is_some());
    s.close(C1, &[], None, true, now(s)).await.expect("close");
    let lapsed = put(s, "rc", 2, 0, 1, "t").await;
    assert!(reserve_job(s, C2, lapsed).await.is_some());
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    s.tick(now(s)).await.expect("tick");
    let listed_del = put(s, "rc", 3, 0, LONG, "l").await;
    let done = s
        .batch(C2, BatchOp::Delete, &[listed_del], now(s))
        .await
        .expect("batch");
    assert!(done.missing.is_empty(), "{done:?}");
    let entry = |id| async move {
        let e = s
            .job_entry(id, now(s))
            .await
            .expect("entry")
            .expect("lives");
        events(&e.history.expect("history"))
    };
    assert_eq!(
        entry(closed).await,
        vec![
            (EventKind::Put, 0),
            (EventKind::Reserve, 1),
            (EventKind::HolderClosed, 1)
        ]
    );
    assert_eq!(
        entry(lapsed).await,
        vec![
            (EventKind::Put, 0),
            (EventKind::Reserve, 2),
            (EventKind::Timeout, 2)
        ]
    );
    let r = retained(s, listed_del)
        .await
        .expect("a list delete retains");
    assert_eq!(
        events(&r.history),
        vec![(EventKind::Put, 0), (EventKind::Delete, 2)]
    );
    let step = s
        .flush_step(&t("rc"), FlushStates::ALL, None, 100, now(s))
        .await
        .expect("flush");
    assert_eq!(step.deleted, 2);
    for id in [closed, lapsed] {
        let r = retained(s, id).await.expect("a flushed job retains");
        assert_eq!(
            events(&r.history).last(),
            Some(&(EventKind::Flush, 0)),
            "{id}"
        );
    }
    assert_eq!(
        listed(s, query(10)).await.len(),
        3,
        "two flushed, one deleted"
    );
}

pub(super) async fn retention_off(s: &AnyStore) {
    let id = put(s, "ro", 1, 0, LONG, "x").await;
    assert!(reserve_job(s, C1, id).await.is_some());
    let entry = s
        .job_entry(id, now(s))
        .await
        .expect("entry")
        .expect("lives");
    assert!(entry.history.is_none(), "no history while off");
    assert!(delete(s, C1, id).await);
    assert!(retained(s, id).await.is_none());
    assert!(listed(s, query(10)).await.is_empty());
    assert_eq!(
        s.retention_figures().await.expect("figures").records,
        0,
        "nothing kept while off"
    );
}
