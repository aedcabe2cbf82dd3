//! The protocol extensions through the engine: `list-extensions` names exactly the
//! families served, an extension verb counts in `/metrics` and never in `stats`, and
//! with `--extensions off` every extension line gets beanstalkd's answer.

use super::*;
use crate::engine::SERVED_FAMILIES;
use crate::protocol::yaml;

/// `list-extensions`' reply for the families this build serves.
fn served_list() -> String {
    let names = yaml::name_list(SERVED_FAMILIES.iter().map(|f| f.name()));
    format!(
        "OK {}\r\n{}",
        names.len(),
        String::from_utf8(names.to_vec()).unwrap()
    )
}

#[tokio::test(start_paused = true)]
async fn list_extensions_names_the_families_served() {
    let e = engine();
    let mut a = Client::connect(&e).await;
    assert_eq!(a.cmd("list-extensions").await, served_list());
    assert_eq!(a.cmd("list-extensions ").await, "UNKNOWN_COMMAND");
}

#[tokio::test(start_paused = true)]
async fn extension_verbs_count_in_metrics_only() {
    let e = engine();
    let mut a = Client::connect(&e).await;
    a.cmd("list-extensions").await;
    a.cmd("list-extensions").await;
    let snap = e.snapshot(0).await.unwrap();
    assert!(
        snap.extension_commands.contains(&("list-extensions", 2)),
        "{:?}",
        snap.extension_commands
    );
    assert!(snap.server.cmd.iter().all(|&n| n == 0), "stats counted it");
}

#[tokio::test(start_paused = true)]
async fn with_extensions_off_every_extension_line_is_beanstalkds() {
    let e = engine_speaking(AnyStore::Memory(MemoryStore::new()), false);
    let mut a = Client::connect(&e).await;
    assert_eq!(a.cmd("list-extensions").await, "UNKNOWN_COMMAND");
    assert_eq!(a.cmd("release 1 0 500ms").await, "BAD_FORMAT");
    assert_eq!(a.cmd("reserve-batch 2").await, "BAD_FORMAT");
    let snap = e.snapshot(0).await.unwrap();
    assert_eq!(snap.extension_commands, [], "no extension verb is spoken");
}

#[tokio::test(start_paused = true)]
async fn a_delay_in_milliseconds_is_due_to_the_millisecond() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    assert_eq!(p.cmd("put 0 250ms 10 4\r\nsoon\r\n").await, "INSERTED 1");
    assert_eq!(
        p.stat("stats-job 1", "delay").await,
        "0",
        "whole seconds, down"
    );
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(wait.await.unwrap(), (reserved(1, "soon"), ms(250)));
}

#[tokio::test(start_paused = true)]
async fn a_ttr_in_milliseconds_lapses_after_it_and_never_below_a_second() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.cmd("put 0 0 1500ms 1\r\na\r\n").await, "INSERTED 1");
    assert_eq!(c.cmd("put 9 0 300ms 1\r\nb\r\n").await, "INSERTED 2");
    assert_eq!(c.stat("stats-job 1", "ttr").await, "1");
    assert_eq!(c.stat("stats-job 2", "ttr").await, "1", "raised to 1 s");
    assert_eq!(c.cmd("reserve").await, reserved(1, "a"));
    assert_eq!(c.cmd("reserve").await, reserved(2, "b"));
    advance(1001).await;
    assert_eq!(c.state(2).await, "ready", "300ms is 1 s");
    assert_eq!(c.state(1).await, "reserved");
    advance(500).await;
    assert_eq!(c.state(1).await, "ready");
}

#[tokio::test(start_paused = true)]
async fn release_and_pause_take_milliseconds_and_count_as_their_verbs() {
    let e = engine();
    let mut h = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    h.put("again").await;
    assert_eq!(h.cmd("reserve").await, reserved(1, "again"));
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(h.cmd("release 1 0 1200ms").await, "RELEASED");
    assert_eq!(wait.await.unwrap(), (reserved(1, "again"), ms(1200)));
    assert_eq!(w.cmd("release 1 0 0").await, "RELEASED");
    assert_eq!(h.cmd("pause-tube default 700ms").await, "PAUSED");
    let wait = spawn_timed_wait(h.block("reserve").await);
    assert_eq!(wait.await.unwrap(), (reserved(1, "again"), ms(700)));
    assert_eq!(w.stat("stats", "cmd-release").await, "2");
    assert_eq!(w.stat("stats", "cmd-pause-tube").await, "1");
}

#[tokio::test(start_paused = true)]
async fn a_window_is_cut_to_the_longest_allowed_and_ends_on_the_timer() {
    let limits = crate::store::KeyLimits {
        window_max_ms: 1000,
        ..Default::default()
    };
    let e = engine_keyed(AnyStore::Memory(MemoryStore::new()), true, limits);
    let mut c = Client::connect(&e).await;
    assert_eq!(
        c.cmd("put 0 0 10 1 idp:k:3600\r\nx\r\n").await,
        "INSERTED 1"
    );
    assert_eq!(c.cmd("delete 1").await, "DELETED");
    assert_eq!(c.cmd("find-key k").await, "FOUND_KEY 1 DELETED");
    advance(1001).await;
    assert_eq!(
        c.cmd("find-key k").await,
        "NOT_FOUND",
        "cut to 1 s, not 1 h"
    );
    assert_eq!(
        crate::store::Store::next_deadline(&e.store).await.unwrap(),
        None,
        "the timer swept it"
    );
}

#[tokio::test(start_paused = true)]
async fn key_verbs_count_in_metrics_only_and_a_keyed_put_is_a_put() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.cmd("put 0 0 10 1 idp:k\r\nx\r\n").await, "INSERTED 1");
    assert_eq!(
        c.cmd("put 0 0 10 1 idp:k\r\ny\r\n").await,
        "INSERTED 1 READY"
    );
    assert_eq!(c.cmd("find-key k").await, "FOUND_KEY 1 READY");
    assert_eq!(c.cmd("delete-key k").await, "DELETED");
    assert_eq!(c.stat("stats", "cmd-put").await, "2");
    assert_eq!(c.stat("stats", "cmd-delete").await, "0");
    assert_eq!(c.stat("stats", "current-producers").await, "1");
    let snap = e.snapshot(0).await.unwrap();
    for verb in [("find-key", 1), ("delete-key", 1)] {
        assert!(snap.extension_commands.contains(&verb), "{verb:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_replace_to_ready_and_a_retime_to_now_serve_a_waiting_reserve() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    assert_eq!(
        p.cmd("put 0 3600 10 3 rpl:k\r\nold\r\n").await,
        "INSERTED 1"
    );
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(
        p.cmd("put 0 0 10 3 rpl:k\r\nnew\r\n").await,
        "INSERTED 1 READY"
    );
    assert_eq!(wait.await.unwrap(), (reserved(1, "new"), ms(0)));
    assert_eq!(w.cmd("release 1 0 3600").await, "RELEASED");
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(p.cmd("retime-key k 250ms").await, "RETIMED");
    assert_eq!(wait.await.unwrap(), (reserved(1, "new"), ms(250)));
}
