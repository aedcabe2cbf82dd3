//! Each connection alone on a tube of its own, one command at a time: put ->
//! `reserve-with-timeout` -> delete. The tube holds one job at most and is empty again
//! after every delete, as the queue of a worker that keeps up is: every put finds its
//! tube empty. (The cycle shares one tube that stays busy.)
//!
//! The job reserved must be the one just put (nobody else uses the tube) with its body
//! intact; TIMED_OUT or any other answer is a failure. With `--retries N` each job is
//! released (delay 0) and reserved again N times before its delete. The measured phase runs from the
//! first put to the last delete.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::produce::Quota;
use super::{PhaseMeter, Run, TaskOut, check_empty, join_all, secs};
use crate::body;
use crate::client::{Conn, Reply};
use crate::report::Outcome;

pub async fn run(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let mut conns = Vec::with_capacity(run.tubes.len());
    for tube in &run.tubes {
        conns.push(connect_alone(&a.addr, tube).await?);
    }

    let meter = PhaseMeter::start(a).await?;
    let started = run.now_ns();
    let quota = Arc::new(match a.jobs {
        Some(n) => Quota::count(n),
        None => Quota::Until(Instant::now() + secs(a.duration)),
    });
    let handles = conns
        .into_iter()
        .map(|c| tokio::spawn(cycle_alone(run.clone(), c, quota.clone())))
        .collect();
    let mut out = join_all(handles).await;
    let (cpu, redis_commands) = meter.stop().await?;

    let mut failures = std::mem::take(&mut out.failures);
    let cycled = out.ledger.deleted.len() as u64;
    failures.extend(std::mem::take(&mut out.ledger).verify());
    check_empty(&run, &mut failures).await;

    Ok(Outcome {
        ops: cycled,
        unit: "jobs",
        elapsed: Duration::from_nanos(u64::try_from(out.last_ns - started).unwrap_or(0)),
        latency: ("end-to-end", std::mem::take(&mut out.latency).summary()),
        others: vec![
            ("put", std::mem::take(&mut out.put_rtt).summary()),
            ("reserve", std::mem::take(&mut out.reserve_rtt).summary()),
            ("delete", std::mem::take(&mut out.delete_rtt).summary()),
        ],
        figures: vec![],
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}

/// A connection that uses and watches `tube` only.
async fn connect_alone(addr: &str, tube: &str) -> Result<Conn> {
    let mut conn = Conn::connect(addr).await?;
    let steps = [
        (format!("use {tube}"), Reply::Using(tube.to_string())),
        (format!("watch {tube}"), Reply::Watching(2)),
        ("ignore default".to_string(), Reply::Watching(1)),
    ];
    for (command, expected) in steps {
        let reply = conn.call(&command).await?;
        if reply != expected {
            bail!("{command} answered {}", reply.describe());
        }
    }
    Ok(conn)
}

/// put -> reserve-with-timeout -> delete on `conn`, one command at a time, until the
/// quota is used up or a reply is wrong (the connection's state is then unknown).
async fn cycle_alone(run: Arc<Run>, mut conn: Conn, quota: Arc<Quota>) -> Result<TaskOut> {
    let a = &run.args;
    let size = a.body_size;
    let reserve = format!("reserve-with-timeout {}", a.reserve_timeout);
    let mut out = TaskOut::default();
    while quota.claim().is_some() {
        let sent = run.now_ns();
        let stamp = u64::try_from(sent).unwrap_or(0);
        conn.put_with(a.pri, 0, a.ttr, size, |b| body::write(b, stamp, size));
        conn.flush().await?;
        let reply = conn.read_reply().await?;
        let put_done = run.now_ns();
        let Reply::Inserted(id) = reply else {
            out.failures
                .push(format!("put answered {}", reply.describe()));
            break;
        };
        out.ledger.put.push(id);
        out.put_rtt.push(put_done - sent);

        let reply = conn.call(&reserve).await?;
        let got = run.now_ns();
        let Reply::Reserved { id: reserved, body } = reply else {
            out.failures.push(format!(
                "{reserve} right after job {id} was put on a tube only this connection \
                 uses answered {}",
                reply.describe()
            ));
            break;
        };
        out.ledger.reserved.push(reserved);
        out.reserve_rtt.push(got - put_done);
        let stray = reserved != id;
        if stray {
            out.failures.push(format!(
                "{reserve} answered job {reserved}, not job {id}, the only one on the tube"
            ));
        }
        match body::check(&body, size) {
            Ok(ts) => out.latency.push(got - i64::try_from(ts).unwrap_or(0)),
            Err(e) => out.failures.push(format!("job {reserved}: {e:#}")),
        }
        if let Err(e) = retry(&mut conn, reserved, a.pri, a.retries, &reserve).await {
            out.failures.push(format!("{e:#}"));
            break;
        }

        conn.delete(reserved);
        conn.flush().await?;
        let reply = conn.read_reply().await?;
        let done = run.now_ns();
        if reply != Reply::Deleted {
            out.failures
                .push(format!("delete {reserved} answered {}", reply.describe()));
            break;
        }
        out.ledger.deleted.push(reserved);
        out.delete_rtt.push(done - got);
        out.last_ns = done;
        run.deleted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if stray {
            break;
        }
    }
    Ok(out)
}

/// Release job `id` with delay 0 and reserve it again, `times` times (`--retries`).
async fn retry(conn: &mut Conn, id: u64, pri: u32, times: u32, reserve: &str) -> Result<()> {
    for _ in 0..times {
        let reply = conn.call(&format!("release {id} {pri} 0")).await?;
        if reply != Reply::Other("RELEASED".to_string()) {
            bail!("release {id} answered {}", reply.describe());
        }
        match conn.call(reserve).await? {
            Reply::Reserved { id: again, .. } if again == id => {}
            other => bail!(
                "{reserve} after releasing job {id} answered {}",
                other.describe()
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpListener;

    use super::*;
    use crate::cli::Args;

    /// A server for one connection that answers each command (a put with its body
    /// counting as one) with the next of `replies`.
    async fn scripted(replies: Vec<&'static str>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            for reply in replies {
                let mut line = String::new();
                if stream.read_line(&mut line).await.unwrap() == 0 {
                    return;
                }
                if line.starts_with("put ") {
                    stream.read_line(&mut String::new()).await.unwrap();
                }
                stream.get_mut().write_all(reply.as_bytes()).await.unwrap();
            }
            let _ = stream.read_to_end(&mut Vec::new()).await;
        });
        addr
    }

    async fn one_job(replies: Vec<&'static str>) -> TaskOut {
        let addr = scripted(replies).await;
        let args = Args::try_parse_from(["b", "solo", "-a", &addr, "-n", "1"]).unwrap();
        let run = Arc::new(Run::new(args));
        let conn = Conn::connect(&addr).await.unwrap();
        cycle_alone(run, conn, Arc::new(Quota::count(1)))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_clean_job_passes() {
        let out = one_job(vec![
            "INSERTED 7\r\n",
            "RESERVED 7 16\r\n0000000000000000\r\n",
            "DELETED\r\n",
        ])
        .await;
        assert!(out.failures.is_empty(), "{:?}", out.failures);
        assert!(out.ledger.verify().is_empty());
    }

    #[tokio::test]
    async fn a_timed_out_reserve_fails() {
        let out = one_job(vec!["INSERTED 7\r\n", "TIMED_OUT\r\n"]).await;
        eprintln!("failures: {:?}", out.failures);
        assert!(out.failures[0].contains("answered TIMED_OUT"));
        assert_eq!(out.ledger.verify().len(), 1, "job 7 put but never reserved");
    }

    #[tokio::test]
    async fn another_job_reserved_fails() {
        let out = one_job(vec![
            "INSERTED 7\r\n",
            "RESERVED 8 16\r\n0000000000000000\r\n",
            "DELETED\r\n",
        ])
        .await;
        eprintln!("failures: {:?}", out.failures);
        assert!(out.failures[0].contains("answered job 8, not job 7"));
        assert!(!out.ledger.verify().is_empty());
    }
}
