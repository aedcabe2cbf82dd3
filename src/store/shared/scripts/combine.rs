//! Combining the hot calls: while this instance has [`IN_FLIGHT`] calls of `put`,
//! `reserve` or `delete` in flight, the next ones wait, and go together as one call of
//! `many.lua` as soon as one of those answers. Redis then pays one EVALSHA, one
//! generation check, one TIME and one SHARDNUMSUB for all of them, and this process one
//! round trip; a lone call goes as it always did, without waiting for company.
//!
//! Invariants: a combined call's reply, or error, reaches its caller as its own call's
//! would (the same value; an error with the same code and fate, naming its own script);
//! the calls of one `many` are made for one generation and run in the order they were
//! queued; a `many` call is [`MAX_CALLS`] calls and about [`MAX_BYTES`] of arguments at
//! most; every caller is answered, by its reply or by an error.
//!
//! Ownership: the queue and the count of calls in flight are the [`Combiner`]'s, behind
//! a mutex held only to push or take (never across an await). The queue holds at most
//! one call per connection of this instance (a connection waits for each reply before
//! its next command). A `many` call is made by a task spawned for it, which owns the
//! calls it took until each has its answer, then takes the next ones, or gives its
//! place in flight back.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use redis::{Arg, Cmd, Value};
use tokio::sync::oneshot;

use super::Runner;
use crate::redis::replicas::ReplicaWait;
use crate::redis::{CallError, Code, Fate};
use crate::util::lock;

/// The scripts whose calls are combined (each `many.lua` runs, by name, as its own
/// script would).
pub(super) const COMBINED: &[&str] = &["put", "reserve", "delete"];

/// Calls in flight before the next ones wait to be combined. One would leave Redis idle
/// while each reply travels back and the next call is made; more calls in flight are
/// smaller calls. At 10 and 50 connections on two cores (bench/results/
/// 2026-12-06-combined-calls.md), 4 was as fast as any of 1 to 32 (1: 0.87-1.01x
/// of calls made alone, 2: 0.97-1.07x, 4: 1.00-1.13x, 16: 0.98-1.18x, 32: 0.93-1.14x).
const IN_FLIGHT: usize = 4;

/// The most calls in one `many`.
const MAX_CALLS: usize = 64;

/// A `many` takes no further call once its arguments pass this (bodies under 1 MiB go
/// through Lua; a larger one is never a script argument, see large.rs).
const MAX_BYTES: usize = 1 << 20;

/// What a caller is answered.
type Answer = Result<Value, CallError>;

#[derive(Default)]
pub struct Combiner {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Calls of [`COMBINED`] scripts (alone, or as one `many`) in flight.
    running: usize,
    queue: VecDeque<Queued>,
}

/// A call waiting to be combined: its script's name, its command as its own call would
/// send it, and where its answer goes.
struct Queued {
    name: &'static str,
    cmd: Cmd,
    /// How many of its keys are the namespace's (its script's), and how many in all.
    ns_keys: usize,
    keys: usize,
    generation: Arc<str>,
    /// Whether its change waits for replicas (`--redis-wait-replicas`).
    wait: Option<ReplicaWait>,
    bytes: usize,
    answer: oneshot::Sender<Answer>,
}

/// One call's place in flight, given back (or handed to the queue) when dropped,
/// however the call ends.
struct Place<'a> {
    runner: &'a Runner,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.runner.combiner.release(self.runner);
    }
}

/// A call of a [`COMBINED`] script, as [`super::Call`] hands it over.
pub(super) struct Combinable<'a> {
    pub name: &'static str,
    pub cmd: &'a Cmd,
    pub ns_keys: usize,
    pub keys: usize,
    pub generation: &'a Arc<str>,
    pub wait: Option<ReplicaWait>,
}

impl Combiner {
    /// Send `call`: at once when fewer than [`IN_FLIGHT`] are in flight, else in the
    /// next `many`.
    pub(super) async fn send(&self, runner: &Runner, call: Combinable<'_>) -> Answer {
        let waiting = {
            let mut state = lock(&self.state);
            if state.running < IN_FLIGHT {
                state.running += 1;
                None
            } else {
                let (answer, waiting) = oneshot::channel();
                state.queue.push_back(Queued {
                    name: call.name,
                    cmd: call.cmd.clone(),
                    ns_keys: call.ns_keys,
                    keys: call.keys,
                    generation: call.generation.clone(),
                    wait: call.wait,
                    bytes: call.cmd.args_iter().map(arg_len).sum(),
                    answer,
                });
                Some(waiting)
            }
        };
        match waiting {
            None => {
                let _place = Place { runner };
                runner.send(call.name, call.cmd, call.wait).await
            }
            // The task making the call was dropped (the runtime is ending): it may have
            // sent it.
            Some(waiting) => waiting.await.unwrap_or_else(|_| {
                Err(CallError {
                    op: call.name,
                    fate: Fate::MayHaveApplied,
                    source: "the combined call ended without an answer".into(),
                })
            }),
        }
    }

    /// A place in flight is free: the queue's next calls take it, in a task of their
    /// own, or it is given back.
    fn release(&self, runner: &Runner) {
        let Some(calls) = self.next_calls() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(run_queue(runner.clone(), calls));
            }
            // No runtime to run them on (the process is ending): their callers are
            // told so, as the senders drop.
            Err(_) => drop(calls),
        }
    }

    /// The queue's next calls for one `many` (keeping the place in flight), or `None`
    /// (the place given back) when none waits.
    fn next_calls(&self) -> Option<Vec<Queued>> {
        let mut state = lock(&self.state);
        let Some(first) = state.queue.front() else {
            state.running -= 1;
            return None;
        };
        let generation = first.generation.clone();
        let mut calls = Vec::new();
        let mut bytes = 0;
        while let Some(next) = state.queue.front() {
            if calls.len() == MAX_CALLS || bytes >= MAX_BYTES || next.generation != generation {
                break;
            }
            bytes += next.bytes;
            calls.extend(state.queue.pop_front());
        }
        Some(calls)
    }
}

/// Make `calls`, then the queue's next ones while any wait.
async fn run_queue(runner: Runner, mut calls: Vec<Queued>) {
    loop {
        run_calls(&runner, calls).await;
        match runner.combiner.next_calls() {
            Some(next) => calls = next,
            None => return,
        }
    }
}

/// Make `calls` (one `many`, or the call alone) and answer each.
async fn run_calls(runner: &Runner, mut calls: Vec<Queued>) {
    if calls.len() == 1 {
        if let Some(call) = calls.pop() {
            let answer = runner.send(call.name, &call.cmd, call.wait).await;
            // A caller that went away (its connection closed) needs no answer.
            let _ = call.answer.send(answer);
        }
        return;
    }
    let cmd = many_cmd(runner, &calls);
    // Waits for replicas when any of its calls would.
    let wait = calls.iter().find_map(|c| c.wait);
    let mut reply = runner.send(MANY, &cmd, wait).await;
    if matches!(&reply, Err(e) if Code::found_in(e) == Some(Code::NoScript)) {
        reply = match runner
            .scripts
            .many
            .script
            .load_async(&mut runner.conn())
            .await
        {
            Ok(_) => runner.send(MANY, &cmd, wait).await,
            Err(e) => Err(CallError::new(MANY, e)),
        };
    }
    match reply {
        Ok(Value::Array(replies)) if replies.len() == calls.len() => {
            for (call, reply) in calls.into_iter().zip(replies) {
                let answer = match reply {
                    Value::ServerError(e) => Err(CallError::new(call.name, e.into())),
                    value => Ok(value),
                };
                let _ = call.answer.send(answer);
            }
        }
        Ok(other) => {
            let detail = format!("{MANY} answered {other:?} to {} calls", calls.len());
            for call in calls {
                let _ = call
                    .answer
                    .send(Err(CallError::bad_reply(call.name, detail.clone())));
            }
        }
        Err(e) => {
            for call in calls {
                let _ = call.answer.send(Err(e.shared_with(call.name)));
            }
        }
    }
}

const MANY: &str = "many";

/// The `many` call of `calls` (see many.lua): the namespace's keys `many` reads, each
/// call's own keys, the generation, then each call's name, key and argument counts and
/// arguments.
fn many_cmd(runner: &Runner, calls: &[Queued]) -> Cmd {
    let lua = &runner.scripts.many;
    let own_keys: usize = calls.iter().map(|c| c.keys - c.ns_keys).sum();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(lua.script.get_hash()).arg(lua.ns.len() + own_keys);
    for &key in &lua.ns {
        cmd.arg(runner.keys.ns(key));
    }
    // Each call's command: EVALSHA, its SHA, its key count, its keys, its
    // generation, its arguments.
    let parts: Vec<Vec<&[u8]>> = calls
        .iter()
        .map(|c| c.cmd.args_iter().skip(1).map(arg_bytes).collect())
        .collect();
    for (call, part) in calls.iter().zip(&parts) {
        for key in part
            .iter()
            .skip(2 + call.ns_keys)
            .take(call.keys - call.ns_keys)
        {
            cmd.arg(*key);
        }
    }
    if let Some(first) = calls.first() {
        cmd.arg(&*first.generation);
    }
    for (call, part) in calls.iter().zip(&parts) {
        let args = part.get(3 + call.keys..).unwrap_or_default();
        cmd.arg(call.name)
            .arg(call.keys - call.ns_keys)
            .arg(args.len());
        for a in args {
            cmd.arg(*a);
        }
    }
    cmd
}

fn arg_bytes(arg: Arg<&[u8]>) -> &[u8] {
    match arg {
        Arg::Simple(bytes) => bytes,
        // A script's call has no cursor.
        _ => &[],
    }
}

fn arg_len(arg: Arg<&[u8]>) -> usize {
    arg_bytes(arg).len()
}
