//! `-f MS`: a background thread that forces written log data to the disk at most every
//! MS milliseconds, off the path that acknowledges changes (beanstalkd's meaning).
//!
//! Ownership: the sink marks the log dirty after each write and hands over the files it
//! rolled away from; the thread syncs every file it holds when dirty, then keeps only
//! the current one. Dropping the [`Syncer`] stops the thread after a last sync.

use crate::util::lock;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the sink and the syncing thread share: the files to sync and whether they
/// were written since the last sync.
#[derive(Debug)]
struct ToSync {
    /// The current file last; earlier ones were rolled away from and await a last sync.
    files: Mutex<Vec<Arc<File>>>,
    dirty: AtomicBool,
    stop: AtomicBool,
}

#[derive(Debug)]
pub struct Syncer {
    shared: Arc<ToSync>,
}

impl Syncer {
    pub fn start(every: Duration, current: Arc<File>) -> std::io::Result<Syncer> {
        let shared = Arc::new(ToSync {
            files: Mutex::new(vec![current]),
            dirty: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("redstalk-fsync".into())
            .spawn(move || run(&theirs, every))?;
        Ok(Syncer { shared })
    }

    pub fn mark_dirty(&self) {
        self.shared.dirty.store(true, Ordering::Release);
    }

    /// The sink writes to `current` from now on.
    pub fn rolled(&self, current: Arc<File>) {
        lock(&self.shared.files).push(current);
        self.mark_dirty();
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

fn run(shared: &ToSync, every: Duration) {
    loop {
        std::thread::sleep(every);
        let stop = shared.stop.load(Ordering::Acquire);
        if shared.dirty.swap(false, Ordering::AcqRel) {
            // Clone the handles out: no lock is held across the (slow) syncs.
            let files: Vec<Arc<File>> = lock(&shared.files).clone();
            for f in &files {
                if let Err(err) = f.sync_data() {
                    tracing::warn!(%err, "binlog: fsync failed");
                }
            }
            let mut held = lock(&shared.files);
            let keep = held.len().saturating_sub(1);
            // Only the files synced above may go; one rolled to meanwhile stays.
            let synced = files.len().saturating_sub(1).min(keep);
            held.drain(..synced);
        }
        if stop {
            return;
        }
    }
}
