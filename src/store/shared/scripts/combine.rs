//! Combining the hot calls: while this instance has [`IN_FLIGHT`] calls of `put`,
//! `reserve` or a delete (`delete`, `delete_job`) in flight, the next ones wait, and go
//! together as one call of `many.lua` as soon as one of those answers. Redis then pays
//! one script call, one generation check, one TIME and one SHARDNUMSUB for all of them, and
//! this process one round trip; a lone call goes as it always did, without waiting for
//! company.
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
//! its next command). A place in flight passes from call to call: when a call answers,
//! the first caller waiting in the queue is woken to make the next `many` itself, with
//! the calls queued behind it (flat combining: no task and no wake-up more than the
//! answers need). The `many` is a boxed future of its own ([`Making`]), so a caller
//! dropped before or while making it (an HTTP request whose client went away) hands it
//! to a task that makes or finishes it: a call once taken from the queue is always made
//! to its end, and its place in flight always passes on.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use redis::{Arg, Cmd, Value};
use tokio::sync::oneshot;

use super::Runner;
use crate::redis::replicas::ReplicaWait;
use crate::redis::{CallError, Code, Fate};
use crate::util::lock;

/// The scripts whose calls are combined (each `many.lua` runs, by name, as its own
/// script would).
pub(super) const COMBINED: &[&str] = &["put", "reserve", "delete", "delete_job"];

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

/// A call waiting to be combined, and where its caller is told what to do.
struct Queued {
    call: Owned,
    turn: oneshot::Sender<Turn>,
}

/// A call as its own call would send it: its script's name, its command, and what
/// combining it needs to know.
struct Owned {
    name: &'static str,
    cmd: Cmd,
    /// How many of its keys are the namespace's (its script's), and how many in all.
    ns_keys: usize,
    keys: usize,
    generation: Arc<str>,
    /// Whether its change waits for replicas (`--redis-wait-replicas`).
    wait: Option<ReplicaWait>,
}

/// What a queued caller is woken with: its answer (its call went in another's `many`),
/// or the `many` to make now, its own call first.
enum Turn {
    Answered(Answer),
    Make(Making),
}

/// The calls of one `many`: the one of the caller who makes it, and those queued
/// behind it (the first still `Queued` until its caller is woken).
struct Batch<T = Owned> {
    own: T,
    rest: Vec<Queued>,
}

/// One call's place in flight, handed to the queue's next calls (or given back) when
/// dropped, however the call ends.
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
                let (turn, waiting) = oneshot::channel();
                state.queue.push_back(Queued {
                    call: Owned {
                        name: call.name,
                        cmd: call.cmd.clone(),
                        ns_keys: call.ns_keys,
                        keys: call.keys,
                        generation: call.generation.clone(),
                        wait: call.wait,
                    },
                    turn,
                });
                Some(waiting)
            }
        };
        let Some(waiting) = waiting else {
            let _place = Place { runner };
            return runner.send(call.name, call.cmd, call.wait).await;
        };
        match waiting.await {
            Ok(Turn::Answered(answer)) => answer,
            Ok(Turn::Make(making)) => making.await,
            // Its turn was dropped unsent: no runtime was left to make the call on.
            Err(_) => Err(CallError {
                op: call.name,
                fate: Fate::MayHaveApplied,
                source: "the combined call ended without an answer".into(),
            }),
        }
    }

    /// A place in flight is free: the queue's next calls take it (their first caller
    /// is woken to make them), or it is given back.
    fn release(&self, runner: &Runner) {
        let Some(batch) = self.next_batch() else {
            return;
        };
        let Batch { own, rest } = batch;
        let Queued { call, turn } = own;
        let making = Making::new(runner, Batch { own: call, rest });
        // A caller that went away while it waited drops its turn unread: the `many` is
        // then made by a task (see `Making`).
        let _ = turn.send(Turn::Make(making));
    }

    /// The queue's next calls for one `many` (keeping the place in flight), or `None`
    /// (the place given back) when none waits.
    fn next_batch(&self) -> Option<Batch<Queued>> {
        let mut state = lock(&self.state);
        let Some(own) = state.queue.pop_front() else {
            state.running -= 1;
            return None;
        };
        let mut rest = Vec::new();
        let mut bytes = own.call.bytes();
        while let Some(next) = state.queue.front() {
            if rest.len() + 1 == MAX_CALLS
                || bytes >= MAX_BYTES
                || next.call.generation != own.call.generation
            {
                break;
            }
            bytes += next.call.bytes();
            rest.extend(state.queue.pop_front());
        }
        Some(Batch { own, rest })
    }
}

impl Owned {
    /// Its command's arguments after FCALL and the function (or EVALSHA and the SHA)
    /// and the key count: its keys, its generation, then its script's arguments.
    fn args(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.cmd.args_iter().skip(3).map(arg_bytes)
    }

    fn bytes(&self) -> usize {
        self.args().map(<[u8]>::len).sum()
    }
}

/// The `many` a woken caller makes. It is boxed so that, dropped before its end (its
/// caller gone before reading its turn, or while making it), it is handed to a task
/// that makes or finishes it: the calls behind it may have been sent, their callers are
/// owed their answers, and its place in flight must pass on.
struct Making {
    call: Option<Pin<Box<dyn Future<Output = Answer> + Send>>>,
}

impl Making {
    fn new(runner: &Runner, batch: Batch) -> Making {
        Making {
            call: Some(Box::pin(make(runner.clone(), batch))),
        }
    }
}

impl Future for Making {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Ready(Err(CallError::bad_reply(MANY, "polled after its end")));
        };
        let answer = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(answer)
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        if let Some(call) = self.call.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = call.await;
            });
        }
    }
}

/// Make `batch` (one `many`, or its own call alone), answer the calls behind it, and
/// return its own call's answer. Its place in flight passes on when it ends.
async fn make(runner: Runner, batch: Batch) -> Answer {
    let _place = Place { runner: &runner };
    let runner = &runner;
    let Batch { own, rest } = batch;
    if rest.is_empty() {
        return runner.send(own.name, &own.cmd, own.wait).await;
    }
    let cmd = many_cmd(runner, &own, &rest);
    // Waits for replicas when any of its calls would.
    let wait = own.wait.or_else(|| rest.iter().find_map(|q| q.call.wait));
    let mut reply = runner.send(MANY, &cmd, wait).await;
    if matches!(&reply, Err(e) if Code::found_in(e) == Some(Code::NoScript)) {
        reply = match runner.reload(&runner.scripts.many.callee).await {
            Ok(_) => runner.send(MANY, &cmd, wait).await,
            Err(e) => Err(CallError::new(MANY, e)),
        };
    }
    let count = rest.len() + 1;
    let replies = match reply {
        Ok(Value::Array(replies)) if replies.len() == count => replies,
        Ok(other) => {
            let detail = format!("{MANY} answered {other:?} to {count} calls");
            for queued in rest {
                let failed = CallError::bad_reply(queued.call.name, detail.clone());
                // A caller that went away (its connection closed) needs no answer.
                let _ = queued.turn.send(Turn::Answered(Err(failed)));
            }
            return Err(CallError::bad_reply(own.name, detail));
        }
        Err(e) => {
            for queued in rest {
                let failed = e.shared_with(queued.call.name);
                let _ = queued.turn.send(Turn::Answered(Err(failed)));
            }
            return Err(e.shared_with(own.name));
        }
    };
    // `many` answers each call in its place: the maker's first.
    let mut replies = replies.into_iter();
    let own_reply = replies.next();
    for (queued, reply) in rest.into_iter().zip(replies) {
        let answer = one_answer(queued.call.name, reply);
        let _ = queued.turn.send(Turn::Answered(answer));
    }
    match own_reply {
        Some(reply) => one_answer(own.name, reply),
        None => Err(CallError::bad_reply(
            own.name,
            format!("{MANY} answered none"),
        )),
    }
}

/// One call's element of `many`'s reply: an error element is that call's error alone.
fn one_answer(name: &'static str, reply: Value) -> Answer {
    match reply {
        Value::ServerError(e) => Err(CallError::new(name, e.into())),
        value => Ok(value),
    }
}

const MANY: &str = "many";

/// The `many` call of `own` and `rest` (see many.lua): the namespace's keys `many`
/// reads, each call's own keys, the generation, then each call's name, key and argument
/// counts and arguments.
fn many_cmd(runner: &Runner, own: &Owned, rest: &[Queued]) -> Cmd {
    let calls = || std::iter::once(own).chain(rest.iter().map(|q| &q.call));
    let lua = &runner.scripts.many;
    let own_keys: usize = calls().map(|c| c.keys - c.ns_keys).sum();
    // Room for each call's arguments as its own command holds them (its keys, generation
    // and arguments: a little more than `many` sends, which gives the namespace's keys
    // once) with its name and three counts, and `many`'s key count, keys and generation.
    let args: usize = calls().map(|c| c.args().len() + 3).sum::<usize>() + lua.ns.len() + 2;
    let bytes: usize = calls().map(|c| c.bytes() + c.name.len() + 3 * 20).sum();
    let mut cmd = lua.callee.command(runner.scripts.functions(), args, bytes);
    cmd.arg(lua.ns.len() + own_keys);
    for &key in &lua.ns {
        cmd.arg(runner.keys.ns(key));
    }
    for call in calls() {
        for key in call
            .args()
            .skip(call.ns_keys)
            .take(call.keys - call.ns_keys)
        {
            cmd.arg(key);
        }
    }
    cmd.arg(&*own.generation);
    for call in calls() {
        // After its keys, its generation, then its arguments.
        let args = call.args().skip(call.keys + 1);
        cmd.arg(call.name)
            .arg(call.keys - call.ns_keys)
            .arg(args.len());
        for a in args {
            cmd.arg(a);
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
