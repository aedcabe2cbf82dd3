//! Which calls a Redis Cluster surely did not run, and when they may be sent again
//! (used by `connection.rs`'s `RedisConn`).
//!
//! Invariant: only a call whose every reply is MOVED, ASK, TRYAGAIN or CLUSTERDOWN (a
//! WAIT's reply aside: it changes nothing) is sent again, after [`REDIRECT_BACKOFF`]'s
//! pauses in turn and while within the caller's limit of its first sending
//! (`connection.rs`'s `WAIT_LIMIT`, a call's longest wait for Redis). A call that may
//! have run (an I/O error, a timeout) never is.

use std::time::{Duration, Instant};

use redis::{Cmd, Pipeline, RedisResult, Value};

use super::error::Code;

/// Pauses before sending again a call a Redis Cluster did not run (MOVED, ASK,
/// TRYAGAIN, CLUSTERDOWN), one per re-sending.
pub const REDIRECT_BACKOFF: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
];

/// Whether the replies `values` of `pipeline` (from its first command on) say that the
/// cluster ran none of it: some reply redirects (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) and
/// every other reply does too, or belongs to a WAIT (which changes nothing).
pub fn pipeline_redirected(pipeline: &Pipeline, offset: usize, values: &[Value]) -> bool {
    let redirect = |v: &Value| matches!(v, Value::ServerError(e) if Code::of_reply(e).redirected());
    let is_wait = |c: &Cmd| matches!(c.args_iter().next(), Some(redis::Arg::Simple(name)) if name.eq_ignore_ascii_case(b"WAIT"));
    offset == 0
        && values.len() == pipeline.len()
        && values.iter().any(redirect)
        && pipeline
            .cmd_iter()
            .zip(values)
            .all(|(c, v)| redirect(v) || is_wait(c))
}

/// Whether `result` of one command says the cluster did not run it (see
/// [`pipeline_redirected`]). redis-rs hands an error reply up as a value; the caller's
/// `query_async` turns it into an error.
pub fn command_redirected(result: &RedisResult<Value>) -> bool {
    match result {
        Ok(Value::ServerError(e)) => Code::of_reply(e).redirected(),
        Err(e) => Code::of(e).is_some_and(Code::redirected),
        Ok(_) => false,
    }
}

/// The pause before sending again a call the cluster redirected, if it may still be
/// sent: [`REDIRECT_BACKOFF`] in turn, while the next send stays within
/// `limit` of the first.
pub fn resend_after(first: Instant, tries: usize, limit: Duration) -> Option<Duration> {
    let pause = *REDIRECT_BACKOFF.get(tries)?;
    (first.elapsed() + pause < limit).then_some(pause)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code_and_detail: &str) -> Value {
        match redis::parse_redis_value(format!("-{code_and_detail}\r\n").as_bytes()) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn only_a_call_the_cluster_surely_did_not_run_is_sent_again() {
        let mut change_and_wait = redis::pipe();
        change_and_wait
            .cmd("EVALSHA")
            .arg("x")
            .arg(0)
            .cmd("WAIT")
            .arg(1)
            .arg(100);
        let moved = reply("MOVED 105 127.0.0.1:7001");
        // The change redirected; the WAIT's reply (any) changes nothing.
        assert!(pipeline_redirected(
            &change_and_wait,
            0,
            &[moved.clone(), Value::Int(0)]
        ));
        assert!(pipeline_redirected(
            &change_and_wait,
            0,
            &[
                reply("TRYAGAIN x"),
                reply("ERR WAIT cannot be used with replica instances")
            ]
        ));
        // The change ran (or failed as it ran): never again.
        assert!(!pipeline_redirected(
            &change_and_wait,
            0,
            &[Value::Okay, reply("CLUSTERDOWN x")]
        ));
        assert!(!pipeline_redirected(
            &change_and_wait,
            0,
            &[reply("ERR user_script:1: boom"), Value::Int(0)]
        ));
        // A transaction's replies (offset past MULTI) are not read here.
        assert!(!pipeline_redirected(
            &change_and_wait,
            1,
            std::slice::from_ref(&moved)
        ));
        assert!(command_redirected(&Ok(moved.clone())));
        let one: RedisResult<Value> = Err(redis::RedisError::from(match moved {
            Value::ServerError(e) => e,
            _ => panic!("an error reply"),
        }));
        assert!(command_redirected(&one));
        assert!(!command_redirected(&Ok(reply("ERR user_script:1: boom"))));
        let timed_out: RedisResult<Value> =
            Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        assert!(!command_redirected(&timed_out));
    }

    #[test]
    fn redirected_calls_are_sent_again_within_the_wait_limit() {
        const LIMIT: Duration = Duration::from_secs(1);
        let now = Instant::now();
        let pauses: Vec<Duration> = (0..5).map_while(|t| resend_after(now, t, LIMIT)).collect();
        assert_eq!(pauses, REDIRECT_BACKOFF.to_vec());
        let long_ago = now - Duration::from_millis(900);
        assert_eq!(resend_after(long_ago, 0, LIMIT), Some(REDIRECT_BACKOFF[0]));
        assert_eq!(resend_after(long_ago, 1, LIMIT), None);
    }
}
