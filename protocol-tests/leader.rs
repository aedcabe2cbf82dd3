//! Redis leader mode against real processes: several `redstalk --redis-mode leader`
//! instances on one private `redis-server` (never the Redis on 6379), leaders killed,
//! frozen and replaced, standbys closed mid-command, namespaces reopened in the other
//! mode. Every wait is bounded; the tests run one at a time and print their figures
//! (`--nocapture`). The instances use a 1 s lease, so a failover takes about a second.
//!
//! What the tests prove:
//! - `failover_to_a_standby_under_load_loses_no_acknowledged_job` — a put / reserve /
//!   delete load runs through a standby (which relays to the leader); the leader is
//!   killed with SIGKILL; the standby takes over and the load carries on through it.
//!   Every acknowledged job is deleted or still there; none lost, none deleted twice.
//! - `a_leader_frozen_past_its_lease_never_answers_as_leader_again` — the leader is
//!   stopped (SIGSTOP) past its lease; the standby takes over and serves a new job;
//!   commands sent to the frozen leader meanwhile are, once it resumes (SIGCONT),
//!   answered INTERNAL_ERROR or not at all (the connection closes) — never INSERTED,
//!   never RESERVED — and nothing it held is written over what the new leader wrote.
//! - `a_standby_dying_mid_command_loses_nothing` — clients of a standby, one halfway
//!   through a put and one holding a reserved job, lose their standby (SIGKILL): the
//!   leader drops the half put and returns the held job to ready at once.
//! - `the_two_modes_never_share_a_namespace` — an instance of one mode refuses to start
//!   on a namespace the other mode serves, saying why.
//! - `a_namespace_reopens_in_either_mode` — jobs in every state, buried order, a pause,
//!   per-tube and global counters and the id counter survive a stop and a start in the
//!   other mode, both ways.
//! - `milliseconds_survive_a_reopen_in_either_mode` — a delay and a TTR written in
//!   milliseconds (docs/EXTENSIONS.md) by one mode are kept to the millisecond by the
//!   other: the delayed job is due at its original time, the TTR lapses after 1.5 s.
//! - `keyed_puts_survive_a_leader_kill_and_dedupe_across_it` — keyed puts
//!   (docs/EXTENSIONS.md, *Keys*) with dedupe windows, some deleted, made before and
//!   during a SIGKILL of the leader (through its standby, which takes over): every key
//!   acknowledged is found by key afterwards (its window for a deleted one), and a put
//!   with it again dedupes to the same id.
//! - `keys_survive_a_reopen_in_either_mode` — keyed jobs and the windows of deleted
//!   ones written by one mode are found by key by the other, and dedupe there.
//! - `a_leader_drops_the_small_bodies_mark` — shared mode's mark that no large body was
//!   ever written (`{P}:small`, docs/REDIS.md) is deleted by a leader taking the
//!   namespace; shared mode, reopening it, serves a large body the leader wrote whole.
//! - `redis_away_answers_within_a_second_and_session_commands_never_wait` — with Redis
//!   killed, a put answers INTERNAL_ERROR within about a second, `list-tube-used` at
//!   once; the leader serves again when Redis is back.
//! - `a_reserve_waits_for_the_jobs_put_and_one_answered_internal_error_holds_no_job` —
//!   with Redis frozen, a RESERVED of a persisted job goes out at once; a reserve of a job
//!   whose put Redis did not apply in time answers INTERNAL_ERROR, and the job is given
//!   back at once: another connection reserves it (the client never learnt it held it).
//! - `a_namespace_lost_with_redis_closes_its_connections_and_starts_fresh` — Redis
//!   restarted empty: the old namespace's connections are closed, the leader serves a
//!   fresh one, and no old connection can touch a new job that reuses an old id.
//! - `a_batch_carries_words_of_every_length_byte_for_byte` — a batch's commands, one
//!   script argument each, reach Redis byte for byte, whatever the length of a word.
//! - `ids_run_a_block_ahead_and_a_clean_stop_writes_the_last_exactly` — the id counter
//!   is written a block ahead: after a kill -9 the next leader's ids are past every id
//!   acknowledged; after a clean stop they continue with the next one.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::thread;
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use support::client::{Client, MsJobs};
use support::keyed::{KeyLedger, keyed_producer};
use support::load::{Load, LoadConfig, wait_drained};
use support::redis::{RedisServer, private_redis};
use support::{Log, ServerKind, ServerProc, redstalk_on_as, serial, wait_served};

const REPLY: Duration = Duration::from_secs(5);
const LOAD_TTR: u32 = 2;

fn redis_aof_always() -> Option<RedisServer> {
    private_redis(
        &["--appendonly", "yes", "--appendfsync", "always"],
        "leader-mode tests",
    )
}

fn leader(redis: &RedisServer, prefix: &str) -> (ServerProc, Log) {
    redstalk_on_as(ServerKind::Leader, redis, prefix, &[])
}

fn load_config(producers: usize, workers: usize) -> LoadConfig {
    LoadConfig {
        producers,
        workers,
        tube: "load".into(),
        ttr: LOAD_TTR,
        reply_timeout: REPLY,
    }
}

/// Jobs `put` by a `from` instance on a fresh namespace (`name` names it), then
/// stopped, are `check`ed through a `to` instance on the same namespace.
fn reopen_checked<T>(
    from: ServerKind,
    to: ServerKind,
    name: &str,
    put: impl FnOnce(&mut Client) -> T,
    check: impl FnOnce(&mut Client, T, &str),
) {
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let prefix = format!("l-{name}-{}", from.name());
    let (first, log1) = redstalk_on_as(from, &redis, &prefix, &[]);
    wait_served(first.addr, REPLY, &log1);
    let mut c = Client::connect(first.addr, "producer");
    let jobs = put(&mut c);
    stop(first);
    drop(c);
    let (second, log2) = redstalk_on_as(to, &redis, &prefix, &[]);
    wait_served(second.addr, REPLY, &log2);
    let mut c = Client::connect(second.addr, "worker");
    check(
        &mut c,
        jobs,
        &format!("{name} {} -> {}", from.name(), to.name()),
    );
    drop(c);
    stop(second);
}

fn reopen_in_milliseconds(from: ServerKind, to: ServerKind) {
    let put = |c: &mut Client| MsJobs::put(c, 4500);
    let check = |c: &mut Client, jobs: MsJobs, what: &str| jobs.check(c, what);
    reopen_checked(from, to, "ms", put, check);
}

/// Keyed jobs and windows put by `from`, audited by `to` on the same namespace.
fn reopen_with_keys(from: ServerKind, to: ServerKind) {
    let put = |c: &mut Client| KeyLedger::put(c, "keys", "r", 100);
    let check = |c: &mut Client, ledger: KeyLedger, what: &str| {
        c.use_tube("keys");
        ledger.audit(c, what);
    };
    reopen_checked(from, to, "keys", put, check);
}

#[test]
fn keys_survive_a_reopen_in_either_mode() {
    let _serial = serial();
    reopen_with_keys(ServerKind::Redis, ServerKind::Leader);
    reopen_with_keys(ServerKind::Leader, ServerKind::Redis);
}

#[test]
fn milliseconds_survive_a_reopen_in_either_mode() {
    let _serial = serial();
    reopen_in_milliseconds(ServerKind::Redis, ServerKind::Leader);
    reopen_in_milliseconds(ServerKind::Leader, ServerKind::Redis);
}

// ---------------------------------------------------------------------------------------

#[test]
fn failover_to_a_standby_under_load_loses_no_acknowledged_job() {
    failover_under_load("KILL");
}

/// A leader frozen (SIGSTOP) with batches in flight, its lease taken over,
/// then resumed: nothing it sends applies after its lease (the batch sequence key
/// keeps the new leader's token), and no acknowledged job is lost.
#[test]
fn keyed_puts_survive_a_leader_kill_and_dedupe_across_it() {
    let _serial = serial();
    let Some(redis) = redis_aof_always() else {
        return;
    };
    let prefix = "l-keys";
    let (mut a, log_a) = leader(&redis, prefix);
    wait_served(a.addr, REPLY, &log_a);
    let (b, log_b) = leader(&redis, prefix);
    let mut c = Client::connect(a.addr, "before");
    let before = KeyLedger::put(&mut c, "keys", "b", 200);
    drop(c);
    let halt = Arc::new(AtomicBool::new(false));
    let producer = keyed_producer(b.addr, "keys", halt.clone());
    thread::sleep(Duration::from_millis(700));
    a.signal("KILL").expect("kill the leader");
    assert!(a.wait_exit(REPLY).is_some(), "the leader survived SIGKILL");
    let killed = Instant::now();
    // The standby leads within its lease; the producer goes on through it.
    thread::sleep(Duration::from_secs(4));
    halt.store(true, Ordering::Relaxed);
    let during = producer.join().expect("the producer");
    assert!(
        during.live.len() + during.deleted.len() > 20,
        "too few keyed puts acknowledged around the kill: {during:?}\n{}",
        log_b.tail()
    );
    let mut c = Client::connect(b.addr, "auditor");
    c.use_tube("keys");
    before.audit(&mut c, "leader kill -9 (keys put before)");
    during.audit(&mut c, "leader kill -9 (keys put around it)");
    println!(
        "keys: audited {} ms after the kill",
        killed.elapsed().as_millis()
    );
    drop(c);
    stop(b);
}

#[test]
fn a_leader_frozen_with_batches_in_flight_applies_nothing_after_its_lease() {
    failover_under_load("STOP");
}

/// The leader's token in `{<prefix>}:lease:commit` (`<token>#<seq>` of the last batch
/// applied); the token ends with the leader's address.
fn last_batch_by(redis: &RedisServer, prefix: &str) -> String {
    let mut c = ::redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("connect to Redis");
    let tag: Option<String> = ::redis::cmd("GET")
        .arg(format!("{{{prefix}}}:lease:commit"))
        .query(&mut c)
        .expect("GET the commit key");
    tag.unwrap_or_default()
}

/// kill -9 (`KILL`) or freeze (`STOP`, resumed once the standby leads) the leader of a
/// load relayed through its standby.
fn failover_under_load(signal: &str) {
    let _serial = serial();
    let Some(redis) = redis_aof_always() else {
        return;
    };
    let prefix = format!("l-fail-{}", signal.to_lowercase());
    let (mut a, log_a) = leader(&redis, &prefix);
    wait_served(a.addr, REPLY, &log_a);
    let (mut b, log_b) = leader(&redis, &prefix);
    // The load goes through the standby, which relays it to the leader.
    let load = Load::start(b.addr, load_config(4, 4));
    load.wait_until(
        "the load runs through the standby",
        Duration::from_secs(10),
        || log_b.tail(),
        |l| l.acked.len() > 200 && l.deleted.len() > 100,
    );
    let (acked_up, deleted_up) = load.ledger(|l| (l.acked.len(), l.deleted.len()));
    let tag_before = last_batch_by(&redis, &prefix);
    assert!(
        tag_before.contains(&a.addr.to_string()),
        "the last batch {tag_before:?} is not the leader's"
    );
    a.signal(signal).expect("signal the leader");
    if signal == "KILL" {
        assert!(a.wait_exit(REPLY).is_some(), "the leader survived SIGKILL");
    }
    let killed = Instant::now();
    let resumed = load.wait_until(
        "the load resumes once the standby leads",
        Duration::from_secs(10),
        || log_b.tail(),
        |l| l.acked.len() > acked_up + 50 && l.deleted.len() > deleted_up + 50,
    );
    if signal == "STOP" {
        // Resumed with its batches built before the freeze: each is refused.
        a.signal("CONT").expect("SIGCONT the leader");
        thread::sleep(Duration::from_millis(1500));
    }
    let tag_after = last_batch_by(&redis, &prefix);
    assert!(
        tag_after.contains(&b.addr.to_string()),
        "a batch not of the new leader applied last: {tag_after:?} (new leader at {})\n{}",
        b.addr,
        log_a.tail()
    );
    thread::sleep(Duration::from_millis(500));
    let mut c = Client::connect(b.addr, "auditor");
    let mut load = load;
    load.stop_producers();
    let drained = wait_drained(&mut c, "load", Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", load.ledger(|l| l.counts()), log_b.tail()));
    let ledger = load.stop();
    assert!(
        ledger.surprises.is_empty(),
        "unexpected replies: {:?}\n{}",
        &ledger.surprises[..ledger.surprises.len().min(20)],
        log_b.tail()
    );
    let audit = ledger.audit(&mut c);
    assert!(b.is_running(), "the standby died: {}", log_b.tail());
    println!(
        "failover: leader killed with {acked_up} acknowledged; load resumed through the \
         former standby {} ms after the kill (lease 1 s); drained {} ms after the producers \
         stopped",
        resumed.as_millis(),
        drained.as_millis()
    );
    println!("failover: {}", audit.summary());
    println!("failover: {}", ledger.counts());
    let _ = killed;
    println!("failover: last batch before {tag_before:?}, after {tag_after:?}");
    audit.assert_sound(&format!(
        "SIG{signal} of the leader under load, failover to the standby"
    ));
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_leader_frozen_past_its_lease_never_answers_as_leader_again() {
    let _serial = serial();
    let Some(redis) = redis_aof_always() else {
        return;
    };
    let (a, log_a) = leader(&redis, "l-stop");
    wait_served(a.addr, REPLY, &log_a);
    let (b, log_b) = leader(&redis, "l-stop");
    let mut x = Client::connect(a.addr, "client of the frozen leader");
    let held = x.put(10, 0, 60, b"held before the freeze");
    let before = x.put(20, 0, 60, b"ready before the freeze");
    assert_eq!(x.reserve().0, held);

    a.signal("STOP").expect("SIGSTOP the leader");
    // Past the lease (1 s) and the standby's takeover.
    let took_over = wait_served(b.addr, Duration::from_secs(10), &log_b);
    let mut y = Client::connect(b.addr, "client of the new leader");
    // The new leader gave the held job back (its holder's leader is gone) and has the
    // ready one.
    let fresh = y.put(5, 0, 60, b"put on the new leader");
    // Sent to the frozen leader; it reads them when it resumes.
    x.send(b"put 0 0 60 6\r\nstale!\r\nreserve-with-timeout 0\r\ndelete 1\r\n");
    thread::sleep(Duration::from_millis(300));
    a.signal("CONT").expect("SIGCONT the leader");
    let mut answers = Vec::new();
    for _ in 0..3 {
        match x.try_reply(REPLY) {
            Ok(r) => answers.push(r.line),
            Err(_) => break,
        }
    }
    for line in &answers {
        assert!(
            line == "INTERNAL_ERROR",
            "the resumed leader answered {line:?} (all: {answers:?})\n{}",
            log_a.tail()
        );
    }
    // Nothing the old leader held was written over the new leader's state.
    thread::sleep(Duration::from_millis(1500));
    let mut z = Client::connect(b.addr, "auditor");
    assert_eq!(
        z.dict_value(&format!("stats-job {held}"), "state"),
        "ready",
        "the job held through the old leader"
    );
    assert_eq!(
        z.dict_value(&format!("stats-job {before}"), "state"),
        "ready"
    );
    assert_eq!(
        z.dict_value(&format!("stats-job {fresh}"), "state"),
        "ready"
    );
    assert_eq!(z.stat_u64("current-jobs-ready"), 3, "{}", log_b.tail());
    let stale = z.cmd("peek-ready");
    assert_ne!(stale.text(), "stale!");
    // The resumed instance stands by now: it relays to the new leader.
    let mut again = Client::connect(a.addr, "client of the resumed instance");
    let r = again.try_call(b"stats-tube default\r\n", REPLY);
    assert!(
        matches!(&r, Ok(r) if r.word() == "OK"),
        "the resumed instance: {r:?}\n{}",
        log_a.tail()
    );
    println!(
        "SIGSTOP past the lease: new leader serving {} ms after the freeze; the resumed \
         instance answered {answers:?} to what it was sent while frozen",
        took_over.as_millis()
    );
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_standby_dying_mid_command_loses_nothing() {
    let _serial = serial();
    let Some(redis) = redis_aof_always() else {
        return;
    };
    let (a, log_a) = leader(&redis, "l-relay");
    wait_served(a.addr, REPLY, &log_a);
    let (mut b, log_b) = leader(&redis, "l-relay");
    let mut direct = Client::connect(a.addr, "direct client");
    let job = direct.put(1, 0, 120, b"held through the standby");
    let total = direct.stat_u64("total-jobs");
    let mut holder = Client::connect(b.addr, "worker via the standby");
    assert_eq!(holder.reserve().0, job, "{}", log_b.tail());
    let mut half = Client::connect(b.addr, "producer via the standby");
    half.send(b"put 0 0 60 10\r\nhalf");
    thread::sleep(Duration::from_millis(200));
    assert_eq!(direct.stat_u64("current-jobs-reserved"), 1);
    b.signal("KILL").expect("kill -9 the standby");
    assert!(b.wait_exit(REPLY).is_some());
    let start = Instant::now();
    // The held job is ready again at once (far below its TTR of 120 s).
    let got = direct.reserve_timeout(5).expect("the held job comes back");
    assert_eq!(got.0, job);
    let back_in = start.elapsed();
    assert!(back_in < Duration::from_secs(2), "took {back_in:?}");
    assert_eq!(
        direct.stat_u64("total-jobs"),
        total,
        "the half put made a job"
    );
    assert_eq!(direct.cmd("delete 99").line, "NOT_FOUND");
    println!(
        "standby killed mid-command: its client's job ready again {} ms later; the half put \
         left nothing",
        back_in.as_millis()
    );
}

// ---------------------------------------------------------------------------------------

#[test]
fn the_two_modes_never_share_a_namespace() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let (l, log_l) = leader(&redis, "l-modes");
    wait_served(l.addr, REPLY, &log_l);
    let refused = ServerProc::start_on_redis_as(ServerKind::Redis, &redis.url(), "l-modes", &[]);
    let err = refused
        .err()
        .expect("a shared-mode instance started next to a leader");
    assert!(err.contains("leader"), "{err}");
    drop(l);
    // Once the leader's lease has lapsed, the shared mode may have the namespace.
    thread::sleep(Duration::from_millis(1500));
    let (s, _log_s) = redstalk_on_as(ServerKind::Redis, &redis, "l-modes", &[]);
    let refused = ServerProc::start_on_redis_as(ServerKind::Leader, &redis.url(), "l-modes", &[]);
    let err = refused
        .err()
        .expect("a leader started next to a shared instance");
    assert!(err.contains("shared"), "{err}");
    drop(s);
    println!("modes: each refused next to the other");
}

// ---------------------------------------------------------------------------------------

/// A job's figures that must survive a reopen (`stats-job` minus age and time left).
fn job_figures(c: &mut Client, id: u64) -> Vec<(String, String)> {
    c.dict(&format!("stats-job {id}"))
        .into_iter()
        .filter(|(k, _)| !matches!(k.as_str(), "age" | "time-left"))
        .collect()
}

/// Tube figures that must survive (the connections' own figures go with them).
fn tube_figures(c: &mut Client, tube: &str) -> Vec<(String, String)> {
    c.dict(&format!("stats-tube {tube}"))
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "current-using" | "current-watching" | "current-waiting" | "pause-time-left"
            )
        })
        .collect()
}

/// Fill a namespace with jobs in every state; the ids, by what they are.
struct Filled {
    ready: u64,
    delayed: u64,
    buried: [u64; 2],
    reserved: u64,
    paused_ready: u64,
}

fn fill(c: &mut Client, holder: &mut Client) -> Filled {
    c.use_tube("a");
    let ready = c.put(5, 0, 60, b"ready");
    let delayed = c.put(6, 100, 60, b"delayed");
    let b1 = c.put(7, 0, 60, b"buried first");
    let b2 = c.put(8, 0, 60, b"buried second");
    let gone = c.put(9, 0, 60, b"deleted");
    assert_eq!(c.cmd(&format!("delete {gone}")).line, "DELETED");
    holder.watch_only("a");
    for want in [ready, b1, b2] {
        // Reserve in priority order, then bury two in order, and release the first.
        assert_eq!(holder.reserve().0, want);
    }
    assert_eq!(holder.cmd(&format!("bury {b1} 70")).line, "BURIED");
    assert_eq!(holder.cmd(&format!("bury {b2} 80")).line, "BURIED");
    assert_eq!(holder.cmd(&format!("release {ready} 4 0")).line, "RELEASED");
    let reserved = c.put(1, 0, 300, b"reserved");
    assert_eq!(holder.reserve().0, reserved);
    c.use_tube("b");
    let paused_ready = c.put(3, 0, 60, b"in a paused tube");
    assert_eq!(c.cmd("pause-tube b 100").line, "PAUSED");
    Filled {
        ready,
        delayed,
        buried: [b1, b2],
        reserved,
        paused_ready,
    }
}

/// Stop `srv` cleanly (SIGTERM) and wait for it.
fn stop(mut srv: ServerProc) {
    srv.signal("TERM").expect("SIGTERM");
    assert!(srv.wait_exit(REPLY).is_some(), "did not stop on SIGTERM");
}

fn reopen(from: ServerKind, to: ServerKind) {
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let prefix = format!("l-reopen-{}", from.name());
    let (first, log1) = redstalk_on_as(from, &redis, &prefix, &[]);
    wait_served(first.addr, REPLY, &log1);
    let mut c = Client::connect(first.addr, "filler");
    let mut holder = Client::connect(first.addr, "holder");
    let f = fill(&mut c, &mut holder);
    let ids = [
        f.ready,
        f.delayed,
        f.buried[0],
        f.buried[1],
        f.reserved,
        f.paused_ready,
    ];
    let jobs: Vec<_> = ids.iter().map(|&id| job_figures(&mut c, id)).collect();
    let tubes = [tube_figures(&mut c, "a"), tube_figures(&mut c, "b")];
    let totals = (c.stat_u64("total-jobs"), c.stat_u64("job-timeouts"));
    let listed = c.list("list-tubes");
    // Stopped while the holder still holds its job: a clean stop hands back nothing a
    // client holds.
    stop(first);
    drop((c, holder));

    let (second, log2) = redstalk_on_as(to, &redis, &prefix, &[]);
    wait_served(second.addr, REPLY, &log2);
    let mut c = Client::connect(second.addr, "checker");
    for (id, before) in ids.iter().zip(&jobs) {
        let mut after = job_figures(&mut c, *id);
        let mut want = before.clone();
        if *id == f.reserved && to == ServerKind::Leader {
            // A leader gives back what was reserved: its holder's connection is gone.
            for (k, v) in &mut want {
                if k == "state" {
                    *v = "ready".into();
                }
            }
        }
        after.sort();
        want.sort();
        assert_eq!(after, want, "job {id} after reopening in {}", to.name());
    }
    let tubes_after = [tube_figures(&mut c, "a"), tube_figures(&mut c, "b")];
    let expect_tubes = if to == ServerKind::Leader {
        // The reserved job is ready again in tube a.
        let mut a = tubes[0].clone();
        for (k, v) in &mut a {
            match k.as_str() {
                "current-jobs-reserved" => *v = "0".into(),
                "current-jobs-ready" => *v = (v.parse::<u64>().unwrap() + 1).to_string(),
                "current-jobs-urgent" => *v = (v.parse::<u64>().unwrap() + 1).to_string(),
                _ => {}
            }
        }
        [a, tubes[1].clone()]
    } else {
        tubes.clone()
    };
    assert_eq!(
        tubes_after,
        expect_tubes,
        "tubes after reopening in {}",
        to.name()
    );
    assert_eq!(
        (c.stat_u64("total-jobs"), c.stat_u64("job-timeouts")),
        totals
    );
    let mut listed_after = c.list("list-tubes");
    let mut listed = listed;
    listed.sort();
    listed_after.sort();
    assert_eq!(listed_after, listed);
    let pause_left: u64 = c
        .dict_value("stats-tube b", "pause-time-left")
        .parse()
        .unwrap();
    assert!((95..=100).contains(&pause_left), "pause left {pause_left}");
    let delay_left: u64 = c
        .dict_value(&format!("stats-job {}", f.delayed), "time-left")
        .parse()
        .unwrap();
    assert!((95..=100).contains(&delay_left), "delay left {delay_left}");
    // Buried order: the first buried is kicked first.
    c.use_tube("a");
    assert_eq!(c.cmd("peek-buried").id(), Some(f.buried[0]));
    assert_eq!(c.cmd("kick 1").line, "KICKED 1");
    assert_eq!(c.cmd("peek-buried").id(), Some(f.buried[1]));
    // Ids continue.
    let next = c.put(0, 0, 60, b"next");
    assert!(next > f.paused_ready, "id {next} reused");
    drop(c);
    stop(second);
    println!(
        "reopen {} -> {}: {} jobs, 2 tubes, pause, buried order and counters kept",
        from.name(),
        to.name(),
        ids.len()
    );
}

#[test]
fn a_namespace_reopens_in_either_mode() {
    let _serial = serial();
    reopen(ServerKind::Redis, ServerKind::Leader);
    reopen(ServerKind::Leader, ServerKind::Redis);
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_leader_drops_the_small_bodies_mark() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let prefix = "l-small";
    let marked = || -> bool {
        let mut c = ::redis::Client::open(redis.url())
            .and_then(|c| c.get_connection())
            .expect("connect to Redis");
        ::redis::cmd("EXISTS")
            .arg(format!("{{{prefix}}}:small"))
            .query(&mut c)
            .expect("EXISTS the mark")
    };
    let big = ["-z", "2000000"];
    let (shared, log) = redstalk_on_as(ServerKind::Redis, &redis, prefix, &big);
    wait_served(shared.addr, REPLY, &log);
    assert!(marked(), "shared mode marks the namespace it makes");
    stop(shared);

    let (leader, log) = redstalk_on_as(ServerKind::Leader, &redis, prefix, &big);
    wait_served(leader.addr, REPLY, &log);
    assert!(!marked(), "a leader deletes the mark: {}", log.tail());
    let body: Vec<u8> = (0..(1 << 20) + 7).map(|i| (i % 251) as u8).collect();
    let mut c = Client::connect(leader.addr, "producer");
    let id = c.put(0, 0, 60, &body);
    drop(c);
    stop(leader);

    let (shared, log) = redstalk_on_as(ServerKind::Redis, &redis, prefix, &big);
    wait_served(shared.addr, REPLY, &log);
    assert!(!marked(), "the mark is made only with a namespace");
    let mut c = Client::connect(shared.addr, "worker");
    let (got, served) = c.reserve();
    assert_eq!(got, id);
    assert!(served == body, "the large body is served whole");
    drop(c);
    stop(shared);
}

// ---------------------------------------------------------------------------------------

#[test]
fn redis_away_answers_within_a_second_and_session_commands_never_wait() {
    let _serial = serial();
    let Some(mut redis) = private_redis(&["--appendonly", "yes"], "leader-mode tests") else {
        return;
    };
    let (l, log) = redstalk_on_as(
        ServerKind::Leader,
        &redis,
        "l-away",
        &["--redis-lease", "5000"],
    );
    wait_served(l.addr, REPLY, &log);
    let mut c = Client::connect(l.addr, "client");
    c.put(0, 0, 60, b"before");
    redis.kill();
    let start = Instant::now();
    let r = c.put_reply(0, 0, 60, b"during");
    let put_took = start.elapsed();
    assert_eq!(r.line, "INTERNAL_ERROR");
    let start = Instant::now();
    assert_eq!(c.cmd("list-tube-used").line, "USING default");
    let used_took = start.elapsed();
    assert!(
        put_took < Duration::from_millis(1500),
        "put took {put_took:?}"
    );
    assert!(
        used_took < Duration::from_millis(100),
        "list-tube-used took {used_took:?}"
    );
    redis.spawn().expect("restart redis-server");
    let start = Instant::now();
    loop {
        if c.put_reply(0, 0, 60, b"after").word() == "INSERTED" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{}", log.tail());
    }
    let back = start.elapsed();
    println!(
        "Redis away: put INTERNAL_ERROR after {} ms, list-tube-used {} us; served again {} ms \
         after Redis restarted",
        put_took.as_millis(),
        used_took.as_micros(),
        back.as_millis()
    );
}

// ---------------------------------------------------------------------------------------

/// A RESERVED waits for every change before it (the job's put among them) to be
/// persisted, but not for the reservation itself (a new leader makes reserved jobs ready
/// anyway): with Redis frozen, a persisted job is handed out at once, while a job whose
/// put is not persisted yet is answered INTERNAL_ERROR and given back.
#[test]
fn a_reserve_waits_for_the_jobs_put_and_one_answered_internal_error_holds_no_job() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let (l, log) = redstalk_on_as(
        ServerKind::Leader,
        &redis,
        "l-giveback",
        &["--redis-lease", "10000"],
    );
    wait_served(l.addr, REPLY, &log);
    let mut p = Client::connect(l.addr, "producer");
    let persisted = p.put(0, 0, 60, b"x");
    let pid = redis.pid().expect("redis pid");
    support::signal_pid(pid, "STOP");
    let mut w = Client::connect(l.addr, "worker");
    let asked = Instant::now();
    let r = w.cmd("reserve-with-timeout 0");
    let took = asked.elapsed();
    assert_eq!(
        r.line,
        format!("RESERVED {persisted} 1"),
        "a persisted job is handed out while Redis is frozen: {}",
        log.tail()
    );
    // Not persisted within the commit timeout: the put may have happened (it has, in
    // memory), so its job is there to reserve, but a RESERVED of it must not go out.
    assert_eq!(p.put_reply(0, 0, 60, b"y").line, "INTERNAL_ERROR");
    let mut w2 = Client::connect(l.addr, "worker 2");
    let r = w2.cmd("reserve-with-timeout 0");
    support::signal_pid(pid, "CONT");
    assert_eq!(r.line, "INTERNAL_ERROR", "{}", log.tail());
    // Given back: another connection gets it, and the one answered holds nothing.
    let start = Instant::now();
    let mut other = Client::connect(l.addr, "other");
    let got = other
        .reserve_timeout(5)
        .expect("the job is reservable again");
    assert_ne!(got.0, persisted);
    assert_eq!(w2.cmd(&format!("delete {}", got.0)).line, "NOT_FOUND");
    assert_eq!(w.cmd(&format!("delete {persisted}")).line, "DELETED");
    println!(
        "with Redis frozen: a persisted job reserved in {} us; a reserve of a job whose \
         put was not persisted answered INTERNAL_ERROR, its job reserved by another \
         connection {} ms after Redis resumed",
        took.as_micros(),
        start.elapsed().as_millis()
    );
}

/// Redis restarted empty under a leader: the namespace it served is gone. As after a
/// beanstalkd restart, every client connection of the old namespace is closed and the
/// leader serves a fresh namespace, so an old worker's `delete` of an id the new
/// namespace hands out again can never touch the new job.
#[test]
fn a_namespace_lost_with_redis_closes_its_connections_and_starts_fresh() {
    let _serial = serial();
    let Some(mut redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let (l, log) = leader(&redis, "l-lost");
    wait_served(l.addr, REPLY, &log);
    let mut p = Client::connect(l.addr, "old producer");
    let old = p.put(0, 0, 60, b"old");
    let mut w = Client::connect(l.addr, "old worker");
    let (id, _) = w.reserve_timeout(0).expect("the old job");
    assert_eq!(id, old);
    // No persistence: Redis comes back empty, on the same port.
    redis.kill();
    redis.spawn().expect("Redis back, empty");
    // Until the leader has found the namespace gone, puts answer INTERNAL_ERROR (its
    // batches are fenced: the lease went with the data), as in any outage.
    let back = Instant::now();
    let (mut p2, new) = loop {
        let mut c = Client::connect(l.addr, "new producer");
        let r = c.put_reply(0, 0, 60, b"new");
        if let ("INSERTED", Some(id)) = (r.word(), r.id()) {
            break (c, id);
        }
        assert!(
            back.elapsed() < Duration::from_secs(15),
            "no fresh namespace served: {:?}\n{}",
            r.line,
            log.tail()
        );
        thread::sleep(Duration::from_millis(50));
    };
    let took = back.elapsed();
    // The old connections belonged to the lost namespace: closed, not answered.
    let deleted = w.try_call(format!("delete {new}\r\n").as_bytes(), REPLY);
    assert!(
        deleted.is_err(),
        "the old worker's connection still answers: {deleted:?}\n{}",
        log.tail()
    );
    assert!(
        p.try_call(b"stats\r\n", REPLY).is_err(),
        "the old producer's connection still answers"
    );
    let r = p2.cmd(&format!("peek {new}"));
    assert_eq!(r.line, format!("FOUND {new} 3"), "{}", log.tail());
    assert_eq!(r.body.as_deref(), Some(&b"new"[..]));
    println!(
        "Redis restarted empty: the leader served a fresh namespace {} ms after Redis was \
         back (new job id {new}, the old job's was {old}); the old connections were closed",
        took.as_millis()
    );
}

// ---------------------------------------------------------------------------------------

/// A runtime for driving batch fences by hand on `redis`: the connector a fence makes
/// its connection with, and a connection of the test's own.
fn batch_fence_setup(
    redis: &RedisServer,
) -> (
    tokio::runtime::Runtime,
    redstalk::redis::Connector,
    ::redis::aio::MultiplexedConnection,
) {
    use redstalk::redis::{Connector, TlsFiles};
    let url = redis.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connector = Connector::new(&url, &TlsFiles::default(), None, "t").unwrap();
    let c = rt.block_on(async {
        ::redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    });
    (rt, connector, c)
}

/// Each batch in flight is fenced on its own, by the lease token and the batch
/// sequence: a takeover between two batches lets the first apply and refuses the second;
/// a batch whose predecessor never arrived is refused; a stale batch that lands after
/// a newer one is refused; a lease renewal aborts nothing; ten batches in flight at once
/// on one connection all apply, in order.
#[test]
fn batches_in_flight_are_each_fenced_by_the_lease_and_the_sequence() {
    use redstalk::redis::Code;
    use redstalk::redis::fenced::FenceError;
    use redstalk::redis::fenced_script::{BatchFence, push_command};

    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let (rt, connector, mut c) = batch_fence_setup(&redis);
    rt.block_on(async {
        let lease = "fence:leader";
        let set = |key: &'static str| move |f: &mut BatchFence| {
            let mut call = f.begin(4, 64);
            push_command(&mut call, [&b"SET"[..], key.as_bytes(), b"1"].into_iter());
            call
        };
        let exists = |c: &mut ::redis::aio::MultiplexedConnection, key: &'static str| {
            let mut c = c.clone();
            async move {
                let n: i64 = ::redis::cmd("EXISTS").arg(key).query_async(&mut c).await.unwrap();
                n == 1
            }
        };
        let _: () = ::redis::cmd("SET").arg(lease).arg("A").query_async(&mut c).await.unwrap();
        let mut a = BatchFence::new(connector.clone(), lease.into(), "A".into());
        let conn = a.connection().await.unwrap();

        // Two batches begun; the lease is taken between them.
        let first = set("a1")(&mut a);
        let second = set("a2")(&mut a);
        a.send(conn.clone(), first).await.unwrap();
        let _: () = ::redis::cmd("SET").arg(lease).arg("B").query_async(&mut c).await.unwrap();
        let r = a.send(conn.clone(), second).await;
        assert!(matches!(r, Err(FenceError::Fenced)), "{r:?}");
        assert!(exists(&mut c, "a1").await && !exists(&mut c, "a2").await);

        // B leads. Its batch 2 is sent without batch 1 (lost on the way): refused.
        let mut b = BatchFence::new(connector.clone(), lease.into(), "B".into());
        let conn = b.connection().await.unwrap();
        let lost = set("b1")(&mut b);
        let orphan = set("b2")(&mut b);
        let r = b.send(conn.clone(), orphan).await;
        let out_of_order =
            |r: &Result<(), FenceError>| matches!(r, Err(FenceError::Failed(e)) if Code::found_in(e) == Some(Code::OutOfOrder));
        assert!(out_of_order(&r), "{r:?}");
        assert!(!exists(&mut c, "b2").await);
        b.failed(false);
        let conn = b.connection().await.unwrap();
        // After the failure the chain is broken: the next batch applies (no later one
        // of B's did)...
        let _: () = ::redis::cmd("PEXPIRE").arg(lease).arg(60_000).query_async(&mut c).await.unwrap();
        let next = set("b3")(&mut b);
        b.send(conn.clone(), next).await.unwrap();
        assert!(exists(&mut c, "b3").await, "a renewal aborted a batch");
        // ...and the lost batch 1, landing late, is refused: a later one applied.
        let r = b.send(conn.clone(), lost).await;
        assert!(out_of_order(&r), "{r:?}");
        assert!(!exists(&mut c, "b1").await, "a stale batch applied over a newer one");

        // Ten batches in flight at once on one connection: all apply, in order.
        b.failed(false);
        let conn = b.connection().await.unwrap();
        let keys = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"];
        let calls: Vec<_> = keys.map(|k| set(k)(&mut b)).into_iter().collect();
        let sent: futures_util::stream::FuturesOrdered<_> =
            calls.into_iter().map(|call| b.send(conn.clone(), call)).collect();
        let results: Vec<_> = futures_util::StreamExt::collect::<Vec<_>>(sent).await;
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        for k in keys {
            assert!(exists(&mut c, k).await, "{k}");
        }
        let tag: String = ::redis::cmd("GET")
            .arg(format!("{lease}:commit"))
            .query_async(&mut c)
            .await
            .unwrap();
        println!("fencing: ten batches in flight applied in order; last batch {tag:?}");
        assert!(tag.starts_with("B#"), "{tag}");
    });
}

/// A batch's commands reach Redis byte for byte, one argument each
/// (MessagePack strings the script takes apart): words of every length the encoding
/// tells apart (up to 31 bytes, 255, 65,535 and beyond) and every byte value; and a
/// command in the other form (a word count, then a word per argument) among them.
#[test]
fn a_batch_carries_words_of_every_length_byte_for_byte() {
    use redstalk::redis::fenced_script::{BatchFence, push_command, push_words};

    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let (rt, connector, mut c) = batch_fence_setup(&redis);
    rt.block_on(async {
        let lease = "words:leader";
        let _: () = ::redis::cmd("SET")
            .arg(lease)
            .arg("A")
            .query_async(&mut c)
            .await
            .unwrap();
        let mut fence = BatchFence::new(connector, lease.into(), "A".into());
        let conn = fence.connection().await.unwrap();
        let lengths = [0usize, 1, 31, 32, 255, 256, 65_535, 65_536, 300_000];
        let value = |n: usize| (0..n).map(|i| (i * 7 + n) as u8).collect::<Vec<u8>>();
        let fields: Vec<Vec<u8>> = lengths
            .iter()
            .map(|n| format!("f{n}").into_bytes())
            .collect();
        let values: Vec<Vec<u8>> = lengths.iter().map(|&n| value(n)).collect();
        let mut call = fence.begin(2, 400_000);
        let mut words: Vec<&[u8]> = vec![b"HSET", b"words"];
        for (f, v) in fields.iter().zip(&values) {
            words.push(f);
            words.push(v);
        }
        push_command(&mut call, words.into_iter());
        let binary = value(256);
        // The other form between two encoded commands: a word count, then each word as
        // an argument of its own (its key beginning with a zero byte).
        let raw = value(70_000);
        assert_eq!(raw[240], 0);
        push_words(
            &mut call,
            3,
            [&b"SET"[..], &raw[240..300], &raw[..]].into_iter(),
        );
        push_command(
            &mut call,
            [&b"SET"[..], &binary[..31], &binary[..]].into_iter(),
        );
        fence.send(conn, call).await.unwrap();
        let got: Vec<u8> = ::redis::cmd("GET")
            .arg(&raw[240..300])
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(
            got == raw,
            "the word-per-argument command: {} bytes back",
            got.len()
        );
        for (f, v) in fields.iter().zip(&values) {
            let got: Vec<u8> = ::redis::cmd("HGET")
                .arg("words")
                .arg(f)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(
                got == *v,
                "field {:?}: {} bytes back for {}",
                String::from_utf8_lossy(f),
                got.len(),
                v.len()
            );
        }
        let got: Vec<u8> = ::redis::cmd("GET")
            .arg(&binary[..31])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(got, binary);
        println!("words of {lengths:?} bytes came back byte for byte");
    });
}

/// A tube's counters are written at most once a second, but they are written
/// (by the sink's own timer) when no later change comes to carry them.
#[test]
fn held_back_tube_figures_reach_redis_within_a_second_or_so() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let prefix = "l-figures";
    let (a, log) = leader(&redis, prefix);
    wait_served(a.addr, REPLY, &log);
    let mut c = Client::connect(a.addr, "producer");
    c.use_tube("figs");
    for _ in 0..5 {
        let id = c.put(1, 0, 60, b"x");
        assert_eq!(c.cmd(&format!("delete {id}")).line, "DELETED");
    }
    let mut r = ::redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("connect to Redis");
    let key = format!("{{{prefix}}}:t:figs:meta");
    let started = Instant::now();
    let figures = loop {
        let f: Vec<Option<u64>> = ::redis::cmd("HMGET")
            .arg(&key)
            .arg("total_jobs")
            .arg("cmd_delete")
            .query(&mut r)
            .unwrap();
        if f == [Some(5), Some(5)] || started.elapsed() > Duration::from_secs(5) {
            break f;
        }
        thread::sleep(Duration::from_millis(50));
    };
    println!(
        "figures: total_jobs and cmd_delete of the tube in Redis {figures:?} after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(figures, [Some(5), Some(5)], "{}", log.tail());
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// The id counter is written a block of ids ahead (not with every put), so a
/// leader killed with SIGKILL never lets the next one hand out an id it acknowledged;
/// a clean stop writes the exact last id, so the next leader continues with the next
/// one; the namespace's `total-jobs`, held back, still reaches Redis by the sink's timer.
#[test]
fn ids_run_a_block_ahead_and_a_clean_stop_writes_the_last_exactly() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "leader-mode tests") else {
        return;
    };
    let prefix = "l-ids";
    let mut r = ::redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("connect to Redis");
    let mut read = |key: &str, field: Option<&str>| -> Option<u64> {
        let key = format!("{{{prefix}}}:{key}");
        match field {
            Some(f) => ::redis::cmd("HGET").arg(key).arg(f).query(&mut r).unwrap(),
            None => ::redis::cmd("GET").arg(key).query(&mut r).unwrap(),
        }
    };
    let (mut a, log_a) = leader(&redis, prefix);
    wait_served(a.addr, REPLY, &log_a);
    let mut c = Client::connect(a.addr, "first leader's client");
    let ids: Vec<u64> = (0..3).map(|_| c.put(1, 0, 60, b"x")).collect();
    let last = *ids.last().unwrap();
    let ahead = read("ids", None).expect("ids written");
    assert!(
        ahead > last && ahead <= last + 1_000,
        "ids {ahead} after {last}"
    );
    let started = Instant::now();
    while read("stats", Some("total_jobs")) != Some(3) {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{}",
            log_a.tail()
        );
        thread::sleep(Duration::from_millis(50));
    }
    a.signal("KILL").expect("kill -9 the leader");
    assert!(a.wait_exit(REPLY).is_some());

    let (b, log_b) = leader(&redis, prefix);
    wait_served(b.addr, REPLY, &log_b);
    let mut c = Client::connect(b.addr, "second leader's client");
    let after_kill = c.put(1, 0, 60, b"y");
    assert!(
        after_kill > ahead,
        "id {after_kill} reused (counter was {ahead})"
    );
    let last_b = c.put(1, 0, 60, b"z");
    stop(b);
    assert_eq!(
        read("ids", None),
        Some(last_b),
        "a clean stop writes the exact id"
    );

    let (d, log_d) = leader(&redis, prefix);
    wait_served(d.addr, REPLY, &log_d);
    let mut c = Client::connect(d.addr, "third leader's client");
    assert_eq!(c.put(1, 0, 60, b"w"), last_b + 1, "{}", log_d.tail());
    println!(
        "ids: {ids:?} with the counter at {ahead}; after kill -9 the next leader put \
         {after_kill}; after a clean stop at {last_b} the next put {}",
        last_b + 1
    );
}
