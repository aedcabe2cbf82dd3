//! Keyed jobs for crash and failover tests (docs/EXTENSIONS.md, *Keys*): a producer
//! that puts keyed jobs with a dedupe window and deletes every fourth, keeping a ledger
//! of what was acknowledged, and the audit that every acknowledged key still names its
//! job (or, deleted, its window) and that a put with the key dedupes to the same id.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::client::Client;

/// The window every ledger put asks for: longer than any test.
const WINDOW: &str = "600000ms";

/// What the server acknowledged: keys of live jobs, keys of deleted jobs (inside their
/// windows), with their ids; and how many requests got no answer (their fate unknown:
/// left out of the audit).
#[derive(Debug, Default)]
pub struct KeyLedger {
    pub live: Vec<(String, u64)>,
    pub deleted: Vec<(String, u64)>,
    pub unknown: usize,
}

/// One keyed put of key `k` into the used tube.
pub fn keyed_put(k: &str) -> Vec<u8> {
    format!("put 0 0 60 1 idp:{k}:{WINDOW}\r\nk\r\n").into_bytes()
}

impl KeyLedger {
    /// Put `n` keyed jobs into `tube` through `c` (keys `<prefix><i>`), deleting every
    /// fourth; all must be acknowledged.
    pub fn put(c: &mut Client, tube: &str, prefix: &str, n: usize) -> KeyLedger {
        c.use_tube(tube);
        let mut ledger = KeyLedger::default();
        for i in 0..n {
            let k = format!("{prefix}{i}");
            let r = c.try_call(&keyed_put(&k), Duration::from_secs(5)).unwrap();
            let id = r.id().unwrap_or_else(|| panic!("{k}: {}", r.line));
            if i % 4 == 3 {
                c.expect(&format!("delete {id}"), "DELETED");
                ledger.deleted.push((k, id));
            } else {
                ledger.live.push((k, id));
            }
        }
        ledger
    }

    /// Check every acknowledged key through `c` (using their tube): `find-key` names
    /// its job (`DELETED` for a deleted one), and a put with the key makes nothing but
    /// answers that id. `what` says when.
    pub fn audit(&self, c: &mut Client, what: &str) {
        let all = self.live.iter().map(|e| (e, false));
        for ((k, id), deleted) in all.chain(self.deleted.iter().map(|e| (e, true))) {
            let found = c.line(&format!("find-key {k}"));
            let dedupe = c.try_call(&keyed_put(k), Duration::from_secs(5)).unwrap();
            if deleted {
                assert_eq!(found, format!("FOUND_KEY {id} DELETED"), "{what}: {k}");
                assert_eq!(dedupe.line, format!("INSERTED {id} DELETED"), "{what}: {k}");
            } else {
                let prefix = format!("FOUND_KEY {id} ");
                assert!(found.starts_with(&prefix), "{what}: {k}: {found}");
                let again = format!("INSERTED {id} ");
                assert!(
                    dedupe.line.starts_with(&again),
                    "{what}: {k}: {}",
                    dedupe.line
                );
            }
        }
        println!(
            "{what}: {} live keys and {} windows found by key, each put again deduped \
             ({} puts unanswered, left out)",
            self.live.len(),
            self.deleted.len(),
            self.unknown
        );
    }
}

/// A producer of keyed puts into `tube` through `addr` until `stop`, reconnecting after
/// any failure (a put that got no answer is counted unknown).
pub fn keyed_producer(
    addr: SocketAddr,
    tube: &str,
    stop: Arc<AtomicBool>,
) -> JoinHandle<KeyLedger> {
    let tube = tube.to_string();
    thread::spawn(move || {
        let mut ledger = KeyLedger::default();
        let mut conn: Option<Client> = None;
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let Some(c) = conn.as_mut() else {
                conn = Client::try_connect(addr, "keyed producer")
                    .ok()
                    .and_then(|mut c| {
                        let used = c
                            .try_call(format!("use {tube}\r\n").as_bytes(), Duration::from_secs(5));
                        used.ok().filter(|r| r.word() == "USING").map(|_| c)
                    });
                if conn.is_none() {
                    thread::sleep(Duration::from_millis(50));
                }
                continue;
            };
            let k = format!("f{i}");
            i += 1;
            match c.try_call(&keyed_put(&k), Duration::from_secs(5)) {
                Ok(r) if r.word() == "INSERTED" => match r.id() {
                    Some(id) if i.is_multiple_of(4) => {
                        match c.try_call(
                            format!("delete {id}\r\n").as_bytes(),
                            Duration::from_secs(5),
                        ) {
                            Ok(d) if d.line == "DELETED" => ledger.deleted.push((k, id)),
                            // Not known deleted: it may be live or in its window.
                            _ => ledger.unknown += 1,
                        }
                    }
                    Some(id) => ledger.live.push((k, id)),
                    None => ledger.unknown += 1,
                },
                Ok(_) => ledger.unknown += 1,
                Err(_) => {
                    ledger.unknown += 1;
                    conn = None;
                }
            }
        }
        ledger
    })
}
