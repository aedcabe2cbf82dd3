//! A script as the store calls it: as a Redis Function (`FCALL`, Redis 7 and later), or
//! by `EVALSHA` where Redis refuses `FUNCTION` (an older Redis, a server without
//! Functions, an ACL without them); how either is loaded; and other builds' libraries
//! deleted ([`drop_others`]).
//!
//! Why Functions: a script's whole text runs at every `EVALSHA`, so each call makes
//! again every helper of its prelude, and Lua 5.1 finds each local a helper captures by
//! walking the list of open upvalues, which grows with every helper. A library makes
//! its helpers once, at `FUNCTION LOAD`; a call runs only the call's state and the
//! script's own part. Measured: a `many` call's prelude cost Redis 15.3 µs by `EVALSHA`
//! and 2.8 µs as a Function (bench/results/2026-12-06-prelude-cost.md).
//!
//! Invariants: one library per script, named `redstalk_<script>_<hash>` with its one
//! function of the same name, the hash of its text: instances of different builds on
//! one Redis (a rolling upgrade) each call their own, as each script's SHA does. The
//! call's state (`CALL_STATE`, the prelude's variables a call changes) is declared at
//! load and assigned at each call's entry, with the generation check, before the body:
//! nothing a call leaves behind reaches the next (scripts/tests.rs checks that every
//! top-level name a script assigns is call state). Only `redstalk_*` libraries are ever
//! deleted.

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Value};

use super::super::shake::split_call_state;
use super::Composed;

/// The prelude's variables that a call sets (lua/prelude.lua): each call starts them
/// again, as a script's whole text does at each `EVALSHA`.
pub const CALL_STATE: &[&str] = &[
    "G",
    "GEN",
    "NOW",
    "RET",
    "LISTENED",
    "ID_BLOCK",
    "PUTS_UNCOUNTED",
    "SMALL",
];

/// One script's two forms.
pub struct Callee {
    script: redis::Script,
    /// The library's name, which is also its function's.
    function: String,
    /// The library's text, for `FUNCTION LOAD`.
    library: String,
}

impl Callee {
    /// The script `name`, composed: its text for `EVALSHA`, and its library (read-only
    /// scripts flagged `no-writes` in both).
    pub(super) fn new(name: &str, composed: &Composed) -> Callee {
        let (load, call) = split_call_state(&composed.prelude, CALL_STATE);
        let flags = if composed.read_only {
            "'no-writes'"
        } else {
            ""
        };
        let body = composed.body;
        // The function's form of KEYS and ARGV: locals of the library that each call
        // sets, which its helpers read as a script's read the globals.
        let head = format!("local KEYS, ARGV\n{load}\nredis.register_function{{function_name = ");
        let tail = format!(
            ", flags = {{ {flags} }}, callback = function(keys, args)\n\
             KEYS, ARGV = keys, args\n{call}\n{body}\nend}}\n"
        );
        let hash = redis::Script::new(&format!("{head}{tail}"))
            .get_hash()
            .to_string();
        let function = format!("redstalk_{name}_{}", &hash[..16]);
        Callee {
            script: redis::Script::new(&composed.text()),
            library: format!("#!lua name={function}\n{head}'{function}'{tail}"),
            function,
        }
    }

    /// A command calling it, to which its key count, keys and arguments are added:
    /// room for `args` more arguments of `bytes` in all, so that adding them does not
    /// grow the command's buffers one argument at a time (each growth a `realloc` and a
    /// copy: a sixth of redstalk's instructions per job in shared mode before,
    /// bench/results/2026-12-07-instructions.md).
    pub fn command(&self, functions: bool, args: usize, bytes: usize) -> Cmd {
        let (word, target) = if functions {
            ("FCALL", self.function.as_str())
        } else {
            ("EVALSHA", self.script.get_hash())
        };
        let mut cmd = Cmd::with_capacity(2 + args, word.len() + target.len() + bytes);
        cmd.arg(word).arg(target);
        cmd
    }

    /// Load it into Redis (on a cluster, every primary: redis-rs routes `FUNCTION
    /// LOAD` and `SCRIPT LOAD` to all of them). A library loaded again is replaced by
    /// the same text, so loading is safe at any time and from any instance.
    pub async fn load(&self, conn: &mut impl ConnectionLike, functions: bool) -> RedisResult<()> {
        if functions {
            redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(&self.library)
                .query_async::<()>(conn)
                .await
        } else {
            self.script.load_async(conn).await.map(drop)
        }
    }

    /// The library's name, which is also its function's.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// The script's text (its `EVALSHA` form).
    #[cfg(test)]
    pub fn script(&self) -> &redis::Script {
        &self.script
    }

    /// The library's name and text.
    #[cfg(test)]
    pub fn library(&self) -> (&str, &str) {
        (&self.function, &self.library)
    }
}

/// Where every library of every build is named: `redstalk_<script>_<hash>`.
const PREFIX: &str = "redstalk_";

/// [`drop_others`], said in the log. A cleanup: a failure costs Redis memory, not
/// service, so it is a warning, never an error.
pub async fn tidy(conn: &mut impl ConnectionLike, ours: &[&str]) {
    match drop_others(conn, ours).await {
        Ok(dropped) => {
            if !dropped.deleted.is_empty() {
                tracing::info!(
                    libraries = dropped.deleted.len(),
                    "deleted other builds' redstalk_* libraries"
                );
            }
            if let Some(e) = dropped.refused {
                tracing::warn!(
                    error = %e,
                    "Redis refused to delete another build's redstalk_* library"
                );
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            "could not list other builds' redstalk_* libraries"
        ),
    }
}

/// Delete the libraries of other builds (named as this build's are, other hashes), so
/// that Redis holds those of the builds that run, not every build's since it started
/// (libraries persist in its RDB and AOF). Safe while another build still runs: its next
/// call of a deleted library answers "Function not found", changes nothing, and loads
/// it again (as after `FUNCTION FLUSH`). `ours`: this build's. A refused delete does not
/// stop the others (on a cluster a primary added since lacks an old library, and
/// refuses its delete while the other primaries make it).
pub async fn drop_others(conn: &mut impl ConnectionLike, ours: &[&str]) -> RedisResult<Dropped> {
    let listed: Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(format!("{PREFIX}*"))
        .query_async(conn)
        .await?;
    let mut dropped = Dropped::default();
    for name in library_names(&listed)
        .into_iter()
        .filter(|n| n.starts_with(PREFIX) && !ours.contains(&n.as_str()))
    {
        let deleted = redis::cmd("FUNCTION")
            .arg("DELETE")
            .arg(&name)
            .query_async::<()>(conn)
            .await;
        match deleted {
            Ok(()) => dropped.deleted.push(name),
            Err(e) => {
                dropped.refused.get_or_insert(e);
            }
        }
    }
    Ok(dropped)
}

/// What [`drop_others`] did.
#[derive(Default)]
pub struct Dropped {
    /// The libraries deleted.
    pub deleted: Vec<String>,
    /// The first refusal of a delete, if any.
    pub refused: Option<redis::RedisError>,
}

/// The `library_name` of each library of a `FUNCTION LIST` reply (a map per library in
/// RESP3, a flat array of fields and values in RESP2).
fn library_names(listed: &Value) -> Vec<String> {
    let Value::Array(libraries) = listed else {
        return Vec::new();
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    libraries
        .iter()
        .filter_map(|library| {
            let pairs: Vec<(&Value, &Value)> = match library {
                Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
                Value::Array(flat) => flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
                _ => return None,
            };
            pairs
                .into_iter()
                .find(|(k, _)| text(k).as_deref() == Some("library_name"))
                .and_then(|(_, v)| text(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names_are_read_from_either_protocol() {
        let field = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp3 = Value::Array(vec![Value::Map(vec![
            (field("library_name"), field("redstalk_put_1")),
            (field("engine"), field("LUA")),
        ])]);
        let resp2 = Value::Array(vec![Value::Array(vec![
            field("library_name"),
            field("redstalk_put_2"),
            field("functions"),
            Value::Array(Vec::new()),
        ])]);
        assert_eq!(library_names(&resp3), ["redstalk_put_1"]);
        assert_eq!(library_names(&resp2), ["redstalk_put_2"]);
        assert!(library_names(&Value::Nil).is_empty());
    }
}
