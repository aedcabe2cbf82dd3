//! The resident set of the server under test (from `/proc/PID/status`). Redis' own
//! `used_memory` is read by [`crate::redis`].

use anyhow::{Context, Result};

/// Resident set size of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status_kb(&status, "VmRSS:").with_context(|| format!("no VmRSS in {path}"))
}

fn status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let status = "Name:\tx\nVmHWM:\t  9000 kB\nVmRSS:\t    5120 kB\n";
        assert_eq!(status_kb(status, "VmRSS:"), Some(5120 * 1024));
    }

    #[test]
    fn own_rss_is_readable() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
    }
}
