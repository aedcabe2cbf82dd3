//! Network partitions in Redis leader mode, between real processes on hosts of their own
//! (network namespaces, support/netfault.rs): a redis-server (`appendfsync always`), a
//! leader A and standbys B and C (lease 1 s), clients of A on host `ca` and of B on host
//! `cb`. A recorded workload (support/workload.rs: put, reserve, then delete, release,
//! bury + kick, or touch + delete) runs through A and B while a fault is injected for a
//! few seconds, then healed; the run must then make progress again, and the history
//! checker (support/history.rs) must find, in the whole history against the final state,
//! 0 acknowledged puts lost, 0 deletes undone, 0 reserves of a deleted job, 0 jobs held
//! by two clients at once within their TTR. Each test prints its figures (`--nocapture`).
//!
//! The faults:
//! - `the_leader_cut_from_redis` — A cannot reach Redis; its clients still reach it.
//!   A answers INTERNAL_ERROR, steps down when its lease runs out, and B takes over. A
//!   client that connects to A meanwhile is told at once (its connection is closed
//!   within about a second); before, each waited 5 s for nothing, again and again until
//!   the cut healed.
//! - `the_leader_cut_from_its_standbys` — A reaches Redis but neither standby: A leads on;
//!   B's clients cannot be relayed (closed) until the cut heals.
//! - `a_standby_cut_from_the_leader` — B alone cut from A.
//! - `clients_cut_mid_command` — A's clients cut from A with commands in flight: their
//!   replies are lost; what they held comes back at its TTR.
//! - `one_way_cuts` — Redis' replies to A dropped (A's commands still reach Redis and
//!   apply, unseen), then A's packets to B dropped.
//! - `a_flapping_lossy_link` — A's link to Redis cut and healed every 0.1-0.6 s, with 15%
//!   of A's packets lost, for 6 s.
//! - `a_shared_instance_cut_from_redis_mid_script` — shared mode, two instances: one cut
//!   from Redis for 4 s with scripts in flight; the other serves on.
//!
//! `REDSTALK_FAULTS_SEED` replays a run's random choices; `REDSTALK_FAULTS_HOLD_SCALE`
//! holds each fault that many times longer; `REDSTALK_FAULTS_HISTORY=DIR` writes each
//! run's whole history there. Needs root, iproute2 and
//! nftables (skipped with a notice otherwise, unless `REDSTALK_REQUIRE_ORACLE=1`).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::history::{Call, Op};
use support::netfault::{Net, NetProc};
use support::netprocs::{BEANSTALK_PORT, NetRedis};
use support::workload::{Side, Workload, WorkloadConfig, judge, spread};
use support::{redis_args, serial};

const WITHIN: Duration = Duration::from_secs(30);

fn seed() -> u64 {
    support::rng::seed_from_env()
}

/// `REDSTALK_FAULTS_HOLD_SCALE` (default 1): how many times longer each fault is held
/// (the soak script, protocol-tests/soak, holds them longer).
fn hold_scale() -> f64 {
    std::env::var("REDSTALK_FAULTS_HOLD_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// Redis, leader A, standbys B and C, and the hosts of A's and B's clients.
struct Setup {
    net: Net,
    redis: NetRedis,
    a: NetProc,
    b: NetProc,
    c: NetProc,
}

impl Setup {
    fn start() -> Option<Setup> {
        let net = Net::new(&["redis", "a", "b", "c", "ca", "cb"])?;
        let redis = net.redis("redis", &["--appendonly", "yes", "--appendfsync", "always"]);
        let url = redis.url();
        let args = redis_args(&url, "p", "leader");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let a = net.redstalk("a", &args);
        net.wait_served("ca", net.addr("a", BEANSTALK_PORT), WITHIN, &a.log);
        let b = net.redstalk("b", &args);
        let c = net.redstalk("c", &args);
        net.wait_served("cb", net.addr("b", BEANSTALK_PORT), WITHIN, &b.log);
        Some(Setup {
            net,
            redis,
            a,
            b,
            c,
        })
    }

    fn addr(&self, host: &str) -> SocketAddr {
        self.net.addr(host, BEANSTALK_PORT)
    }

    /// Clients of A on `ca` and of B on `cb`, two producers and two workers each.
    fn workload(&self, seed: u64) -> Workload {
        let side = |name: &str, host: &str, to: &str| {
            Side::new(name, self.net.connector(host, self.addr(to)), 2, 2)
        };
        let w = Workload::start(
            &[side("ca", "ca", "a"), side("cb", "cb", "b")],
            WorkloadConfig::new(seed),
        );
        w.wait_progress(100, WITHIN, || self.logs());
        w
    }

    fn logs(&self) -> String {
        format!(
            "--- A:\n{}\n--- B:\n{}\n--- C:\n{}",
            self.a.log.tail(),
            self.b.log.tail(),
            self.c.log.tail()
        )
    }

    /// Which instance leads now, by the lease in Redis (the address in its token).
    fn leader(&self) -> String {
        let token = self
            .redis
            .cli(&["GET", &support::lease::lease_key("p")])
            .unwrap_or_default();
        let holder = support::lease::holder_address(&token);
        ["a", "b", "c"]
            .into_iter()
            .find(|h| holder == Some(self.addr(h).to_string().as_str()))
            .unwrap_or("none")
            .to_string()
    }
}

/// Run the workload, inject `fault` (its guard heals when dropped) for `hold`, heal, wait
/// for progress, then judge the whole history; prints `name`'s figures.
fn scenario<G>(name: &str, hold: Duration, fault: impl FnOnce(&Setup) -> G) -> Option<()> {
    let _serial = serial();
    let seed = seed();
    let s = Setup::start()?;
    let w = s.workload(seed);
    let before = s.leader();
    let cut_at = Instant::now();
    let guard = fault(&s);
    std::thread::sleep(hold.mul_f64(hold_scale()));
    let during = s.leader();
    drop(guard);
    let healed_at = Instant::now();
    let resumed = w.wait_progress(50, WITHIN, || s.logs());
    report(name, &s, w, cut_at, healed_at, resumed, [before, during]);
    Some(())
}

/// Stop the workload, judge its history, print the figures and assert it sound.
fn report(
    name: &str,
    s: &Setup,
    w: Workload,
    cut_at: Instant,
    healed_at: Instant,
    resumed: Duration,
    leaders: [String; 2],
) {
    let history = w.stop();
    history.dump(name);
    let verdict = judge(&history, &s.net.connector("cb", s.addr("b")));
    let ops = history.ops();
    let during = |o: &Op| o.start >= cut_at && o.start < healed_at;
    println!(
        "{name}: leader before {}, during {}, after {}; fault held {} ms; progress again {} ms \
         after the heal",
        leaders[0],
        leaders[1],
        s.leader(),
        healed_at.duration_since(cut_at).as_millis(),
        resumed.as_millis()
    );
    println!(
        "{name}: during the fault: puts acknowledged {}, INTERNAL_ERROR replies {} ({}), \
         ops without a reply {} ({})",
        ops.iter()
            .filter(|o| during(o) && matches!(o.call, Call::Put { .. }) && o.succeeded())
            .count(),
        ops.iter()
            .filter(|o| during(o) && o.uncertain() && o.reply.is_some())
            .count(),
        spread(&history, |o| during(o)
            && o.uncertain()
            && o.reply.is_some()),
        ops.iter()
            .filter(|o| during(o) && o.reply.is_none() && o.call != Call::Close)
            .count(),
        spread(&history, |o| during(o)
            && o.reply.is_none()
            && o.call != Call::Close),
    );
    println!("{name}: {}", verdict.summary());
    verdict.assert_sound(&format!("{name}\n{}", s.logs()));
}

/// How long a new client of instance `to` waits, connecting from `from`, for an answer
/// to `stats` or the end of its connection.
fn probe(s: &Setup, from: &str, to: &str) -> (Duration, String) {
    let start = Instant::now();
    let outcome = match s.net.connect(from, s.addr(to), Duration::from_secs(2)) {
        Err(e) => format!("connect: {e}"),
        Ok(sock) => {
            let mut c = support::client::Client::from_stream(sock, "probe").unwrap();
            match c.try_call(b"stats\r\n", Duration::from_secs(10)) {
                Ok(r) => r.word().to_string(),
                Err(e) => format!("{:?}", e.kind()),
            }
        }
    };
    (start.elapsed(), outcome)
}

#[test]
fn the_leader_cut_from_redis() {
    let _ = scenario(
        "the leader cut from Redis",
        Duration::from_millis(500),
        |s| {
            let cut = s.net.cut("a", "redis");
            // A steps down within its lease (1 s); B takes over.
            let start = Instant::now();
            while s.leader() != "b" && s.leader() != "c" {
                assert!(
                    start.elapsed() < WITHIN,
                    "no standby took over\n{}",
                    s.logs()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let took_over = start.elapsed();
            // A has found it cannot reach the lease by now (its first attempt after
            // stepping down times out within about a second).
            std::thread::sleep(Duration::from_millis(2000));
            // A new client of A, which can lead nothing and relay to nobody, is told so at
            // once, again and again.
            let probes: Vec<(Duration, String)> = (0..4).map(|_| probe(s, "ca", "a")).collect();
            println!(
                "the leader cut from Redis: a standby leads {} ms after the cut; new clients of \
             the cut instance: {:?}",
                took_over.as_millis(),
                probes
                    .iter()
                    .map(|(d, o)| format!("{o} after {} ms", d.as_millis()))
                    .collect::<Vec<_>>()
            );
            for (d, outcome) in &probes {
                assert!(
                    *d < Duration::from_millis(1500),
                    "a client of the instance cut from Redis waited {d:?} ({outcome})\n{}",
                    s.logs()
                );
            }
            cut
        },
    );
}

#[test]
fn the_leader_cut_from_its_standbys() {
    let _ = scenario(
        "the leader cut from its standbys",
        Duration::from_secs(4),
        |s| (s.net.cut("a", "b"), s.net.cut("a", "c")),
    );
}

#[test]
fn a_standby_cut_from_the_leader() {
    let _ = scenario(
        "a standby cut from the leader",
        Duration::from_secs(4),
        |s| s.net.cut("b", "a"),
    );
}

#[test]
fn clients_cut_mid_command() {
    let _ = scenario("clients cut mid-command", Duration::from_secs(4), |s| {
        s.net.cut("ca", "a")
    });
}

#[test]
fn one_way_cuts() {
    let _ = scenario("one-way cuts", Duration::from_secs(3), |s| {
        let replies_lost = s.net.cut_one_way("redis", "a");
        std::thread::sleep(Duration::from_secs(4));
        drop(replies_lost);
        std::thread::sleep(Duration::from_secs(2));
        s.net.cut_one_way("a", "b")
    });
}

#[test]
fn a_flapping_lossy_link() {
    let seed = seed();
    let _ = scenario("a flapping, lossy link", Duration::from_secs(6), |s| {
        (
            s.net.flap(
                "a",
                "redis",
                (Duration::from_millis(100), Duration::from_millis(600)),
                seed,
            ),
            s.net.lossy("a", 15),
        )
    });
}

/// Shared mode: two instances on one Redis, clients on each (some holding jobs 3 s,
/// asking `list-tube-used` meanwhile); the first instance is cut from Redis for 4 s with
/// scripts in flight (their replies lost: reserves among them, whose jobs the instance
/// undoes after), then healed.
#[test]
fn a_shared_instance_cut_from_redis_mid_script() {
    let _serial = serial();
    let seed = seed();
    let Some(net) = Net::new(&["redis", "s1", "s2", "c1", "c2"]) else {
        return;
    };
    let redis = net.redis("redis", &["--appendonly", "yes", "--appendfsync", "always"]);
    let url = redis.url();
    let args = redis_args(&url, "p", "shared");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a1, a2) = (
        net.addr("s1", BEANSTALK_PORT),
        net.addr("s2", BEANSTALK_PORT),
    );
    let s1 = net.redstalk("s1", &args);
    let s2 = net.redstalk("s2", &args);
    net.wait_served("c1", a1, WITHIN, &s1.log);
    net.wait_served("c2", a2, WITHIN, &s2.log);
    let logs = || format!("--- S1:\n{}\n--- S2:\n{}", s1.log.tail(), s2.log.tail());
    let mut holders = Side::new("c1h", net.connector("c1", a1), 0, 2);
    holders.hold = Duration::from_secs(3);
    let w = Workload::start(
        &[
            Side::new("c1", net.connector("c1", a1), 2, 2),
            holders,
            Side::new("c2", net.connector("c2", a2), 2, 2),
        ],
        WorkloadConfig::new(seed),
    );
    w.wait_progress(100, WITHIN, logs);
    let cut_at = Instant::now();
    let (acked, deleted) = (w.acked(), w.deleted());
    let cut = net.cut("s1", "redis");
    std::thread::sleep(Duration::from_secs(4));
    let during = (w.acked() - acked, w.deleted() - deleted);
    drop(cut);
    let healed_at = Instant::now();
    // Both instances serve again (S1's clients too).
    net.wait_served("c1", a1, WITHIN, &s1.log);
    let resumed = w.wait_progress(50, WITHIN, logs);
    let history = w.stop();
    history.dump("a shared instance cut from Redis mid-script");
    let verdict = judge(&history, &net.connector("c2", a2));
    let in_cut = |o: &Op| o.start >= cut_at && o.start < healed_at;
    let name = "a shared instance cut from Redis mid-script";
    println!(
        "{name}: during the 4 s cut: {} puts and {} deletes acknowledged (through S2); \
         INTERNAL_ERROR replies {} ({}); progress again {} ms after the heal",
        during.0,
        during.1,
        history.count(|o| in_cut(o) && o.uncertain() && o.reply.is_some()),
        spread(&history, |o| in_cut(o)
            && o.uncertain()
            && o.reply.is_some()),
        resumed.as_millis()
    );
    println!("{name}: {}", verdict.summary());
    verdict.assert_sound(&format!("{name}\n{}", logs()));
}
