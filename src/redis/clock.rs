//! Redis' clock as this process's [`Clock`], for both modes: shared mode runs on it
//! (every script reads `TIME`), and a new leader continues the deadlines its
//! predecessor kept on it.
//!
//! Read as NTP reads a server: of [`READINGS`] `TIME` round trips, the shortest, Redis
//! having read its clock about half of it before the answer came. The error is then at
//! most half the shortest round trip (well under a millisecond on one host, even
//! loaded), where one reading may be off by half of a slow one: a shared-mode instance
//! whose clock ran a few milliseconds behind Redis' timed a reserve out before a job
//! Redis had made due just before that timeout (the deadlines test, on a loaded
//! machine).

use std::time::Duration;

use redis::RedisResult;
use redis::aio::ConnectionLike;
use tokio::time::Instant;

use super::US;
use crate::time::Clock;

/// How many times [`read_clock`] reads the Redis clock.
const READINGS: usize = 5;

/// One `TIME` round trip: how long it took, what Redis read, when the answer came.
struct Reading {
    trip: Duration,
    redis_us: u64,
    back: Instant,
}

/// Redis' clock, read over `conn` (see the module's header).
pub async fn read_clock(conn: &mut impl ConnectionLike) -> RedisResult<Clock> {
    let mut best = reading(conn).await?;
    for _ in 1..READINGS {
        let next = reading(conn).await?;
        if next.trip < best.trip {
            best = next;
        }
    }
    Ok(Clock::reading_at(
        best.redis_us * US + best.trip.as_nanos() as u64 / 2,
        best.back,
    ))
}

async fn reading(conn: &mut impl ConnectionLike) -> RedisResult<Reading> {
    let asked = Instant::now();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    let back = Instant::now();
    Ok(Reading {
        trip: back - asked,
        redis_us: secs * 1_000_000 + micros,
        back,
    })
}
