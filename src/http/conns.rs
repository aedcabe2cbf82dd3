//! The open HTTP connections, what each is doing, and who makes room for a new one.
//!
//! A new connection is always admitted: at [`Conns`]' limit, the oldest connection not
//! in a request (reading a request head, or idle between requests) is shed to make
//! room, or, when every one is in a request, the oldest of all. So however many slow
//! or idle connections a client opens, a probe's connection is served: it could only
//! be shed by `limit` newer connections arriving before its request head does.
//!
//! Invariants: the table never holds more than `limit` entries; an entry is removed
//! when its connection's [`Ticket`] is dropped (or when it is shed); the lock is never
//! held across an `.await` (nothing here is async).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::lock;
use tokio_util::sync::CancellationToken;

/// How often a warning says that connections were shed (each one is logged at debug).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What a connection is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Reading a request head, or idle between requests, since then.
    Waiting { since: Instant, served: bool },
    /// A request was read at this time and its response is not yet written.
    InRequest { since: Instant },
}

/// One connection's entry, shared by its task, its requests and the table.
#[derive(Debug)]
pub(super) struct ConnState {
    phase: Mutex<Phase>,
    /// Cancelled when the connection is shed to make room for a newer one.
    pub(super) shed: CancellationToken,
}

impl ConnState {
    fn new() -> ConnState {
        ConnState {
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                served: false,
            }),
            shed: CancellationToken::new(),
        }
    }

    pub(super) fn phase(&self) -> Phase {
        *lock(&self.phase)
    }

    /// A request head was read.
    pub(super) fn request_began(&self) {
        *lock(&self.phase) = Phase::InRequest {
            since: Instant::now(),
        };
    }

    /// The response was written (or abandoned).
    pub(super) fn request_ended(&self) {
        *lock(&self.phase) = Phase::Waiting {
            since: Instant::now(),
            served: true,
        };
    }
}

/// The table of open connections.
#[derive(Debug)]
pub(super) struct Conns {
    limit: usize,
    table: Mutex<ConnTable>,
}

#[derive(Debug)]
struct ConnTable {
    next_id: u64,
    /// By id, so in order of arrival.
    open: BTreeMap<u64, Arc<ConnState>>,
    shed_since_warning: u64,
    warned: Option<Instant>,
}

impl Conns {
    pub(super) fn new(limit: usize) -> Arc<Conns> {
        Arc::new(Conns {
            limit: limit.max(1),
            table: Mutex::new(ConnTable {
                next_id: 0,
                open: BTreeMap::new(),
                shed_since_warning: 0,
                warned: None,
            }),
        })
    }

    /// Admit a new connection, shedding an older one first when the table is full.
    pub(super) fn admit(self: &Arc<Self>) -> Ticket {
        let mut t = lock(&self.table);
        if t.open.len() >= self.limit {
            let victim = t
                .open
                .iter()
                .find(|(_, c)| !matches!(c.phase(), Phase::InRequest { .. }))
                .or_else(|| t.open.iter().next())
                .map(|(id, _)| *id);
            if let Some(c) = victim.and_then(|id| t.open.remove(&id)) {
                c.shed.cancel();
                tracing::debug!(phase = ?c.phase(), "http: shed a connection to admit a new one");
                t.shed_since_warning += 1;
                if t.warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                    tracing::warn!(
                        limit = self.limit,
                        shed = t.shed_since_warning,
                        "http: connection limit reached; closed the oldest idle or slow connections to admit new ones"
                    );
                    t.warned = Some(Instant::now());
                    t.shed_since_warning = 0;
                }
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let state = Arc::new(ConnState::new());
        t.open.insert(id, state.clone());
        Ticket {
            conns: self.clone(),
            id,
            state,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.table).open.len()
    }
}

/// A connection's place in the table; dropping it frees the place.
#[derive(Debug)]
pub(super) struct Ticket {
    conns: Arc<Conns>,
    id: u64,
    pub(super) state: Arc<ConnState>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.conns.table).open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_limit_the_oldest_idle_connection_is_shed() {
        let conns = Conns::new(3);
        let busy = conns.admit();
        busy.state.request_began();
        let idle = conns.admit();
        let third = conns.admit();
        assert_eq!(conns.len(), 3);
        let fourth = conns.admit();
        assert_eq!(conns.len(), 3);
        assert!(!busy.state.shed.is_cancelled(), "in a request: kept");
        assert!(
            idle.state.shed.is_cancelled(),
            "the oldest not in a request"
        );
        assert!(!third.state.shed.is_cancelled());
        drop(idle);
        assert_eq!(
            conns.len(),
            3,
            "a shed connection's ticket frees nothing twice"
        );
        drop((busy, third, fourth));
        assert_eq!(conns.len(), 0);
    }

    #[test]
    fn when_every_connection_is_in_a_request_the_oldest_is_shed() {
        let conns = Conns::new(2);
        let a = conns.admit();
        let b = conns.admit();
        a.state.request_began();
        b.state.request_began();
        let _c = conns.admit();
        assert!(a.state.shed.is_cancelled());
        assert!(!b.state.shed.is_cancelled());
        b.state.request_ended();
        assert!(matches!(
            b.state.phase(),
            Phase::Waiting { served: true, .. }
        ));
    }
}
