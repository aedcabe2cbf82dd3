//! A leader-mode namespace's lease as the tests read it from Redis: its key
//! (`{<prefix>}:lease`, src/cluster/lease.rs) and its token, `epoch|instance|address`
//! (the epoch changes with every new leadership; the address is the leader's beanstalk
//! address). One spelling for every test, so a change of either is made here.

use std::time::{Duration, Instant};

/// The lease's key in namespace `prefix`.
pub fn lease_key(prefix: &str) -> String {
    format!("{{{prefix}}}:lease")
}

/// The beanstalk address a lease token names; `None` for a value that is no token
/// (a tombstone or a copy's lock has no three parts).
pub fn holder_address(token: &str) -> Option<&str> {
    let mut parts = token.splitn(3, '|');
    let (_epoch, _instance) = (parts.next()?, parts.next()?);
    parts.next()
}

/// The token in the lease of `prefix`, if any.
pub fn lease_token(conn: &mut ::redis::Connection, prefix: &str) -> Option<String> {
    ::redis::cmd("GET")
        .arg(lease_key(prefix))
        .query(conn)
        .expect("GET the lease")
}

/// Wait until the lease of `prefix` names the leader at `address`; how long it took.
/// Fails the test after `within`, naming what the lease held.
pub fn wait_for_holder(
    conn: &mut ::redis::Connection,
    prefix: &str,
    address: &str,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let token = lease_token(conn, prefix);
        if token.as_deref().and_then(holder_address) == Some(address) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "the leader at {address} did not take the lease of {prefix} within {within:?}: \
             {token:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
