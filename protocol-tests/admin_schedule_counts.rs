//! Schedules fire each tick exactly once (docs/SCHEDULES.md), counted, on every mode
//! (a part of `admin.rs`, sharing its launcher). Each schedule fires every second into
//! a tube nobody consumes, so the tube's ready jobs are the jobs its ticks made; the
//! count that proves "exactly once" is
//! `jobs == cursor.fired == (cursor.last_tick_ms - first tick) / 1000 + 1`
//! (a tick fired twice makes the left side larger, a tick lost makes it smaller; the
//! first tick is the schedule's `changed_ms` + 1 s).
//! - `every_tick_once_on_every_mode` — memory, `-b` with five `kill -9`s and restarts,
//!   leader mode with the leader killed and its standby taking over, shared mode with
//!   three instances firing 20 schedules and one killed midway (the instances' `stale`
//!   answers, counted in `/metrics`, show that they raced for the same ticks).

use super::*;

/// The ticks an instance found fired already (by another instance).
const STALE: &str = "redstalk_schedule_fires_total{result=\"stale\"}";

/// A `--schedules` file of `names`, each every second into the tube of its name.
fn every_second(names: &[String]) -> PathBuf {
    let file = fresh_dir().join("schedules.toml");
    let text: String = names
        .iter()
        .map(|n| {
            format!(
                "[[schedule]]\nname = \"{n}\"\ntube = \"{n}\"\nbody = \"{n}\"\nevery_ms = 1000\n\n"
            )
        })
        .collect();
    std::fs::write(&file, text).unwrap();
    file
}

/// The flags of a server with the API's token and the schedules of `file`.
fn flags(file: &std::path::Path) -> [&str; 4] {
    [
        "--admin-token",
        TOKEN,
        "--schedules",
        file.to_str().unwrap(),
    ]
}

fn view(api: &Api, name: &str) -> Value {
    let (s, v) = api.get(&format!("/schedules/{name}"));
    assert_eq!(s, 200, "{v}");
    v
}

/// A tube's ready jobs (0 when it does not exist).
fn ready(c: &mut Client, tube: &str) -> u64 {
    let answer = c.dict(&format!("stats-tube {tube}"));
    answer
        .iter()
        .find(|(k, _)| k == "current-jobs-ready")
        .map_or(0, |(_, v)| v.parse().unwrap())
}

/// Pause `names`, let any fire in flight land, and check the count of each.
fn pause_and_count(api: &Api, c: &mut Client, names: &[String], created: &[u64], what: &str) {
    for name in names {
        let (s, v) = api.post(&format!("/schedules/{name}/pause"), json!({}));
        assert_eq!(s, 200, "{v}");
    }
    // Shared instances follow the set each second; a fire under way finishes.
    std::thread::sleep(Duration::from_secs(3));
    let mut total = 0;
    for (name, first_change) in names.iter().zip(created) {
        let v = view(api, name);
        let cursor = &v["cursor"];
        let last = cursor["last_tick_ms"].as_u64().unwrap();
        let fired = cursor["fired"].as_u64().unwrap();
        let jobs = ready(c, name);
        let ticks = (last - (first_change + 1000)) / 1000 + 1;
        assert_eq!(
            (jobs, fired),
            (ticks, ticks),
            "{what} {name}: jobs and cursor.fired against the ticks from the first to the last; {v}"
        );
        assert_eq!(
            cursor["skipped"].as_u64(),
            Some(0),
            "{what} {name}: none missed"
        );
        total += jobs;
    }
    println!(
        "{what}: {total} jobs for {total} ticks of {} schedules",
        names.len()
    );
}

/// The `changed_ms` of each schedule, once it has fired at least once.
fn created(api: &Api, names: &[String]) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    names
        .iter()
        .map(|name| {
            loop {
                let v = view(api, name);
                if v["cursor"]["fired"].as_u64().unwrap_or(0) > 0 {
                    break v["changed_ms"].as_u64().unwrap();
                }
                assert!(Instant::now() < deadline, "{name} never fired: {v}");
                std::thread::sleep(Duration::from_millis(200));
            }
        })
        .collect()
}

fn kill(srv: &mut ServerProc) {
    signal_pid(srv.pid(), "KILL");
    assert!(
        srv.wait_exit(Duration::from_secs(5)).is_some(),
        "survived kill -9"
    );
}

#[test]
fn every_tick_once_on_every_mode() {
    let _serial = serial();
    for home in Home::all() {
        let what = home.name();
        match &home {
            Home::Memory | Home::Binlog(_) => {
                let names = vec![format!("tick-{what}")];
                let file = every_second(&names);
                let args = flags(&file);
                let (mut srv, mut api) = home.launch(&args);
                let first = created(&api, &names);
                if matches!(home, Home::Binlog(_)) {
                    for _ in 0..5 {
                        std::thread::sleep(Duration::from_millis(2500));
                        kill(&mut srv);
                        (srv, api) = home.launch(&args);
                    }
                }
                std::thread::sleep(Duration::from_secs(3));
                let mut c = Client::connect(srv.addr, "count");
                pause_and_count(&api, &mut c, &names, &first, what);
            }
            Home::Leader(_) => {
                let names = vec!["tick-leader".to_string()];
                let file = every_second(&names);
                let args = flags(&file);
                let (mut leader, api) = home.launch(&args);
                let (standby, api2) = home.launch_as(&args, "standby");
                let first = created(&api, &names);
                std::thread::sleep(Duration::from_secs(3));
                kill(&mut leader);
                let deadline = Instant::now() + Duration::from_secs(30);
                while api2.whoami().1["role"] != "leader" {
                    assert!(Instant::now() < deadline, "the standby never led");
                    std::thread::sleep(Duration::from_millis(100));
                }
                std::thread::sleep(Duration::from_secs(4));
                let mut c = Client::connect(standby.addr, "count");
                pause_and_count(&api2, &mut c, &names, &first, "leader (over a takeover)");
            }
            Home::Shared(_) => {
                let names: Vec<String> = (0..20).map(|i| format!("tick-shared-{i}")).collect();
                let file = every_second(&names);
                let args = flags(&file);
                let (mut a, _api_a) = home.launch(&args);
                let (b, api_b) = home.launch(&args);
                let (c_srv, api_c) = home.launch(&args);
                let first = created(&api_b, &names);
                std::thread::sleep(Duration::from_secs(5));
                kill(&mut a);
                std::thread::sleep(Duration::from_secs(5));
                let stale = metric(&api_b, STALE) + metric(&api_c, STALE);
                let mut c = Client::connect(b.addr, "count");
                pause_and_count(&api_b, &mut c, &names, &first, "shared (three instances)");
                println!("shared: {stale} ticks answered stale (raced for) on the two survivors");
                assert!(stale > 0, "three instances firing every second never raced");
                drop(c_srv);
            }
        }
    }
}
