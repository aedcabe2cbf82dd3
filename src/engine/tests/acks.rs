//! Which change each reply is acknowledged after, as the engine decides it with the
//! reply: on a journaled memory store, which numbers its changes as a persisted store
//! does (and has nothing to wait for, so the test sees the decision alone).

use super::*;
use crate::engine::Ack;
use crate::store::{Change, Store};

/// The store's last change now.
fn last(e: &Engine) -> Change {
    e.store.last_change()
}

#[tokio::test(start_paused = true)]
async fn a_sessions_own_commands_and_rejected_requests_are_acknowledged_at_once() {
    let e = journaled_engine();
    let mut c = Client::connect(&e).await;
    for request in [
        "use other",
        "watch more",
        "ignore more",
        "list-tube-used",
        "list-tubes-watched",
        "no-such-command",
        "put 0 0 10 x",
    ] {
        let answer = c.answer(request).await;
        assert_eq!(answer.ack, Ack::Now, "{request:?}: {}", text(&answer));
    }
    assert!(last(&e) > Change::NONE, "the store numbered its changes");
}

#[tokio::test(start_paused = true)]
async fn a_reply_that_read_or_changed_the_store_waits_for_its_last_change() {
    let e = journaled_engine();
    let mut c = Client::connect(&e).await;
    let put = c.answer("put 0 0 60 3\r\nabc").await;
    assert_eq!(put.ack, Ack::After(last(&e)), "{}", text(&put));
    for request in [
        "peek-ready",
        "stats-job 1",
        "stats",
        "list-tubes",
        "delete 9",
        "reserve-with-timeout 0",
    ] {
        let before = last(&e);
        let answer = c.answer(request).await;
        eprintln!("{request}: {:?} (store at {before:?})", answer.ack);
        if request == "reserve-with-timeout 0" {
            // A job was there: the reservation is acknowledged as a RESERVED.
            assert_eq!(text(&answer), reserved(1, "abc"));
            continue;
        }
        assert_eq!(answer.ack, Ack::After(last(&e)), "{request}");
    }
    let timed_out = c.answer("reserve-with-timeout 0").await;
    assert_eq!(text(&timed_out), "TIMED_OUT");
    assert_eq!(timed_out.ack, Ack::After(last(&e)));
}

#[tokio::test(start_paused = true)]
async fn a_reserved_waits_for_the_changes_before_its_reservation_only() {
    let e = journaled_engine();
    let mut p = Client::connect(&e).await;
    let mut w = Client::connect(&e).await;
    p.put("first").await;
    p.put("second").await;
    // Handed over at once by the store.
    let before = last(&e);
    let got = w.answer("reserve").await;
    assert_eq!(text(&got), reserved(1, "first"));
    assert_eq!(got.ack, Ack::After(before));
    assert!(last(&e) > before, "the reservation is a change of its own");
    // reserve-job.
    let before = last(&e);
    let got = w.answer("reserve-job 2").await;
    assert_eq!(text(&got), reserved(2, "second"));
    assert_eq!(got.ack, Ack::After(before));
    // Handed to a waiter by a serve pass.
    let mut waiting = w.block("reserve").await;
    let mut put = p.run("put 0 0 60 5\r\nthird").await;
    let before_pass = match &mut put {
        Outcome::Reply(a) => a.ack,
        _ => panic!("put blocked"),
    };
    let got = waiting
        .answer_now(e.clock.now(), false)
        .expect("handed over before INSERTED");
    assert_eq!(text(&got), reserved(3, "third"));
    let Ack::After(pass_saw) = got.ack else {
        panic!("a waiter's RESERVED acknowledged at once")
    };
    let Ack::After(put_saw) = before_pass else {
        panic!("INSERTED acknowledged at once")
    };
    eprintln!("waiter's RESERVED after {pass_saw:?}, INSERTED after {put_saw:?}");
    assert!(
        pass_saw < put_saw,
        "the RESERVED waits for the put, not its own reservation"
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_persists_nothing_in_batches_acknowledges_everything_at_once() {
    let e = engine();
    let mut c = Client::connect(&e).await;
    for request in ["put 0 0 60 1\r\nx", "reserve", "stats", "delete 1", "use t"] {
        let answer = c.answer(request).await;
        assert_eq!(answer.ack, Ack::Now, "{request}: {}", text(&answer));
    }
}
