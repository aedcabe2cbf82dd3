//! With a store that answers late (as Redis does, a round trip per call), on the paused
//! clock: a job due just before a reserve's timeout still goes to that reserve; a hint
//! that arrives while the timer reads its next deadline is not lost; a job reserved for
//! a waiter that went away meanwhile goes back alone, the connection's other
//! reservations untouched, and on to the next waiter; a reply does not wait for the
//! next pass while one is in flight; a waiter whose timeout comes while the timer
//! reads waits for a job hinted due before it; a reservation whose TTR passed while the
//! timer was late is not its old holder's to touch, release or bury.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_job_due_before_a_timeout_goes_to_the_waiter_though_the_tick_ends_after_it() {
    // Each store call takes 20 ms. The put is applied at 0 (due at 1000); the reserve
    // starts at 10 (times out at 1010). The tick at 1000 is answered at 1020, and its
    // pass hands the job over at 1040: the timeout falls in between.
    let e = lagging_engine(ms(20), ms(20));
    let mut p = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    let started = Instant::now();
    let put = tokio::spawn(async move {
        let reply = p.put_with(0, 1, 60, "due").await;
        (p, reply)
    });
    tokio::time::sleep(ms(10)).await;
    let wait = spawn_wait(w.block("reserve-with-timeout 1").await);
    let (mut p, inserted) = put.await.unwrap();
    assert_eq!(inserted, "INSERTED 1");
    let reply = wait.await.unwrap();
    eprintln!(
        "late store: job due at 1000 ms, reserve times out at 1010 ms, tick and pass answered \
         20 ms late each: {reply:?} at {:?}",
        started.elapsed()
    );
    assert_eq!(reply, reserved(1, "due"));
    assert_eq!(p.state(1).await, "reserved");
    assert_eq!(p.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_with_nothing_due_by_then_is_not_held_by_a_late_store() {
    let e = lagging_engine(ms(20), ms(20));
    let mut p = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    // Due after the timeout: the waiter does not wait for it.
    assert_eq!(p.put_with(0, 2, 60, "later").await, "INSERTED 1");
    let started = Instant::now();
    let wait = spawn_wait(w.block("reserve-with-timeout 1").await);
    assert_eq!(wait.await.unwrap(), "TIMED_OUT");
    assert_eq!(started.elapsed(), ms(1000));
    assert_eq!(p.state(1).await, "delayed");
}

#[tokio::test(start_paused = true)]
async fn a_hint_during_the_timers_read_is_kept() {
    // Reads of the next deadline answer 50 ms late, other calls at once: a release
    // made after the read was taken, and hinted, arrives before the read's answer.
    let e = lagging_engine(ms(0), ms(50));
    let mut h = Client::connect(&e).await;
    let started = Instant::now();
    assert_eq!(h.put_with(0, 1, 60, "first").await, "INSERTED 1");
    h.put("held").await;
    assert_eq!(h.cmd("reserve-job 2").await, reserved(2, "held"));
    // At 1000 the timer ticks (job 1 is ready) and reads its next deadline again
    // (answered at 1050). Meanwhile job 2 goes back with a delay of 1 s: due at 2010.
    tokio::time::sleep_until(started + ms(1010)).await;
    settle().await;
    assert_eq!(h.state(1).await, "ready");
    assert_eq!(h.cmd("release 2 0 1").await, "RELEASED");
    tokio::time::sleep_until(started + ms(2010)).await;
    settle().await;
    let state = h.state(2).await;
    eprintln!(
        "late read: job released during the timer's read, due at 2010 ms: {state} at 2010 ms"
    );
    assert_eq!(state, "ready");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gone_mid_pass_gives_back_only_the_job_it_did_not_get() {
    let e = lagging_engine(ms(10), ms(10));
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    assert_eq!(w.put("mine").await, 1);
    assert_eq!(w.cmd("reserve").await, reserved(1, "mine"));
    let waiting = w.block("reserve").await;
    // The put is applied at once and answered 10 ms later; its pass claims the waiter
    // and asks the store, whose answer comes 10 ms after that. The waiter goes at 15
    // ms (its connection ends, as at shutdown), before the answer.
    let gone = tokio::spawn(async move {
        tokio::time::sleep(ms(15)).await;
        drop(waiting);
    });
    assert_eq!(p.put("theirs").await, 2);
    gone.await.unwrap();
    settle().await;
    let (one, two) = (p.state(1).await, p.state(2).await);
    eprintln!("waiter gone mid-pass: its own job {one}, the job it never got {two}");
    assert_eq!(
        one, "reserved",
        "the connection's own reservation was released"
    );
    assert_eq!(two, "ready");
    // At shutdown the connection ends without releasing: its job stays reserved.
    let session = w.session.take().unwrap();
    e.disconnect(session, false).await;
    assert_eq!(p.state(1).await, "reserved");
    assert_eq!(p.stat("stats", "current-jobs-reserved").await, "1");
}

#[tokio::test(start_paused = true)]
async fn a_job_a_waiter_gone_mid_pass_refused_goes_to_the_next_waiter() {
    // Each call answers 10 ms late. The put is answered at 10 ms; its pass claims the
    // older waiter and asks the store (answered at 20 ms); that waiter goes at 15 ms
    // (its reserve dropped, as at shutdown or a read error). The pass must give the job
    // it reserved for nobody back, and the next waiter gets it.
    let e = lagging_engine(ms(10), ms(10));
    let mut gone = Client::connect(&e).await;
    let mut next = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    let older = gone.block("reserve").await;
    let younger = spawn_timed_wait(next.block("reserve-with-timeout 5").await);
    let vanish = tokio::spawn(async move {
        tokio::time::sleep(ms(15)).await;
        drop(older);
    });
    assert_eq!(p.put("refused").await, 1);
    vanish.await.unwrap();
    let (reply, took) = younger.await.unwrap();
    eprintln!(
        "a job refused by a waiter gone mid-pass: the next waiter got {reply:?} after {took:?}"
    );
    assert_eq!(reply, reserved(1, "refused"));
    assert_eq!(p.state(1).await, "reserved");
    assert_eq!(p.stat("stats-job 1", "reserves").await, "2");
}

#[tokio::test(start_paused = true)]
async fn a_put_while_a_pass_waits_on_the_store_does_not_wait_for_the_next_pass() {
    // Each call answers 20 ms late. The first put is answered at 20 ms and waits for
    // its pass (the waiter on `a` gets its job at 40 ms), as every put does when no
    // pass is in flight. The second put, started at 10 ms, is answered by the store at
    // 30 ms, while that pass waits on the store: it does not wait for the next pass
    // (which would hold its reply until 60 ms); its job reaches the waiter on `b` just
    // after (at 60 ms).
    let e = lagging_engine(ms(20), ms(20));
    let mut wa = Client::connect(&e).await;
    let mut wb = Client::connect(&e).await;
    let mut pa = Client::connect(&e).await;
    let mut pb = Client::connect(&e).await;
    for (c, tube) in [(&mut wa, "a"), (&mut wb, "b")] {
        assert_eq!(c.cmd(&format!("watch {tube}")).await, "WATCHING 2");
        assert_eq!(c.cmd("ignore default").await, "WATCHING 1");
    }
    assert_eq!(pa.cmd("use a").await, "USING a");
    assert_eq!(pb.cmd("use b").await, "USING b");
    let started = Instant::now();
    let on_a = spawn_timed_wait(wa.block("reserve").await);
    let on_b = spawn_timed_wait(wb.block("reserve").await);
    settle().await;
    let registered = started.elapsed();
    let first = tokio::spawn(async move {
        let began = Instant::now();
        let id = pa.put("to a").await;
        (id, began.elapsed())
    });
    tokio::time::sleep(ms(10)).await;
    let second = tokio::spawn(async move {
        let began = Instant::now();
        let id = pb.put("to b").await;
        (id, began.elapsed())
    });
    let (one, first_took) = first.await.unwrap();
    let (two, second_took) = second.await.unwrap();
    let (got_a, _) = on_a.await.unwrap();
    let (got_b, _) = on_b.await.unwrap();
    eprintln!(
        "store 20 ms late, waiters registered in {registered:?}: the put with no pass in \
         flight answered in {first_took:?}, the put during that pass in {second_took:?}"
    );
    assert_eq!(first_took, ms(40), "the first put waits for its pass");
    assert_eq!(
        second_took,
        ms(20),
        "a put during a pass in flight waited for a pass"
    );
    assert_eq!(got_a, reserved(one, "to a"));
    assert_eq!(got_b, reserved(two, "to b"));
}

#[tokio::test(start_paused = true)]
async fn a_job_hinted_during_the_timers_read_and_due_before_a_timeout_goes_to_the_waiter() {
    // Reads of the next deadline answer 1200 ms late, other calls at once. The timer's
    // first read begins at 0, before any job; meanwhile a job is released with a delay
    // of 1 s (due at 1000) and a reserve begins at 5 (times out at 1005). At 1005 the
    // read is not back: only the hint tells the waiter that a job is due before its
    // timeout, so it waits for the tick (at 1200, once the read is back) rather than
    // answer TIMED_OUT.
    let e = lagging_engine(ms(0), ms(1200));
    settle().await;
    let mut h = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    assert_eq!(h.cmd("use w").await, "USING w");
    assert_eq!(w.cmd("watch w").await, "WATCHING 2");
    assert_eq!(w.cmd("ignore default").await, "WATCHING 1");
    assert_eq!(h.put("held").await, 1);
    assert_eq!(h.cmd("reserve-job 1").await, reserved(1, "held"));
    assert_eq!(h.cmd("release 1 0 1").await, "RELEASED");
    tokio::time::sleep(ms(5)).await;
    let wait = spawn_timed_wait(w.block("reserve-with-timeout 1").await);
    let (reply, took) = wait.await.unwrap();
    eprintln!(
        "late read: job due at 1000 ms hinted during the timer's read (back at 1200 ms), \
         reserve timing out at 1005 ms: {reply:?} after {took:?}"
    );
    assert_eq!(reply, reserved(1, "held"));
    assert_eq!(took, ms(1195), "answered once the tick applied the job");
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_reservation_is_not_its_holders_though_the_tick_is_late() {
    // The timer's first read of its next deadline answers at 2000 ms: the deadline of
    // a reservation made meanwhile (TTR 1 s, hinted) is looked at only then. A command
    // of the old holder after the deadline waits for it to be applied.
    for command in ["touch 1", "release 1 0 0", "bury 1 0"] {
        let e = lagging_engine(ms(0), ms(2000));
        let mut h = Client::connect(&e).await;
        let started = Instant::now();
        h.put_with(0, 0, 1, "lapses").await;
        assert_eq!(h.cmd("reserve-job 1").await, reserved(1, "lapses"));
        tokio::time::sleep_until(started + ms(1500)).await;
        let reply = h.cmd(command).await;
        eprintln!(
            "late tick: TTR 1 s, the timer's read answered at 2000 ms; {command:?} at \
             1500 ms: {reply} at {:?}",
            started.elapsed()
        );
        assert_eq!(reply, "NOT_FOUND", "{command}");
        assert_eq!(h.state(1).await, "ready");
        assert_eq!(h.stat("stats", "job-timeouts").await, "1");
    }
}
