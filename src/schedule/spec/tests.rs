//! croner's answers as redstalk documents them (docs/SCHEDULES.md): a croner upgrade
//! that changes one fails here.

use super::*;

/// Milliseconds of an RFC 3339 instant.
fn at(text: &str) -> u64 {
    let t = DateTime::parse_from_rfc3339(text).expect("an RFC 3339 instant");
    u64::try_from(t.timestamp_millis()).expect("after 1970")
}

/// The ticks of `expr` in Berlin in (from, upto].
fn berlin(expr: &str, from: &str, upto: &str) -> Vec<u64> {
    let spec = Spec::cron(expr, "Europe/Berlin").expect("a valid spec");
    spec.ticks_between(at(from), at(upto), 0, 100).0
}

#[test]
fn a_fixed_time_in_the_spring_gap_fires_after_the_gap() {
    // 2027-03-28: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    let ticks = berlin("30 2 * * *", "2027-03-27T23:00:00Z", "2027-03-29T23:00:00Z");
    assert_eq!(
        ticks,
        [at("2027-03-28T01:00:00Z"), at("2027-03-29T00:30:00Z")]
    );
}

#[test]
fn a_step_inside_the_spring_gap_fires_nothing_that_day() {
    let ticks = berlin(
        "*/15 2 * * *",
        "2027-03-27T23:00:00Z",
        "2027-03-29T00:00:00Z",
    );
    assert_eq!(ticks, [at("2027-03-29T00:00:00Z")]);
}

#[test]
fn an_hourly_schedule_follows_real_hours_in_spring() {
    let ticks = berlin("0 * * * *", "2027-03-27T23:30:00Z", "2027-03-28T01:00:00Z");
    assert_eq!(
        ticks,
        [at("2027-03-28T00:00:00Z"), at("2027-03-28T01:00:00Z")]
    );
}

#[test]
fn a_fixed_time_repeated_in_autumn_fires_once() {
    // 2027-10-31: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    let ticks = berlin("30 2 * * *", "2027-10-30T23:00:00Z", "2027-11-01T02:00:00Z");
    assert_eq!(
        ticks,
        [at("2027-10-31T00:30:00Z"), at("2027-11-01T01:30:00Z")]
    );
    // From inside the second pass, the next is the next day's.
    let spec = Spec::cron("30 2 * * *", "Europe/Berlin").expect("valid");
    assert_eq!(
        spec.next_after(at("2027-10-31T01:10:00Z"), 0),
        Some(at("2027-11-01T01:30:00Z"))
    );
}

#[test]
fn a_step_inside_the_repeated_hour_fires_in_both_passes() {
    let ticks = berlin(
        "*/15 2 * * *",
        "2027-10-30T23:00:00Z",
        "2027-10-31T03:00:00Z",
    );
    let expected: Vec<u64> = [
        "00:00", "00:15", "00:30", "00:45", "01:00", "01:15", "01:30", "01:45",
    ]
    .iter()
    .map(|hm| at(&format!("2027-10-31T{hm}:00Z")))
    .collect();
    assert_eq!(ticks, expected);
}

#[test]
fn an_hourly_schedule_follows_real_hours_in_autumn() {
    let ticks = berlin("0 * * * *", "2027-10-30T23:30:00Z", "2027-10-31T02:00:00Z");
    assert_eq!(
        ticks,
        [
            at("2027-10-31T00:00:00Z"),
            at("2027-10-31T01:00:00Z"),
            at("2027-10-31T02:00:00Z")
        ]
    );
}

#[test]
fn day_of_month_and_day_of_week_combine_with_or() {
    let spec = Spec::cron("0 0 13 * FRI", "UTC").expect("valid");
    let (ticks, _) = spec.ticks_between(
        at("2027-01-01T00:00:00Z"),
        at("2027-01-16T00:00:00Z"),
        0,
        10,
    );
    assert_eq!(
        ticks,
        [
            at("2027-01-08T00:00:00Z"),
            at("2027-01-13T00:00:00Z"),
            at("2027-01-15T00:00:00Z")
        ]
    );
}

#[test]
fn aliases_and_refusals() {
    let daily = Spec::cron("@daily", "UTC").expect("valid");
    let midnight = Spec::cron("@midnight", "UTC").expect("cron's other name for @daily");
    let from = at("2027-05-05T10:00:00Z");
    assert_eq!(midnight.next_after(from, 0), daily.next_after(from, 0));
    assert_eq!(daily.next_after(from, 0), Some(at("2027-05-06T00:00:00Z")));
    assert!(Spec::cron("@hourly", "UTC").is_ok());
    assert!(matches!(
        Spec::cron("@reboot", "UTC"),
        Err(SpecError::Cron { .. })
    ));
    assert!(matches!(
        Spec::cron("0 0 1 1 * 2030", "UTC"),
        Err(SpecError::Cron { .. })
    ));
    assert!(matches!(
        Spec::cron("61 * * * *", "UTC"),
        Err(SpecError::Cron { .. })
    ));
    assert!(matches!(
        Spec::cron("not cron", "UTC"),
        Err(SpecError::Cron { .. })
    ));
    assert_eq!(
        Spec::cron("* * * * *", "Mars/Olympus").err(),
        Some(SpecError::TimeZone("Mars/Olympus".into()))
    );
    assert!(
        Spec::cron("0 0 30 2 *", "UTC").is_err(),
        "February 30th never comes"
    );
}

#[test]
fn six_fields_fire_by_the_second_and_never_before_the_instant_asked() {
    let spec = Spec::cron("*/10 * * * * *", "UTC").expect("valid");
    assert_eq!(spec.next_after(10_500, 0), Some(20_000));
    assert_eq!(spec.next_after(20_000, 0), Some(30_000));
    assert_eq!(spec.next_after(19_999, 0), Some(20_000));
}

#[test]
fn intervals_count_from_their_anchor() {
    let spec = Spec::every(1000).expect("valid");
    assert_eq!(spec.next_after(500, 1_250), Some(1_250));
    assert_eq!(spec.next_after(1_250, 1_250), Some(2_250));
    assert_eq!(spec.next_after(2_000, 1_250), Some(2_250));
    assert_eq!(spec.next_after(u64::MAX - 10, 0), None);
    assert_eq!(Spec::every(999).err(), Some(SpecError::Every(999)));
    assert!(Spec::every(MAX_EVERY_MS + 1).is_err());
    let (ticks, more) = spec.ticks_between(1_250, 10_000, 1_250, 3);
    assert_eq!((ticks, more), (vec![2_250, 3_250, 4_250], true));
}

#[test]
fn local_times_carry_the_zone_offset() {
    let spec = Spec::cron("30 2 * * *", "Europe/Berlin").expect("valid");
    assert_eq!(
        spec.local(at("2027-10-31T00:30:00Z")),
        "2027-10-31T02:30:00+02:00"
    );
    assert_eq!(
        Spec::every(1000).expect("valid").local(0),
        "1970-01-01T00:00:00+00:00"
    );
}

#[test]
fn the_last_tick_at_or_before_an_instant() {
    let spec = Spec::every(1000).expect("valid");
    assert_eq!(spec.last_at_or_before(5_600, 250), Some(5_250));
    assert_eq!(spec.last_at_or_before(5_250, 250), Some(5_250));
    assert_eq!(spec.last_at_or_before(100, 250), None);
    let cron = Spec::cron("*/10 * * * * *", "UTC").expect("valid");
    assert_eq!(cron.last_at_or_before(25_500, 0), Some(20_000));
    assert_eq!(cron.last_at_or_before(30_000, 0), Some(30_000));
    let berlin = Spec::cron("30 2 * * *", "Europe/Berlin").expect("valid");
    assert_eq!(
        berlin.last_at_or_before(at("2027-10-31T12:00:00Z"), 0),
        Some(at("2027-10-31T00:30:00Z"))
    );
}
