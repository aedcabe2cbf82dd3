//! Time as every layer sees it: [`Nanos`] since the Unix epoch, and the [`Clock`] that
//! reads it -- wall-clock nanoseconds (as the reference uses `gettimeofday`), advanced by
//! the monotonic clock so it never jumps backwards within a process, and mapped onto
//! tokio instants so timers sleep until an exact deadline.
//!
//! Stores and the engine both take time from here (the engine passes `now` into every
//! store call), so neither depends on the other for it.
//!
//! Invariant: `instant_at(now())` is (to the nanosecond) the tokio instant of the call.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch.
pub type Nanos = u64;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The wall clock in ms since the Unix epoch, as read now (0 before the epoch): for
/// what is compared across processes in whole seconds or more, not for timers.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `secs` whole seconds as [`Nanos`].
pub fn secs(secs: u32) -> Nanos {
    u64::from(secs) * NANOS_PER_SEC
}

/// `ms` milliseconds as [`Nanos`].
pub fn millis(ms: u64) -> Nanos {
    ms.saturating_mul(1_000_000)
}

/// `secs` whole seconds (beanstalkd's unit) in milliseconds (the store's).
pub fn secs_as_ms(secs: u32) -> u64 {
    u64::from(secs) * 1000
}

/// Whether `ms` milliseconds are whole seconds: a duration a client could have written
/// in beanstalkd's unit, which persisted formats keep in their first layout.
pub fn is_whole_secs(ms: u64) -> bool {
    ms.is_multiple_of(1000)
}

/// Whole seconds, as beanstalkd shows a duration (rounded down), of `ms` milliseconds.
pub fn whole_secs(ms: u64) -> u64 {
    ms / 1000
}

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

    /// A clock that read `now` at `instant` (a past one: when a reading arrived).
    pub fn reading_at(now: Nanos, instant: tokio::time::Instant) -> Clock {
        Clock {
            base_wall: now,
            base_instant: instant,
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
