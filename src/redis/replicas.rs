//! Waiting for replicas (`--redis-wait-replicas`): a change a client is told of is
//! followed, in the same round trip, by Redis `WAIT`, and counts as done only once that
//! many replicas confirm it. The one reading of WAIT's reply, for both modes (the shared
//! mode's scripts, leader mode's batches, the fenced transactions).
//!
//! Invariant: WAIT follows a change that ran. Its failure, a refusal (a primary just
//! demoted to replica, an ACL without WAIT) or too few replicas in time, never makes
//! the change look not applied: the call may have applied ([`Fate::MayHaveApplied`]),
//! and a failover may lose it.

use std::time::Duration;

use redis::{Pipeline, RedisError, RedisResult};

use super::RESPONSE_TIMEOUT;
use super::error::{CallError, Fate};

/// How many replicas must confirm each change, and how long they may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaWait {
    replicas: u32,
    timeout: Duration,
}

/// Why a change that ran is not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum Unconfirmed {
    #[error("WAIT refused after the change ran")]
    Refused(#[source] RedisError),
    #[error("WAIT: {confirmed} of {asked} replicas confirmed the change in time")]
    TooFew { confirmed: i64, asked: u32 },
}

impl ReplicaWait {
    /// Wait for `replicas` replicas within `timeout`; `None` for 0 (changes do not wait).
    pub fn new(replicas: u32, timeout: Duration) -> Option<ReplicaWait> {
        (replicas > 0).then_some(ReplicaWait { replicas, timeout })
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long a reply may take on a connection whose changes wait (`wait`): a WAIT
    /// answers after its timeout at the latest.
    pub fn response_timeout(wait: Option<ReplicaWait>) -> Duration {
        RESPONSE_TIMEOUT + wait.map_or(Duration::ZERO, |w| w.timeout)
    }

    /// Append the WAIT to `pipe`, after the change.
    pub fn append_to(&self, pipe: &mut Pipeline) {
        pipe.cmd("WAIT")
            .arg(self.replicas)
            .arg(self.timeout.as_millis() as u64);
    }

    /// What WAIT's `reply` says of the change `op` that ran before it: done once enough
    /// replicas confirmed it; else it may have been applied (see the module's header).
    pub fn confirm(&self, op: &'static str, reply: RedisResult<i64>) -> Result<(), CallError> {
        let unconfirmed = match reply {
            Ok(n) if n >= i64::from(self.replicas) => return Ok(()),
            Ok(confirmed) => Unconfirmed::TooFew {
                confirmed,
                asked: self.replicas,
            },
            Err(e) => Unconfirmed::Refused(e),
        };
        Err(CallError {
            op,
            fate: Fate::MayHaveApplied,
            source: Box::new(unconfirmed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::error::error_reply;

    #[test]
    fn a_change_is_done_only_once_enough_replicas_confirm_it() {
        assert_eq!(ReplicaWait::new(0, Duration::from_secs(1)), None);
        let wait = ReplicaWait::new(2, Duration::from_millis(200)).unwrap();
        assert!(wait.confirm("put", Ok(2)).is_ok());
        assert!(wait.confirm("put", Ok(3)).is_ok());
        for reply in [
            Ok(1),
            Err(error_reply("NOPERM this user has no permissions")),
        ] {
            let err = wait.confirm("put", reply).unwrap_err();
            assert_eq!((err.op, err.fate), ("put", Fate::MayHaveApplied));
            eprintln!("{err}: {}", err.source);
        }
        assert_eq!(
            ReplicaWait::response_timeout(Some(wait)),
            RESPONSE_TIMEOUT + Duration::from_millis(200)
        );
        assert_eq!(ReplicaWait::response_timeout(None), RESPONSE_TIMEOUT);
    }
}
