//! Many redstalk instances on one Redis, proven against real
//! processes: every test starts its own private `redis-server` and two or three
//! `redstalk --redis URL --redis-prefix NAME` processes sharing it, and talks to them
//! over plain blocking sockets. Every wait is bounded, so a misbehaving server fails a
//! test instead of hanging it. The tests run one at a time (a lock), so the timing
//! figures are not skewed by each other.
//!
//! What the tests prove:
//! - racing workers: 3000 jobs put through three instances (a tenth of them delayed)
//!   and consumed by four reserve-with-timeout/delete workers on each instance are each
//!   reserved exactly once (no duplicate, none missing, bodies intact), every instance
//!   takes a share, and `stats`/`stats-tube` on every instance then show no job left;
//! - cross-instance wake-up: a `reserve` blocked on B receives a job put on A (the job
//!   goes to B's waiter, it is not left ready); the median latency from sending the put
//!   to receiving RESERVED over 200 rounds is under 10 ms (median, p90 and max are
//!   printed, with the same-instance figures for comparison), and no wake-up is lost
//!   when the put races the reserve (sent 0–2 ms after it, 200 rounds);
//! - timers work whichever instance holds the client: a job reserved on A with TTR 1
//!   by a connection that then stays idle is reservable on B after 0.9–1.5 s; the old
//!   owner on A then gets NOT_FOUND for touch, release, bury and delete, and closing
//!   it leaves the jobs with their new holder on B; a put with delay 1 on A reaches a
//!   waiter on B after 0.95–1.5 s; `pause-tube` on A holds reserves on B, `pause-tube
//!   t 0` on A resumes B's blocked reserve within 250 ms, and a 1 s pause set on A
//!   ends for B's waiter after 0.9–1.6 s;
//! - id-only commands from any instance: peek, stats-job, kick-job (buried and
//!   delayed), reserve-job and delete (ready, buried, delayed) on B act on jobs put on
//!   A; touch, release, bury, delete and kick-job on B of a job a connection on A holds
//!   answer NOT_FOUND, and the holder keeps it;
//! - a connection closed on A returns its reservation at once: a waiter on B gets the
//!   job within milliseconds (not after the 60 s TTR);
//! - job ids are unique across instances and increase: sequential puts interleaved
//!   over three instances get 1, 2, 3, … and concurrent ones a gap-free unique range;
//! - a crashed instance (`kill -9`) while its connection holds a job with TTR 2: the
//!   job is reservable on B once the TTR has run out, a job A put with delay 2 reaches
//!   a waiter on B once the delay has run out, and B drops the dead instance's
//!   tube references within the heartbeat lapse (a tube only A's connection used leaves
//!   `list-tubes` about 10 s after the kill, bounded at 14 s), while a tube that a live
//!   but idle instance C watches stays. This test takes about 12 s;
//! - a stalled instance that resumes (SIGSTOP for longer than the heartbeat lapse,
//!   standing for a long pause or a partition from Redis, then SIGCONT): once B has
//!   dropped its references, A must either re-assert the references of its connections
//!   that are still open or close them, and when its connection finally closes the
//!   counts of the tubes it shared with B's live connections stay right (B's tube is
//!   not garbage-collected under it). This test takes about 15 s.
//!
//! Without `redis-server` installed the tests are skipped with a loud message, unless
//! `REDSTALK_REQUIRE_ORACLE=1` (then they fail).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use support::ServerProc;
use support::client::Client;
use support::redis::RedisServer;

/// The tests run one at a time: their timing figures must not disturb each other.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Instance names in messages.
const NAMES: [&str; 3] = ["A", "B", "C"];

/// Several redstalk processes on one private Redis and prefix. The processes are
/// dropped (killed) before the Redis.
struct Cluster {
    instances: Vec<ServerProc>,
    stderr: Vec<Arc<Mutex<String>>>,
    redis: RedisServer,
}

impl Cluster {
    /// `k` instances on a fresh Redis under `prefix`; `None` (skip) when redis-server
    /// is not installed and not required.
    fn start(k: usize, prefix: &str) -> Option<Cluster> {
        let redis = support::redis::private_redis(&[], "multi-instance tests")?;
        let mut instances = Vec::new();
        let mut stderr = Vec::new();
        for name in NAMES.iter().take(k) {
            let mut p = ServerProc::start_on_redis(&redis.url(), prefix, &["-V".to_string()])
                .unwrap_or_else(|e| panic!("start redstalk {name}: {e}"));
            // Drain the log so a chatty server never blocks on a full pipe; it is shown
            // if the test fails.
            let log = Arc::new(Mutex::new(String::new()));
            if let Some(mut pipe) = p.take_stderr() {
                let log = log.clone();
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = pipe.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
                        l.push_str(&String::from_utf8_lossy(&buf[..n]));
                        if l.len() > 256 * 1024 {
                            let cut = l.len() - 128 * 1024;
                            let cut = (cut..l.len()).find(|&i| l.is_char_boundary(i)).unwrap_or(0);
                            l.drain(..cut);
                        }
                    }
                });
            }
            instances.push(p);
            stderr.push(log);
        }
        Some(Cluster {
            instances,
            stderr,
            redis,
        })
    }

    fn connect(&self, i: usize, name: &str) -> Client {
        Client::connect(self.instances[i].addr, format!("{name}@{}", NAMES[i]))
    }

    fn addr(&self, i: usize) -> std::net::SocketAddr {
        self.instances[i].addr
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("(redis on port {})", self.redis.port);
            for (i, log) in self.stderr.iter().enumerate() {
                let l = log.lock().unwrap_or_else(|e| e.into_inner());
                let tail: Vec<&str> = l.lines().rev().take(40).collect();
                eprintln!("--- last log lines of redstalk {} ---", NAMES[i]);
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// Poll `cond` every 5 ms until it holds; panics after `timeout`. Returns the time it
/// took.
fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until `n` connections of the monitor's instance wait in a reserve on `tube`.
fn wait_waiting(monitor: &mut Client, tube: &str, n: u64) {
    wait_until(
        &format!("{}: current-waiting {n} on {tube}", monitor.name),
        Duration::from_secs(5),
        || monitor.dict_value(&format!("stats-tube {tube}"), "current-waiting") == n.to_string(),
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// (median, p90, max) of `samples`.
fn summary(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let q = support::quantiles(samples, &[0.5, 0.9, 1.0]);
    (q[0], q[1], q[2])
}

/// The job figures of a `stats` or `stats-tube` reply.
fn job_counts(c: &mut Client, cmd: &str) -> HashMap<String, u64> {
    c.dict(cmd)
        .into_iter()
        .filter(|(k, _)| k.starts_with("current-jobs-") || k == "total-jobs")
        .map(|(k, v)| {
            let n = v.parse().unwrap_or_else(|_| panic!("{cmd}: {k} = {v:?}"));
            (k, n)
        })
        .collect()
}

fn assert_no_jobs_left(c: &mut Client, cmd: &str, total: u64) {
    let counts = job_counts(c, cmd);
    for state in ["urgent", "ready", "reserved", "delayed", "buried"] {
        assert_eq!(
            counts[&format!("current-jobs-{state}")],
            0,
            "{}: {cmd}: jobs left: {counts:?}",
            c.name
        );
    }
    assert_eq!(counts["total-jobs"], total, "{}: {cmd}: {counts:?}", c.name);
}

// ---------------------------------------------------------------------------------------
// 1. Racing workers.

#[test]
fn racing_workers_on_three_instances_reserve_every_job_exactly_once() {
    let _serial = serial();
    const K: usize = 3;
    const WORKERS_PER_INSTANCE: usize = 4;
    const N: usize = 3000;
    const TUBE: &str = "race";
    let Some(cluster) = Cluster::start(K, "race") else {
        return;
    };
    // One idle connection per instance watches the tube, so it (and its counters)
    // outlives the workers for the final `stats-tube`.
    let mut monitors: Vec<Client> = (0..K)
        .map(|i| {
            let mut c = cluster.connect(i, "stats");
            c.watch(TUBE);
            c
        })
        .collect();
    let deleted = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let give_up = started + Duration::from_secs(90);

    let mut workers = Vec::new();
    for (inst, &name) in NAMES.iter().enumerate().take(K) {
        for w in 0..WORKERS_PER_INSTANCE {
            let addr = cluster.addr(inst);
            let deleted = deleted.clone();
            workers.push(thread::spawn(move || {
                let mut c = Client::connect(addr, format!("worker {w}@{name}"));
                c.watch_only(TUBE);
                // (id, body, delete reply)
                let mut got: Vec<(u64, Vec<u8>, String)> = Vec::new();
                while deleted.load(Ordering::SeqCst) < N && Instant::now() < give_up {
                    if let Some((id, body)) = c.reserve_timeout(1) {
                        let del = c.line(&format!("delete {id}"));
                        if del == "DELETED" {
                            deleted.fetch_add(1, Ordering::SeqCst);
                        }
                        got.push((id, body, del));
                    }
                }
                (inst, got)
            }));
        }
    }

    let mut producers = Vec::new();
    for (inst, &name) in NAMES.iter().enumerate().take(K) {
        let addr = cluster.addr(inst);
        producers.push(thread::spawn(move || {
            let mut c = Client::connect(addr, format!("producer@{name}"));
            c.use_tube(TUBE);
            let mut put = Vec::new();
            for k in 0..N / K {
                let body = format!("job {k} from {name}").into_bytes();
                let delay = u32::from(k % 10 == 3);
                let pri = (k % 4) as u32 * 100;
                let id = c.put(pri, delay, 60, &body);
                put.push((id, body, delay));
            }
            put
        }));
    }

    let mut expected: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut delayed = 0;
    for p in producers {
        for (id, body, delay) in p.join().expect("producer thread") {
            delayed += delay as usize;
            assert!(
                expected.insert(id, body).is_none(),
                "id {id} was handed out by two puts"
            );
        }
    }
    assert_eq!(expected.len(), N);

    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut per_instance = [0usize; K];
    let (mut bad_bodies, mut unknown, mut failed_deletes) = (Vec::new(), Vec::new(), Vec::new());
    for w in workers {
        let (inst, got) = w.join().expect("worker thread");
        per_instance[inst] += got.len();
        for (id, body, del) in got {
            *seen.entry(id).or_default() += 1;
            match expected.get(&id) {
                None => unknown.push(id),
                Some(b) if *b != body => bad_bodies.push(id),
                Some(_) => {}
            }
            if del != "DELETED" {
                failed_deletes.push((id, del));
            }
        }
    }
    let elapsed = started.elapsed();
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    let missing: Vec<u64> = expected
        .keys()
        .filter(|id| !seen.contains_key(id))
        .copied()
        .collect();
    println!(
        "multi-instance race: {N} jobs ({delayed} delayed), {} workers on {K} instances, \
         duplicates {duplicates}, missing {}, in {:.2} s ({:.0} jobs/s); reserved per \
         instance {per_instance:?}",
        K * WORKERS_PER_INSTANCE,
        missing.len(),
        elapsed.as_secs_f64(),
        N as f64 / elapsed.as_secs_f64(),
    );
    assert_eq!(duplicates, 0, "jobs reserved more than once");
    assert!(missing.is_empty(), "jobs never reserved: {missing:?}");
    assert!(unknown.is_empty(), "reserved ids never put: {unknown:?}");
    assert!(bad_bodies.is_empty(), "wrong bodies for ids {bad_bodies:?}");
    assert!(
        failed_deletes.is_empty(),
        "deletes that failed: {failed_deletes:?}"
    );
    for (i, n) in per_instance.iter().enumerate() {
        assert!(
            *n > 0,
            "instance {} served no job: {per_instance:?}",
            NAMES[i]
        );
    }
    for c in &mut monitors {
        assert_no_jobs_left(c, "stats", N as u64);
        assert_no_jobs_left(c, &format!("stats-tube {TUBE}"), N as u64);
        assert_eq!(
            c.dict_value(&format!("stats-tube {TUBE}"), "cmd-delete"),
            N.to_string()
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. Cross-instance wake-up.

/// `rounds` of: `waiter` blocks in `reserve`, `producer` puts, time until RESERVED.
fn wake_rounds(
    producer: &mut Client,
    waiter: &mut Client,
    monitor: &mut Client,
    tube: &str,
    rounds: usize,
) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds {
        waiter.send_line("reserve");
        wait_waiting(monitor, tube, 1);
        let body = format!("wake {round}");
        let t0 = Instant::now();
        producer.send_put(0, 0, 60, body.as_bytes());
        let got = waiter.reply();
        samples.push(t0.elapsed());
        let inserted = producer.reply();
        let id = match (inserted.word(), inserted.id()) {
            ("INSERTED", Some(id)) => id,
            _ => panic!("put answered {:?}", inserted.line),
        };
        assert_eq!(
            got.line,
            format!("RESERVED {id} {}", body.len()),
            "round {round}: the waiter did not get the job just put"
        );
        assert_eq!(got.text(), body);
        waiter.expect(&format!("delete {id}"), "DELETED");
    }
    samples
}

#[test]
fn a_put_on_one_instance_wakes_a_reserve_blocked_on_another() {
    let _serial = serial();
    const ROUNDS: usize = 200;
    let Some(cluster) = Cluster::start(2, "wake") else {
        return;
    };
    let mut a = cluster.connect(0, "producer");
    let mut b = cluster.connect(1, "waiter");
    let mut b_mon = cluster.connect(1, "monitor");
    let mut a_mon = cluster.connect(0, "monitor");
    a.use_tube("wake");
    b.watch_only("wake");

    // Same-instance figures first, for comparison.
    let mut a_waiter = cluster.connect(0, "waiter");
    a_waiter.watch_only("wake");
    let local = wake_rounds(&mut a, &mut a_waiter, &mut a_mon, "wake", 50);
    drop(a_waiter);
    wait_waiting(&mut a_mon, "wake", 0);

    let cross = wake_rounds(&mut a, &mut b, &mut b_mon, "wake", ROUNDS);
    let (lm, lp, lx) = summary(&local);
    let (m, p90, max) = summary(&cross);
    println!(
        "multi-instance wake-up: put on A -> RESERVED on B over {ROUNDS} rounds: median \
         {:.2} ms, p90 {:.2} ms, max {:.2} ms (same instance, 50 rounds: median {:.2} ms, \
         p90 {:.2} ms, max {:.2} ms)",
        ms(m),
        ms(p90),
        ms(max),
        ms(lm),
        ms(lp),
        ms(lx)
    );
    assert!(
        m < Duration::from_millis(10),
        "median cross-instance wake-up {:.2} ms is not under 10 ms",
        ms(m)
    );

    // Unsynchronised: the put is sent 0–2 ms after the reserve, so it often lands while
    // B is still between its first attempt and registering its waiter. A lost wake-up
    // would leave B waiting with the job ready (nothing else would wake it).
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut racy = Vec::with_capacity(ROUNDS);
    b.timeout = Duration::from_secs(3);
    for round in 0..ROUNDS {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let gap = Duration::from_micros((seed >> 33) % 2000);
        let body = format!("racy {round}");
        b.send_line("reserve");
        let t0 = Instant::now();
        thread::sleep(gap);
        a.send_put(0, 0, 60, body.as_bytes());
        let got = b.reply();
        racy.push(t0.elapsed().saturating_sub(gap));
        let id = a.reply().id().expect("INSERTED");
        assert_eq!(
            got.line,
            format!("RESERVED {id} {}", body.len()),
            "unsynchronised round {round} (gap {gap:?})"
        );
        b.expect(&format!("delete {id}"), "DELETED");
    }
    let (rm, rp, rx) = summary(&racy);
    println!(
        "multi-instance wake-up, unsynchronised ({ROUNDS} rounds, put 0-2 ms after the \
         reserve): median {:.2} ms, p90 {:.2} ms, max {:.2} ms after the put",
        ms(rm),
        ms(rp),
        ms(rx)
    );
    assert!(
        rm < Duration::from_millis(10),
        "median unsynchronised wake-up {:.2} ms",
        ms(rm)
    );

    // Every job went to a waiter: none was left ready.
    let total = (2 * ROUNDS + 50) as u64;
    assert_no_jobs_left(&mut b_mon, "stats-tube wake", total);
    assert_no_jobs_left(&mut a_mon, "stats", total);
}

// ---------------------------------------------------------------------------------------
// 3. TTR expiry, delays and pause, whichever instance holds the client.

#[test]
fn a_lapsed_reservation_on_one_instance_is_reservable_on_another() {
    let _serial = serial();
    let Some(cluster) = Cluster::start(2, "ttr") else {
        return;
    };
    let mut producer = cluster.connect(0, "producer");
    producer.use_tube("ttr");
    let ids: Vec<u64> = (0..3)
        .map(|k| producer.put(0, 0, 1, format!("ttr {k}").as_bytes()))
        .collect();

    // The holder on A reserves all three, then stays connected and idle.
    let mut holder = cluster.connect(0, "holder");
    holder.watch_only("ttr");
    let mut held = Vec::new();
    let mut t0 = None;
    for _ in 0..3 {
        let (id, _) = holder.reserve();
        t0.get_or_insert_with(Instant::now);
        held.push(id);
    }
    let t0 = t0.expect("reserved");
    assert_eq!(held, ids, "reserved in (pri, id) order");

    // Three workers on B wait for them.
    let mut workers: Vec<Client> = (0..3)
        .map(|k| {
            let mut w = cluster.connect(1, &format!("worker {k}"));
            w.watch_only("ttr");
            w.send_line("reserve-with-timeout 5");
            w
        })
        .collect();
    let mut got = Vec::new();
    for w in &mut workers {
        let r = w.reply();
        let at = t0.elapsed();
        assert_eq!(r.word(), "RESERVED", "{}: {:?}", w.name, r.line);
        got.push((r.id().expect("id"), at));
    }
    let mut got_ids: Vec<u64> = got.iter().map(|(id, _)| *id).collect();
    got_ids.sort();
    assert_eq!(got_ids, ids, "B got the jobs A's holder let lapse");
    let first = got.iter().map(|(_, at)| *at).min().expect("three");
    let last = got.iter().map(|(_, at)| *at).max().expect("three");
    println!(
        "multi-instance TTR: jobs reserved on A with TTR 1 reserved on B after {:.0}–{:.0} ms",
        ms(first),
        ms(last)
    );
    assert!(
        first >= Duration::from_millis(900),
        "a job was taken from its holder before its TTR: {:.0} ms",
        ms(first)
    );
    assert!(
        last <= Duration::from_millis(1500),
        "lapsed jobs reached B only after {:.0} ms",
        ms(last)
    );

    // The old owner has lost them.
    holder.expect(&format!("touch {}", ids[0]), "NOT_FOUND");
    holder.expect(&format!("release {} 0 0", ids[1]), "NOT_FOUND");
    holder.expect(&format!("bury {} 0", ids[2]), "NOT_FOUND");
    holder.expect(&format!("delete {}", ids[0]), "NOT_FOUND");

    // Closing the old owner's connection does not take them back from B (B's TTR is 1 s
    // too: this part runs well within it, and the touches renew it).
    drop(holder);
    wait_until("A closes the old owner", Duration::from_secs(2), || {
        producer.stat_u64("current-connections") == 1
    });
    for (w, (id, _)) in workers.iter_mut().zip(&got) {
        w.expect(&format!("touch {id}"), "TOUCHED");
    }
    let mut b = cluster.connect(1, "stats");
    for id in &ids {
        let stats: HashMap<String, String> =
            b.dict(&format!("stats-job {id}")).into_iter().collect();
        assert_eq!(stats["state"], "reserved", "job {id}: {stats:?}");
        assert_eq!(stats["reserves"], "2", "job {id}: {stats:?}");
        assert_eq!(stats["timeouts"], "1", "job {id}: {stats:?}");
        assert_eq!(stats["releases"], "0", "job {id}: {stats:?}");
        assert_eq!(stats["buries"], "0", "job {id}: {stats:?}");
    }
    assert_eq!(b.stat("job-timeouts"), "3");
    assert_eq!(producer.stat("job-timeouts"), "3");
    for (w, (id, _)) in workers.iter_mut().zip(&got) {
        w.expect(&format!("delete {id}"), "DELETED");
    }
    assert_no_jobs_left(&mut b, "stats", 3);
}

#[test]
fn a_delayed_put_on_one_instance_reaches_a_waiter_on_another() {
    let _serial = serial();
    let Some(cluster) = Cluster::start(2, "delay") else {
        return;
    };
    let mut a = cluster.connect(0, "producer");
    a.use_tube("later");
    let mut b = cluster.connect(1, "waiter");
    b.watch_only("later");
    let mut b_mon = cluster.connect(1, "monitor");
    let mut samples = Vec::new();
    for round in 0..3 {
        b.send_line("reserve");
        wait_waiting(&mut b_mon, "later", 1);
        let t0 = Instant::now();
        let id = a.put(0, 1, 60, format!("later {round}").as_bytes());
        let r = b.reply();
        let at = t0.elapsed();
        assert_eq!(r.line, format!("RESERVED {id} 7"), "round {round}");
        b.expect(&format!("delete {id}"), "DELETED");
        samples.push(at);
    }
    let shown: Vec<String> = samples.iter().map(|d| format!("{:.0}", ms(*d))).collect();
    println!(
        "multi-instance delay: put with delay 1 on A -> RESERVED on B after {} ms",
        shown.join(", ")
    );
    for at in samples {
        assert!(
            at >= Duration::from_millis(950),
            "delayed job delivered early: {:.0} ms",
            ms(at)
        );
        assert!(
            at <= Duration::from_millis(1500),
            "delayed job delivered late: {:.0} ms",
            ms(at)
        );
    }
}

#[test]
fn pause_tube_on_one_instance_holds_and_resumes_reserves_on_another() {
    let _serial = serial();
    let Some(cluster) = Cluster::start(2, "pause") else {
        return;
    };
    let mut a = cluster.connect(0, "pauser");
    a.use_tube("p");
    let id = a.put(0, 0, 60, b"paused job");
    let mut b = cluster.connect(1, "worker");
    b.watch_only("p");
    let mut b_mon = cluster.connect(1, "monitor");

    // A long pause set on A holds B's reserves.
    a.expect("pause-tube p 60", "PAUSED");
    assert_eq!(b_mon.dict_value("stats-tube p", "pause"), "60");
    assert_eq!(b.line("reserve-with-timeout 1"), "TIMED_OUT");
    b.send_line("reserve");
    wait_waiting(&mut b_mon, "p", 1);
    b.expect_silence(Duration::from_millis(300));

    // `pause-tube p 0` on A resumes B's blocked reserve at once.
    let t0 = Instant::now();
    a.expect("pause-tube p 0", "PAUSED");
    let r = b.reply();
    let resumed = t0.elapsed();
    assert_eq!(r.line, format!("RESERVED {id} 10"));
    b.expect(&format!("delete {id}"), "DELETED");

    // A 1 s pause set on A ends for B's waiter after about a second.
    a.expect("pause-tube p 1", "PAUSED");
    let t1 = Instant::now();
    let id = a.put(0, 0, 60, b"second");
    b.send_line("reserve");
    let r = b.reply();
    let ended = t1.elapsed();
    assert_eq!(r.line, format!("RESERVED {id} 6"));
    b.expect(&format!("delete {id}"), "DELETED");
    println!(
        "multi-instance pause: `pause-tube p 0` on A -> RESERVED on B in {:.2} ms; a 1 s \
         pause set on A released B's waiter after {:.0} ms",
        ms(resumed),
        ms(ended)
    );
    assert!(
        resumed < Duration::from_millis(250),
        "unpausing on A resumed B's reserve only after {:.0} ms",
        ms(resumed)
    );
    assert!(
        ended >= Duration::from_millis(900) && ended <= Duration::from_millis(1600),
        "a 1 s pause ended for B after {:.0} ms",
        ms(ended)
    );
    assert_eq!(b_mon.dict_value("stats-tube p", "cmd-pause-tube"), "3");
}

// ---------------------------------------------------------------------------------------
// 4. Id-only commands from any instance.

#[test]
fn id_only_commands_work_from_any_instance() {
    let _serial = serial();
    let Some(cluster) = Cluster::start(2, "ids") else {
        return;
    };
    let mut a = cluster.connect(0, "producer");
    a.use_tube("jobs");
    a.watch_only("jobs");
    let mut holder = cluster.connect(0, "holder");
    holder.watch_only("jobs");

    // One job in each state, all put on A.
    let held = a.put(0, 0, 60, b"held");
    let (got, _) = holder.reserve();
    assert_eq!(got, held);
    let ready = a.put(5, 0, 60, b"ready");
    let delayed = a.put(5, 60, 60, b"delayed");
    let buried = a.put(0, 0, 60, b"buried");
    let (got, _) = a.reserve();
    assert_eq!(got, buried);
    a.expect(&format!("bury {buried} 7"), "BURIED");

    let mut b = cluster.connect(1, "other");
    for (id, body, state) in [
        (held, "held", "reserved"),
        (ready, "ready", "ready"),
        (delayed, "delayed", "delayed"),
        (buried, "buried", "buried"),
    ] {
        let r = b.cmd(&format!("peek {id}"));
        assert_eq!(r.line, format!("FOUND {id} {}", body.len()), "peek {id}");
        assert_eq!(r.text(), body);
        let s: HashMap<String, String> = b.dict(&format!("stats-job {id}")).into_iter().collect();
        assert_eq!(s["id"], id.to_string());
        assert_eq!(s["tube"], "jobs", "stats-job {id}");
        assert_eq!(s["state"], state, "stats-job {id}");
    }
    let missing = buried + 1000;
    b.expect(&format!("peek {missing}"), "NOT_FOUND");
    b.expect(&format!("stats-job {missing}"), "NOT_FOUND");

    // Another instance cannot act on the job a connection on A holds.
    b.expect(&format!("touch {held}"), "NOT_FOUND");
    b.expect(&format!("release {held} 0 0"), "NOT_FOUND");
    b.expect(&format!("bury {held} 0"), "NOT_FOUND");
    b.expect(&format!("delete {held}"), "NOT_FOUND");
    b.expect(&format!("kick-job {held}"), "NOT_FOUND");
    b.expect(&format!("reserve-job {held}"), "NOT_FOUND");
    assert_eq!(
        b.dict_value(&format!("stats-job {held}"), "state"),
        "reserved"
    );
    // The holder still has it.
    holder.expect(&format!("touch {held}"), "TOUCHED");
    holder.expect(&format!("delete {held}"), "DELETED");

    // kick-job on B: buried and delayed jobs put on A become ready; a ready one is not
    // kickable.
    b.expect(&format!("kick-job {ready}"), "NOT_FOUND");
    b.expect(&format!("kick-job {buried}"), "KICKED");
    b.expect(&format!("kick-job {delayed}"), "KICKED");
    for id in [buried, delayed] {
        let s: HashMap<String, String> = a.dict(&format!("stats-job {id}")).into_iter().collect();
        assert_eq!(s["state"], "ready", "job {id} after kick-job on B: {s:?}");
        assert_eq!(s["kicks"], "1", "job {id} after kick-job on B: {s:?}");
    }
    // reserve-job on B of a ready job put on A.
    let r = b.cmd(&format!("reserve-job {ready}"));
    assert_eq!(r.line, format!("RESERVED {ready} 5"));
    a.expect(&format!("delete {ready}"), "NOT_FOUND");
    b.expect(&format!("delete {ready}"), "DELETED");
    b.expect(&format!("delete {buried}"), "DELETED");
    b.expect(&format!("delete {delayed}"), "DELETED");

    // delete on B of ready, buried and delayed jobs put on A.
    let d_ready = a.put(0, 0, 60, b"x");
    let d_delayed = a.put(0, 60, 60, b"y");
    let d_buried = a.put(0, 0, 60, b"z");
    let (got, _) = a.reserve();
    assert_eq!(got, d_ready);
    a.expect(&format!("release {d_ready} 0 0"), "RELEASED");
    a.expect(
        &format!("reserve-job {d_buried}"),
        &format!("RESERVED {d_buried} 1"),
    );
    a.expect(&format!("bury {d_buried} 0"), "BURIED");
    assert_eq!(
        b.dict_value(&format!("stats-job {d_ready}"), "state"),
        "ready"
    );
    assert_eq!(
        b.dict_value(&format!("stats-job {d_delayed}"), "state"),
        "delayed"
    );
    assert_eq!(
        b.dict_value(&format!("stats-job {d_buried}"), "state"),
        "buried"
    );
    for id in [d_ready, d_delayed, d_buried] {
        b.expect(&format!("delete {id}"), "DELETED");
        a.expect(&format!("peek {id}"), "NOT_FOUND");
        a.expect(&format!("delete {id}"), "NOT_FOUND");
    }
    assert_no_jobs_left(&mut a, "stats", 7);
    assert_no_jobs_left(&mut b, "stats-tube jobs", 7);
    assert_eq!(a.dict_value("stats-tube jobs", "cmd-delete"), "7");
}

// ---------------------------------------------------------------------------------------
// 5. A closed connection's reservations return at once.

#[test]
fn closing_a_connection_on_one_instance_hands_its_job_to_a_waiter_on_another() {
    let _serial = serial();
    const ROUNDS: usize = 20;
    let Some(cluster) = Cluster::start(2, "close") else {
        return;
    };
    let mut a = cluster.connect(0, "producer");
    a.use_tube("c");
    let mut b = cluster.connect(1, "waiter");
    b.watch_only("c");
    let mut b_mon = cluster.connect(1, "monitor");
    let mut samples = Vec::new();
    for round in 0..ROUNDS {
        let id = a.put(0, 0, 60, format!("close {round}").as_bytes());
        let mut holder = cluster.connect(0, "holder");
        holder.watch_only("c");
        let (got, _) = holder.reserve();
        assert_eq!(got, id);
        b.send_line("reserve");
        wait_waiting(&mut b_mon, "c", 1);
        if round == 0 {
            // While A's connection holds it, B's waiter gets nothing.
            b.expect_silence(Duration::from_millis(300));
        }
        let t0 = Instant::now();
        drop(holder);
        let r = b.reply();
        samples.push(t0.elapsed());
        assert_eq!(r.word(), "RESERVED", "round {round}: {:?}", r.line);
        assert_eq!(r.id(), Some(id), "round {round}");
        let s: HashMap<String, String> = b.dict(&format!("stats-job {id}")).into_iter().collect();
        assert_eq!(s["reserves"], "2", "job {id}: {s:?}");
        assert_eq!(s["timeouts"], "0", "job {id}: {s:?}");
        b.expect(&format!("delete {id}"), "DELETED");
    }
    let (m, p90, max) = summary(&samples);
    println!(
        "multi-instance close: connection closed on A -> its job RESERVED on B over \
         {ROUNDS} rounds: median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        ms(m),
        ms(p90),
        ms(max)
    );
    assert!(
        m < Duration::from_millis(50),
        "median close-to-reserve {:.2} ms",
        ms(m)
    );
    assert!(
        max < Duration::from_secs(1),
        "a closed connection's job took {:.0} ms to reach B",
        ms(max)
    );
    assert_no_jobs_left(&mut b_mon, "stats", ROUNDS as u64);
}

// ---------------------------------------------------------------------------------------
// 6. Job ids.

#[test]
fn job_ids_are_unique_across_instances_and_increase() {
    let _serial = serial();
    const K: usize = 3;
    const SEQUENTIAL: u64 = 300;
    const CONCURRENT_EACH: u64 = 500;
    let Some(cluster) = Cluster::start(K, "idseq") else {
        return;
    };
    let mut clients: Vec<Client> = (0..K).map(|i| cluster.connect(i, "producer")).collect();
    clients[1].use_tube("other");
    let mut last = 0;
    for n in 1..=SEQUENTIAL {
        let c = &mut clients[(n as usize) % K];
        let id = c.put(0, 0, 60, b"x");
        assert_eq!(
            id, n,
            "put #{n} (on {}) got id {id}, after id {last}",
            c.name
        );
        last = id;
    }

    let handles: Vec<_> = (0..K)
        .map(|i| {
            let addr = cluster.addr(i);
            thread::spawn(move || {
                let mut c = Client::connect(addr, format!("producer@{}", NAMES[i]));
                let mut ids = Vec::new();
                for _ in 0..CONCURRENT_EACH {
                    ids.push(c.put(0, 0, 60, b"y"));
                }
                ids
            })
        })
        .collect();
    let mut all = BTreeSet::new();
    for h in handles {
        let ids = h.join().expect("producer thread");
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one connection's ids did not increase"
        );
        for id in ids {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
    let want: BTreeSet<u64> = (SEQUENTIAL + 1..=SEQUENTIAL + K as u64 * CONCURRENT_EACH).collect();
    assert_eq!(
        all, want,
        "concurrent puts did not get a gap-free unique range"
    );
    println!(
        "multi-instance ids: {SEQUENTIAL} interleaved puts on {K} instances got 1..={SEQUENTIAL} \
         in order; {} concurrent puts got {}..={} with no duplicate",
        all.len(),
        SEQUENTIAL + 1,
        SEQUENTIAL + K as u64 * CONCURRENT_EACH
    );
}

// ---------------------------------------------------------------------------------------
// 7. A crashed instance.

#[test]
fn a_crashed_instance_jobs_return_after_ttr_and_its_tube_references_lapse() {
    let _serial = serial();
    let Some(mut cluster) = Cluster::start(3, "crash") else {
        return;
    };
    // On A: a connection that alone uses and watches `ghost`, and one that holds a job
    // with TTR 2 from `work`.
    let mut ghost = cluster.connect(0, "ghost");
    ghost.use_tube("ghost");
    ghost.watch("ghost");
    let mut holder = cluster.connect(0, "holder");
    holder.watch_only("work");
    // On C (alive, idle throughout): a connection that alone watches `alive`.
    let mut idle = cluster.connect(2, "idle");
    idle.watch("alive");

    let mut b = cluster.connect(1, "producer");
    b.use_tube("work");
    let id = b.put(0, 0, 2, b"crash");
    let (got, _) = holder.reserve();
    let reserved_at = Instant::now();
    assert_eq!(got, id);
    let tubes = b.list("list-tubes");
    for t in ["default", "ghost", "work", "alive"] {
        assert!(tubes.contains(&t.to_string()), "list-tubes on B: {tubes:?}");
    }
    let ghost_stats: HashMap<String, String> = b.dict("stats-tube ghost").into_iter().collect();
    assert_eq!(ghost_stats["current-using"], "1");
    assert_eq!(ghost_stats["current-watching"], "1");

    // A also puts a job with delay 2: its due time is A's to act on, but A dies first.
    let mut a_producer = cluster.connect(0, "delayed producer");
    a_producer.use_tube("later");
    let later_put_at = Instant::now();
    let later = a_producer.put(0, 2, 60, b"later");

    let mut waiter = cluster.connect(1, "waiter");
    waiter.watch_only("work");
    waiter.send_line("reserve");
    let mut later_waiter = cluster.connect(1, "later waiter");
    later_waiter.watch_only("later");
    later_waiter.send_line("reserve");
    let mut b_mon = cluster.connect(1, "monitor");
    wait_waiting(&mut b_mon, "work", 1);
    wait_waiting(&mut b_mon, "later", 1);
    // References are summed over instances: `work` is used by B's producer and
    // watched by A's holder and B's waiter; `later` is used by A's producer and watched
    // by B's waiter.
    let refs = |c: &mut Client, tube: &str| {
        let s: HashMap<String, String> =
            c.dict(&format!("stats-tube {tube}")).into_iter().collect();
        (s["current-using"].clone(), s["current-watching"].clone())
    };
    assert_eq!(refs(&mut b_mon, "work"), ("1".into(), "2".into()));
    assert_eq!(refs(&mut b_mon, "later"), ("1".into(), "1".into()));

    cluster.instances[0]
        .signal("KILL")
        .expect("kill -9 instance A");
    let killed_at = Instant::now();
    assert!(
        cluster.instances[0]
            .wait_exit(Duration::from_secs(5))
            .is_some(),
        "A did not die"
    );

    // The job comes back once its TTR has run out.
    let r = waiter.reply();
    let back_after = reserved_at.elapsed();
    assert_eq!(r.line, format!("RESERVED {id} 5"));
    let s: HashMap<String, String> = b.dict(&format!("stats-job {id}")).into_iter().collect();
    assert_eq!(s["reserves"], "2", "{s:?}");
    assert_eq!(s["timeouts"], "1", "{s:?}");
    assert!(
        back_after >= Duration::from_millis(1900),
        "the dead instance's job came back before its TTR: {:.0} ms",
        ms(back_after)
    );
    assert!(
        back_after <= Duration::from_millis(3500),
        "the dead instance's job came back only after {:.0} ms",
        ms(back_after)
    );
    waiter.expect(&format!("delete {id}"), "DELETED");

    // So does the delayed job, once its delay has run out.
    let r = later_waiter.reply();
    let later_after = later_put_at.elapsed();
    assert_eq!(r.line, format!("RESERVED {later} 5"));
    assert!(
        later_after >= Duration::from_millis(1900),
        "the dead instance's delayed job became ready early: {:.0} ms",
        ms(later_after)
    );
    assert!(
        later_after <= Duration::from_millis(3500),
        "the dead instance's delayed job became ready only after {:.0} ms",
        ms(later_after)
    );
    later_waiter.expect(&format!("delete {later}"), "DELETED");

    // B drops A's references once A's heartbeat has lapsed.
    let ghost_gone = killed_at.elapsed()
        + wait_until(
            "B drops the dead instance's reference to `ghost`",
            Duration::from_secs(14).saturating_sub(killed_at.elapsed()),
            || !b.list("list-tubes").contains(&"ghost".to_string()),
        );
    b.expect("stats-tube ghost", "NOT_FOUND");
    // Only A's share of the shared tubes' references went.
    assert_eq!(refs(&mut b_mon, "work"), ("1".into(), "1".into()));
    assert_eq!(refs(&mut b_mon, "later"), ("0".into(), "1".into()));
    let tubes = b.list("list-tubes");
    for t in ["default", "work", "alive"] {
        assert!(
            tubes.contains(&t.to_string()),
            "list-tubes on B after A's references lapsed: {tubes:?}"
        );
    }
    // C, alive but idle all along, kept its reference and still serves.
    assert_eq!(
        b.dict_value("stats-tube alive", "current-watching"),
        "1",
        "C's live reference"
    );
    assert_eq!(idle.list("list-tubes-watched"), vec!["default", "alive"]);
    assert_eq!(idle.line("reserve-with-timeout 0"), "TIMED_OUT");
    println!(
        "multi-instance crash: A killed holding a job with TTR 2: job reservable on B {:.0} ms \
         after it was reserved; A's job with delay 2 reached B {:.0} ms after the put; A's \
         tube references dropped {:.1} s after the kill",
        ms(back_after),
        ms(later_after),
        ghost_gone.as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// 8. A stalled instance that comes back.

/// Whether `c`'s connection is still open: a harmless command must get its reply.
fn still_open(c: &mut Client) -> bool {
    use std::io::Write;
    if c.socket().write_all(b"list-tube-used\r\n").is_err() {
        return false;
    }
    c.try_reply(Duration::from_secs(2))
        .is_ok_and(|r| r.word() == "USING")
}

#[test]
fn a_stalled_instance_that_resumes_does_not_corrupt_tube_references() {
    let _serial = serial();
    let Some(cluster) = Cluster::start(2, "stall") else {
        return;
    };
    let refs = |c: &mut Client, tube: &str| {
        let s: HashMap<String, String> =
            c.dict(&format!("stats-tube {tube}")).into_iter().collect();
        (s["current-using"].clone(), s["current-watching"].clone())
    };
    // A's connection alone uses `mine`; it and B's connection watch `shared`.
    let mut a_conn = cluster.connect(0, "stalled");
    a_conn.use_tube("mine");
    a_conn.watch("shared");
    let mut b_conn = cluster.connect(1, "live");
    b_conn.watch("shared");
    let mut b_mon = cluster.connect(1, "monitor");
    assert_eq!(refs(&mut b_mon, "shared"), ("0".into(), "2".into()));
    assert_eq!(refs(&mut b_mon, "mine"), ("1".into(), "0".into()));

    // A stops answering (SIGSTOP: a long GC pause, a frozen VM, a partition from Redis)
    // for longer than the heartbeat lapse: B counts it dead and drops its references.
    cluster.instances[0].signal("STOP").expect("SIGSTOP A");
    let stopped_at = Instant::now();
    let dropped_after = wait_until(
        "B drops the stalled instance's references",
        Duration::from_secs(14),
        || !b_mon.list("list-tubes").contains(&"mine".to_string()),
    );
    cluster.instances[0].signal("CONT").expect("SIGCONT A");
    let resumed_at = Instant::now();

    // A comes back with its connection still open. Either it re-asserts that
    // connection's references, or it closes the connection (it was declared dead);
    // what it must not do is keep serving a connection that no count includes.
    let mut problems = Vec::new();
    let mut outcome = None;
    while resumed_at.elapsed() < Duration::from_secs(5) {
        if !still_open(&mut a_conn) {
            outcome = Some("closed its connection");
            break;
        }
        if b_mon.list("list-tubes").contains(&"mine".to_string())
            && refs(&mut b_mon, "shared") == ("0".into(), "2".into())
        {
            outcome = Some("restored its references");
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    if outcome.is_none() {
        problems.push(format!(
            "5 s after A resumed, its open connection still uses `mine` and watches `shared`, \
             but list-tubes on B is {:?} and stats-tube shared (using, watching) is {:?}",
            b_mon.list("list-tubes"),
            refs(&mut b_mon, "shared")
        ));
    }

    // A's connection goes away; B's connection still watches `shared`.
    drop(a_conn);
    let mut a_mon = cluster.connect(0, "monitor");
    wait_until("A closes its connection", Duration::from_secs(5), || {
        a_mon.stat_u64("current-connections") == 1
    });
    let tubes = b_mon.list("list-tubes");
    if !tubes.contains(&"shared".to_string()) {
        problems.push(format!(
            "after A's connection closed, `shared` (still watched by B's connection) is gone \
             from list-tubes: {tubes:?}"
        ));
    } else {
        let shared = refs(&mut b_mon, "shared");
        if shared != ("0".into(), "1".into()) {
            problems.push(format!(
                "after A's connection closed, stats-tube shared (using, watching) is {shared:?}, \
                 expected (0, 1): B's connection watches it"
            ));
        }
    }
    let default = refs(&mut b_mon, "default");
    // B's two connections and A's monitor use and watch `default`.
    if default != ("3".into(), "3".into()) {
        problems.push(format!(
            "stats-tube default (using, watching) is {default:?}, expected (3, 3) for the three \
             open connections"
        ));
    }
    println!(
        "multi-instance stall: A stopped for {:.1} s (B dropped its references after {:.1} s); \
         after resuming A {}",
        (resumed_at - stopped_at).as_secs_f64(),
        dropped_after.as_secs_f64(),
        outcome.unwrap_or("neither restored its references nor closed its connection")
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(b_conn.list("list-tubes-watched"), vec!["default", "shared"]);
}
