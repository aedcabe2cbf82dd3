//! Leader mode: a standby answers the API by forwarding each request to the leader's
//! HTTP listener, whose address the leader publishes in Redis beside its lease.
//! (Placeholder until the publication exists: a standby answers `unavailable`.)

/// Where the leader's API is, as a standby knows it.
#[derive(Clone, Debug, Default)]
pub struct LeaderApi;
