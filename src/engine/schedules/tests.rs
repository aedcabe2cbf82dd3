//! The runner on tokio's paused clock, against the memory store: ticks counted to the
//! one, missed ticks after a jump of the clock, keys, pauses, and a change of the set.

use super::*;
use crate::engine::EngineConfig;
use crate::engine::tests::{advance, settle};
use crate::protocol::TubeName;
use crate::schedule::ScheduleDoc;
use crate::store::{AnyStore, Cursor, MemoryStore};

/// An engine on a memory store, firing the schedules `set` holds.
fn engine_with(set: watch::Receiver<Arc<Schedules>>) -> Arc<Engine> {
    Engine::start(
        AnyStore::Memory(MemoryStore::new()),
        EngineConfig {
            max_job_size: 65_535,
            memory: None,
            dialect: Default::default(),
            extensions: true,
            keys: Default::default(),
            policies: None,
            schedules: Some(set),
            retention: Default::default(),
        },
    )
}

/// Every second into `tube`, counted from `changed_ms`.
fn every_second(tube: &str, changed_ms: u64) -> ScheduleDoc {
    ScheduleDoc {
        tube: tube.into(),
        body: Some(tube.into()),
        every_ms: Some(1000),
        pri: 1024,
        ttr_ms: 60_000,
        changed_ms,
        ..ScheduleDoc::default()
    }
}

async fn ready(engine: &Engine, tube: &str) -> u64 {
    let tube = TubeName::new(tube.as_bytes()).unwrap();
    let info = engine
        .store
        .tube_info(&tube, engine.clock.now())
        .await
        .unwrap();
    info.map_or(0, |i| i.ready)
}

async fn cursor(engine: &Engine, name: &str) -> Cursor {
    let cursors = engine.store.schedule_cursors().await.unwrap();
    cursors
        .into_iter()
        .find(|(n, _)| n.as_str() == name)
        .map(|(_, c)| c)
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn each_tick_makes_one_job_in_order() {
    let (tx, rx) = watch::channel(Arc::new(Schedules::default()));
    let engine = engine_with(rx);
    let now = engine.now_ms();
    let set = Schedules::default()
        .with("s", &every_second("t", now))
        .unwrap();
    tx.send_replace(Arc::new(set));
    advance(10).await;
    assert_eq!(
        ready(&engine, "t").await,
        0,
        "no tick at or before the change"
    );
    for n in 1..=5 {
        advance(1000).await;
        assert_eq!(ready(&engine, "t").await, n, "after {n} s");
    }
    let c = cursor(&engine, "s").await;
    assert_eq!((c.last_tick_ms, c.fired), (now + 5000, 5));
    let recent = engine
        .schedule_fires()
        .recent(&ScheduleName::new("s").unwrap());
    assert_eq!(recent.len(), 5);
    assert!(matches!(recent[4].result, FireResult::Made(_)));
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_schedule_fires_nothing_and_resumes_from_its_change() {
    let (tx, rx) = watch::channel(Arc::new(Schedules::default()));
    let engine = engine_with(rx);
    let now = engine.now_ms();
    let mut doc = every_second("t", now);
    doc.paused = true;
    tx.send_replace(Arc::new(Schedules::default().with("s", &doc).unwrap()));
    advance(3500).await;
    assert_eq!(ready(&engine, "t").await, 0);
    doc.paused = false;
    doc.changed_ms = engine.now_ms();
    tx.send_replace(Arc::new(Schedules::default().with("s", &doc).unwrap()));
    advance(10).await;
    advance(1000).await;
    assert_eq!(ready(&engine, "t").await, 1, "one tick since the resume");
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_keyed_schedule_dedupes_while_its_job_waits() {
    let (tx, rx) = watch::channel(Arc::new(Schedules::default()));
    let engine = engine_with(rx);
    let mut doc = every_second("t", engine.now_ms());
    doc.key = Some("only-one".into());
    tx.send_replace(Arc::new(Schedules::default().with("s", &doc).unwrap()));
    advance(10).await;
    advance(3000).await;
    assert_eq!(ready(&engine, "t").await, 1);
    let c = cursor(&engine, "s").await;
    assert_eq!((c.fired, c.deduped), (1, 2));
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn missed_ticks_are_skipped_or_fired_once() {
    let (tx, rx) = watch::channel(Arc::new(Schedules::default()));
    let engine = engine_with(rx);
    let now = engine.now_ms();
    let mut once = every_second("once", now);
    once.missed = Missed::Once;
    let set = Schedules::default()
        .with("skip", &every_second("skip", now))
        .unwrap()
        .with("once", &once)
        .unwrap();
    tx.send_replace(Arc::new(set));
    advance(10).await;
    advance(1000).await;
    assert_eq!(ready(&engine, "skip").await, 1);
    // Nothing ran for five minutes (the clock jumps: the runner wakes once).
    advance(300_000).await;
    settle().await;
    let skip = cursor(&engine, "skip").await;
    let once_c = cursor(&engine, "once").await;
    assert_eq!(ready(&engine, "skip").await, 1, "skip: no job for the gap");
    assert_eq!(skip.skipped, 300, "{skip:?}");
    assert_eq!(ready(&engine, "once").await, 2, "once: one job for the gap");
    assert_eq!(once_c.skipped, 299, "{once_c:?}");
    assert_eq!(skip.last_tick_ms, once_c.last_tick_ms);
    // And both go on each second.
    advance(1000).await;
    assert_eq!(ready(&engine, "skip").await, 2);
    assert_eq!(ready(&engine, "once").await, 3);
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_schedule_stops_and_its_ring_goes() {
    let (tx, rx) = watch::channel(Arc::new(Schedules::default()));
    let engine = engine_with(rx);
    let set = Schedules::default()
        .with("s", &every_second("t", engine.now_ms()))
        .unwrap();
    tx.send_replace(Arc::new(set));
    advance(10).await;
    advance(2000).await;
    assert_eq!(ready(&engine, "t").await, 2);
    tx.send_replace(Arc::new(Schedules::default()));
    advance(10).await;
    advance(3000).await;
    assert_eq!(ready(&engine, "t").await, 2);
    let name = ScheduleName::new("s").unwrap();
    assert!(engine.schedule_fires().recent(&name).is_empty());
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_job_size_is_refused_tick_by_tick() {
    let (tx, rx) = watch::channel(Arc::new(Schedules::default()));
    let engine = engine_with(rx);
    let mut doc = every_second("t", engine.now_ms());
    doc.body = Some("x".repeat(70_000));
    tx.send_replace(Arc::new(Schedules::default().with("s", &doc).unwrap()));
    advance(10).await;
    advance(2000).await;
    assert_eq!(ready(&engine, "t").await, 0);
    let recent = engine
        .schedule_fires()
        .recent(&ScheduleName::new("s").unwrap());
    assert_eq!(recent.len(), 2);
    assert!(matches!(&recent[1].result, FireResult::Failed(why) if why.contains("over -z")));
    engine.shutdown().await;
}
