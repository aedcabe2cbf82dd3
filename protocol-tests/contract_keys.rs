//! The store contract's checks of keyed jobs (docs/EXTENSIONS.md, *Keys*), run like
//! every other check on the memory, durable and Redis stores (see `store_contract.rs`):
//! - `keys_dedupe_and_replace`: a dedupe answers the key's job whatever its state and
//!   changes nothing (no job made, no id consumed); a replace changes a waiting job in
//!   place (same id, new body, priority and delay) and conflicts with a reserved or
//!   buried one; keys are per tube;
//! - `keys_commands`: find, delete (not another connection's reservation, no
//!   `cmd-delete`), kick, bury (a waiting job or the caller's own; conflicts
//!   otherwise), retime (waiting jobs only);
//! - `keys_windows`: a delete opens the window its put asked for (the key answers
//!   `DELETED`, a dedupe answers the deleted id, a replace conflicts) and a delete
//!   without one frees the key; a flush frees it at once whatever the window;
//! - `keys_move`: a job the operator API moves to another tube leaves its key behind,
//!   freed (its delete then opens no window);
//! - `keys_in_entries`: a keyed job's entry (`job_entry`, `list_jobs`: what the
//!   operator API shows) carries its key, an unkeyed job's none.

use redstalk::protocol::ext::{FlushStates, Key, KeyMode, Millis, PutKey};
use redstalk::store::keys::KeyState;
use redstalk::store::{KeyOp, KeyOutcome, KeyedPut};

use super::*;

fn key(k: &str) -> Key {
    Key::new(k.as_bytes()).expect("a key")
}

fn pk(k: &str, mode: KeyMode, window_ms: u64) -> PutKey {
    PutKey {
        key: key(k),
        mode,
        window: Millis::new(window_ms).expect("a window"),
    }
}

async fn kput(s: &AnyStore, tube: &str, pri: u32, delay: u32, body: &str, pk: PutKey) -> KeyedPut {
    let job = new_job(tube, pri, delay, LONG, body);
    s.put_keyed(job, &pk, now(s)).await.expect("put_keyed")
}

async fn by_key(s: &AnyStore, conn: ConnId, tube: &str, k: &str, op: KeyOp) -> KeyOutcome {
    s.by_key(conn, &t(tube), &key(k), op, now(s))
        .await
        .expect("by_key")
}

fn inserted(p: KeyedPut) -> JobId {
    match p {
        KeyedPut::Inserted(id) => id,
        other => panic!("expected a new job, got {other:?}"),
    }
}

async fn body(s: &AnyStore, id: JobId) -> String {
    let (_, b) = s.peek(id).await.expect("peek").expect("the job");
    String::from_utf8_lossy(&b).into_owned()
}

pub(super) async fn keys_dedupe_and_replace(s: &AnyStore) {
    use KeyMode::{Dedupe, Replace};
    let a = inserted(kput(s, "k", 5, 0, "first", pk("order", Dedupe, 0)).await);
    let dup = kput(s, "k", 1, LONG, "second", pk("order", Dedupe, 0)).await;
    assert_eq!(dup, KeyedPut::Existing(a, KeyState::Ready));
    assert_eq!(body(s, a).await, "first", "a dedupe changes nothing");
    assert_eq!(job(s, a).await.pri, 5);
    assert_eq!(totals(s).await.total_jobs, 1, "a dedupe makes no job");
    let other = inserted(kput(s, "other", 0, 0, "o", pk("order", Dedupe, 0)).await);
    assert_eq!(
        other,
        a + 1,
        "the same key in another tube is another job; no id consumed"
    );
    // Replace: in place, the state after it.
    let r = kput(s, "k", 7, LONG, "third", pk("order", Replace, 0)).await;
    assert_eq!(r, KeyedPut::Replaced(a, KeyState::Delayed));
    let info = job(s, a).await;
    assert_eq!(
        (info.pri, info.state, info.reserves),
        (7, JobState::Delayed, 0)
    );
    assert_eq!(body(s, a).await, "third");
    let r = kput(s, "k", 7, 0, "fourth", pk("order", Replace, 0)).await;
    assert_eq!(r, KeyedPut::Replaced(a, KeyState::Ready));
    assert_eq!(totals(s).await.total_jobs, 2, "a replace makes no job");
    // Reserved, then buried: a replace conflicts, a dedupe answers the state.
    assert_eq!(reserve(s, C1, &["k"]).await.map(|r| r.id), Some(a));
    let r = kput(s, "k", 0, 0, "x", pk("order", Replace, 0)).await;
    assert_eq!(r, KeyedPut::Conflict(a, KeyState::Reserved));
    assert!(bury(s, C1, a, 0).await);
    let r = kput(s, "k", 0, 0, "x", pk("order", Replace, 0)).await;
    assert_eq!(r, KeyedPut::Conflict(a, KeyState::Buried));
    let r = kput(s, "k", 0, 0, "x", pk("order", Dedupe, 0)).await;
    assert_eq!(r, KeyedPut::Existing(a, KeyState::Buried));
    assert_eq!(body(s, a).await, "fourth");
}

pub(super) async fn keys_commands(s: &AnyStore) {
    use KeyMode::Dedupe;
    let find = async |k| by_key(s, C1, "k", k, KeyOp::Find).await;
    assert_eq!(find("none").await, KeyOutcome::NotFound);
    // Keeps the tube (and its figures) when the keyed job goes.
    put(s, "k", 0, LONG, LONG, "unkeyed").await;
    let a = inserted(kput(s, "k", 0, LONG, "a", pk("a", Dedupe, 0)).await);
    assert_eq!(find("a").await, KeyOutcome::Found(a, KeyState::Delayed));
    assert_eq!(
        by_key(s, C1, "k", "a", KeyOp::Kick).await,
        KeyOutcome::Done(a)
    );
    assert_eq!(state(s, a).await, JobState::Ready);
    assert_eq!(job(s, a).await.kicks, 1);
    assert_eq!(
        by_key(s, C1, "k", "a", KeyOp::Kick).await,
        KeyOutcome::NotFound
    );
    // Retime a waiting job; a reserved one conflicts.
    let later = KeyOp::Retime { delay_ms: ms(LONG) };
    assert_eq!(by_key(s, C1, "k", "a", later).await, KeyOutcome::Done(a));
    assert_eq!(state(s, a).await, JobState::Delayed);
    let soon = KeyOp::Retime { delay_ms: 0 };
    assert_eq!(by_key(s, C1, "k", "a", soon).await, KeyOutcome::Done(a));
    assert_eq!(reserve(s, C2, &["k"]).await.map(|r| r.id), Some(a));
    let conflict = KeyOutcome::Conflict(a, KeyState::Reserved);
    assert_eq!(by_key(s, C1, "k", "a", soon).await, conflict);
    // Bury and delete: another connection's reservation is not the caller's.
    let bury_op = KeyOp::Bury { pri: 9 };
    assert_eq!(by_key(s, C1, "k", "a", bury_op).await, conflict);
    assert_eq!(
        by_key(s, C1, "k", "a", KeyOp::Delete).await,
        KeyOutcome::NotFound
    );
    assert_eq!(by_key(s, C2, "k", "a", bury_op).await, KeyOutcome::Done(a));
    let info = job(s, a).await;
    assert_eq!(
        (info.state, info.pri, info.buries),
        (JobState::Buried, 9, 1)
    );
    let buried = KeyOutcome::Conflict(a, KeyState::Buried);
    assert_eq!(by_key(s, C2, "k", "a", bury_op).await, buried);
    assert_eq!(
        by_key(s, C1, "k", "a", KeyOp::Delete).await,
        KeyOutcome::Done(a)
    );
    assert_eq!(find("a").await, KeyOutcome::NotFound, "no window asked for");
    let figures = tube_info(s, "k").await.expect("the tube");
    assert_eq!(figures.cmd_delete, 0, "delete-key is no `delete` command");
}

pub(super) async fn keys_windows(s: &AnyStore) {
    use KeyMode::{Dedupe, Replace};
    let a = inserted(kput(s, "w", 0, 0, "a", pk("ran", Dedupe, ms(LONG))).await);
    assert!(delete(s, C1, a).await);
    let deleted = KeyOutcome::Found(a, KeyState::Deleted);
    assert_eq!(by_key(s, C1, "w", "ran", KeyOp::Find).await, deleted);
    let again = kput(s, "w", 0, 0, "b", pk("ran", Dedupe, 0)).await;
    assert_eq!(again, KeyedPut::Existing(a, KeyState::Deleted));
    let again = kput(s, "w", 0, 0, "b", pk("ran", Replace, 0)).await;
    assert_eq!(again, KeyedPut::Conflict(a, KeyState::Deleted));
    assert_eq!(
        by_key(s, C1, "w", "ran", KeyOp::Delete).await,
        KeyOutcome::NotFound
    );
    assert_eq!(totals(s).await.total_jobs, 1);
    // A window keeps its key while its tube is gone, and a put re-creates the tube.
    assert!(
        !list(s).await.contains(&"w".to_string()),
        "the tube is destroyed"
    );
    let again = kput(s, "w", 0, 0, "c", pk("ran", Dedupe, 0)).await;
    assert_eq!(again, KeyedPut::Existing(a, KeyState::Deleted));
    // A flush frees its jobs' keys at once, whatever their windows.
    let b = inserted(kput(s, "w", 0, 0, "b", pk("waiting", Dedupe, ms(LONG))).await);
    let step = s
        .flush_step(&t("w"), FlushStates::ALL, None, 1_000, now(s))
        .await
        .expect("flush_step");
    assert_eq!(step.deleted, 1, "the flush deleted the keyed job");
    assert_eq!(
        by_key(s, C1, "w", "waiting", KeyOp::Find).await,
        KeyOutcome::NotFound
    );
    let c = inserted(kput(s, "w", 0, 0, "c", pk("waiting", Dedupe, 0)).await);
    assert!(c > b);
    let figures = tube_info(s, "w").await.expect("the tube");
    assert_eq!(figures.cmd_delete, 0, "a flush is no `delete` command");
}

pub(super) async fn keys_move(s: &AnyStore) {
    use redstalk::store::Edit;
    let a = inserted(kput(s, "m", 0, 0, "a", pk("moved", KeyMode::Dedupe, ms(LONG))).await);
    s.edit(a, &Edit::Move(t("elsewhere")), now(s))
        .await
        .expect("edit");
    // The moved job left its key behind, freed: no window, no job by it anywhere.
    for tube in ["m", "elsewhere"] {
        let found = by_key(s, C1, tube, "moved", KeyOp::Find).await;
        assert_eq!(found, KeyOutcome::NotFound, "{tube}");
    }
    assert!(delete(s, C1, a).await);
    let b = inserted(kput(s, "m", 0, 0, "b", pk("moved", KeyMode::Dedupe, 0)).await);
    assert!(b > a);
}

pub(super) async fn keys_in_entries(s: &AnyStore) {
    use redstalk::store::{JobState, ListQuery};
    let a = inserted(kput(s, "e", 0, 0, "a", pk("shown", KeyMode::Dedupe, 0)).await);
    let plain = put(s, "e", 0, 0, LONG, "b").await;
    let entry = s.job_entry(a, now(s)).await.expect("job_entry").expect("a");
    assert_eq!(entry.job_key, Some(key("shown")));
    let entry = s
        .job_entry(plain, now(s))
        .await
        .expect("job_entry")
        .expect("b");
    assert_eq!(entry.job_key, None, "an unkeyed job has no key");
    let q = ListQuery {
        tube: t("e"),
        state: JobState::Ready,
        after: None,
        limit: 10,
        scan: 10,
        contains: None,
    };
    let page = s.list_jobs(&q, now(s)).await.expect("list_jobs");
    let keys: Vec<_> = page.jobs.iter().map(|e| e.job_key.clone()).collect();
    assert_eq!(keys, [Some(key("shown")), None]);
}
