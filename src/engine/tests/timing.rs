//! The deadline timer as clients see it: a delayed job is ready exactly at its due
//! time, a reservation lapses strictly after its deadline (the timer's 1 ms resolution
//! makes that the next millisecond), and a paused tube serves its waiters exactly when
//! the pause ends (at once for `pause-tube x 0`).

use super::*;

#[tokio::test(start_paused = true)]
async fn a_delayed_job_is_ready_exactly_at_its_due_time() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.put_with(0, 1, 10, "later").await, "INSERTED 1");
    assert_eq!(c.state(1).await, "delayed");
    advance(999).await;
    assert_eq!(c.state(1).await, "delayed");
    assert_eq!(c.cmd("peek-ready").await, "NOT_FOUND");
    advance(1).await;
    assert_eq!(c.state(1).await, "ready");
    assert_eq!(c.cmd("peek-ready").await, "FOUND 1 5\r\nlater");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gets_a_delayed_job_exactly_at_its_due_time() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    let wait = spawn_timed_wait(w.block("reserve").await);
    p.put_with(0, 3, 10, "due").await;
    assert_eq!(wait.await.unwrap(), (reserved(1, "due"), ms(3000)));
}

#[tokio::test(start_paused = true)]
async fn delayed_jobs_come_in_due_order() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    p.put_with(0, 2, 10, "second").await;
    p.put_with(9, 1, 10, "first").await;
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(wait.await.unwrap(), (reserved(2, "first"), ms(1000)));
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(wait.await.unwrap(), (reserved(1, "second"), ms(1000)));
}

#[tokio::test(start_paused = true)]
async fn a_release_with_delay_comes_back_at_its_due_time() {
    let e = engine();
    let mut h = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    h.put("again").await;
    assert_eq!(h.cmd("reserve").await, reserved(1, "again"));
    advance(500).await;
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(h.cmd("release 1 0 2").await, "RELEASED");
    assert_eq!(h.state(1).await, "delayed");
    assert_eq!(wait.await.unwrap(), (reserved(1, "again"), ms(2000)));
}

#[tokio::test(start_paused = true)]
async fn a_reservation_lapses_strictly_after_its_deadline() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put_with(0, 0, 1, "ttr").await;
    assert_eq!(c.cmd("reserve").await, reserved(1, "ttr"));
    advance(1000).await;
    // At the deadline itself the job is still held.
    assert_eq!(c.state(1).await, "reserved");
    assert_eq!(c.stat("stats-job 1", "timeouts").await, "0");
    advance(1).await;
    assert_eq!(c.state(1).await, "ready");
    assert_eq!(c.stat("stats-job 1", "timeouts").await, "1");
    assert_eq!(c.stat("stats", "job-timeouts").await, "1");
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_reservation_goes_to_a_waiter() {
    let e = engine();
    let mut h = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    h.put_with(0, 0, 2, "lapses").await;
    assert_eq!(h.cmd("reserve").await, reserved(1, "lapses"));
    let wait = spawn_timed_wait(w.block("reserve").await);
    assert_eq!(wait.await.unwrap(), (reserved(1, "lapses"), ms(2001)));
    // The former holder no longer holds it.
    assert_eq!(h.cmd("delete 1").await, "NOT_FOUND");
}

#[tokio::test(start_paused = true)]
async fn touch_restarts_the_ttr() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put_with(0, 0, 2, "kept").await;
    assert_eq!(c.cmd("reserve").await, reserved(1, "kept"));
    advance(1500).await;
    assert_eq!(c.cmd("touch 1").await, "TOUCHED");
    advance(2000).await;
    assert_eq!(c.state(1).await, "reserved");
    advance(1).await;
    assert_eq!(c.state(1).await, "ready");
}

#[tokio::test(start_paused = true)]
async fn a_ttr_of_zero_is_one_second() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put_with(0, 0, 0, "quick").await;
    assert_eq!(c.stat("stats-job 1", "ttr").await, "1");
    assert_eq!(c.cmd("reserve").await, reserved(1, "quick"));
    advance(1000).await;
    assert_eq!(c.state(1).await, "reserved");
    advance(1).await;
    assert_eq!(c.state(1).await, "ready");
}

#[tokio::test(start_paused = true)]
async fn time_left_and_age_follow_the_clock() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put_with(0, 5, 10, "delayed").await;
    c.put_with(0, 0, 10, "held").await;
    assert_eq!(c.cmd("reserve").await, reserved(2, "held"));
    assert_eq!(c.stat("stats-job 2", "time-left").await, "10");
    advance(3500).await;
    assert_eq!(c.stat("stats-job 1", "time-left").await, "1");
    assert_eq!(c.stat("stats-job 1", "age").await, "3");
    assert_eq!(c.stat("stats-job 2", "time-left").await, "6");
}

#[tokio::test(start_paused = true)]
async fn a_pause_holds_waiters_until_it_ends_exactly() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    assert_eq!(p.cmd("pause-tube default 2").await, "PAUSED");
    let wait = spawn_timed_wait(w.block("reserve").await);
    p.put("held back").await;
    advance(1999).await;
    assert!(!wait.is_finished(), "served during the pause");
    assert_eq!(p.state(1).await, "ready");
    assert_eq!(wait.await.unwrap(), (reserved(1, "held back"), ms(2000)));
}

#[tokio::test(start_paused = true)]
async fn pause_tube_zero_resumes_now_and_serves_the_waiters() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    assert_eq!(p.cmd("pause-tube default 10").await, "PAUSED");
    let wait = spawn_timed_wait(w.block("reserve").await);
    p.put("resumed").await;
    advance(300).await;
    assert!(!wait.is_finished());
    assert_eq!(p.cmd("pause-tube default 0").await, "PAUSED");
    // A zero pause is 1 ns ("resume now"), ended by the timer like any pause: within
    // the timer's millisecond, not at the old pause's end.
    let (reply, took) = wait.await.unwrap();
    assert_eq!(reply, reserved(1, "resumed"));
    assert!(took >= ms(300) && took <= ms(301), "served after {took:?}");
    assert_eq!(p.stat("stats-tube default", "pause").await, "0");
}

#[tokio::test(start_paused = true)]
async fn pause_tube_zero_on_a_tube_that_is_not_paused() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.cmd("pause-tube default 0").await, "PAUSED");
    c.put("a").await;
    // "Resume now" is a pause of 1 ns: over once the clock has moved at all.
    advance(1).await;
    assert_eq!(c.cmd("reserve-with-timeout 0").await, reserved(1, "a"));
    assert_eq!(c.stat("stats-tube default", "cmd-pause-tube").await, "1");
}

#[tokio::test(start_paused = true)]
async fn pause_tube_on_a_missing_tube_is_not_found() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.cmd("pause-tube nowhere 5").await, "NOT_FOUND");
}

#[tokio::test(start_paused = true)]
async fn stats_tube_shows_the_pause_counting_down() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    assert_eq!(c.cmd("pause-tube default 10").await, "PAUSED");
    advance(3500).await;
    assert_eq!(c.stat("stats-tube default", "pause").await, "10");
    assert_eq!(c.stat("stats-tube default", "pause-time-left").await, "6");
    advance(6500).await;
    assert_eq!(c.stat("stats-tube default", "pause").await, "0");
    assert_eq!(c.stat("stats-tube default", "pause-time-left").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_paused_tube_answers_timeout_zero_with_timed_out() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    c.put("paused").await;
    assert_eq!(c.cmd("pause-tube default 5").await, "PAUSED");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(c.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_paused_tube_does_not_hold_back_another_watched_tube() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    w.cmd("watch open").await;
    p.put_with(0, 0, 10, "paused").await;
    assert_eq!(p.cmd("pause-tube default 60").await, "PAUSED");
    let mut waiting = w.block("reserve").await;
    p.cmd("use open").await;
    p.put("open").await;
    assert_eq!(
        waiting.answer_now(e.clock.now(), false).map(|r| text(&r)),
        Some(reserved(2, "open"))
    );
}

#[tokio::test(start_paused = true)]
async fn pausing_again_moves_the_end() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    assert_eq!(p.cmd("pause-tube default 2").await, "PAUSED");
    p.put("x").await;
    let wait = spawn_timed_wait(w.block("reserve").await);
    advance(1000).await;
    assert_eq!(p.cmd("pause-tube default 5").await, "PAUSED");
    assert_eq!(wait.await.unwrap(), (reserved(1, "x"), ms(6000)));
}

#[tokio::test(start_paused = true)]
async fn a_job_due_during_a_pause_waits_for_its_end() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    p.put_with(0, 1, 10, "due early").await;
    assert_eq!(p.cmd("pause-tube default 3").await, "PAUSED");
    let wait = spawn_timed_wait(w.block("reserve").await);
    advance(1500).await;
    assert_eq!(p.state(1).await, "ready");
    assert!(!wait.is_finished());
    assert_eq!(wait.await.unwrap(), (reserved(1, "due early"), ms(3000)));
}

#[tokio::test(start_paused = true)]
async fn the_end_of_a_pause_serves_waiters_in_order() {
    let e = engine();
    let (mut a, mut b) = (Client::connect(&e).await, Client::connect(&e).await);
    let mut p = Client::connect(&e).await;
    assert_eq!(p.cmd("pause-tube default 1").await, "PAUSED");
    let wa = spawn_timed_wait(a.block("reserve").await);
    settle().await;
    let wb = spawn_wait(b.block("reserve-with-timeout 5").await);
    p.put("one").await;
    assert_eq!(wa.await.unwrap(), (reserved(1, "one"), ms(1000)));
    assert_eq!(wb.await.unwrap(), "TIMED_OUT");
}
