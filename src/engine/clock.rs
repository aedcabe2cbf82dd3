//! The engine's clock: wall-clock nanoseconds (as the reference uses `gettimeofday`),
//! advanced by the monotonic clock so it never jumps backwards within a process, and
//! mapped onto tokio instants so timers sleep until an exact deadline.
//!
//! Invariant: `instant_at(now())` is (to the nanosecond) the tokio instant of the call.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::Nanos;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base_wall: Nanos,
    base_instant: tokio::time::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Clock {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Clock {
            base_wall: wall,
            base_instant: tokio::time::Instant::now(),
        }
    }

    /// A clock that reads `now` at this instant (for example the Redis clock).
    pub fn starting_at(now: Nanos) -> Clock {
        Clock {
            base_wall: now,
            base_instant: tokio::time::Instant::now(),
        }
    }

    /// Nanoseconds since the Unix epoch.
    pub fn now(&self) -> Nanos {
        self.base_wall + self.base_instant.elapsed().as_nanos() as u64
    }

    /// The tokio instant at which `now()` will read `at`.
    pub fn instant_at(&self, at: Nanos) -> tokio::time::Instant {
        self.base_instant + Duration::from_nanos(at.saturating_sub(self.base_wall))
    }
}
