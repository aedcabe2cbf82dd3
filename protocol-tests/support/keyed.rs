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

/// How many keys an audit asks about before it reads the answers.
const PIPELINE: usize = 100;

/// What the server acknowledged: keys of live jobs, keys of deleted jobs (inside their
/// windows), with their ids; and the keys whose put (or delete) got no answer (their
/// fate unknown: the audit only counts those found by key).
#[derive(Debug, Default)]
pub struct KeyLedger {
    pub live: Vec<(String, u64)>,
    pub deleted: Vec<(String, u64)>,
    pub unknown: Vec<String>,
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
    /// its job, `READY` (no one reserves them; `DELETED` for a deleted one), and a put
    /// with the key makes nothing but answers that id and state. Counts the keys of
    /// unanswered requests that are found by key. Pipelined, [`PIPELINE`] keys at a time.
    /// Prints the figures under `what` (says when), then fails on any key not as
    /// acknowledged.
    pub fn audit(&self, c: &mut Client, what: &str) {
        let live = self.live.iter().map(|(k, id)| (k, id, "READY"));
        let deleted = self.deleted.iter().map(|(k, id)| (k, id, "DELETED"));
        let acked: Vec<_> = live.chain(deleted).collect();
        let (mut found, mut deduped, mut wrong) = (0, 0, Vec::new());
        for chunk in acked.chunks(PIPELINE) {
            let mut req = Vec::new();
            for (k, _, _) in chunk {
                req.extend_from_slice(format!("find-key {k}\r\n").as_bytes());
                req.extend_from_slice(&keyed_put(k));
            }
            c.send(&req);
            for (k, id, state) in chunk {
                let (by_key, again) = (c.reply().line, c.reply().line);
                if by_key == format!("FOUND_KEY {id} {state}") {
                    found += 1;
                } else {
                    wrong.push(format!("{k}: find-key: {by_key} (put as {id}, {state})"));
                }
                if again == format!("INSERTED {id} {state}") {
                    deduped += 1;
                } else {
                    wrong.push(format!("{k}: put again: {again} (put as {id}, {state})"));
                }
            }
        }
        let mut applied = 0;
        for chunk in self.unknown.chunks(PIPELINE) {
            let req: String = chunk.iter().map(|k| format!("find-key {k}\r\n")).collect();
            c.send(req.as_bytes());
            for k in chunk {
                match c.reply().line {
                    l if l.starts_with("FOUND_KEY ") => applied += 1,
                    l if l == "NOT_FOUND" => {}
                    l => wrong.push(format!("{k} (unanswered): find-key: {l}")),
                }
            }
        }
        println!(
            "{what}: {} keyed puts acknowledged ({} live, {} deleted in their windows): {found} \
             found by key with their id, {deduped} put again deduped to it; {} keys with a \
             request unanswered, {applied} of them found by key",
            acked.len(),
            self.live.len(),
            self.deleted.len(),
            self.unknown.len()
        );
        assert!(
            wrong.is_empty(),
            "{what}: {} answers not as acknowledged (of {} keys), the first:\n{}",
            wrong.len(),
            acked.len(),
            wrong[..wrong.len().min(20)].join("\n")
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
                            _ => ledger.unknown.push(k),
                        }
                    }
                    Some(id) => ledger.live.push((k, id)),
                    None => ledger.unknown.push(k),
                },
                Ok(_) => ledger.unknown.push(k),
                Err(_) => {
                    ledger.unknown.push(k);
                    conn = None;
                }
            }
        }
        ledger
    })
}
