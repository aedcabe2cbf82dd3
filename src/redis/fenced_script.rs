//! Leader mode's batches as script calls: each batch is one call of one small Lua script
//! ([`SCRIPT`]) that checks, before it writes anything, that the lease key holds this
//! leader's token and that the batch is the next of this leader's sequence, then runs
//! the batch's commands. Several batches may be in flight on one connection: Redis runs
//! them in the order they were sent, each whole (a script is atomic), and each checks
//! its own fence, so a lease renewal (a `PEXPIRE` on the lease key) no longer aborts
//! anything, and no batch waits for the answer of the one before.
//!
//! The sequence: `<commit key>` holds `<token>#<seq>` of the last batch applied. While
//! the chain is unbroken a batch names the one it follows and applies only if that one
//! was the last applied, so a batch that failed (refused, or its connection lost) stops
//! every batch sent after it: none of them was built for what Redis holds then. After a
//! failure the chain is broken: the owner sends nothing until every batch in flight has
//! answered, and the next batch asks only that no batch of this token with a higher
//! number was applied; so a batch of unknown fate that lands late (a frozen Redis that
//! resumes) never applies over a newer one. The argument in full: docs/LEADER.md,
//! *Fencing*.
//!
//! Error replies are told apart by their code (`FENCED`, `OUT_OF_ORDER`,
//! `crate::redis::error`), never by their text.
//!
//! Ownership: the committer's sink owns the [`BatchFence`]; the calls it hands out own
//! a clone of its connection and their command, so they run without it.

use std::future::Future;
use std::io::Write;
use std::time::Duration;

use redis::RedisWrite;
use redis::aio::MultiplexedConnection;

use super::Connector;
use super::error::{CallError, Code, Fate};
use super::fenced::{FenceError, FenceLink};
use super::keys::commit_key;
use super::replicas::ReplicaWait;

/// The batch script. KEYS: the lease key, the commit key. ARGV: the token, this batch's
/// number, the number it must follow (empty: any lower one, or none), then the
/// commands, each in one of two forms, told apart by the argument's first byte:
/// - one argument: its words one after the other, each a MessagePack string
///   ([`encode_word`]), which Redis' `cmsgpack` library takes apart in C
///   ([`command_arg`]);
/// - its word count (decimal), then each word as an argument of its own
///   ([`push_words`]): for commands of large words (bodies), which Redis then hands to
///   the command as they came, with no copy made in Lua.
///
/// Against one argument per word (the script before this one), the first form costs
/// Redis less per command of small words, and more for bodies of 256 bytes and up (each
/// copied once more, into Lua), hence the second: bench/results/2026-11-27-leader-encode.md.
///
/// Versions: a script is called by its SHA, so a call always runs the script it was
/// built for, whatever else is loaded: during a rolling upgrade an older leader's batch
/// (each word its own argument) runs the older script, never this one. Every version of
/// one key layout checks the same lease key and the same `<token>#<seq>` in the commit
/// key, so the fencing holds across them; across the change of layout to schema 3 (a
/// lease key of its own) it holds because the upgrade leaves the old lease key holding
/// a tombstone, which no old leader's token matches (`crate::redis::schema`).
pub const SCRIPT: &str = r#"#!lua
local held = redis.call('MGET', KEYS[1], KEYS[2])
if held[1] ~= ARGV[1] then
  return redis.error_reply('FENCED the lease is not held by this leader')
end
local tag = ARGV[1] .. '#'
local seq = tonumber(ARGV[2])
local last = 0
if held[2] and string.sub(held[2], 1, #tag) == tag then
  last = tonumber(string.sub(held[2], #tag + 1))
end
if ARGV[3] ~= '' then
  if last ~= tonumber(ARGV[3]) then
    return redis.error_reply('OUT_OF_ORDER the batch before this one was not applied')
  end
elseif last >= seq then
  return redis.error_reply('OUT_OF_ORDER a later batch was applied')
end
redis.call('SET', KEYS[2], tag .. ARGV[2])
local i = 4
local n = #ARGV
while i <= n do
  local command = ARGV[i]
  if string.byte(command) < 128 then
    local count = tonumber(command)
    redis.call(unpack(ARGV, i + 1, i + count))
    i = i + count + 1
  else
    redis.call(cmsgpack.unpack(command))
    i = i + 1
  end
end
return 1
"#;

/// The fence of one leadership's batches: its connection, token and sequence.
pub struct BatchFence {
    /// The lease key and token; the connection, made anew (and the script loaded on
    /// it) after an error.
    link: FenceLink,
    sha: String,
    commit_key: String,
    /// The number of the last batch begun.
    seq: u64,
    /// Whether every batch begun so far was applied or is still in flight: the next
    /// names the last as the one it follows.
    chained: bool,
}

impl BatchFence {
    pub fn new(connector: Connector, lease_key: String, token: String) -> BatchFence {
        BatchFence {
            sha: redis::Script::new(SCRIPT).get_hash().to_string(),
            commit_key: commit_key(&lease_key),
            link: FenceLink::new(connector, lease_key, token),
            seq: 0,
            chained: false,
        }
    }

    /// Acknowledge a batch only once `replicas` replicas have it (Redis `WAIT`).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> BatchFence {
        self.link.wait = ReplicaWait::new(replicas, timeout);
        self
    }

    /// The connection, made anew with the script loaded on it after an error.
    pub async fn connection(&mut self) -> Result<MultiplexedConnection, FenceError> {
        let (mut c, new) = self.link.connection().await?;
        if new {
            let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(SCRIPT)
                .query_async(&mut c)
                .await;
            if let Err(e) = loaded {
                self.link.drop_connection();
                return Err(CallError::new("load the batch script", e).into());
            }
        }
        Ok(c)
    }

    /// The call of the next batch, its fence set; the caller appends the batch's
    /// commands with [`push_command`] or [`command_arg`]. `commands` and `bytes` size it
    /// up front (what the commands will add, roughly), so that no body is copied again
    /// as it grows.
    pub fn begin(&mut self, commands: usize, bytes: usize) -> redis::Cmd {
        let after = if self.chained { self.seq } else { 0 };
        self.seq += 1;
        self.chained = true;
        let mut c = redis::Cmd::with_capacity(commands + 8, bytes + 256);
        c.arg("EVALSHA")
            .arg(&self.sha)
            .arg(2)
            .arg(&self.link.key)
            .arg(&self.commit_key)
            .arg(&self.link.token)
            .arg(self.seq);
        if after > 0 {
            c.arg(after);
        } else {
            c.arg("");
        }
        c
    }

    /// Send `call` (made by [`BatchFence::begin`]) on `conn`; the future owns both.
    pub fn send(
        &self,
        mut conn: MultiplexedConnection,
        call: redis::Cmd,
    ) -> impl Future<Output = Result<(), FenceError>> + Send + 'static {
        let wait = self.link.wait;
        async move {
            let Some(wait) = wait else {
                let r: Result<redis::Value, _> = call.query_async(&mut conn).await;
                return r.map(|_| ()).map_err(classify);
            };
            let mut pipe = redis::pipe();
            pipe.add_command(call);
            wait.append_to(&mut pipe);
            // Each reply on its own: a WAIT that fails (a node just demoted to replica
            // refuses WAIT) must not make the batch, which ran, look not applied.
            let (ran, confirmed): (redis::RedisResult<redis::Value>, redis::RedisResult<i64>) =
                pipe.ignore_errors()
                    .query_async(&mut conn)
                    .await
                    .map_err(classify)?;
            ran.map_err(classify)?;
            Ok(wait.confirm(BATCH, confirmed)?)
        }
    }

    /// The call [`BatchFence::begin`] made last will not be sent (it had no commands):
    /// its number is free again. `chained` is what [`BatchFence::begin`] found.
    pub fn unbegin(&mut self, chained: bool) {
        self.seq -= 1;
        self.chained = chained;
    }

    /// Whether the next batch follows the last one begun (see [`BatchFence::unbegin`]).
    pub fn chained(&self) -> bool {
        self.chained
    }

    /// A batch failed (told in the order they were begun): the chain is broken, and
    /// after anything but the fence's own refusal the connection is made anew.
    pub fn failed(&mut self, fenced: bool) {
        self.chained = false;
        if !fenced {
            self.link.drop_connection();
        }
    }
}

/// Add one command to a batch's call, as one argument (the script's encoding,
/// [`SCRIPT`]): redis-rs then packs a handful of arguments per batch, not every word of
/// it.
pub fn push_command<'a>(call: &mut redis::Cmd, words: impl Iterator<Item = &'a [u8]>) {
    let mut arg = command_arg(call);
    for w in words {
        arg.word(w);
    }
}

/// Add one command of `count` words to a batch's call as its word count, then each word
/// as an argument of its own (the script's other form, [`SCRIPT`]): for large words,
/// which Redis then takes as they are.
pub fn push_words<'a>(call: &mut redis::Cmd, count: usize, words: impl Iterator<Item = &'a [u8]>) {
    call.arg(count);
    for w in words {
        call.arg(w);
    }
}

/// One command being written as its argument of a batch's call, straight into the
/// call's buffer (so a body is copied once, from where it is into the call); the
/// argument ends when this is dropped.
pub struct CommandArg<W: Write> {
    out: W,
}

/// Begin a command as the next argument of `call`.
pub fn command_arg(call: &mut redis::Cmd) -> CommandArg<impl Write + '_> {
    CommandArg {
        out: call.writer_for_next_arg(),
    }
}

impl<W: Write> CommandArg<W> {
    /// The next word.
    pub fn word(&mut self, w: &[u8]) {
        let (head, len) = word_head(w.len());
        self.put(&head[..len]);
        self.put(w);
    }

    /// Words already encoded by [`encode_word`].
    pub fn encoded(&mut self, words: &[u8]) {
        self.put(words);
    }

    fn put(&mut self, bytes: &[u8]) {
        // The writer appends to the call's `Vec`: it never fails.
        let _ = self.out.write_all(bytes);
    }
}

/// `w` encoded as a word of a command's argument, appended to `out`: a command's words
/// can be gathered ahead and written in one piece ([`CommandArg::encoded`]).
pub fn encode_word(out: &mut Vec<u8>, w: &[u8]) {
    let (head, len) = word_head(w.len());
    out.extend_from_slice(&head[..len]);
    out.extend_from_slice(w);
}

/// How many bytes the MessagePack head beginning with `first` takes ([`word_head`]).
pub fn word_head_len(first: u8) -> usize {
    match first {
        0xd9 => 2,
        0xda => 3,
        0xdb => 5,
        _ => 1,
    }
}

/// The MessagePack head of a string of `n` bytes (its first `.1` bytes): fixstr, str 8,
/// str 16 or str 32. Nothing in a batch comes near 4 GiB: with Redis a body is at most
/// 64 MiB (`crate::cli::REDIS_MAX_JOB_SIZE`).
fn word_head(n: usize) -> ([u8; 5], usize) {
    match n {
        0..32 => ([0xa0 | n as u8, 0, 0, 0, 0], 1),
        32..256 => ([0xd9, n as u8, 0, 0, 0], 2),
        256..65_536 => {
            let [a, b] = (n as u16).to_be_bytes();
            ([0xda, a, b, 0, 0], 3)
        }
        _ => {
            let [a, b, c, d] = u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes();
            ([0xdb, a, b, c, d], 5)
        }
    }
}

/// What a batch's failed calls are named in errors.
const BATCH: &str = "commit batch";

/// What a failed batch call means, by the reply's code.
fn classify(e: redis::RedisError) -> FenceError {
    match Code::of(&e) {
        Some(Code::Fenced) => FenceError::Fenced,
        Some(Code::OutOfOrder) => FenceError::Failed(CallError {
            op: BATCH,
            fate: Fate::NotApplied,
            source: Box::new(e),
        }),
        // A command of the batch failed as the script ran it (a key of the wrong type):
        // what ran before it stays applied.
        Some(Code::Other) => FenceError::Failed(CallError {
            op: BATCH,
            fate: Fate::MayHaveApplied,
            source: Box::new(e),
        }),
        _ => FenceError::Failed(CallError::new(BATCH, e)),
    }
}
