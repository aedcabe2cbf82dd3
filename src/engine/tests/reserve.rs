//! The reserve path: what is answered at once (as a plain reply, never a wait),
//! `reserve-with-timeout` to the millisecond, and DEADLINE_SOON around its 1 s margin.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_ready_job_is_answered_as_a_plain_reply() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put("a").await;
    // A plain reply, not a wait that happened to end at once: the connection does not
    // flush in the middle of a pipeline for it.
    match c.run("reserve").await {
        Outcome::Reply(r) => assert_eq!(text(&r), reserved(1, "a")),
        other => panic!("expected a plain reply, got {other:?}"),
    }
    assert_eq!(c.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn timeout_zero_on_an_empty_tube_times_out_at_once_and_leaves_no_waiter() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(c.stat("stats", "current-waiting").await, "0");
    assert_eq!(c.stat("stats-tube default", "current-waiting").await, "0");
    // No waiter was left behind to swallow the next job.
    let mut p = Client::connect(&e).await;
    let id = p.put("a").await;
    assert_eq!(p.state(id).await, "ready");
}

#[tokio::test(start_paused = true)]
async fn timeout_zero_takes_a_ready_job() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put_with(7, 0, 10, "x").await;
    c.put_with(3, 0, 10, "y").await;
    assert_eq!(c.cmd("reserve-with-timeout 0").await, reserved(2, "y"));
    assert_eq!(c.cmd("reserve-with-timeout 0").await, reserved(1, "x"));
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
}

#[tokio::test(start_paused = true)]
async fn timeout_one_expires_exactly_at_one_second() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    let wait = spawn_wait(c.block("reserve-with-timeout 1").await);
    advance(999).await;
    assert!(!wait.is_finished(), "timed out before 1 s");
    assert_eq!(c.stat("stats", "current-waiting").await, "1");
    advance(1).await;
    assert!(wait.is_finished(), "still waiting at 1 s");
    assert_eq!(wait.await.unwrap(), "TIMED_OUT");
    assert_eq!(c.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_longer_timeout_ends_on_the_millisecond() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    let wait = spawn_timed_wait(c.block("reserve-with-timeout 5").await);
    assert_eq!(wait.await.unwrap(), ("TIMED_OUT".to_string(), ms(5000)));
}

#[tokio::test(start_paused = true)]
async fn a_job_put_before_the_timeout_ends_the_wait() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    let wait = spawn_timed_wait(w.block("reserve-with-timeout 2").await);
    advance(1999).await;
    p.put("late").await;
    assert_eq!(wait.await.unwrap(), (reserved(1, "late"), ms(1999)));
    // And the timeout that was armed does not fire later on anything.
    advance(10).await;
    assert_eq!(w.state(1).await, "reserved");
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_reserve_does_not_take_a_later_job() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let wait = spawn_wait(w.block("reserve-with-timeout 1").await);
    assert_eq!(wait.await.unwrap(), "TIMED_OUT");
    let mut p = Client::connect(&e).await;
    let id = p.put("a").await;
    assert_eq!(p.state(id).await, "ready");
    assert_eq!(w.cmd("reserve-with-timeout 0").await, reserved(id, "a"));
}

#[tokio::test(start_paused = true)]
async fn a_blocked_reserve_counts_as_waiting_and_its_connection_as_a_worker() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut o = Client::connect(&e).await;
    let _wait = spawn_wait(w.block("reserve").await);
    settle().await;
    assert_eq!(o.stat("stats", "current-waiting").await, "1");
    assert_eq!(o.stat("stats", "current-workers").await, "1");
    assert_eq!(o.stat("stats", "cmd-reserve").await, "1");
    assert_eq!(o.stat("stats-tube default", "current-waiting").await, "1");
}

#[tokio::test(start_paused = true)]
async fn the_first_reserve_searches_every_watched_tube_by_priority() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    p.cmd("use a").await;
    p.put_with(5, 0, 10, "in-a").await;
    p.cmd("use b").await;
    p.put_with(1, 0, 10, "in-b").await;
    let mut w = Client::connect(&e).await;
    w.cmd("watch a").await;
    w.cmd("watch b").await;
    assert_eq!(w.cmd("reserve").await, reserved(2, "in-b"));
    assert_eq!(w.cmd("reserve").await, reserved(1, "in-a"));
}

#[tokio::test(start_paused = true)]
async fn a_job_in_an_unwatched_tube_does_not_end_a_wait() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    let wait = spawn_wait(w.block("reserve").await);
    p.cmd("use other").await;
    let other = p.put("other").await;
    settle().await;
    assert!(!wait.is_finished());
    assert_eq!(p.state(other).await, "ready");
    p.cmd("use default").await;
    let mine = p.put("mine").await;
    assert_eq!(wait.await.unwrap(), reserved(mine, "mine"));
}

// DEADLINE_SOON. A job reserved at 0 with TTR 2 s has its deadline at 2 s; the margin
// starts 1 s before, at 1 s.

/// A client holding job 1 (TTR `ttr` s, reserved at the current time).
async fn holding(e: &Arc<Engine>, ttr: u32) -> Client {
    let mut c = Client::connect(e).await;
    c.put_with(0, 0, ttr, "held").await;
    assert_eq!(c.cmd("reserve").await, reserved(1, "held"));
    c
}

#[tokio::test(start_paused = true)]
async fn just_before_the_margin_a_reserve_waits_until_it() {
    let e = engine();
    let mut c = holding(&e, 2).await;
    advance(999).await;
    let wait = spawn_timed_wait(c.block("reserve").await);
    assert_eq!(wait.await.unwrap(), ("DEADLINE_SOON".to_string(), ms(1)));
}

#[tokio::test(start_paused = true)]
async fn at_the_margin_deadline_soon_is_answered_at_once() {
    let e = engine();
    let mut c = holding(&e, 2).await;
    advance(1000).await;
    assert_eq!(c.cmd("reserve").await, "DEADLINE_SOON");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "DEADLINE_SOON");
    assert_eq!(c.cmd("reserve-with-timeout 9").await, "DEADLINE_SOON");
    // The held job stays held.
    assert_eq!(c.state(1).await, "reserved");
}

#[tokio::test(start_paused = true)]
async fn after_the_margin_deadline_soon_is_answered_at_once() {
    let e = engine();
    let mut c = holding(&e, 2).await;
    advance(1500).await;
    assert_eq!(c.cmd("reserve").await, "DEADLINE_SOON");
}

#[tokio::test(start_paused = true)]
async fn with_ttr_one_the_next_reserve_is_already_in_the_margin() {
    let e = engine();
    let mut c = holding(&e, 1).await;
    assert_eq!(c.cmd("reserve").await, "DEADLINE_SOON");
}

#[tokio::test(start_paused = true)]
async fn in_the_margin_a_ready_job_is_handed_out_instead() {
    // beanstalkd #646: DEADLINE_SOON only when no watched tube has a ready job.
    let e = engine();
    let mut c = holding(&e, 2).await;
    let mut p = Client::connect(&e).await;
    advance(1200).await;
    let id = p.put("fresh").await;
    assert_eq!(c.cmd("reserve").await, reserved(id, "fresh"));
}

#[tokio::test(start_paused = true)]
async fn in_the_margin_a_ready_job_in_an_unwatched_tube_does_not_count() {
    let e = engine();
    let mut c = holding(&e, 2).await;
    let mut p = Client::connect(&e).await;
    p.cmd("use elsewhere").await;
    let id = p.put("elsewhere").await;
    advance(1000).await;
    assert_eq!(c.cmd("reserve").await, "DEADLINE_SOON");
    assert_eq!(p.state(id).await, "ready");
}

#[tokio::test(start_paused = true)]
async fn in_the_margin_a_ready_job_in_a_paused_tube_is_not_handed_out() {
    let e = engine();
    let mut c = holding(&e, 2).await;
    let mut p = Client::connect(&e).await;
    let id = p.put("paused").await;
    assert_eq!(p.cmd("pause-tube default 60").await, "PAUSED");
    advance(1000).await;
    assert_eq!(c.cmd("reserve").await, "DEADLINE_SOON");
    assert_eq!(p.state(id).await, "ready");
}

#[tokio::test(start_paused = true)]
async fn a_job_put_before_the_margin_ends_a_wait_headed_for_it() {
    let e = engine();
    let mut c = holding(&e, 3).await;
    let mut p = Client::connect(&e).await;
    let wait = spawn_timed_wait(c.block("reserve").await);
    advance(500).await;
    let id = p.put("in time").await;
    assert_eq!(wait.await.unwrap(), (reserved(id, "in time"), ms(500)));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_sooner_than_the_margin_wins() {
    let e = engine();
    let mut c = holding(&e, 5).await; // margin at 4 s
    let wait = spawn_timed_wait(c.block("reserve-with-timeout 2").await);
    assert_eq!(wait.await.unwrap(), ("TIMED_OUT".to_string(), ms(2000)));
}

#[tokio::test(start_paused = true)]
async fn a_margin_sooner_than_the_timeout_wins() {
    let e = engine();
    let mut c = holding(&e, 3).await; // margin at 2 s
    let wait = spawn_timed_wait(c.block("reserve-with-timeout 5").await);
    assert_eq!(wait.await.unwrap(), ("DEADLINE_SOON".to_string(), ms(2000)));
}

#[tokio::test(start_paused = true)]
async fn a_tie_between_margin_and_timeout_is_deadline_soon() {
    let e = engine();
    let mut c = holding(&e, 3).await; // margin at 2 s
    let wait = spawn_timed_wait(c.block("reserve-with-timeout 2").await);
    assert_eq!(wait.await.unwrap(), ("DEADLINE_SOON".to_string(), ms(2000)));
}

#[tokio::test(start_paused = true)]
async fn touch_moves_the_margin() {
    let e = engine();
    let mut c = holding(&e, 2).await;
    advance(800).await;
    assert_eq!(c.cmd("touch 1").await, "TOUCHED");
    // Deadline now 2.8 s, margin 1.8 s.
    advance(200).await;
    let wait = spawn_timed_wait(c.block("reserve").await);
    assert_eq!(wait.await.unwrap(), ("DEADLINE_SOON".to_string(), ms(800)));
}

#[tokio::test(start_paused = true)]
async fn the_margin_follows_the_soonest_of_several_held_jobs() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put_with(0, 0, 10, "long").await;
    c.put_with(1, 0, 4, "short").await;
    assert_eq!(c.cmd("reserve").await, reserved(1, "long"));
    assert_eq!(c.cmd("reserve").await, reserved(2, "short"));
    // Margin of the 4 s job: 3 s.
    let wait = spawn_timed_wait(c.block("reserve").await);
    assert_eq!(wait.await.unwrap(), ("DEADLINE_SOON".to_string(), ms(3000)));
    // Once that job is gone, the margin is the 10 s job's.
    assert_eq!(c.cmd("delete 2").await, "DELETED");
    let wait = spawn_timed_wait(c.block("reserve").await);
    assert_eq!(wait.await.unwrap(), ("DEADLINE_SOON".to_string(), ms(6000)));
}
