//! Running one extension request (docs/EXTENSIONS.md): [`Engine::execute_extension`]
//! counts it (a standard verb with extended arguments as that verb, an extension verb
//! in `/metrics` only) and answers it. beanstalkd's own requests never come here
//! (`dispatch.rs`), so no standard reply can change.
//!
//! Invariant: only the families in [`SERVED_FAMILIES`] reach the engine: the
//! connection's grammar ([`Engine::grammar`]) reads every other extension line as
//! beanstalkd does, so a family is visible only once it is served on every engine.

use std::sync::Arc;

use super::dispatch::TimedPut;
use super::{Answer, Engine, Outcome, Session};
use crate::protocol::ext::ExtendedPut;
use crate::protocol::{EXTENSION_VERBS, Extension, Families, Family, Grammar, Reply, yaml};
use crate::store::KeyOp;

/// The extension families this build serves, on every engine. A family joins when
/// every engine serves it; `list-extensions` names exactly these.
pub const SERVED_FAMILIES: Families = Families::of(Family::Milliseconds)
    .with(Family::Keys)
    .with(Family::Batches)
    .with(Family::Flush);

impl Engine {
    /// The grammar a connection reads: beanstalkd's with `--extensions off`, else
    /// beanstalkd's plus the families served.
    pub fn grammar(&self) -> Grammar {
        if self.extensions {
            Grammar::Extended(SERVED_FAMILIES)
        } else {
            Grammar::Standard
        }
    }

    /// Run one extension request for `session` (see [`Engine::execute`] for how a
    /// reply is acknowledged).
    pub async fn execute_extension(
        self: &Arc<Self>,
        session: &mut Session,
        ext: Extension,
    ) -> Outcome {
        session.client.note_extension(&ext, self.clock.now());
        match (ext.counter(), ext.verb_index()) {
            (Some(counter), _) => self.counters.count(counter),
            (None, Some(verb)) => self.counters.count_extension(verb),
            (None, None) => {}
        }
        let s = session;
        let ran = match ext {
            Extension::ListExtensions => {
                return Outcome::Reply(Answer::now(self.list_extensions()));
            }
            // Milliseconds: beanstalkd's put, release and pause-tube at a finer unit.
            Extension::Put(ExtendedPut {
                pri,
                delay,
                ttr,
                key,
                body,
            }) => {
                let put = TimedPut {
                    pri,
                    delay_ms: delay.as_millis(),
                    ttr_ms: ttr.as_millis(),
                    body,
                };
                let answer = match key {
                    None => self.put(s, put).await,
                    Some(key) => self.put_keyed(s, put, key).await,
                };
                return Outcome::Reply(self.or_failed(s, answer));
            }
            // Keys (`keys.rs`).
            Extension::FindKey(key) => self.by_key(s, &key, KeyOp::Find).await,
            Extension::PeekKey(key) => self.peek_key(s, &key).await,
            Extension::DeleteKey(key) => self.by_key(s, &key, KeyOp::Delete).await,
            Extension::KickKey(key) => self.by_key(s, &key, KeyOp::Kick).await,
            Extension::BuryKey { key, pri } => self.by_key(s, &key, KeyOp::Bury { pri }).await,
            Extension::RetimeKey { key, delay } => {
                let op = KeyOp::Retime {
                    delay_ms: delay.as_millis(),
                };
                self.by_key(s, &key, op).await
            }
            Extension::Release { id, pri, delay } => {
                self.release(s, id, pri, delay.as_millis()).await
            }
            Extension::PauseTube { tube, delay } => self.pause(&tube, delay.as_millis()).await,
            // Batches and flush (`batch.rs`).
            Extension::ReserveBatch { max, timeout } => {
                let (max, timeout) = (usize::from(max), Some(timeout.as_nanos()));
                let outcome = self.reserve_up_to(s, timeout, Some(max)).await;
                return outcome.unwrap_or_else(|err| Outcome::Reply(self.or_failed(s, Err(err))));
            }
            Extension::Batch { op, ids } => self.batch(s.id, op, &ids).await,
            Extension::Flush { tube, states } => {
                self.flush(&tube, states).await.map(Reply::Flushed)
            }
        };
        Outcome::Reply(self.after_latest(ran.unwrap_or_else(|err| self.failed(s, err))))
    }

    /// `list-extensions`: the families served, as a YAML list.
    fn list_extensions(&self) -> Reply {
        let families = match self.grammar() {
            Grammar::Extended(families) => families,
            Grammar::Standard => Families::NONE,
        };
        Reply::Ok(yaml::name_list(families.iter().map(|f| f.name())))
    }

    /// Each extension verb this server speaks (none with `--extensions off`) and how
    /// many times it ran, for `/metrics`.
    pub(super) fn extension_commands(&self) -> Vec<(&'static str, u64)> {
        let grammar = self.grammar();
        let counts = self.counters.extension_snapshot();
        EXTENSION_VERBS
            .iter()
            .zip(counts)
            .filter(|((_, family), _)| match family {
                Some(family) => grammar.serves(*family),
                None => grammar != Grammar::Standard,
            })
            .map(|((verb, _), n)| (*verb, n))
            .collect()
    }
}
