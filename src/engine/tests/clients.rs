//! The clients listing against what the protocol did: used and watched tubes, the
//! producer/worker flags, held jobs with their time left (from the store's holders),
//! a blocked reserve with its timeout, the last command, paging; a closed connection
//! is gone. And `still_held`, over more ids than one group of lookups.

use super::*;

#[tokio::test(start_paused = true)]
async fn the_listing_shows_what_each_connection_did() {
    let e = engine();
    let mut a = Client::connect(&e).await;
    let mut b = Client::connect(&e).await;
    assert_eq!(a.cmd("use jobs").await, "USING jobs");
    assert_eq!(a.cmd("watch jobs").await, "WATCHING 2");
    assert_eq!(a.cmd("watch other").await, "WATCHING 3");
    assert_eq!(a.cmd("ignore default").await, "WATCHING 2");
    let id = a.put_with(0, 0, 30, "x").await;
    let id = id_of(&id, "INSERTED");
    assert_eq!(a.cmd("reserve").await, reserved(id, "x"));
    advance(5_000).await;
    assert_eq!(b.cmd("watch waits").await, "WATCHING 2");
    let waiting = b.block("reserve-with-timeout 20").await;
    advance(3_000).await;

    let page = e.admin_clients(0, 100).await.unwrap();
    assert_eq!(page.total, 2);
    assert!(page.held_complete);
    let (ca, cb) = (&page.clients[0], &page.clients[1]);
    println!("listing: {ca:?}\n{cb:?}");
    assert_eq!(ca.using.as_str(), "jobs");
    let names =
        |v: &[crate::protocol::TubeName]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    // In the session's order, as `list-tubes-watched` gives it.
    assert_eq!(names(&ca.watching), ["other", "jobs"]);
    assert_eq!(
        a.cmd("list-tubes-watched").await,
        "OK 19\r\n---\n- other\n- jobs\n"
    );
    assert_eq!(ca.watching_count, 2);
    assert!(ca.producer && ca.worker);
    assert_eq!(ca.held_count, 1);
    assert_eq!(ca.held[0].id, id);
    let left = ca.held[0].deadline.unwrap() - page.now;
    assert_eq!(left, 22 * 1_000_000_000, "30 s TTR, 8 s gone");
    assert!(ca.blocked.is_none());
    assert_eq!(ca.last_command.map(|l| l.0), Some("reserve"));

    assert_eq!(cb.using.as_str(), "default");
    assert!(!cb.producer && cb.worker);
    assert_eq!(cb.held_count, 0);
    let blocked = cb.blocked.as_ref().expect("b is blocked in reserve");
    assert_eq!(page.now - blocked.since, 3 * 1_000_000_000);
    assert_eq!(blocked.until.unwrap() - page.now, 17 * 1_000_000_000);
    assert_eq!(names(&blocked.watched), ["default", "waits"]);
    let (cmd, at) = cb.last_command.unwrap();
    // Kept to the millisecond.
    assert_eq!(
        (cmd, at),
        (
            "reserve-with-timeout",
            blocked.since / 1_000_000 * 1_000_000
        )
    );

    // Paging by id.
    let first = e.admin_clients(0, 1).await.unwrap();
    assert_eq!(first.clients.len(), 1);
    let after = first.next.expect("a second page");
    let second = e.admin_clients(after, 1).await.unwrap();
    assert_eq!(second.clients[0].id, cb.id);
    assert_eq!(second.next, None);
    assert!(e.admin_clients(0, 0).await.is_err());

    drop(waiting);
    a.close().await;
    b.close().await;
    let page = e.admin_clients(0, 100).await.unwrap();
    assert_eq!((page.total, page.clients.len()), (0, 0));
}

/// `still_held` across more than one group of lookups: the ids a connection holds,
/// none of another's, not a released one, not one that does not exist.
#[tokio::test(start_paused = true)]
async fn still_held_finds_a_connections_jobs_across_lookup_groups() {
    let e = engine();
    let mut a = Client::connect(&e).await;
    let b = Client::connect(&e).await;
    let n = 2 * crate::engine::clients_list::HELD_CHECK_GROUP + 10;
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(id_of(&a.put_with(0, 0, 60, "x").await, "INSERTED"));
    }
    for &id in &ids[..n - 5] {
        assert_eq!(a.cmd("reserve").await, reserved(id, "x"));
    }
    let let_go = ids[3];
    assert_eq!(a.cmd(&format!("release {let_go} 0 0")).await, "RELEASED");
    ids.push(1_000_000);
    let a_id = a.session.as_ref().unwrap().id;
    let b_id = b.session.as_ref().unwrap().id;
    let held = e
        .still_held(a_id, &ids)
        .await
        .expect("the memory store tells");
    let want: std::collections::HashSet<u64> = ids[..n - 5]
        .iter()
        .copied()
        .filter(|&id| id != let_go)
        .collect();
    assert_eq!(held, want);
    assert_eq!(e.still_held(b_id, &ids).await, Some(Default::default()));
}
