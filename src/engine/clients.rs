//! The registry of live client connections, for the operator API's `clients` listing:
//! each connection's peer, start, used and watched tubes, producer/worker
//! flags and last command. What a connection holds is the store's to say (the holder of
//! each reserved job) and whether it waits is the waiters registry's; the listing
//! (`clients_list.rs`) joins them.
//!
//! Cost on the command path: the last command is one relaxed atomic store per request;
//! the entry's lock is taken only by connect, disconnect, `use`/`watch`/`ignore`, the
//! first put or reserve (the flags), and a listing (never held across an `.await`).
//!
//! Invariant: an entry is in the registry from [`super::Engine::connect`] until the
//! start of [`super::Engine::disconnect`]; the session holds its own `Arc` of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::protocol::{Command, Counter, EXTENSION_VERBS, Extension, Request, TubeName};
use crate::store::{ConnId, Nanos};
use crate::util::lock;

/// One connection's entry.
#[derive(Debug)]
pub struct Client {
    pub id: ConnId,
    pub since: Nanos,
    state: Mutex<ClientState>,
    /// The last request: its [`command_code`] in the low 8 bits, its time in ms since
    /// the epoch above them (0: none yet).
    last: AtomicU64,
}

/// The parts of an entry that change with the session (copied from it).
#[derive(Clone, Debug)]
pub struct ClientState {
    /// The client's address (`unix` for a local socket); `None` until noted.
    pub peer: Option<Arc<str>>,
    /// Leader mode: the standby (instance id) that relays this client.
    pub relayed_from: Option<Arc<str>>,
    pub using: TubeName,
    /// The first watched tubes only ([`SHOWN_TUBES`]): a copy of the whole
    /// list after each `watch` would cost a client watching n tubes O(n²).
    pub watching: Arc<[TubeName]>,
    pub watching_count: usize,
    pub producer: bool,
    pub worker: bool,
}

impl Client {
    pub(super) fn new(id: ConnId, since: Nanos) -> Client {
        Client {
            id,
            since,
            state: Mutex::new(ClientState {
                peer: None,
                relayed_from: None,
                using: TubeName::default_tube(),
                watching: Arc::from([TubeName::default_tube()]),
                watching_count: 1,
                producer: false,
                worker: false,
            }),
            last: AtomicU64::new(0),
        }
    }

    /// A copy of the entry's session state.
    pub fn state(&self) -> ClientState {
        lock(&self.state).clone()
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut ClientState)) {
        f(&mut lock(&self.state));
    }

    /// Note the request being run at `now`.
    pub(super) fn note_request(&self, req: &Request, now: Nanos) {
        self.note_code(command_code(req), now);
    }

    /// Note the extension being run at `now`.
    pub(super) fn note_extension(&self, ext: &Extension, now: Nanos) {
        self.note_code(extension_code(ext), now);
    }

    fn note_code(&self, code: u8, now: Nanos) {
        let ms = now / 1_000_000;
        self.last
            .store((ms << 8) | u64::from(code), Ordering::Relaxed);
    }

    /// The last request's command name and time (ns since the epoch, ms precision).
    pub fn last_command(&self) -> Option<(&'static str, Nanos)> {
        let v = self.last.load(Ordering::Relaxed);
        (v != 0).then(|| (command_name((v & 0xff) as u8), (v >> 8) * 1_000_000))
    }
}

/// Watched tubes a client's entry keeps, and a listing shows, per connection (the
/// count is always given).
pub const SHOWN_TUBES: usize = 20;

const CODE_RESERVE_JOB: u8 = 100;
const CODE_KICK_JOB: u8 = 101;
const CODE_QUIT: u8 = 102;
const CODE_REJECTED: u8 = 103;
/// A command with no counter that is not named above (none today): shown as `?`, never
/// as another command.
const CODE_UNNAMED: u8 = 104;
/// The extension verbs, from here on, by [`EXTENSION_VERBS`] index.
const CODE_EXTENSION: u8 = 110;

/// A request's command as a small code (a [`Counter`]'s index + 1, or one of the
/// uncounted commands).
fn command_code(req: &Request) -> u8 {
    match req {
        Request::Put(_) => Counter::Put.index() as u8 + 1,
        Request::Rejected(_) => CODE_REJECTED,
        Request::Command(cmd) => match (cmd.counter(), cmd) {
            (Some(c), _) => c.index() as u8 + 1,
            (None, Command::ReserveJob(_)) => CODE_RESERVE_JOB,
            (None, Command::KickJob(_)) => CODE_KICK_JOB,
            (None, Command::Quit) => CODE_QUIT,
            (None, _) => CODE_UNNAMED,
        },
    }
}

/// An extension's code: a standard verb with extended arguments is that verb's.
fn extension_code(ext: &Extension) -> u8 {
    match (ext.counter(), ext.verb_index()) {
        (Some(c), _) => c.index() as u8 + 1,
        (None, Some(i)) => CODE_EXTENSION + i as u8,
        (None, None) => CODE_UNNAMED,
    }
}

fn command_name(code: u8) -> &'static str {
    match code {
        CODE_RESERVE_JOB => "reserve-job",
        CODE_KICK_JOB => "kick-job",
        CODE_QUIT => "quit",
        CODE_REJECTED => "(rejected)",
        CODE_UNNAMED => "?",
        c if c >= CODE_EXTENSION => EXTENSION_VERBS
            .get(usize::from(c - CODE_EXTENSION))
            .map_or("?", |(verb, _)| verb),
        c => Counter::ALL
            .get(usize::from(c).wrapping_sub(1))
            .map_or("?", |c| c.key().trim_start_matches("cmd-")),
    }
}

/// Every live connection, by id (so a listing pages in id order).
#[derive(Debug, Default)]
pub struct Clients {
    by_id: Mutex<BTreeMap<u64, Arc<Client>>>,
}

impl Clients {
    pub(super) fn add(&self, client: Arc<Client>) {
        lock(&self.by_id).insert(client.id.0, client);
    }

    pub(super) fn remove(&self, id: ConnId) {
        lock(&self.by_id).remove(&id.0);
    }

    pub fn get(&self, id: ConnId) -> Option<Arc<Client>> {
        lock(&self.by_id).get(&id.0).cloned()
    }

    pub fn len(&self) -> usize {
        lock(&self.by_id).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `limit` connections with an id above `after`, in id order, and whether
    /// more follow.
    pub fn page(&self, after: u64, limit: usize) -> (Vec<Arc<Client>>, bool) {
        let map = lock(&self.by_id);
        let mut it = map.range(after.saturating_add(1)..).map(|(_, c)| c.clone());
        let page: Vec<_> = it.by_ref().take(limit).collect();
        let more = it.next().is_some();
        (page, more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_round_trip() {
        let c = Client::new(ConnId(1), 0);
        assert_eq!(c.last_command(), None);
        c.note_request(&Request::Command(Command::ListTubes), 5_000_000_123);
        assert_eq!(c.last_command(), Some(("list-tubes", 5_000_000_000)));
        c.note_request(&Request::Command(Command::ReserveJob(3)), 6_000_000_000);
        assert_eq!(c.last_command(), Some(("reserve-job", 6_000_000_000)));
        c.note_request(&Request::Command(Command::KickJob(3)), 7_000_000_000);
        assert_eq!(c.last_command(), Some(("kick-job", 7_000_000_000)));
        c.note_request(&Request::Command(Command::Quit), 8_000_000_000);
        assert_eq!(c.last_command(), Some(("quit", 8_000_000_000)));
        c.note_extension(&Extension::ListExtensions, 9_000_000_000);
        assert_eq!(c.last_command(), Some(("list-extensions", 9_000_000_000)));
        let release = Extension::Release {
            id: 1,
            pri: 0,
            delay: crate::protocol::ext::Millis::ZERO,
        };
        c.note_extension(&release, 10_000_000_000);
        assert_eq!(c.last_command(), Some(("release", 10_000_000_000)));
    }

    #[test]
    fn pages_in_id_order() {
        let clients = Clients::default();
        for id in 1..=5 {
            clients.add(Arc::new(Client::new(ConnId(id), 0)));
        }
        let (p, more) = clients.page(0, 2);
        assert_eq!(p.iter().map(|c| c.id.0).collect::<Vec<_>>(), [1, 2]);
        assert!(more);
        let (p, more) = clients.page(3, 2);
        assert_eq!(p.iter().map(|c| c.id.0).collect::<Vec<_>>(), [4, 5]);
        assert!(!more);
    }
}
