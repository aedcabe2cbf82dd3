//! A connection's protocol state. Owned by the connection's task; the engine reads and
//! changes it while running that connection's commands.
//!
//! Invariant: the store holds exactly one "using" reference for `using` and one
//! "watching" reference per tube in `watching` (taken in [`super::Engine::connect`],
//! moved by `use`/`watch`/`ignore`, dropped in [`super::Engine::disconnect`]); its
//! entry in the clients registry (`clients.rs`) shows the same used and watched tubes
//! (the used tube and the first watched ones, copied after each change, see
//! [`Session::publish`]).

use std::sync::Arc;

use super::clients::{Client, SHOWN_TUBES};
use crate::protocol::TubeName;
use crate::store::ConnId;
use crate::util::SwapList;

#[derive(Debug)]
pub struct Session {
    pub id: ConnId,
    pub using: TubeName,
    pub watching: SwapList<TubeName>,
    /// Ever passed put validation (counts in `current-producers`).
    pub producer: bool,
    /// Ever issued a reserve or reserved a job (counts in `current-workers`).
    pub worker: bool,
    /// The watch list as shared slice, rebuilt only after `watch`/`ignore`, so a
    /// reserve does not allocate.
    watched: Option<Arc<[TubeName]>>,
    /// This connection's entry in the clients registry.
    pub(crate) client: Arc<Client>,
}

impl Session {
    pub(super) fn new(id: ConnId, client: Arc<Client>) -> Session {
        let mut watching = SwapList::new();
        watching.insert(TubeName::default_tube());
        Session {
            id,
            using: TubeName::default_tube(),
            watching,
            producer: false,
            worker: false,
            watched: None,
            client,
        }
    }

    /// The watched tubes, in list order.
    pub fn watched(&mut self) -> Arc<[TubeName]> {
        self.watched
            .get_or_insert_with(|| self.watching.as_slice().iter().cloned().collect())
            .clone()
    }

    pub(super) fn watch_list_changed(&mut self) {
        self.watched = None;
    }

    /// Copy the used tube and the first watched ones to the registry entry (after
    /// `use`, `watch`, `ignore`: the only commands that change them). Bounded: a client
    /// that watches 100,000 tubes one by one must not copy its list each time.
    pub(super) fn publish(&mut self) {
        let shown: Arc<[TubeName]> = self
            .watching
            .as_slice()
            .iter()
            .take(SHOWN_TUBES)
            .cloned()
            .collect();
        let count = self.watching.as_slice().len();
        let using = self.using.clone();
        self.client.update(|c| {
            c.using = using;
            c.watching = shown;
            c.watching_count = count;
        });
    }
}
