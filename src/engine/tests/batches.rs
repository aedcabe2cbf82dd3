//! Batches and flush through the engine, on tokio's paused clock: a waiting
//! `reserve-batch` is a waiter like `reserve-with-timeout` (counted in current-waiting,
//! timed to the millisecond) that, once handed its first job, takes what else is ready
//! at that moment; a list command answers its missing ids; a flush deletes across
//! steps and only the jobs that existed when it began.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_waiting_reserve_batch_takes_what_is_ready_when_its_job_comes() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let mut p = Client::connect(&e).await;
    // Three jobs in a paused tube: the waiter is handed one when the pause ends, and
    // takes the two others, ready at that moment, with it.
    assert_eq!(p.cmd("pause-tube default 1").await, "PAUSED");
    for body in ["a", "b", "c"] {
        p.put(body).await;
    }
    let wait = spawn_timed_wait(w.block("reserve-batch 5 10").await);
    settle().await;
    assert_eq!(p.stat("stats-tube default", "current-waiting").await, "1");
    let batch = format!(
        "RESERVED_BATCH 3\r\n{}\r\n{}\r\n{}",
        reserved(1, "a"),
        reserved(2, "b"),
        reserved(3, "c")
    );
    assert_eq!(wait.await.unwrap(), (batch, ms(1000)));
    assert_eq!(p.state(3).await, "reserved");
    assert_eq!(p.stat("stats-job 3", "reserves").await, "1");
    assert_eq!(p.stat("stats-tube default", "current-waiting").await, "0");
    // A put while it waits: the job, alone.
    let wait = spawn_wait(w.block("reserve-batch 5 10").await);
    settle().await;
    p.put("d").await;
    assert_eq!(
        wait.await.unwrap(),
        format!("RESERVED_BATCH 1\r\n{}", reserved(4, "d"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_reserve_batch_times_out_with_an_empty_batch_to_the_millisecond() {
    let e = engine();
    let mut w = Client::connect(&e).await;
    let wait = spawn_timed_wait(w.block("reserve-batch 5 300ms").await);
    assert_eq!(
        wait.await.unwrap(),
        ("RESERVED_BATCH 0".to_string(), ms(300))
    );
    assert_eq!(w.cmd("reserve-batch 5").await, "RESERVED_BATCH 0");
}

#[tokio::test(start_paused = true)]
async fn list_commands_answer_the_ids_they_missed() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    for body in ["a", "b", "c"] {
        c.put(body).await;
    }
    let reply = c.cmd("reserve-batch 2").await;
    assert!(reply.starts_with("RESERVED_BATCH 2\r\n"), "{reply}");
    assert_eq!(c.cmd("touch-batch 1 3 2").await, "TOUCHED_BATCH 2 1 3");
    assert_eq!(c.cmd("release-batch 5 0 2 2").await, "RELEASED_BATCH 1 1 2");
    assert_eq!(c.state(2).await, "ready");
    assert_eq!(c.cmd("delete-batch 1 2 3 9").await, "DELETED_BATCH 3 1 9");
    assert_eq!(c.stat("stats-tube default", "cmd-delete").await, "0");
}

#[tokio::test(start_paused = true)]
async fn a_flush_spans_steps_and_leaves_what_came_after() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    let n = crate::engine::FLUSH_STEP * 2 + 10;
    for _ in 0..n {
        c.put("x").await;
    }
    assert_eq!(c.cmd("flush-tube default").await, format!("FLUSHED {n}"));
    assert_eq!(
        c.stat("stats-tube default", "current-jobs-ready").await,
        "0"
    );
    assert_eq!(c.cmd("flush-tube nothing").await, "FLUSHED 0");
    assert_eq!(c.cmd("stats-tube nothing").await, "NOT_FOUND");
    // A put that runs between two steps is not taken.
    for _ in 0..crate::engine::FLUSH_STEP + 5 {
        c.put("early").await;
    }
    let tube = crate::protocol::TubeName::new(b"default").unwrap();
    let flush = {
        let e = e.clone();
        tokio::spawn(async move { e.flush(&tube, crate::protocol::ext::FlushStates::ALL).await })
    };
    tokio::task::yield_now().await;
    assert!(
        !flush.is_finished(),
        "the flush yields after its first step"
    );
    let late = c.put("late").await;
    assert_eq!(
        flush.await.unwrap().unwrap(),
        crate::engine::FLUSH_STEP as u64 + 5
    );
    assert_eq!(c.state(late).await, "ready");
}
