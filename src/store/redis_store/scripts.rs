//! The Lua scripts, one per job transition. Each is the shared prelude followed by the
//! script's own body; it is loaded once and called by EVALSHA ([`Call`]), and loaded
//! again when Redis answers NOSCRIPT (after a restart or `SCRIPT FLUSH`).

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

/// One call of a script, written straight into one command buffer as its keys and
/// arguments are added (redis-rs' `ScriptInvocation` keeps each in its own allocation
/// and copies them again into the command: a measurable part of every command's cost).
///
/// Invariant: exactly the number of keys announced to [`Call::new`] are added before
/// the first argument; [`Call::invoke`] refuses a call that broke it.
pub struct Call<'a> {
    script: &'a Script,
    cmd: Cmd,
    keys_left: usize,
}

impl<'a> Call<'a> {
    /// A call of `script` that will name `keys` keys.
    pub fn new(script: &'a Script, keys: usize) -> Call<'a> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys);
        Call {
            script,
            cmd,
            keys_left: keys,
        }
    }

    pub fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys_left = self.keys_left.saturating_sub(1);
        self.cmd.arg(key);
        self
    }

    pub fn keys<K: ToRedisArgs>(&mut self, keys: &[K]) -> &mut Self {
        for k in keys {
            self.key(k);
        }
        self
    }

    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    pub async fn invoke<T: FromRedisValue>(&self, con: &mut impl ConnectionLike) -> RedisResult<T> {
        if self.keys_left != 0 {
            return Err((ErrorKind::Client, "script call built with too few keys").into());
        }
        match self.cmd.query_async(con).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(con).await?;
                self.cmd.query_async(con).await
            }
            other => other,
        }
    }
}

macro_rules! lua {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/prelude.lua"),
            "\n",
            include_str!(concat!("lua/", $file))
        ))
    };
}

pub struct Scripts {
    pub put: Script,
    pub reserve: Script,
    pub reserve_job: Script,
    pub delete: Script,
    pub release: Script,
    pub bury: Script,
    pub touch: Script,
    pub unreserve: Script,
    pub kick: Script,
    pub kick_job: Script,
    pub peek: Script,
    pub job_info: Script,
    pub tube_info: Script,
    pub pause: Script,
    pub tick: Script,
    pub tube_ref: Script,
    pub reap: Script,
    pub reclaim: Script,
    pub close: Script,
    pub init: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            put: lua!("put.lua"),
            reserve: lua!("reserve.lua"),
            reserve_job: lua!("reserve_job.lua"),
            delete: lua!("delete.lua"),
            release: lua!("release.lua"),
            bury: lua!("bury.lua"),
            touch: lua!("touch.lua"),
            unreserve: lua!("unreserve.lua"),
            kick: lua!("kick.lua"),
            kick_job: lua!("kick_job.lua"),
            peek: lua!("peek.lua"),
            job_info: lua!("job_info.lua"),
            tube_info: lua!("tube_info.lua"),
            pause: lua!("pause.lua"),
            tick: lua!("tick.lua"),
            tube_ref: lua!("tube_ref.lua"),
            reap: lua!("reap.lua"),
            reclaim: lua!("reclaim.lua"),
            close: lua!("close.lua"),
            init: lua!("init.lua"),
        }
    }
}

impl Scripts {
    /// Every script, for loading them all up front (so no command pays for a NOSCRIPT
    /// round trip, and a close is one round trip like any other).
    pub fn all(&self) -> [&Script; 20] {
        [
            &self.put,
            &self.reserve,
            &self.reserve_job,
            &self.delete,
            &self.release,
            &self.bury,
            &self.touch,
            &self.unreserve,
            &self.kick,
            &self.kick_job,
            &self.peek,
            &self.job_info,
            &self.tube_info,
            &self.pause,
            &self.tick,
            &self.tube_ref,
            &self.reap,
            &self.reclaim,
            &self.close,
            &self.init,
        ]
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}
