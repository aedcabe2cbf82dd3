//! Schedules against the wall clock (docs/SCHEDULES.md), each server under libfaketime
//! (a part of `clock.rs`, sharing its fake clock): a schedule's ticks are instants of
//! the wall clock the process read at its start, moved on by its monotonic clock.
//! - `schedules_across_daylight_saving_changes` — Europe/Berlin, a process started a
//!   few seconds before each change: `30 2 * * *` fires at 03:00 CEST on the spring
//!   day (02:30 does not exist); `*/15 2 * * *` fires at 02:00 CET in the repeated
//!   autumn hour; `30 2 * * *` does not fire again at the second 02:30 (croner's whole
//!   table is pinned by src/schedule/spec/tests.rs).
//! - `ticks_missed_while_down_are_skipped_or_run_once` — `-b`: a server with three
//!   every-second schedules (missed `skip`, missed `once`, and `once` with a key whose
//!   job still waits) is killed and restarted five minutes later: the first makes no
//!   job for the gap and counts the ticks skipped, the second makes one, the third
//!   none (its key's job waits: deduped); each goes on at once.

use super::*;

/// Seconds from now to `instant` (RFC 3339), as a libfaketime offset.
fn offset_to(instant: &str) -> String {
    let target = chrono_secs(instant);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    format!("{:+}", target - now)
}

/// Seconds since the epoch of a UTC instant `YYYY-MM-DDTHH:MM:SSZ` (days from civil).
fn chrono_secs(instant: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| instant[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (hh, mm, ss) = (n(11..13), n(14..16), n(17..19));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hh * 3600 + mm * 60 + ss
}

fn schedule_file(text: &str) -> PathBuf {
    let file = fresh_dir().join("schedules.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Whether a job reaches `tube` within `secs`.
fn job_within(p: &Proc, tube: &str, secs: u32) -> bool {
    let mut c = p.client("worker");
    c.expect(&format!("watch {tube}"), "WATCHING 2");
    let answer = c.cmd(&format!("reserve-with-timeout {secs}"));
    answer.word() == "RESERVED"
}

#[test]
fn schedules_across_daylight_saving_changes() {
    let _serial = serial();
    let cases = [
        (
            "2027-03-28T00:59:54Z",
            "30 2 * * *",
            true,
            "spring: 02:30 fires at 03:00 CEST",
        ),
        (
            "2027-10-31T00:59:54Z",
            "*/15 2 * * *",
            true,
            "autumn: the repeated 02:00 fires",
        ),
        (
            "2027-10-31T01:29:54Z",
            "30 2 * * *",
            false,
            "autumn: the second 02:30 does not",
        ),
    ];
    for (start, cron, fires, what) in cases {
        let Some(clock) = FakeClock::new() else {
            return;
        };
        clock.set(&offset_to(start));
        let file = schedule_file(&format!(
            "[[schedule]]\nname = \"dst\"\ntube = \"dst\"\ncron = \"{cron}\"\ntz = \"Europe/Berlin\"\n"
        ));
        let p = Proc::redstalk(&clock, &["--schedules", file.to_str().unwrap()]);
        let started = Instant::now();
        let fired = job_within(&p, "dst", 9);
        println!(
            "{what}: {} after {:?}",
            if fired { "a job" } else { "no job" },
            started.elapsed()
        );
        assert_eq!(fired, fires, "{what}\n{}", p.log.tail());
    }
}

fn api_get(http: SocketAddr, path: &str) -> serde_json::Value {
    let text = ureq::get(&format!("http://{http}/api/v1{path}"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

const TOKEN: &str = "clock-schedules-token";

fn api_pause(http: SocketAddr, name: &str) {
    let status = ureq::post(&format!("http://{http}/api/v1/schedules/{name}/pause"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send_empty()
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 200, "pause {name}");
}

fn ready(p: &Proc, tube: &str) -> u64 {
    p.client("count")
        .dict(&format!("stats-tube {tube}"))
        .into_iter()
        .find(|(k, _)| k == "current-jobs-ready")
        .map_or(0, |(_, v)| v.parse().unwrap())
}

#[test]
fn ticks_missed_while_down_are_skipped_or_run_once() {
    let _serial = serial();
    let Some(clock) = FakeClock::new() else {
        return;
    };
    let dir = fresh_dir();
    let file = schedule_file(
        "[[schedule]]\nname = \"skip\"\ntube = \"skip\"\nevery_ms = 1000\nmissed = \"skip\"\n\n\
         [[schedule]]\nname = \"once\"\ntube = \"once\"\nevery_ms = 1000\nmissed = \"once\"\n\n\
         [[schedule]]\nname = \"keyed\"\ntube = \"keyed\"\nevery_ms = 1000\nmissed = \"once\"\nkey = \"k\"\n",
    );
    let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let args = [
        "-b",
        dir.to_str().unwrap(),
        "--schedules",
        file.to_str().unwrap(),
        "--http",
        &http.to_string(),
        "--admin-token",
        TOKEN,
    ];
    let mut p = Proc::redstalk(&clock, &args);
    std::thread::sleep(Duration::from_secs(3));
    let before = ["skip", "once", "keyed"].map(|t| ready(&p, t));
    let changed: std::collections::HashMap<&str, u64> = ["skip", "once"]
        .into_iter()
        .map(|n| {
            (
                n,
                api_get(http, &format!("/schedules/{n}"))["changed_ms"]
                    .as_u64()
                    .unwrap(),
            )
        })
        .collect();
    assert!(
        before[0] >= 1 && before[1] >= 1 && before[2] == 1,
        "{before:?}"
    );
    let _ = p.child.kill();
    let _ = p.child.wait();
    clock.set("+300");
    let p = Proc::redstalk(&clock, &args);
    std::thread::sleep(Duration::from_millis(2500));
    for name in ["skip", "once", "keyed"] {
        api_pause(http, name);
    }
    std::thread::sleep(Duration::from_secs(1));
    let [skip, once, keyed] =
        ["skip", "once", "keyed"].map(|n| api_get(http, &format!("/schedules/{n}")));
    let n = |v: &serde_json::Value, field: &str| v["cursor"][field].as_u64().unwrap();
    println!(
        "after 300 s down: skipped {} / {} / {}; made {} / {} / {}; ready {} / {} / {}",
        n(&skip, "skipped"),
        n(&once, "skipped"),
        n(&keyed, "skipped"),
        n(&skip, "fired"),
        n(&once, "fired"),
        n(&keyed, "fired"),
        ready(&p, "skip"),
        ready(&p, "once"),
        ready(&p, "keyed")
    );
    for (v, tube) in [(&skip, "skip"), (&once, "once")] {
        let ticks = (n(v, "last_tick_ms") - (changed[tube] + 1000)) / 1000 + 1;
        assert_eq!(
            ready(&p, tube),
            n(v, "fired"),
            "{tube}: a job per tick fired: {v}"
        );
        assert_eq!(
            ticks,
            n(v, "fired") + n(v, "skipped"),
            "{tube}: every tick fired or skipped: {v}"
        );
    }
    assert!(
        (280..=310).contains(&n(&skip, "skipped")),
        "skip: the gap skipped: {skip}"
    );
    assert_eq!(
        n(&skip, "skipped"),
        n(&once, "skipped") + 1,
        "once: the gap's latest tick fired, the others skipped"
    );
    assert!(
        n(&skip, "fired") > before[0],
        "skip goes on after the gap: {skip}"
    );
    // The keyed one's job still waits: every tick since is deduped, none made.
    assert_eq!(ready(&p, "keyed"), 1, "{keyed}");
    assert_eq!(n(&keyed, "fired"), 1, "{keyed}");
    assert!(n(&keyed, "deduped") >= 2, "{keyed}");
}
