use super::*;

fn every(ms: u64) -> ScheduleDoc {
    ScheduleDoc {
        tube: "jobs".into(),
        body: Some("hello".into()),
        every_ms: Some(ms),
        pri: DEFAULT_PRI,
        ttr_ms: DEFAULT_TTR_MS,
        ..ScheduleDoc::default()
    }
}

#[test]
fn a_doc_round_trips_through_a_schedule() {
    let mut doc = every(5000);
    doc.key = Some("k1".into());
    doc.changed_ms = 42;
    let s = Schedule::from_doc("nightly.report", &doc).unwrap();
    assert_eq!(s.doc(), doc);
    let binary = ScheduleDoc {
        body: None,
        body_base64: Some("/wA=".into()),
        ..doc.clone()
    };
    let s = Schedule::from_doc("b", &binary).unwrap();
    assert_eq!(&s.body[..], &[0xff, 0]);
    assert_eq!(s.doc(), binary);
}

#[test]
fn refusals_say_why() {
    assert!(matches!(
        Schedule::from_doc("a b", &every(1000)),
        Err(ScheduleError::Name(_))
    ));
    let no_spec = ScheduleDoc {
        every_ms: None,
        ..every(1000)
    };
    assert_eq!(
        Schedule::from_doc("a", &no_spec).err(),
        Some(ScheduleError::NoSpec)
    );
    let both = ScheduleDoc {
        cron: Some("* * * * *".into()),
        ..every(1000)
    };
    assert_eq!(
        Schedule::from_doc("a", &both).err(),
        Some(ScheduleError::NoSpec)
    );
    let tz = ScheduleDoc {
        tz: Some("UTC".into()),
        ..every(1000)
    };
    assert_eq!(
        Schedule::from_doc("a", &tz).err(),
        Some(ScheduleError::TzWithoutCron)
    );
    let tube = ScheduleDoc {
        tube: "-bad".into(),
        ..every(1000)
    };
    assert!(matches!(
        Schedule::from_doc("a", &tube),
        Err(ScheduleError::Tube(_))
    ));
    let big = ScheduleDoc {
        body: Some("x".repeat(LARGE_BODY)),
        ..every(1000)
    };
    assert!(matches!(
        Schedule::from_doc("a", &big),
        Err(ScheduleError::BodyTooBig(_))
    ));
}

#[test]
fn a_replacement_keeps_changed_ms_unless_the_timing_changed() {
    let mut doc = every(1000);
    doc.changed_ms = 100;
    let set = Schedules::default().with("s", &doc).unwrap();
    let mut body_only = doc.clone();
    body_only.body = Some("other".into());
    body_only.changed_ms = 900;
    let kept = set.with("s", &body_only).unwrap();
    assert_eq!(kept.get("s").unwrap().changed_ms, 100);
    let mut paused = body_only.clone();
    paused.paused = true;
    let moved = kept.with("s", &paused).unwrap();
    assert_eq!(moved.get("s").unwrap().changed_ms, 900);
    assert!(moved.without("s").unwrap().is_empty());
    assert!(moved.without("t").is_none());
}

#[test]
fn no_tick_fires_at_or_before_the_last_change() {
    let mut doc = every(1000);
    doc.changed_ms = 10_500;
    let s = Schedule::from_doc("s", &doc).unwrap();
    assert_eq!(s.next_after(0), Some(11_500));
    assert_eq!(s.upcoming(11_500, 3), [12_500, 13_500, 14_500]);
    let t = s.tick(12_500, 2);
    assert_eq!((t.tick_ms, t.skipped, t.job.ttr_ms), (12_500, 2, 60_000));
    assert!(t.key.is_none());
}

#[test]
fn a_schedule_file_names_each_schedule() {
    let text = r#"
[[schedule]]
name = "refunds"
tube = "payments"
cron = "*/5 * * * *"
tz = "Europe/Berlin"
body = "check-refunds"
key = "refunds"
missed = "once"

[[schedule]]
name = "tick"
tube = "t"
every_ms = 1000
"#;
    let docs = ScheduleFile::parse(text, 7).unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].0, "refunds");
    assert_eq!(docs[0].1.missed, Missed::Once);
    assert_eq!(docs[1].1.changed_ms, 7);
    assert!(ScheduleFile::parse("[[schedule]]\ntube = \"t\"\nevery_ms = 1000\n", 0).is_err());
    assert!(
        ScheduleFile::parse("[[schedule]]\nname=\"x\"\ntube = \"t\"\nevery_ms = 10\n", 0).is_err()
    );
}
