//! Correctness checks made while measuring.
//!
//! [`Ledger`] collects the ids each connection saw put, reserved and deleted; merged at
//! the end, it proves every job put was reserved exactly once and deleted exactly once
//! (and nothing else was). [`server_empty`] then asks the server itself: every tube the
//! run used holds no job in any state, and optionally the whole server holds none.

use anyhow::{Result, bail};

use crate::client::{Conn, Reply, parse_stats};

/// How many offending ids a failure message lists.
const SHOWN: usize = 8;

/// Job ids as one connection (or, merged, the whole run) saw them.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    pub put: Vec<u64>,
    pub reserved: Vec<u64>,
    pub deleted: Vec<u64>,
}

impl Ledger {
    pub fn merge(&mut self, other: Ledger) {
        self.put.extend(other.put);
        self.reserved.extend(other.reserved);
        self.deleted.extend(other.deleted);
    }

    /// Every way in which the run differs from "each job put was reserved once and
    /// deleted once", as messages (empty when all is well).
    pub fn verify(mut self) -> Vec<String> {
        let mut failures = Vec::new();
        self.put.sort_unstable();
        self.reserved.sort_unstable();
        self.deleted.sort_unstable();
        for (what, ids) in [
            ("INSERTED", &self.put),
            ("reserved", &self.reserved),
            ("deleted", &self.deleted),
        ] {
            let dups = duplicates(ids);
            if !dups.is_empty() {
                failures.push(format!(
                    "{} job id(s) {what} more than once, e.g. {}",
                    dups.len(),
                    show(&dups)
                ));
            }
        }
        let put = dedup(&self.put);
        let reserved = dedup(&self.reserved);
        let deleted = dedup(&self.deleted);
        let pairs = [
            (&put, &reserved, "put but never reserved"),
            (&reserved, &put, "reserved but never put by this run"),
            (&reserved, &deleted, "reserved but not deleted"),
            (&deleted, &reserved, "deleted without being reserved"),
        ];
        for (a, b, what) in pairs {
            let missing = difference(a, b);
            if !missing.is_empty() {
                failures.push(format!(
                    "{} job(s) {what}, e.g. {}",
                    missing.len(),
                    show(&missing)
                ));
            }
        }
        failures
    }
}

fn duplicates(sorted: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = sorted
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    out.dedup();
    out
}

fn dedup(sorted: &[u64]) -> Vec<u64> {
    let mut v = sorted.to_vec();
    v.dedup();
    v
}

/// Elements of sorted `a` not in sorted `b`.
fn difference(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut j = 0;
    for &x in a {
        while j < b.len() && b[j] < x {
            j += 1;
        }
        if j >= b.len() || b[j] != x {
            out.push(x);
        }
    }
    out
}

fn show(ids: &[u64]) -> String {
    let mut s: Vec<String> = ids.iter().take(SHOWN).map(u64::to_string).collect();
    if ids.len() > SHOWN {
        s.push("...".into());
    }
    s.join(", ")
}

/// The job counters that must all be zero for a tube (or server) to be empty.
const JOB_COUNTERS: [&str; 5] = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
];

/// Ask the server whether `tubes` (and, with `whole_server`, every tube) are empty.
/// Returns one message per non-empty tube; a tube the server no longer knows (it was
/// garbage-collected once empty and unused) counts as empty.
pub async fn server_empty(addr: &str, tubes: &[String], whole_server: bool) -> Result<Vec<String>> {
    let mut conn = Conn::connect(addr).await?;
    for tube in tubes {
        conn.command(&format!("stats-tube {tube}"));
    }
    if whole_server {
        conn.command("stats");
    }
    conn.flush().await?;
    let mut failures = Vec::new();
    let names = tubes
        .iter()
        .map(|t| format!("tube {t}"))
        .chain(whole_server.then(|| "the server".to_string()));
    for name in names {
        match conn.read_reply().await? {
            Reply::NotFound => {}
            Reply::Ok(yaml) => {
                let nonzero: Vec<String> = parse_stats(&yaml)
                    .into_iter()
                    .filter(|(k, v)| JOB_COUNTERS.contains(&k.as_str()) && v != "0")
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                if !nonzero.is_empty() {
                    failures.push(format!(
                        "{name} is not empty at the end: {}",
                        nonzero.join(", ")
                    ));
                }
            }
            other => bail!("stats for {name} answered {}", other.describe()),
        }
    }
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(put: &[u64], reserved: &[u64], deleted: &[u64]) -> Ledger {
        Ledger {
            put: put.to_vec(),
            reserved: reserved.to_vec(),
            deleted: deleted.to_vec(),
        }
    }

    #[test]
    fn exact_once_passes() {
        assert!(
            ledger(&[3, 1, 2], &[2, 3, 1], &[1, 2, 3])
                .verify()
                .is_empty()
        );
    }

    #[test]
    fn every_kind_of_failure_is_named() {
        let f = ledger(&[1, 2, 3], &[1, 1, 4], &[1]).verify();
        let all = f.join("\n");
        assert!(all.contains("reserved more than once, e.g. 1"), "{all}");
        assert!(all.contains("put but never reserved, e.g. 2, 3"), "{all}");
        assert!(
            all.contains("reserved but never put by this run, e.g. 4"),
            "{all}"
        );
        assert!(all.contains("reserved but not deleted, e.g. 4"), "{all}");
    }

    #[test]
    fn difference_of_sorted() {
        assert_eq!(difference(&[1, 2, 5, 7], &[2, 3, 7]), vec![1, 5]);
        assert_eq!(
            show(&(1..=10).collect::<Vec<_>>()),
            "1, 2, 3, 4, 5, 6, 7, 8, ..."
        );
    }
}
