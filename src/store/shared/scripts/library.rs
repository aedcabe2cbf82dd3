//! A script as the store calls it: as a Redis Function (`FCALL`, Redis 7 and later), or
//! by `EVALSHA` where Redis refuses `FUNCTION` (an older Redis, a server without
//! Functions, an ACL without them); and how either is loaded.
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
//! top-level name a script assigns is call state).

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult};

use super::super::shake::split_call_state;

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
    /// The script `name` whose text is `script` (for EVALSHA: its shebang, then `kept`,
    /// the prelude cut to what `body` uses, then `body`); `read_only`: flagged
    /// `no-writes`.
    pub fn new(name: &str, script: &str, kept: &str, body: &str, read_only: bool) -> Callee {
        let (load, call) = split_call_state(kept, CALL_STATE);
        let flags = if read_only { "'no-writes'" } else { "" };
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
            script: redis::Script::new(script),
            library: format!("#!lua name={function}\n{head}'{function}'{tail}"),
            function,
        }
    }

    /// A command calling it, to which its key count, keys and arguments are added.
    pub fn command(&self, functions: bool) -> Cmd {
        let mut cmd;
        if functions {
            cmd = redis::cmd("FCALL");
            cmd.arg(&self.function);
        } else {
            cmd = redis::cmd("EVALSHA");
            cmd.arg(self.script.get_hash());
        }
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
