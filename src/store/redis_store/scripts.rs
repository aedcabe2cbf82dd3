//! The Lua scripts, one per job transition. Each is the shared prelude followed by the
//! script's own body; `redis::Script` loads it once and calls it by EVALSHA (loading it
//! again by itself after a Redis restart).

use redis::Script;

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
