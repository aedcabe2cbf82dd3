//! Hand-over to waiting connections: a waiter has its job before the command that made
//! it ready is answered, waiters are served in registration order (earlier waiters get
//! the more urgent jobs), and each is answered exactly once when its timeout, a
//! hang-up or its connection's end races a delivery (the claim protocol, with a pass's
//! claim held open by the test).

use foldhash::HashSet;

use super::*;
use crate::protocol::TubeName;
use crate::store::Store;

/// The answer a blocked reserve already has, without waiting for one.
fn answered(w: &mut Waiting, e: &Engine) -> Option<String> {
    w.answer_now(e.clock.now(), false).map(|r| text(&r))
}

fn tubes(names: &[&str]) -> HashSet<TubeName> {
    names
        .iter()
        .map(|n| TubeName::new(n.as_bytes()).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_waiter_has_its_job_before_the_producer_reads_inserted() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    let mut waiting = w.block("reserve").await;
    assert_eq!(answered(&mut waiting, &e), None);
    assert_eq!(p.put_with(0, 0, 10, "job").await, "INSERTED 1");
    assert_eq!(answered(&mut waiting, &e), Some(reserved(1, "job")));
}

#[tokio::test(start_paused = true)]
async fn release_kick_and_kick_job_hand_over_before_their_reply() {
    let e = engine();
    let mut h = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    h.put("a").await;
    h.put("b").await;
    h.put("c").await;
    for id in 1..=3 {
        assert_eq!(
            h.cmd("reserve").await,
            reserved(id, ["a", "b", "c"][id as usize - 1])
        );
    }
    let mut waiting = w.block("reserve").await;
    assert_eq!(h.cmd("release 1 0 0").await, "RELEASED");
    assert_eq!(answered(&mut waiting, &e), Some(reserved(1, "a")));

    assert_eq!(h.cmd("bury 2 0").await, "BURIED");
    let mut waiting = w.block("reserve").await;
    assert_eq!(h.cmd("kick 1").await, "KICKED 1");
    assert_eq!(answered(&mut waiting, &e), Some(reserved(2, "b")));

    assert_eq!(h.cmd("bury 3 0").await, "BURIED");
    let mut waiting = w.block("reserve").await;
    assert_eq!(h.cmd("kick-job 3").await, "KICKED");
    assert_eq!(answered(&mut waiting, &e), Some(reserved(3, "c")));
}

#[tokio::test(start_paused = true)]
async fn a_closing_connection_hands_its_jobs_to_a_waiter_before_it_is_gone() {
    let e = engine();
    let mut h = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    h.put("held").await;
    assert_eq!(h.cmd("reserve").await, reserved(1, "held"));
    let mut waiting = w.block("reserve").await;
    h.close().await;
    assert_eq!(answered(&mut waiting, &e), Some(reserved(1, "held")));
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_registration_order() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    let mut ws = Vec::new();
    for _ in 0..3 {
        let mut c = Client::connect(&e).await;
        let waiting = c.block("reserve").await;
        ws.push((c, waiting));
    }
    for n in 1..=3u64 {
        p.put(&format!("job{n}")).await;
        for (i, (_, waiting)) in ws.iter_mut().enumerate() {
            let got = answered(waiting, &e);
            if i + 1 == n as usize {
                assert_eq!(got, Some(reserved(n, &format!("job{n}"))), "waiter {i}");
            } else if i + 1 > n as usize {
                assert_eq!(got, None, "waiter {i} served out of turn");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn one_job_goes_to_the_oldest_waiter_only() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    let (mut a, mut b) = (Client::connect(&e).await, Client::connect(&e).await);
    let mut wa = a.block("reserve").await;
    let mut wb = b.block("reserve").await;
    p.put("only").await;
    assert_eq!(answered(&mut wa, &e), Some(reserved(1, "only")));
    assert_eq!(answered(&mut wb, &e), None);
    assert_eq!(p.stat("stats", "current-waiting").await, "1");
}

/// `n` buried jobs with priorities `pris` (ids 1..), made by `c`.
async fn bury_all(c: &mut Client, pris: &[u32]) {
    for (i, pri) in pris.iter().enumerate() {
        c.put_with(*pri, 0, 60, &format!("p{pri}")).await;
        let id = i as u64 + 1;
        assert_eq!(
            c.cmd(&format!("reserve-job {id}")).await,
            reserved(id, &format!("p{pri}"))
        );
        assert_eq!(c.cmd(&format!("bury {id} {pri}")).await, "BURIED");
    }
}

#[tokio::test(start_paused = true)]
async fn one_kick_serves_several_waiters_in_order_the_earliest_the_most_urgent() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    bury_all(&mut p, &[3, 1, 2]).await;
    let mut ws = Vec::new();
    for _ in 0..4 {
        let mut c = Client::connect(&e).await;
        let waiting = c.block("reserve").await;
        ws.push((c, waiting));
    }
    assert_eq!(p.cmd("kick 10").await, "KICKED 3");
    let got: Vec<Option<String>> = ws.iter_mut().map(|(_, w)| answered(w, &e)).collect();
    assert_eq!(
        got,
        vec![
            Some(reserved(2, "p1")),
            Some(reserved(3, "p2")),
            Some(reserved(1, "p3")),
            None
        ]
    );
    assert_eq!(p.stat("stats", "current-waiting").await, "1");
}

#[tokio::test(start_paused = true)]
async fn a_wave_larger_than_a_batch_serves_every_waiter() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    let n = 150;
    bury_all(&mut p, &vec![5; n]).await;
    let mut ws = Vec::new();
    for _ in 0..n {
        let mut c = Client::connect(&e).await;
        let waiting = c.block("reserve").await;
        ws.push((c, waiting));
    }
    assert_eq!(p.cmd("kick 1000").await, format!("KICKED {n}"));
    for (i, (_, w)) in ws.iter_mut().enumerate() {
        assert_eq!(
            answered(w, &e),
            Some(reserved(i as u64 + 1, "p5")),
            "waiter {i}"
        );
    }
    assert_eq!(p.stat("stats", "current-waiting").await, "0");
    assert_eq!(p.stat("stats", "current-jobs-ready").await, "0");
}

#[tokio::test(start_paused = true)]
async fn waiters_on_other_tubes_do_not_take_a_job() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    let (mut a, mut b) = (Client::connect(&e).await, Client::connect(&e).await);
    a.cmd("watch a").await;
    a.cmd("ignore default").await;
    b.cmd("watch b").await;
    b.cmd("ignore default").await;
    let mut wa = a.block("reserve").await;
    let mut wb = b.block("reserve").await;
    p.cmd("use b").await;
    p.put("for b").await;
    assert_eq!(answered(&mut wa, &e), None);
    assert_eq!(answered(&mut wb, &e), Some(reserved(1, "for b")));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_on_two_tubes_is_served_from_the_second() {
    let e = engine();
    let mut p = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    w.cmd("watch second").await;
    let mut waiting = w.block("reserve").await;
    p.cmd("use second").await;
    p.put("x").await;
    assert_eq!(answered(&mut waiting, &e), Some(reserved(1, "x")));
}

#[tokio::test(start_paused = true)]
async fn a_hang_up_withdraws_the_waiter_with_timed_out() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    let mut waiting = w.block("reserve").await;
    assert_eq!(text(&waiting.hang_up().await), "TIMED_OUT");
    let id = p.put("a").await;
    assert_eq!(p.state(id).await, "ready");
    assert_eq!(p.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_withdraws_the_waiter() {
    // Dropped while a pass holds it: see `late.rs`, where a store that answers late
    // lets a waiter vanish while a real pass waits on the store for it.
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    drop(w.block("reserve").await);
    assert_eq!(p.stat("stats", "current-waiting").await, "0");
    let id = p.put("a").await;
    assert_eq!(p.state(id).await, "ready");
    w.close().await;
    assert_eq!(p.stat("stats", "current-workers").await, "0");
}

// Races with a pass: the test claims the waiter as a pass would (before its reserve
// reaches the store), lets the other event happen, then finishes the pass by hand.

/// Claim the next waiter on `default` as a pass does; its sequence number and conn.
fn claim(e: &Engine) -> (u64, crate::store::ConnId) {
    let c = e.waiters.claim_next(&tubes(&["default"]), 0).unwrap();
    (c.seq, c.conn)
}

/// Finish a pass's claim with the store's answer for `conn`.
async fn finish_pass(e: &Engine, seq: u64, conn: crate::store::ConnId) {
    let default = [TubeName::default_tube()];
    match e
        .store
        .reserve(conn, &default, e.clock.now())
        .await
        .unwrap()
    {
        Some(job) => e.waiters.deliver(seq, job).unwrap(),
        None => e.waiters.unclaim(seq),
    }
}

/// Put a job straight into the store (no serve pass), as another instance would.
async fn put_unseen(e: &Engine, body: &'static str) {
    let job = crate::store::NewJob {
        tube: TubeName::default_tube(),
        pri: 0,
        delay_ms: 0,
        ttr_ms: 60_000,
        body: bytes::Bytes::from_static(body.as_bytes()),
    };
    e.store.put(job, e.clock.now()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_a_pass_that_finds_a_job_answers_the_job() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let wait = spawn_wait(w.block("reserve-with-timeout 1").await);
    let (seq, conn) = claim(&e);
    advance(1000).await;
    assert!(!wait.is_finished(), "gave up while a pass held it");
    put_unseen(&e, "won").await;
    finish_pass(&e, seq, conn).await;
    assert_eq!(wait.await.unwrap(), reserved(1, "won"));
    assert_eq!(w.state(1).await, "reserved");
    assert_eq!(w.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_a_pass_that_finds_nothing_answers_timed_out_once() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let wait = spawn_wait(w.block("reserve-with-timeout 1").await);
    let (seq, conn) = claim(&e);
    advance(1000).await;
    assert!(!wait.is_finished());
    finish_pass(&e, seq, conn).await;
    settle().await;
    assert_eq!(wait.await.unwrap(), "TIMED_OUT");
    // Gone from the registry: a later job stays ready.
    let id = w.put("later").await;
    assert_eq!(w.state(id).await, "ready");
    assert_eq!(w.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_hang_up_during_a_pass_that_finds_a_job_answers_the_job() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut waiting = w.block("reserve").await;
    let (seq, conn) = claim(&e);
    let hang_up = tokio::spawn(async move { text(&waiting.hang_up().await) });
    settle().await;
    assert!(!hang_up.is_finished(), "answered while a pass held it");
    put_unseen(&e, "won").await;
    finish_pass(&e, seq, conn).await;
    assert_eq!(hang_up.await.unwrap(), reserved(1, "won"));
}

#[tokio::test(start_paused = true)]
async fn a_hang_up_during_a_pass_that_finds_nothing_answers_timed_out() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut waiting = w.block("reserve").await;
    let (seq, conn) = claim(&e);
    let hang_up = tokio::spawn(async move { text(&waiting.hang_up().await) });
    settle().await;
    finish_pass(&e, seq, conn).await;
    assert_eq!(hang_up.await.unwrap(), "TIMED_OUT");
    assert_eq!(w.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_pass_skips_a_waiter_another_pass_holds() {
    let e = engine();
    let (mut a, mut b) = (Client::connect(&e).await, Client::connect(&e).await);
    let mut p = Client::connect(&e).await;
    let mut wa = a.block("reserve").await;
    let mut wb = b.block("reserve").await;
    let (seq, conn) = claim(&e);
    p.put("to b").await;
    assert_eq!(answered(&mut wb, &e), Some(reserved(1, "to b")));
    finish_pass(&e, seq, conn).await;
    assert_eq!(answered(&mut wa, &e), None);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_and_a_due_job_at_the_same_instant_answer_the_job_once() {
    // The reference's tick moves due jobs before it times connections out: the job
    // due at the timeout's instant goes to the waiter.
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    p.put_with(0, 1, 60, "due").await;
    let wait = spawn_timed_wait(w.block("reserve-with-timeout 1").await);
    let (reply, took) = wait.await.unwrap();
    assert_eq!(took, ms(1000));
    settle().await;
    assert_eq!(reply, reserved(1, "due"));
    assert_eq!(p.state(1).await, "reserved");
    assert_eq!(p.stat("stats", "current-waiting").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_new_reserve_does_not_take_a_job_an_older_waiter_is_owed() {
    // The moment between a put reaching the store and its pass (the put's reply waits
    // for the pass; other connections run meanwhile), staged with a put the engine has
    // not been told of yet.
    let e = engine();
    let (mut old, mut new) = (Client::connect(&e).await, Client::connect(&e).await);
    let mut first = old.block("reserve").await;
    put_unseen(&e, "owed").await;
    assert_eq!(new.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(answered(&mut first, &e), Some(reserved(1, "owed")));
    // With nobody ahead, a blocking reserve registers and the next pass serves it.
    let mut second = new.block("reserve").await;
    put_unseen(&e, "next").await;
    new.engine.serve([TubeName::default_tube()]).await;
    assert_eq!(answered(&mut second, &e), Some(reserved(2, "next")));
}
