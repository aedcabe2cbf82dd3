//! The history checker of the fault tests (support/history.rs) on hand-made histories:
//! each kind of violation is caught, and what an operation without a definite reply may
//! have done is never counted against the server. No process runs here.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::client::Reply;
use support::history::{Call, CheckConfig, FinalState, Op, Verdict, check};

/// Builds a history on a common time base (milliseconds from it).
struct H {
    t0: Instant,
    ops: Vec<Op>,
}

fn reply(line: &str) -> Option<Reply> {
    Some(Reply {
        line: line.into(),
        body: None,
    })
}

impl H {
    fn new() -> H {
        H {
            t0: Instant::now(),
            ops: Vec::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn op(&mut self, conn: u64, call: Call, from: u64, to: u64, reply: Option<Reply>) -> &mut H {
        let op = Op {
            conn,
            call,
            start: self.at(from),
            end: self.at(to),
            reply,
        };
        self.ops.push(op);
        self
    }

    fn put(&mut self, conn: u64, body: &str, ttr: u32, ms: u64, line: Option<&str>) -> &mut H {
        let call = Call::Put {
            body: body.as_bytes().to_vec(),
            ttr,
        };
        self.op(conn, call, ms, ms + 1, line.and_then(reply))
    }

    fn reserved(&mut self, conn: u64, id: u64, body: &str, from: u64, to: u64) -> &mut H {
        let r = Some(Reply {
            line: format!("RESERVED {id} {}", body.len()),
            body: Some(body.as_bytes().to_vec()),
        });
        self.op(conn, Call::Reserve, from, to, r)
    }

    fn check(&self, end: &[(u64, Option<&str>)]) -> Verdict {
        let end: FinalState = end
            .iter()
            .map(|(id, b)| (*id, b.map(|b| b.as_bytes().to_vec())))
            .collect();
        let v = check(&self.ops, &end, CheckConfig::default());
        println!("{}", v.summary());
        v
    }
}

#[test]
fn a_sound_history_passes() {
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .put(1, "b", 10, 10, Some("INSERTED 2"))
        .reserved(2, 1, "a", 20, 25)
        .op(2, Call::Delete(1), 30, 31, reply("DELETED"))
        .reserved(3, 2, "b", 40, 45)
        .op(3, Call::Release(2), 50, 51, reply("RELEASED"))
        .reserved(2, 2, "b", 60, 65)
        .op(2, Call::Bury(2), 70, 71, reply("BURIED"))
        .op(3, Call::Kick(2), 80, 81, reply("KICKED"));
    let v = h.check(&[(1, None), (2, Some("b"))]);
    v.assert_sound("a sound history");
    assert_eq!((v.puts_acked, v.reserves, v.deletes_acked), (2, 3, 1));
}

#[test]
fn an_acknowledged_put_gone_without_a_delete_is_lost() {
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 7"));
    let v = h.check(&[(7, None)]);
    assert_eq!(v.lost, vec![7]);
    // A delete answered NOT_FOUND did nothing: still lost.
    h.op(2, Call::Delete(7), 5, 6, reply("NOT_FOUND"));
    assert_eq!(h.check(&[(7, None)]).lost, vec![7]);
}

#[test]
fn a_delete_without_a_definite_reply_may_have_applied() {
    for answer in [None, reply("INTERNAL_ERROR")] {
        let mut h = H::new();
        h.put(1, "a", 10, 0, Some("INSERTED 7"))
            .reserved(2, 7, "a", 5, 6)
            .op(2, Call::Delete(7), 10, 20, answer);
        h.check(&[(7, None)]).assert_sound("an uncertain delete");
        h.check(&[(7, Some("a"))])
            .assert_sound("an uncertain delete that did not apply");
    }
}

#[test]
fn an_uncertain_put_may_exist_or_not() {
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INTERNAL_ERROR"))
        .put(1, "b", 10, 5, None)
        .reserved(2, 3, "a", 10, 11);
    let v = h.check(&[(3, Some("a"))]);
    v.assert_sound("uncertain puts");
    assert_eq!((v.puts_uncertain, v.puts_uncertain_seen), (2, 1));
}

#[test]
fn a_deleted_job_back_at_the_end_is_undone() {
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 5, 6)
        .op(2, Call::Delete(1), 10, 11, reply("DELETED"));
    let v = h.check(&[(1, Some("a"))]);
    assert_eq!(v.undone.len(), 1, "{:?}", v.undone);
    assert!(v.lost.is_empty());
}

#[test]
fn a_job_deleted_twice_or_touched_after_its_delete_is_undone() {
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 5, 6)
        .op(2, Call::Delete(1), 10, 11, reply("DELETED"))
        .op(3, Call::Delete(1), 20, 21, reply("DELETED"));
    assert_eq!(h.check(&[(1, None)]).undone.len(), 1);
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 5, 6)
        .op(2, Call::Delete(1), 10, 11, reply("DELETED"))
        .op(2, Call::Touch(1), 20, 21, reply("TOUCHED"));
    assert_eq!(h.check(&[(1, None)]).undone.len(), 1);
    // A touch sent before the DELETED came back is concurrent with it: not a finding.
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 5, 6)
        .op(2, Call::Delete(1), 10, 30, reply("DELETED"))
        .op(3, Call::Kick(1), 20, 21, reply("KICKED"));
    h.check(&[(1, None)])
        .assert_sound("a kick concurrent with the delete");
}

#[test]
fn a_reserve_of_a_deleted_job_is_caught() {
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 5, 6)
        .op(2, Call::Delete(1), 10, 11, reply("DELETED"))
        .reserved(3, 1, "a", 20, 21);
    let v = h.check(&[(1, None)]);
    assert_eq!(v.reserved_after_delete.len(), 1, "{v:?}");
    assert!(!v.is_sound());
}

#[test]
fn two_holders_within_the_ttr_are_caught() {
    // A holds job 1 (TTR 10 s) and still holds it at 200 ms (its delete succeeds then);
    // B was told RESERVED at 105 ms.
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 0, 5)
        .reserved(3, 1, "a", 100, 105)
        .op(2, Call::Delete(1), 200, 201, reply("DELETED"));
    let v = h.check(&[(1, None)]);
    assert_eq!(v.double_held.len(), 1, "{v:?}");
    // Both reserves in flight at once, both proven held afterwards (touched).
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 10, 50)
        .reserved(3, 1, "a", 20, 40)
        .op(2, Call::Touch(1), 100, 101, reply("TOUCHED"))
        .op(3, Call::Touch(1), 110, 111, reply("TOUCHED"));
    assert_eq!(h.check(&[(1, Some("a"))]).double_held.len(), 1);
}

#[test]
fn a_second_holder_after_the_first_ended_is_fine() {
    // A's TTR (1 s) ran out before B reserved; A's late delete is NOT_FOUND.
    let mut h = H::new();
    h.put(1, "a", 1, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 0, 5)
        .reserved(3, 1, "a", 1500, 1505)
        .op(2, Call::Delete(1), 1600, 1601, reply("NOT_FOUND"))
        .op(3, Call::Delete(1), 1610, 1611, reply("DELETED"));
    h.check(&[(1, None)]).assert_sound("a TTR ran out");
    // A released it before B reserved.
    let mut h = H::new();
    h.put(1, "a", 60, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 0, 5)
        .op(2, Call::Release(1), 10, 11, reply("RELEASED"))
        .reserved(3, 1, "a", 20, 25);
    h.check(&[(1, Some("a"))]).assert_sound("released first");
    // A's connection failed before B reserved: the server may have closed it (freeing
    // the job) right after the reserve, so nothing proves A still held it.
    let mut h = H::new();
    h.put(1, "a", 60, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 0, 5)
        .op(2, Call::Touch(1), 300, 310, None)
        .reserved(3, 1, "a", 100, 105);
    h.check(&[(1, Some("a"))])
        .assert_sound("the first holder's connection failed");
    // ...and after INTERNAL_ERROR alone nothing proves it either.
    let mut h = H::new();
    h.put(1, "a", 60, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 0, 5)
        .op(2, Call::Touch(1), 50, 60, reply("INTERNAL_ERROR"))
        .reserved(3, 1, "a", 100, 105);
    h.check(&[(1, Some("a"))])
        .assert_sound("the first holder's touch failed");
}

#[test]
fn a_touch_extends_the_hold_past_the_first_ttr() {
    // TTR 1 s; A touches at 800 ms and still holds the job at 1.5 s; B reserved at 1.3 s.
    let mut h = H::new();
    h.put(1, "a", 1, 0, Some("INSERTED 1"))
        .reserved(2, 1, "a", 0, 5)
        .op(2, Call::Touch(1), 800, 801, reply("TOUCHED"))
        .reserved(3, 1, "a", 1300, 1305)
        .op(2, Call::Delete(1), 1500, 1501, reply("DELETED"));
    assert_eq!(h.check(&[(1, None)]).double_held.len(), 1);
}

#[test]
fn bodies_that_no_put_explains_are_wrong() {
    // Reserved with another body than its put's.
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .reserved(2, 1, "x", 5, 6);
    assert!(!h.check(&[(1, Some("a"))]).wrong.is_empty());
    // A job nobody put.
    let mut h = H::new();
    h.reserved(2, 9, "ghost", 5, 6);
    assert!(!h.check(&[(9, None)]).wrong.is_empty());
    // A put refused with OUT_OF_MEMORY that made a job anyway.
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("OUT_OF_MEMORY"))
        .reserved(2, 4, "a", 5, 6);
    assert!(!h.check(&[(4, None)]).wrong.is_empty());
    // One id acknowledged to two puts.
    let mut h = H::new();
    h.put(1, "a", 10, 0, Some("INSERTED 1"))
        .put(2, "b", 10, 0, Some("INSERTED 1"));
    assert!(!h.check(&[(1, Some("a"))]).wrong.is_empty());
    // One body under two ids (a put applied twice).
    let mut h = H::new();
    h.put(1, "a", 10, 0, None)
        .reserved(2, 3, "a", 5, 6)
        .reserved(3, 4, "a", 7, 8);
    assert!(!h.check(&[(3, None), (4, None)]).wrong.is_empty());
}
