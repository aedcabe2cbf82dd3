//! A memory-limited cgroup for one test's process, as a container's: made under the
//! test's own memory cgroup (v2 if its memory controller is there, else v1's
//! `/sys/fs/cgroup/memory`), the process put in it before it execs (`sh -c 'echo $$ >
//! cgroup.procs; exec ...'`), removed when dropped (after its process is killed).
//! Needs root: [`MemCgroup::new`] answers `None` after a notice otherwise (a failure
//! under `REDSTALK_REQUIRE_ORACLE=1`). Named `redstalk-mem-<pid>-<n>`; ones left by a
//! test process that no longer runs are removed first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct MemCgroup {
    pub path: PathBuf,
    v2: bool,
}

/// The directory of this process's memory cgroup, and whether it is v2.
fn own_cgroup() -> Option<(PathBuf, bool)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut v1 = None;
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            v2 = Some(Path::new("/sys/fs/cgroup").join(path));
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(Path::new("/sys/fs/cgroup/memory").join(path));
        }
    }
    if let Some(dir) = v2.filter(|_| {
        std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
    }) {
        return Some((dir, true));
    }
    v1.map(|d| (d, false))
}

impl MemCgroup {
    /// A new cgroup limited to `bytes` of memory (swap included where that can be set).
    pub fn new(bytes: u64) -> Option<MemCgroup> {
        let Some((parent, v2)) = own_cgroup() else {
            return skip("no memory cgroup found");
        };
        sweep(&parent);
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = parent.join(format!(
            "redstalk-mem-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(e) = std::fs::create_dir(&path) {
            return skip(&format!("cannot make {}: {e}", path.display()));
        }
        let cg = MemCgroup { path, v2 };
        let limit = bytes.to_string();
        if v2 {
            cg.write("memory.max", &limit);
            let _ = std::fs::write(cg.path.join("memory.swap.max"), "0");
        } else {
            cg.write("memory.limit_in_bytes", &limit);
            let _ = std::fs::write(cg.path.join("memory.memsw.limit_in_bytes"), &limit);
        }
        Some(cg)
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.path.join(file), value)
            .unwrap_or_else(|e| panic!("write {value} to {}/{file}: {e}", self.path.display()));
    }

    /// A command that runs `program` inside this cgroup (the shell puts itself in,
    /// then execs: the pid is the program's).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "echo $$ > '{}/cgroup.procs' && exec \"$0\" \"$@\"",
                self.path.display()
            ))
            .arg(program);
        cmd
    }

    /// The most memory the cgroup used (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    pub fn peak(&self) -> u64 {
        let f = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.path.join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

fn skip(why: &str) -> Option<MemCgroup> {
    assert!(
        !super::oracle_required(),
        "the memory-limit tests need a writable memory cgroup (REDSTALK_REQUIRE_ORACLE=1): {why}"
    );
    eprintln!("!!! memory-limit tests SKIPPED: {why}");
    None
}

/// Remove cgroups of test processes that no longer run (empty by then).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("redstalk-mem-") else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !Path::new("/proc").join(pid).exists() {
            kill_members(&e.path());
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

fn kill_members(dir: &Path) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        kill_members(&self.path);
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.path.display());
    }
}
