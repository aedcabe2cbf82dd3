//! Schedules (docs/SCHEDULES.md): jobs the server puts into a tube at each tick of a
//! cron expression or an interval.

pub mod spec;
