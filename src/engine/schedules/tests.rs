//! The runner on tokio's paused clock, against the memory store.
