//! CPU time of the server processes during the measured phase of a run (`--cpu-pid`).
//!
//! [`CpuMeter::start`] reads user + system time of each pid from `/proc/PID/stat` at the
//! start of the measured phase, [`CpuMeter::stop`] reads it again at its end; the
//! difference is the servers' work for the ops the run counted. `/proc/PID/stat` counts
//! every thread of the process, ended threads included, in clock ticks (`CLK_TCK`,
//! usually 100 a second): a figure is exact to one tick per process, so runs should
//! last long enough that a tick is small next to the total.

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// CPU time one process spent during the measured phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessCpu {
    pub pid: u32,
    pub micros: f64,
}

/// Readings taken at the start of the measured phase.
#[derive(Debug)]
pub struct CpuMeter {
    start: Vec<(u32, u64)>,
}

impl CpuMeter {
    /// Read the CPU time of every pid now (nothing when `pids` is empty).
    pub fn start(pids: &[u32]) -> Result<CpuMeter> {
        let start = pids
            .iter()
            .map(|&pid| Ok((pid, ticks(pid)?)))
            .collect::<Result<_>>()?;
        Ok(CpuMeter { start })
    }

    /// CPU time of each pid since [`CpuMeter::start`].
    pub fn stop(self) -> Result<Vec<ProcessCpu>> {
        let per_sec = ticks_per_second()?;
        self.start
            .into_iter()
            .map(|(pid, before)| {
                let used = ticks(pid)?.saturating_sub(before);
                Ok(ProcessCpu {
                    pid,
                    micros: used as f64 * 1e6 / per_sec as f64,
                })
            })
            .collect()
    }
}

/// The processes' CPU time as JSON: each process, the total, and the total per op.
pub fn json(cpu: &[ProcessCpu], ops: u64) -> Value {
    if cpu.is_empty() {
        return Value::Null;
    }
    let total: f64 = cpu.iter().map(|c| c.micros).sum();
    json!({
        "pids": cpu.iter().map(|c| c.pid).collect::<Vec<_>>(),
        "us": cpu.iter().map(|c| c.micros).collect::<Vec<_>>(),
        "total_us": total,
        "us_per_op": if ops > 0 { Some(total / ops as f64) } else { None },
    })
}

/// user + system time of process `pid`, in clock ticks.
fn ticks(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_stat(&stat).with_context(|| format!("no utime/stime in {path}"))
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may itself hold spaces and parentheses, so fields
/// are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11); // field 3 (state) is the first
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second, the unit of `/proc/PID/stat` times.
fn ticks_per_second() -> Result<u64> {
    // SAFETY: sysconf reads a configuration value; it has no memory effects and is
    // safe to call with any name.
    #[allow(unsafe_code)]
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .context("sysconf(_SC_CLK_TCK) failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_an_awkward_name() {
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 3 0 12345 1000000 300 18446744073709551615";
        assert_eq!(parse_stat(stat), Some(325));
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
    }

    #[test]
    fn own_cpu_grows_with_work() {
        let me = std::process::id();
        let before = ticks(me).unwrap();
        let meter = CpuMeter::start(&[me]).unwrap();
        // Spin until the kernel has charged this process another tick (a busy machine
        // may give the thread less than its share of a core; 10 s is plenty).
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 0u64;
        while ticks(me).unwrap() <= before && std::time::Instant::now() < give_up {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let used = meter.stop().unwrap();
        assert_eq!(used.len(), 1);
        assert_eq!(used[0].pid, me);
        assert!(used[0].micros > 0.0, "{used:?}");
        let j = json(&used, 4);
        assert_eq!(j["pids"][0], me);
        assert!(j["us_per_op"].as_f64().unwrap() > 0.0);
        assert_eq!(json(&[], 4), Value::Null);
    }
}
