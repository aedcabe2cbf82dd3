//! The consumer loops.
//!
//! [`work`]: a worker as clients write them, one command at a time: `reserve` (blocking),
//! check the body, `delete`; until told to stop. What it records of each job is its
//! caller's ([`Record`]): the cycle's end-to-end latency ([`end_to_end`]: from the put
//! being sent, the time stamp in the body, to the job arriving here), the timers'
//! lateness.
//!
//! [`drain`]: empty the run's tubes with up to `depth` `reserve-with-timeout 0` in
//! flight, deleting each job it gets, until the server says the tubes have none ready.
//! Its latency is the reserve round trip.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Result;
use tokio::sync::{Semaphore, watch};

use super::{Run, TaskOut};
use crate::body;
use crate::client::{Conn, Reply};

/// What a worker records of a job sent at `ts` (the stamp in its body) and received at
/// `got` (both ns since the run started).
pub trait Record: Fn(&mut TaskOut, u64, i64) + Send + 'static {}
impl<F: Fn(&mut TaskOut, u64, i64) + Send + 'static> Record for F {}

/// The end-to-end latency: put sent -> job here.
pub fn end_to_end(out: &mut TaskOut, ts: u64, got: i64) {
    out.latency.push(got - i64::try_from(ts).unwrap_or(0));
}

/// Reserve and delete jobs until `stop` turns true, recording each job with `record`.
/// Each delete returns a permit to `backlog`.
pub async fn work(
    run: Arc<Run>,
    mut conn: Conn,
    backlog: Option<Arc<Semaphore>>,
    mut stop: watch::Receiver<bool>,
    record: impl Record,
) -> Result<TaskOut> {
    let size = run.args.body_size;
    let mut out = TaskOut::default();
    while !*stop.borrow_and_update() {
        conn.command("reserve");
        conn.flush().await?;
        let reply = tokio::select! {
            biased;
            r = conn.read_reply() => r?,
            _ = stop.changed() => break,
        };
        let got = run.now_ns();
        let Reply::Reserved { id, body } = reply else {
            out.failures
                .push(format!("reserve answered {}", reply.describe()));
            break;
        };
        out.ledger.reserved.push(id);
        match body::check(&body, size) {
            Ok(ts) => record(&mut out, ts, got),
            Err(e) => out.failures.push(format!("job {id}: {e:#}")),
        }
        conn.delete(id);
        conn.flush().await?;
        let reply = conn.read_reply().await?;
        let done = run.now_ns();
        if reply != Reply::Deleted {
            out.failures
                .push(format!("delete {id} answered {}", reply.describe()));
            break;
        }
        out.ledger.deleted.push(id);
        out.delete_rtt.push(done - got);
        out.last_ns = done;
        run.deleted.fetch_add(1, Ordering::Relaxed);
        if let Some(sem) = &backlog {
            sem.add_permits(1);
        }
    }
    Ok(out)
}

enum Sent {
    Reserve(i64),
    Delete(u64, i64),
}

/// Drain the tubes `conn` watches, `depth` reserves in flight.
pub async fn drain(run: Arc<Run>, mut conn: Conn, depth: usize) -> Result<TaskOut> {
    let size = run.args.body_size;
    let mut out = TaskOut::default();
    let mut window: VecDeque<Sent> = VecDeque::with_capacity(2 * depth);
    let mut reserves = 0;
    let mut empty = false;
    loop {
        while !empty && reserves < depth {
            conn.command("reserve-with-timeout 0");
            window.push_back(Sent::Reserve(run.now_ns()));
            reserves += 1;
        }
        conn.flush().await?;
        let Some(sent) = window.pop_front() else {
            break;
        };
        let reply = conn.read_reply().await?;
        let now = run.now_ns();
        match (sent, reply) {
            (Sent::Reserve(t), Reply::Reserved { id, body }) => {
                reserves -= 1;
                out.ledger.reserved.push(id);
                out.latency.push(now - t);
                if let Err(e) = body::check(&body, size) {
                    out.failures.push(format!("job {id}: {e:#}"));
                }
                conn.delete(id);
                window.push_back(Sent::Delete(id, now));
            }
            (Sent::Reserve(_), Reply::TimedOut) => {
                reserves -= 1;
                empty = true;
            }
            (Sent::Delete(id, t), Reply::Deleted) => {
                out.ledger.deleted.push(id);
                out.delete_rtt.push(now - t);
                out.last_ns = now;
                run.deleted.fetch_add(1, Ordering::Relaxed);
            }
            (Sent::Reserve(_), other) => {
                reserves -= 1;
                out.failures.push(format!(
                    "reserve-with-timeout 0 answered {}",
                    other.describe()
                ));
                empty = true;
            }
            (Sent::Delete(id, _), other) => {
                out.failures
                    .push(format!("delete {id} answered {}", other.describe()));
                empty = true;
            }
        }
    }
    Ok(out)
}
