//! What one authenticated connection of the beanstalk port may do: its identity's role,
//! checked before each command reaches the engine (docs/SECURITY.md, *Roles*).
//!
//! Cost: the connection of a listener without authentication has no grant at all (one
//! branch per command). With a grant, a command costs one atomic load (has the roles
//! file been reloaded?) and, for a restricted role, a flag or one pattern match: the
//! grant keeps, up to date after `use`, `watch` and `ignore`, whether the used tube
//! may be put to and read and whether every watched tube may be reserved from, so a
//! `put` or a `reserve` looks nothing up. `delete` needs the ids the connection holds
//! (kept from its RESERVED replies, and checked against the store's holders once they
//! reach a bound that doubles: a job let go without a reply naming it would otherwise
//! stay, see [`Grant::held_to_check`]); `peek <id>` and `stats-job <id>` of a role whose
//! `read` is not `*` need the job's tube, which the caller looks up ([`Verdict::IfTube`]).
//!
//! Invariant: a refused command changes nothing (the caller answers FORBIDDEN without
//! running it: no counter, no job id).

use std::collections::HashSet;
use std::sync::Arc;

use super::Control;
use super::role::Role;
use super::roles::{Identity, Roles};
use crate::protocol::command::Counter;
use crate::protocol::ext::BatchOp;
use crate::protocol::{Command, Extension, Rejection, Reply, Request, TubeName};

/// How an identity is found again in a reloaded roles file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityKey {
    /// A token, by its digest.
    Token([u8; 32]),
    /// A client certificate, by its names (subject CNs, then SANs).
    Cert(Vec<String>),
    /// A listener's `role=`, or a role a standby relayed: the role by name.
    Role(String),
}

impl IdentityKey {
    /// The identity this key stands for in `roles`, if any still.
    pub fn resolve(&self, roles: &Roles) -> Option<Identity> {
        match self {
            IdentityKey::Token(digest) => roles.tokens().by_digest(digest).map(|e| e.value.clone()),
            IdentityKey::Cert(names) => roles.cert(names.iter().map(String::as_str)).cloned(),
            IdentityKey::Role(name) => roles.role(name).map(|role| Identity {
                name: name.as_str().into(),
                role: role.clone(),
            }),
        }
    }
}

/// What a request may change of a grant's view (see [`Grant::note`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    Nothing,
    /// `use`, `watch`, `ignore`: the tubes changed.
    Tubes,
    /// `delete`, `release`, `bury` of this job: no longer held if it worked.
    MayLetGo(u64),
    /// `delete-batch`, `release-batch`, `bury-batch` of these jobs: those the reply
    /// does not list as missing are no longer held.
    MayLetGoAll(Vec<u64>),
}

/// Whether a command may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Answer FORBIDDEN.
    Refuse,
    /// Allowed if job `id` is in a tube the role may read (or does not exist).
    IfTube(u64),
}

/// One connection's identity and what its role allows now.
#[derive(Debug)]
pub struct Grant {
    key: IdentityKey,
    identity: Identity,
    /// The roles file's generation the role was taken from.
    generation: u64,
    /// The role may `put` to the used tube.
    put_used: bool,
    /// The role may peek into the used tube.
    read_used: bool,
    /// The role may reserve from every watched tube.
    reserve_watched: bool,
    /// The jobs this connection reserved and has not deleted, released or buried by
    /// a reply that names them. A job let go otherwise (`delete-key`, `bury-key`, its
    /// TTR ran out, an operator deleted it) stays until the connection checks `held`
    /// against the store ([`Grant::held_to_check`]), once it reaches `check_at`.
    held: HashSet<u64>,
    check_at: usize,
}

/// The `held` size at which a connection first checks it against the store; after a
/// check, twice what was still held (so checks cost O(1) per reserve, amortized).
pub const HELD_CHECK_AT: usize = 1024;

impl Grant {
    /// A new connection (using and watching `default`) of `identity`, found by `key`
    /// in generation `generation` of the roles.
    pub fn new(key: IdentityKey, identity: Identity, generation: u64) -> Grant {
        let mut g = Grant {
            key,
            identity,
            generation,
            put_used: false,
            read_used: false,
            reserve_watched: false,
            held: HashSet::new(),
            check_at: HELD_CHECK_AT,
        };
        let default = TubeName::default_tube();
        g.recompute(&default, std::slice::from_ref(&default));
        g
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn role(&self) -> &Arc<Role> {
        &self.identity.role
    }

    /// Take the role from a reloaded roles file, if there was a reload since; `false`
    /// when the file no longer names this identity (the connection is to be closed).
    pub fn refresh(&mut self, control: &Control, using: &TubeName, watching: &[TubeName]) -> bool {
        let now = control.generation();
        if now == self.generation {
            return true;
        }
        let Some(identity) = self.key.resolve(&control.roles()) else {
            return false;
        };
        self.identity = identity;
        self.generation = now;
        self.recompute(using, watching);
        true
    }

    /// Another identity for this connection (a second `auth`).
    pub fn replace(&mut self, other: Grant, using: &TubeName, watching: &[TubeName]) {
        let (held, check_at) = (std::mem::take(&mut self.held), self.check_at);
        *self = other;
        (self.held, self.check_at) = (held, check_at);
        self.recompute(using, watching);
    }

    fn recompute(&mut self, using: &TubeName, watching: &[TubeName]) {
        let role = &self.identity.role;
        self.put_used = role.put.matches(using.as_str());
        self.read_used = role.read.matches(using.as_str());
        self.reserve_watched = watching.iter().all(|t| role.reserve.matches(t.as_str()));
    }

    /// Whether `req` may run now.
    pub fn check(&self, req: &Request) -> Verdict {
        let role = &self.identity.role;
        let allow = |ok: bool| if ok { Verdict::Allow } else { Verdict::Refuse };
        match req {
            Request::Put(_) => allow(self.put_used),
            Request::Rejected(r) => match r {
                Rejection::JobTooBig | Rejection::ExpectedCrlf | Rejection::OutOfMemory => {
                    allow(self.put_used)
                }
                Rejection::BadFormat {
                    counted: Some(Counter::Put),
                } => allow(self.put_used),
                Rejection::BadFormat { counted: Some(_) } => allow(role.manage),
                Rejection::BadFormat { counted: None } | Rejection::UnknownCommand => {
                    Verdict::Allow
                }
            },
            Request::Command(c) => match c {
                Command::Use(t) => allow(role.put.matches(t.as_str())),
                Command::Watch(t) => allow(role.reserve.matches(t.as_str())),
                Command::Reserve | Command::ReserveWithTimeout(_) => allow(self.reserve_watched),
                Command::Delete(id) => allow(role.manage || self.held.contains(id)),
                Command::Peek(id) | Command::StatsJob(id) => {
                    if role.read.is_all() || self.held.contains(id) {
                        Verdict::Allow
                    } else {
                        Verdict::IfTube(*id)
                    }
                }
                Command::PeekReady | Command::PeekDelayed | Command::PeekBuried => {
                    allow(self.read_used)
                }
                Command::StatsTube(t) => allow(role.may_inspect(t.as_str())),
                Command::Kick(_)
                | Command::KickJob(_)
                | Command::PauseTube { .. }
                | Command::ReserveJob(_)
                | Command::Stats
                | Command::ListTubes => allow(role.manage),
                Command::Release { .. }
                | Command::Bury { .. }
                | Command::Touch(_)
                | Command::Ignore(_)
                | Command::ListTubeUsed
                | Command::ListTubesWatched
                | Command::Quit => Verdict::Allow,
            },
        }
    }

    /// Whether the role may run the extension `ext` (docs/EXTENSIONS.md, *Access*): each
    /// is checked as the standard command it stands for.
    pub fn check_extension(&self, ext: &Extension) -> Verdict {
        let role = &self.identity.role;
        let allow = |ok: bool| if ok { Verdict::Allow } else { Verdict::Refuse };
        match ext {
            Extension::Put(_) => allow(self.put_used),
            Extension::ReserveBatch { .. } => allow(self.reserve_watched),
            Extension::Batch {
                op: BatchOp::Delete,
                ids,
            } => allow(role.manage || ids.iter().all(|id| self.held.contains(id))),
            Extension::FindKey(_) | Extension::PeekKey(_) => allow(self.read_used),
            Extension::DeleteKey(_)
            | Extension::KickKey(_)
            | Extension::BuryKey { .. }
            | Extension::RetimeKey { .. } => allow(self.put_used || role.manage),
            Extension::PauseTube { .. } | Extension::Flush { .. } => allow(role.manage),
            // A connection's own reservations, and the probe.
            Extension::Release { .. } | Extension::Batch { .. } | Extension::ListExtensions => {
                Verdict::Allow
            }
        }
    }

    /// The verdict on [`Verdict::IfTube`], given the job's tube (`None`: no such job).
    pub fn may_read_tube(&self, tube: Option<&str>) -> bool {
        tube.is_none_or(|t| self.identity.role.read.matches(t))
    }

    /// What [`Grant::after`] must know of `req` once it ran (taken before, since the
    /// request goes to the engine).
    pub fn note(req: &Request) -> Note {
        match req {
            Request::Command(Command::Use(_) | Command::Watch(_) | Command::Ignore(_)) => {
                Note::Tubes
            }
            Request::Command(
                Command::Delete(id) | Command::Release { id, .. } | Command::Bury { id, .. },
            ) => Note::MayLetGo(*id),
            _ => Note::Nothing,
        }
    }

    /// [`Grant::note`] of an extension.
    pub fn note_extension(ext: &Extension) -> Note {
        match ext {
            Extension::Release { id, .. } => Note::MayLetGo(*id),
            Extension::Batch { op, ids } if !matches!(op, BatchOp::Touch) => {
                Note::MayLetGoAll(ids.clone())
            }
            _ => Note::Nothing,
        }
    }

    /// The held ids to check against the store, once there are `check_at` of them.
    pub fn held_to_check(&self) -> Option<Vec<u64>> {
        (self.held.len() >= self.check_at).then(|| self.held.iter().copied().collect())
    }

    /// Keep, of the ids [`Grant::held_to_check`] gave, only `still` (those the store
    /// says this connection holds); `None` when the store could not tell (all kept).
    /// The next check waits for twice as many.
    pub fn checked_held(&mut self, still: Option<HashSet<u64>>) {
        if let Some(still) = still {
            self.held.retain(|id| still.contains(id));
        }
        self.check_at = HELD_CHECK_AT.max(2 * self.held.len());
    }

    /// Note what a request (`note`), answered `reply`, changed of what the checks look
    /// at: the used and watched tubes (`using`, `watching`: the session after it), the
    /// jobs held.
    pub fn after(&mut self, note: Note, reply: &Reply, using: &TubeName, watching: &[TubeName]) {
        match (note, reply) {
            (_, Reply::Reserved { id, .. }) => {
                self.held.insert(*id);
            }
            (_, Reply::ReservedBatch(jobs)) => self.held.extend(jobs.iter().map(|(id, _)| *id)),
            (Note::MayLetGo(id), Reply::Deleted | Reply::Released | Reply::Buried) => {
                self.held.remove(&id);
            }
            (Note::MayLetGoAll(ids), Reply::Batch { missing, .. }) => {
                // The missing ids are a subsequence of `ids`: an id is let go when one
                // of its places is not matched by a missing one.
                let mut missing = missing.iter().peekable();
                for id in ids {
                    if missing.next_if(|m| **m == id).is_none() {
                        self.held.remove(&id);
                    }
                }
            }
            (Note::Tubes, _) => self.recompute(using, watching),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::roles::Roles;
    use crate::protocol::Timeout;

    fn grant(role_toml: &str) -> Grant {
        let roles = Roles::parse(role_toml, None).unwrap();
        let role = roles.role("r").unwrap().clone();
        Grant::new(
            IdentityKey::Role("r".into()),
            Identity {
                name: "r".into(),
                role,
            },
            0,
        )
    }

    fn cmd(c: Command) -> Request {
        Request::Command(c)
    }

    fn tube(s: &str) -> TubeName {
        TubeName::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_producer_puts_only_where_it_may() {
        let mut g = grant("[roles.r]\nput = [\"emails\"]\n");
        let put = Request::Put(crate::protocol::Put {
            pri: 0,
            delay: 0,
            ttr: 1,
            body: bytes::Bytes::new(),
        });
        assert_eq!(g.check(&put), Verdict::Refuse, "default is not its tube");
        assert_eq!(
            g.check(&Request::Rejected(Rejection::JobTooBig)),
            Verdict::Refuse
        );
        assert_eq!(g.check(&cmd(Command::Use(tube("other")))), Verdict::Refuse);
        let using = tube("emails");
        assert_eq!(g.check(&cmd(Command::Use(using.clone()))), Verdict::Allow);
        g.after(
            Grant::note(&cmd(Command::Use(using.clone()))),
            &Reply::Using(using.clone()),
            &using,
            &[tube("default")],
        );
        assert_eq!(g.check(&put), Verdict::Allow);
        assert_eq!(g.check(&cmd(Command::Reserve)), Verdict::Refuse);
        assert_eq!(g.check(&cmd(Command::Stats)), Verdict::Refuse);
        assert_eq!(g.check(&cmd(Command::StatsTube(using))), Verdict::Allow);
        assert_eq!(g.check(&cmd(Command::ListTubeUsed)), Verdict::Allow);
        assert_eq!(
            g.check(&Request::Rejected(Rejection::UnknownCommand)),
            Verdict::Allow
        );
    }

    #[test]
    fn extensions_are_checked_as_the_commands_they_stand_for() {
        use crate::protocol::ext::{ExtendedPut, Millis};
        let mut g = grant("[roles.r]\nput = [\"default\"]\n");
        let ms = Millis::new(1500).unwrap();
        let put = Extension::Put(ExtendedPut {
            pri: 0,
            delay: ms,
            ttr: ms,
            key: None,
            body: bytes::Bytes::new(),
        });
        assert_eq!(g.check_extension(&put), Verdict::Allow, "put on its tube");
        let pause = Extension::PauseTube {
            tube: tube("default"),
            delay: ms,
        };
        assert_eq!(g.check_extension(&pause), Verdict::Refuse, "needs manage");
        let release = Extension::Release {
            id: 7,
            pri: 0,
            delay: ms,
        };
        assert_eq!(g.check_extension(&release), Verdict::Allow, "its own work");
        assert_eq!(Grant::note_extension(&release), Note::MayLetGo(7));
        assert_eq!(
            g.check_extension(&Extension::ListExtensions),
            Verdict::Allow
        );
        let using = tube("other");
        g.after(
            Note::Tubes,
            &Reply::Using(using.clone()),
            &using,
            &[tube("default")],
        );
        assert_eq!(g.check_extension(&put), Verdict::Refuse, "not its tube");
    }

    #[test]
    fn held_ids_let_go_without_a_reply_naming_them_are_checked_in_doubling_steps() {
        let mut g = grant("[roles.r]\nreserve = [\"*\"]\n");
        let d = tube("default");
        let reserved = |g: &mut Grant, id: u64| {
            let reply = Reply::Reserved {
                id,
                body: bytes::Bytes::new(),
            };
            g.after(Note::Nothing, &reply, &d, std::slice::from_ref(&d));
        };
        for id in 1..HELD_CHECK_AT as u64 {
            reserved(&mut g, id);
        }
        assert_eq!(g.held_to_check(), None, "below the first check");
        reserved(&mut g, HELD_CHECK_AT as u64);
        let ids = g.held_to_check().expect("a check at HELD_CHECK_AT");
        assert_eq!(ids.len(), HELD_CHECK_AT);
        // The store still names 10 of them this connection's (delete-key let the
        // others go): those stay, the rest no longer allow a `delete`.
        g.checked_held(Some((1..=10).collect()));
        assert_eq!(g.check(&cmd(Command::Delete(5))), Verdict::Allow);
        assert_eq!(g.check(&cmd(Command::Delete(11))), Verdict::Refuse);
        assert_eq!(g.held_to_check(), None);
        // A store that cannot tell keeps them all, and the next check waits for twice
        // as many.
        for id in 2000..2000 + HELD_CHECK_AT as u64 - 10 {
            reserved(&mut g, id);
        }
        assert_eq!(g.held_to_check().map(|v| v.len()), Some(HELD_CHECK_AT));
        g.checked_held(None);
        assert_eq!(g.check(&cmd(Command::Delete(2000))), Verdict::Allow);
        reserved(&mut g, 5000);
        assert_eq!(g.held_to_check(), None, "the next check is at 2 x 1024");
    }

    #[test]
    fn a_worker_reserves_once_it_watches_only_its_tubes_and_deletes_what_it_holds() {
        let mut g = grant("[roles.r]\nreserve = [\"jobs.*\"]\nread = [\"jobs.a\"]\n");
        let twt = cmd(Command::ReserveWithTimeout(Timeout::Secs(0)));
        assert_eq!(g.check(&twt), Verdict::Refuse, "still watches default");
        let (a, d) = (tube("jobs.a"), tube("default"));
        g.after(
            Grant::note(&cmd(Command::Watch(a.clone()))),
            &Reply::Watching(2),
            &d,
            &[d.clone(), a.clone()],
        );
        assert_eq!(g.check(&twt), Verdict::Refuse);
        g.after(
            Grant::note(&cmd(Command::Ignore(d.clone()))),
            &Reply::Watching(1),
            &d,
            std::slice::from_ref(&a),
        );
        assert_eq!(g.check(&twt), Verdict::Allow);
        assert_eq!(g.check(&cmd(Command::Delete(7))), Verdict::Refuse);
        g.after(
            Grant::note(&twt),
            &Reply::Reserved {
                id: 7,
                body: bytes::Bytes::new(),
            },
            &d,
            std::slice::from_ref(&a),
        );
        assert_eq!(g.check(&cmd(Command::Delete(7))), Verdict::Allow);
        assert_eq!(g.check(&cmd(Command::Peek(8))), Verdict::IfTube(8));
        assert!(g.may_read_tube(Some("jobs.a")) && !g.may_read_tube(Some("jobs.b")));
        assert!(g.may_read_tube(None));
        g.after(
            Grant::note(&cmd(Command::Delete(7))),
            &Reply::Deleted,
            &d,
            &[a],
        );
        assert_eq!(g.check(&cmd(Command::Delete(7))), Verdict::Refuse);
        for c in [
            Command::Kick(1),
            Command::KickJob(1),
            Command::ReserveJob(1),
            Command::ListTubes,
            Command::PauseTube {
                tube: tube("x"),
                delay: 1,
            },
        ] {
            assert_eq!(g.check(&cmd(c.clone())), Verdict::Refuse, "{c:?}");
        }
    }

    /// The jobs of a RESERVED_BATCH are held; a list command lets go of the ids its
    /// reply does not list as missing (a repeated id once found is let go).
    #[test]
    fn a_batch_worker_deletes_what_its_batches_hold() {
        let mut g = grant("[roles.r]\nreserve = [\"*\"]\n");
        let d = tube("default");
        let watched = std::slice::from_ref(&d);
        let delete = |ids: Vec<u64>| Extension::Batch {
            op: BatchOp::Delete,
            ids,
        };
        assert_eq!(g.check_extension(&delete(vec![1])), Verdict::Refuse);
        let batch = Reply::ReservedBatch(vec![(1, bytes::Bytes::new()), (2, bytes::Bytes::new())]);
        g.after(Note::Nothing, &batch, &d, watched);
        assert_eq!(g.check_extension(&delete(vec![1, 2])), Verdict::Allow);
        assert_eq!(g.check_extension(&delete(vec![1, 3])), Verdict::Refuse);
        let done = Reply::Batch {
            kind: crate::protocol::ext::BatchKind::Delete,
            done: 1,
            missing: vec![1],
        };
        g.after(
            Grant::note_extension(&delete(vec![1, 1])),
            &done,
            &d,
            watched,
        );
        assert_eq!(g.check_extension(&delete(vec![1])), Verdict::Refuse);
        assert_eq!(g.check_extension(&delete(vec![2])), Verdict::Allow);
        let touch = Extension::Batch {
            op: BatchOp::Touch,
            ids: vec![2],
        };
        assert_eq!(Grant::note_extension(&touch), Note::Nothing);
    }
}
