//! Memory pressure, against real processes in a memory-limited cgroup (as a container's
//! limit: allocation never fails there, the kernel kills the process at the limit);
//! support/cgroup.rs makes one per test and removes it after. Figures printed
//! (`--nocapture`).
//!
//! - `puts_answer_out_of_memory_before_the_limit` — memory mode and leader mode in a
//!   cgroup of 96 MiB, no option given: redstalk reads the cgroup's limit and, once 85%
//!   of it is in use, answers puts OUT_OF_MEMORY (as beanstalkd does when it cannot
//!   allocate a job) instead of being killed; everything else is still served, and once
//!   jobs are deleted puts are accepted again. Before (no budget), the same load got
//!   the process killed by the kernel.
//! - `killed_at_the_limit_anyway_loses_nothing_acknowledged` — `-b` and leader mode in
//!   the same cgroup with `--memory-limit` far above it (the budget cannot protect):
//!   four producers of 60 KB jobs until the kernel kills the process; restarted outside
//!   the cgroup on the same log directory or Redis namespace, every put acknowledged
//!   before the kill is there (history checker: 0 lost).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::cgroup::MemCgroup;
use support::client::Client;
use support::redis::private_redis;
use support::workload::{Side, Workload, WorkloadConfig, judge};
use support::{
    Log, free_port, fresh_dir, redis_args, redstalk_path, serial, spawn_logged,
    wait_child_listening,
};

const LIMIT: u64 = 96 << 20;
const WITHIN: Duration = Duration::from_secs(30);

/// redstalk in `cg` with `args`, once it listens; its address.
fn start_in(cg: &MemCgroup, args: &[String]) -> (Child, Log, SocketAddr) {
    let port = free_port();
    let mut cmd = cg.command(&redstalk_path());
    cmd.args(["-l", "127.0.0.1", "-p", &port.to_string()])
        .args(args);
    let (mut child, log) = spawn_logged(&mut cmd).expect("spawn redstalk in the cgroup");
    wait_child_listening(&mut child, port, WITHIN, &log);
    (child, log, ([127, 0, 0, 1], port).into())
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn puts_answer_out_of_memory_before_the_limit() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "memory-limit tests") else {
        return;
    };
    let url = redis.url();
    let leader = redis_args(&url, "redstalk", "leader");
    for (mode, args) in [("memory", Vec::new()), ("leader", leader)] {
        let Some(cg) = MemCgroup::new(LIMIT) else {
            return;
        };
        let (mut child, log, addr) = start_in(&cg, &args);
        support::wait_served(addr, WITHIN, &log);
        let mut c = Client::connect(addr, "producer");
        let body = vec![b'm'; 16 * 1024];
        let mut ids = Vec::new();
        let mut refused = 0;
        let started = Instant::now();
        for n in 0..20_000 {
            let mut b = body.clone();
            b.extend(format!("-{n}").bytes());
            let r = c
                .try_put(0, 0, 60, &b, Duration::from_secs(10))
                .unwrap_or_else(|e| {
                    panic!(
                        "{mode}: put {n} got no reply ({e}): killed? {:?}\n{}",
                        child.try_wait(),
                        log.tail()
                    )
                });
            match (r.word(), r.id()) {
                ("INSERTED", Some(id)) => ids.push(id),
                ("OUT_OF_MEMORY", _) => {
                    refused += 1;
                    if refused >= 20 {
                        break;
                    }
                }
                _ => panic!("{mode}: put answered {:?}", r.line),
            }
        }
        let filled_in = started.elapsed();
        assert!(
            refused >= 20,
            "{mode}: 20,000 puts of 16 KiB were all accepted"
        );
        assert!(
            matches!(child.try_wait(), Ok(None)),
            "{mode}: the process died: {}",
            log.tail()
        );
        // Everything else is served.
        assert_eq!(c.cmd("stats").word(), "OK");
        assert_eq!(c.cmd("peek-ready").word(), "FOUND");
        let (held, _) = c.reserve();
        assert_eq!(c.cmd(&format!("delete {held}")).line, "DELETED");
        // Room again once jobs go.
        for id in &ids[1..ids.len() / 2] {
            if *id != held {
                assert_eq!(c.cmd(&format!("delete {id}")).line, "DELETED");
            }
        }
        let deleted_at = Instant::now();
        while c.put_reply(0, 0, 60, b"after the deletes").word() != "INSERTED" {
            assert!(
                deleted_at.elapsed() < Duration::from_secs(10),
                "{mode}: puts still refused 10 s after the deletes\n{}",
                log.tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        println!(
            "memory limit ({mode} mode): cgroup limit {} MiB: {} puts of 16 KiB accepted in {} \
             ms, then OUT_OF_MEMORY; the cgroup's peak {} MiB; after {} deletes a put is \
             accepted again",
            LIMIT >> 20,
            ids.len(),
            filled_in.as_millis(),
            cg.peak() >> 20,
            ids.len() / 2
        );
        kill(&mut child);
    }
}

#[test]
fn killed_at_the_limit_anyway_loses_nothing_acknowledged() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "memory-limit tests") else {
        return;
    };
    let url = redis.url();
    let dir = fresh_dir();
    let binlog: Vec<String> = vec!["-b".into(), dir.display().to_string()];
    let leader = redis_args(&url, "redstalk", "leader");
    for (mode, args) in [("-b", binlog), ("leader", leader)] {
        let Some(cg) = MemCgroup::new(LIMIT) else {
            return;
        };
        let mut with_budget = args.clone();
        with_budget.extend(["--memory-limit".into(), (8u64 << 30).to_string()]);
        let (mut child, log, addr) = start_in(&cg, &with_budget);
        support::wait_served(addr, WITHIN, &log);
        let connect: support::workload::Connect =
            Arc::new(move || TcpStream::connect_timeout(&addr, Duration::from_secs(2)));
        let mut cfg = WorkloadConfig::new(0x6d65_6d00);
        cfg.body_pad = 60_000;
        cfg.pace = Duration::ZERO;
        let w = Workload::start(&[Side::new("p", connect, 4, 0)], cfg);
        let start = Instant::now();
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{mode}: not killed within 60 s ({} acknowledged)",
                w.acked()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let acked = w.acked();
        let history = w.stop();
        history.dump(&format!("killed at the memory limit {mode}"));
        let peak = cg.peak();
        drop(cg);
        // Restarted outside the cgroup, on the same log or namespace.
        let port = free_port();
        let mut cmd = std::process::Command::new(redstalk_path());
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(&args);
        let (mut again, again_log) = spawn_logged(&mut cmd).expect("restart redstalk");
        let addr2: SocketAddr = ([127, 0, 0, 1], port).into();
        support::wait_served(addr2, WITHIN, &again_log);
        let connect2: support::workload::Connect =
            Arc::new(move || TcpStream::connect_timeout(&addr2, Duration::from_secs(2)));
        let verdict = judge(&history, &connect2);
        println!(
            "killed at the memory limit ({mode}): {acked} puts of 60 KB acknowledged, then \
             the kernel ended the process ({status}) at a peak of {} MiB (limit {} MiB); \
             restarted: {}",
            peak >> 20,
            LIMIT >> 20,
            verdict.summary()
        );
        verdict.assert_sound(&format!(
            "{mode}, killed at the memory limit\n{}",
            log.tail()
        ));
        assert!(acked > 100, "{mode}: only {acked} puts before the kill");
        kill(&mut again);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
