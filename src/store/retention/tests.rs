use super::*;

fn on(max_jobs: usize, max_bytes: usize) -> RetentionLimits {
    RetentionLimits {
        keep_ms: 60_000,
        max_jobs,
        max_bytes,
        bodies: true,
    }
}

fn record(id: JobId, deleted_ms: u64, key: Option<&str>) -> Retained {
    let mut history = History::default();
    history.push(Event {
        at_ms: deleted_ms - 10,
        kind: EventKind::Put,
        conn: 1,
    });
    history.push(Event {
        at_ms: deleted_ms,
        kind: EventKind::Delete,
        conn: 2,
    });
    Retained {
        id,
        tube: TubeName::new(b"t").unwrap(),
        key: key.map(|k| Key::new(k.as_bytes()).unwrap()),
        deleted_ms,
        figures: RetainedFigures::default(),
        history,
        body_len: 3,
        body: Some(Bytes::from_static(b"abc")),
    }
}

#[test]
fn a_history_keeps_its_first_and_latest_events() {
    let mut h = History::default();
    for n in 0..100u64 {
        h.push(Event {
            at_ms: n,
            kind: EventKind::Release,
            conn: n,
        });
    }
    let kept: Vec<u64> = h.events().map(|e| e.at_ms).collect();
    assert_eq!(kept.len(), HISTORY_HEAD + HISTORY_TAIL);
    assert_eq!(&kept[..HISTORY_HEAD], &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(kept[HISTORY_HEAD], 76);
    assert_eq!(kept.last(), Some(&99));
    assert_eq!(h.dropped(), 100 - 32);
}

#[test]
fn the_set_is_bounded_by_count_bytes_and_age_oldest_first() {
    let mut set = RetainedSet::new(on(3, usize::MAX));
    for id in 1..=3 {
        assert!(set.keep(record(id, 1000 + id, None)).is_empty());
    }
    assert_eq!(set.keep(record(4, 1004, None)), [1]);
    assert_eq!(set.len(), 3);
    let one = record(9, 100, None).bytes();
    let mut small = RetainedSet::new(on(100, one * 2));
    small.keep(record(1, 10, None));
    small.keep(record(2, 20, None));
    assert_eq!(small.keep(record(3, 30, None)), [1], "the bytes bound");
    assert_eq!(small.bytes(), one * 2);
    assert_eq!(
        set.expire(1003 + 60_000, 10),
        [2],
        "deleted before the horizon"
    );
    assert!(set.get(2).is_none() && set.get(3).is_some());
}

#[test]
fn the_key_index_names_the_newest_and_survives_older_evictions() {
    let mut set = RetainedSet::new(on(10, usize::MAX));
    set.keep(record(1, 100, Some("order-1")));
    set.keep(record(2, 200, Some("order-1")));
    let tube = TubeName::new(b"t").unwrap();
    let key = Key::new(b"order-1").unwrap();
    assert_eq!(set.by_key(&tube, &key).map(|r| r.id), Some(2));
    set.expire(150 + 60_000, 10);
    assert_eq!(
        set.by_key(&tube, &key).map(|r| r.id),
        Some(2),
        "1's eviction"
    );
    set.expire(250 + 60_000, 10);
    assert!(set.by_key(&tube, &key).is_none());
}

#[test]
fn pages_go_newest_first_and_bodies_are_opt_in() {
    let mut set = RetainedSet::new(RetentionLimits {
        bodies: false,
        ..on(10, usize::MAX)
    });
    for id in 1..=5 {
        set.keep(record(id, id * 10, None));
    }
    let first: Vec<JobId> = set.page(None, 2, None).iter().map(|r| r.id).collect();
    assert_eq!(first, [5, 4]);
    let next: Vec<JobId> = set
        .page(Some((40, 4)), 2, None)
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(next, [3, 2]);
    assert!(set.get(1).unwrap().body.is_none());
    assert_eq!(set.get(1).unwrap().body_len, 3);
    let off = set.set_limits(RetentionLimits::OFF);
    assert_eq!(off.len(), 5);
    assert!(set.is_empty());
    assert!(
        set.keep(record(6, 60, None)).is_empty() && set.is_empty(),
        "off keeps nothing"
    );
}

#[test]
fn a_history_reads_back_its_text_form() {
    let mut h = History::default();
    for (n, kind) in [
        EventKind::Put,
        EventKind::Reserve,
        EventKind::Release,
        EventKind::DeadLetter,
        EventKind::Kick,
        EventKind::Timeout,
        EventKind::HolderClosed,
        EventKind::Edit,
        EventKind::Bury,
        EventKind::Flush,
        EventKind::Delete,
    ]
    .into_iter()
    .cycle()
    .take(50)
    .enumerate()
    {
        h.push(Event {
            at_ms: 1_733_400_000_000 + n as u64,
            kind,
            conn: n as u64 * 7,
        });
    }
    let text = h.encode();
    assert!(
        text.starts_with("18 1733400000000p0 1733400000001r7 "),
        "{text}"
    );
    assert_eq!(History::decode(text.as_bytes()).unwrap(), h);
    assert_eq!(History::decode(b"").unwrap(), History::default());
    for bad in [&b"x"[..], b"0 12", b"0 12q3", b"0 12r", b"0 r3"] {
        assert!(History::decode(bad).is_err(), "{bad:?}");
    }
}
