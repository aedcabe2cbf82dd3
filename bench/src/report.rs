//! What a run found, as text for people or one JSON object for scripts
//! (`bench/compare` reads the JSON).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::cli::Args;
use crate::cpu::{self, ProcessCpu};
use crate::redis::RedisCommands;
use crate::stats::{Summary, ms};

/// The result of one run.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Operations of the measured phase (jobs put, cycled, drained or delivered late).
    pub ops: u64,
    /// What one operation is, e.g. "puts" or "jobs".
    pub unit: &'static str,
    pub elapsed: Duration,
    /// The latency the scenario is about, and its name.
    pub latency: (&'static str, Summary),
    /// Other latencies measured on the way.
    pub others: Vec<(&'static str, Summary)>,
    /// Named figures such as memory (bytes) or rates.
    pub figures: Vec<(&'static str, f64)>,
    /// CPU time of each `--cpu-pid` process during the measured phase.
    pub cpu: Vec<ProcessCpu>,
    /// Commands the Redis of `--redis-info` ran during the measured phase.
    pub redis_commands: Option<RedisCommands>,
    /// Correctness failures; empty when the run is clean.
    pub failures: Vec<String>,
    /// The tubes the run used.
    pub tubes: Vec<String>,
}

impl Outcome {
    pub fn ops_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 { self.ops as f64 / s } else { 0.0 }
    }
}

fn summary_json(s: &Summary) -> Value {
    json!({
        "count": s.count,
        "min_ms": ms(s.min),
        "mean_ms": ms(s.mean),
        "p50_ms": ms(s.p50),
        "p90_ms": ms(s.p90),
        "p99_ms": ms(s.p99),
        "p999_ms": ms(s.p999),
        "max_ms": ms(s.max),
    })
}

/// The run as one JSON object.
pub fn json(args: &Args, o: &Outcome) -> Value {
    let mut others = Map::new();
    for (name, s) in &o.others {
        others.insert((*name).to_string(), summary_json(s));
    }
    let mut figures = Map::new();
    for (name, v) in &o.figures {
        figures.insert((*name).to_string(), json!(v));
    }
    json!({
        "scenario": args.scenario.name(),
        "label": args.label,
        "addr": args.addr,
        "worker_addr": args.worker_addr(),
        "connections": args.connections,
        "workers": args.workers(),
        "pipeline": args.pipeline,
        "body_size": args.body_size,
        "tubes": o.tubes.len(),
        "ops": o.ops,
        "unit": o.unit,
        "elapsed_s": o.elapsed.as_secs_f64(),
        "ops_per_sec": o.ops_per_sec(),
        "latency_name": o.latency.0,
        "latency": summary_json(&o.latency.1),
        "other_latencies": others,
        "figures": figures,
        "server_cpu": cpu::json(&o.cpu, o.ops),
        "redis_commands": o.redis_commands.as_ref().map(|r| r.json(o.ops)),
        "ok": o.failures.is_empty(),
        "failures": o.failures,
    })
}

fn summary_line(name: &str, s: &Summary) -> String {
    format!(
        "  {name:<14} p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms  min {:>8.3} ms  (n={})",
        ms(s.p50),
        ms(s.p99),
        ms(s.max),
        ms(s.min),
        s.count
    )
}

/// The run as a few lines of text.
pub fn text(args: &Args, o: &Outcome) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{}{} on {}: connections={} workers={} pipeline={} body={}B tubes={}",
        args.scenario.name(),
        args.label
            .as_deref()
            .map(|l| format!(" [{l}]"))
            .unwrap_or_default(),
        args.addr,
        args.connections,
        args.workers(),
        args.pipeline,
        args.body_size,
        o.tubes.len()
    );
    let _ = writeln!(
        t,
        "  {} {} in {:.3} s: {:.0} {}/s",
        o.ops,
        o.unit,
        o.elapsed.as_secs_f64(),
        o.ops_per_sec(),
        o.unit
    );
    let _ = writeln!(t, "{}", summary_line(o.latency.0, &o.latency.1));
    for (name, s) in &o.others {
        let _ = writeln!(t, "{}", summary_line(name, s));
    }
    for (name, v) in &o.figures {
        let _ = writeln!(t, "  {name}: {v:.1}");
    }
    if !o.cpu.is_empty() {
        let total: f64 = o.cpu.iter().map(|c| c.micros).sum();
        let each: Vec<String> = o
            .cpu
            .iter()
            .map(|c| format!("pid {} {:.3} s", c.pid, c.micros / 1e6))
            .collect();
        let _ = writeln!(
            t,
            "  server CPU: {:.3} s ({}), {:.2} us per {}",
            total / 1e6,
            each.join(", "),
            total / o.ops.max(1) as f64,
            o.unit.trim_end_matches('s')
        );
    }
    if let Some(r) = &o.redis_commands {
        let busiest: Vec<String> = r
            .busiest()
            .iter()
            .take(8)
            .map(|(name, n)| format!("{name} {:.2}", *n as f64 / o.ops.max(1) as f64))
            .collect();
        let _ = writeln!(
            t,
            "  Redis commands: {} ({:.2} per {}): {}",
            r.total(),
            r.total() as f64 / o.ops.max(1) as f64,
            o.unit.trim_end_matches('s'),
            busiest.join(", ")
        );
    }
    if o.failures.is_empty() {
        let _ = writeln!(
            t,
            "  check: OK (every job put was reserved and deleted exactly once; the tubes are empty)"
        );
    } else {
        let _ = writeln!(t, "  check: FAILED");
        for f in &o.failures {
            let _ = writeln!(t, "    - {f}");
        }
    }
    t
}
