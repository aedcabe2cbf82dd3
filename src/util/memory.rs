//! The memory budget: refuse a put (OUT_OF_MEMORY, as beanstalkd answers when it cannot
//! allocate a job) before the process's memory reaches its limit, rather than let the
//! kernel kill it there. Under a cgroup memory limit (a container's) allocation never
//! fails: the kernel's OOM killer ends the process when it crosses the limit, taking
//! every connection and, without `-b` or Redis, every job with it.
//!
//! The limit is `--memory-limit`, or else the memory limit of the cgroup the process
//! runs in (v2 `memory.max`, v1 `memory.limit_in_bytes`; the smallest along its path),
//! or none. A put is admitted while the memory in use, plus what the puts admitted
//! since it was last measured may take, plus the new body's share, stays under
//! [`ADMIT_SHARE`] of the limit: the rest is headroom for what a job costs besides its
//! body (its copy in a batch on its way to Redis or the log, buffers, connections).
//!
//! "In use" is the allocator's live heap (glibc's `mallinfo2`: arena bytes in use plus
//! mmapped blocks) where glibc is the allocator, the resident set elsewhere: freed
//! memory the allocator keeps is reused by the next allocations, so it does not count
//! against new jobs. It is measured at most every [`SAMPLE_EVERY`]; puts admitted in
//! between are counted at [`COST_FACTOR`] times their body.
//!
//! Invariants: the budget never blocks (a measurement is a few microseconds, taken by
//! whichever put finds the last one stale); it only refuses puts, never anything else.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::lock;

/// The share of the limit jobs may fill (the rest is headroom).
pub const ADMIT_SHARE: f64 = 0.85;
/// How stale a measurement may be.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// What a put admitted since the last measurement is counted as: its body in the job,
/// in a batch or log record on its way out, and bookkeeping.
const COST_FACTOR: u64 = 2;
const JOB_OVERHEAD: u64 = 512;

/// Where the limit came from (for the start log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    Option,
    Cgroup,
}

/// See the module header. Shared by every connection (one per process).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    source: LimitSource,
    sample: Mutex<Sample>,
}

#[derive(Debug)]
struct Sample {
    at: Option<Instant>,
    in_use: u64,
    /// What puts admitted since `at` may take.
    admitted: u64,
}

impl MemoryBudget {
    /// The budget for `--memory-limit` (`option`), else for the cgroup's limit, else
    /// none.
    pub fn configure(option: Option<u64>) -> Option<MemoryBudget> {
        let (limit, source) = match option {
            Some(bytes) => (bytes, LimitSource::Option),
            None => (cgroup_limit()?, LimitSource::Cgroup),
        };
        Some(MemoryBudget::new(limit, source))
    }

    pub fn new(limit: u64, source: LimitSource) -> MemoryBudget {
        MemoryBudget {
            limit,
            source,
            sample: Mutex::new(Sample {
                at: None,
                in_use: 0,
                admitted: 0,
            }),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn source(&self) -> LimitSource {
        self.source
    }

    /// Whether a put of `bytes` fits; if so, it is counted until the next measurement.
    pub fn admit(&self, bytes: u32) -> bool {
        self.admit_with(bytes, in_use)
    }

    fn admit_with(&self, bytes: u32, measure: impl FnOnce() -> u64) -> bool {
        let cost = (u64::from(bytes) + JOB_OVERHEAD) * COST_FACTOR;
        let mut s = lock(&self.sample);
        if s.at.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY) {
            s.in_use = measure();
            s.admitted = 0;
            s.at = Some(Instant::now());
        }
        let ceiling = (self.limit as f64 * ADMIT_SHARE) as u64;
        if s.in_use + s.admitted + cost > ceiling {
            return false;
        }
        s.admitted += cost;
        true
    }
}

/// The memory this process uses now (see the module header).
fn in_use() -> u64 {
    live_heap().unwrap_or_else(resident)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn live_heap() -> Option<u64> {
    // SAFETY: mallinfo2 only reads the allocator's statistics; it takes no pointers.
    #[allow(unsafe_code)]
    let info = unsafe { libc::mallinfo2() };
    Some((info.uordblks + info.hblkhd) as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn live_heap() -> Option<u64> {
    None
}

/// The resident set (`/proc/self/statm`), 0 where it cannot be read.
fn resident() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The smallest memory limit along this process's cgroup path (v2, or v1's memory
/// controller), if any.
fn cgroup_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (root, file) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        } else {
            return None;
        };
        smallest_limit(root, path, file)
    })
}

/// The smallest limit in `file` of the cgroup at `path` under `root` and of its
/// ancestors; `None` when none sets one ("max", or v1's "no limit" value).
fn smallest_limit(root: &str, path: &str, file: &str) -> Option<u64> {
    let mut dir = std::path::PathBuf::from(root);
    let mut smallest: Option<u64> = None;
    let mut consider = |dir: &std::path::Path| {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        // v1 says "no limit" with a page-rounded i64::MAX.
        if let Ok(n) = text.trim().parse::<u64>()
            && n < (1 << 62)
        {
            smallest = Some(smallest.map_or(n, |s| s.min(n)));
        }
    };
    consider(&dir);
    for part in path.split('/').filter(|p| !p.is_empty()) {
        dir.push(part);
        consider(&dir);
    }
    smallest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn puts_are_refused_past_the_share_of_the_limit() {
        let b = MemoryBudget::new(100 << 20, LimitSource::Option);
        // 80 MiB in use, the ceiling at 85 MiB; a 1 MiB put counts about 2 MiB.
        assert!(b.admit_with(1 << 20, || 80 << 20));
        assert!(b.admit_with(1 << 20, || unreachable!("measured within 10 ms")));
        // Two admitted (about 4 MiB counted): one more MiB still fits, not three.
        assert!(!b.admit_with(3 << 20, || unreachable!()));
        assert!(b.admit_with(100, || unreachable!()));
    }

    #[test]
    fn a_measurement_resets_what_was_counted() {
        let b = MemoryBudget::new(100 << 20, LimitSource::Option);
        assert!(b.admit_with(2 << 20, || 80 << 20));
        std::thread::sleep(SAMPLE_EVERY);
        // Measured again (the jobs were deleted meanwhile): room again.
        assert!(b.admit_with(20 << 20, || 10 << 20));
        std::thread::sleep(SAMPLE_EVERY);
        assert!(!b.admit_with(1, || 85 << 20));
    }

    #[test]
    fn the_live_heap_grows_with_what_is_held() {
        let before = in_use();
        let held = vec![1u8; 64 << 20];
        let after = in_use();
        assert!(after >= before + (32 << 20), "{before} -> {after}");
        drop(held);
    }
}
