//! What a failed Redis call means, decided in one place: by the error's kind and, for an
//! error reply, by its code (`READONLY`, `OOM`, `NOSCRIPT`..., and the scripts' own
//! codes such as `NAMESPACE_LOST` and `DAMAGED`), never by searching its text (the one
//! reply Redis gives no code, FCALL's missing function, is matched whole).
//!
//! [`Code`] names the codes redstalk acts on; [`Fate`] says what became of a failed
//! call, for its caller (nothing applied, maybe applied, an unreadable reply, the
//! namespace gone); [`CallError`] is a failed call with its fate and Redis' own error as
//! its source, which the store turns into its `StoreError` unchanged in meaning.

use redis::{ErrorKind, RedisError, ServerError};

/// A boxed error kept as the source of a [`CallError`] (Redis' own error, or what was
/// wrong with a reply), so its chain reaches the logs.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// FCALL's detail when the function is not loaded.
const FUNCTION_NOT_FOUND: &str = "Function not found";

/// The code of an error reply, for the codes redstalk tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// `READONLY`: the server is a replica now (demoted by a failover).
    ReadOnly,
    /// `OOM`: Redis is at `maxmemory` and refuses writes.
    OutOfMemory,
    /// `NOSCRIPT`: the script is not loaded (Redis restarted, or `SCRIPT FLUSH`); also
    /// FCALL's `ERR Function not found`, the same fact for a function (see
    /// [`Code::parse`]).
    NoScript,
    /// `LOADING`: Redis is loading its dataset.
    Loading,
    /// `MASTERDOWN`: a replica that lost its primary refuses reads.
    MasterDown,
    /// `BUSY`: another script runs too long.
    Busy,
    /// `NOAUTH`: the connection is not authenticated (any more).
    NoAuth,
    /// `NOPERM`: the ACL user may not run this command, or touch these keys.
    NoPerm,
    /// `MOVED`: a Redis Cluster node that does not own the slot (any more); the reply
    /// names the owner. Nothing ran.
    Moved,
    /// `ASK`: the slot is migrating and the keys have left this node. Nothing ran.
    Ask,
    /// `TRYAGAIN`: the slot is migrating and the keys are split. Nothing ran.
    TryAgain,
    /// `CLUSTERDOWN`: the cluster cannot serve the slot now (no primary). Nothing ran.
    ClusterDown,
    /// `CROSSSLOT`: keys of several slots in one call (a bug: every key is in `{P}`).
    CrossSlot,
    /// `EXECABORT`: a transaction discarded for an error at queue time. Nothing ran.
    ExecAbort,
    /// The scripts' own (`lua/prelude.lua`): the call was made for a namespace that is
    /// gone; nothing was applied.
    NamespaceLost,
    /// The scripts' own (`reserve.lua`, `reserve_job.lua`): a job had lost its body or
    /// meta, and was dropped.
    Damaged,
    /// The scripts' own (`put.lua`): the body written ahead of a large put is gone.
    BodyMissing,
    /// The scripts' own (`init.lua`): the namespace has a key layout this version does
    /// not read (a later version upgraded it); nothing was applied.
    Layout,
    /// The lease's own (`cluster/lease.rs`): instances of the shared mode are alive.
    SharedModeLive,
    /// The batch script's own (`fenced_script.rs`): the lease holds another token;
    /// nothing was applied.
    Fenced,
    /// The batch script's own: the batch before this one was not applied (or a later
    /// one was); nothing was applied.
    OutOfOrder,
    /// Any other error reply: a script that failed as it ran (a Lua error, a key of the
    /// wrong type), a command refused for its arguments or its permissions.
    Other,
}

impl Code {
    /// The code of `e`, when it is an error reply (alone or in a pipeline).
    pub fn of(e: &RedisError) -> Option<Code> {
        e.code().map(|code| Code::parse(code, e.detail()))
    }

    /// The code of an error reply that arrived as a value (inside a pipeline's replies).
    pub fn of_reply(e: &ServerError) -> Code {
        Code::parse(e.code(), e.details())
    }

    /// The code of the Redis error found along `err`'s sources, if any (see
    /// [`redis_error_in`]).
    pub fn found_in(err: &(dyn std::error::Error + 'static)) -> Option<Code> {
        redis_error_in(err).and_then(Code::of)
    }

    /// The code of an error reply of `code` and `detail`. The one reply read by its
    /// detail: Redis gives a missing function no code of its own (FCALL answers
    /// `ERR Function not found`, fcall.c), and redstalk must load it again as it does a
    /// script on NOSCRIPT.
    fn parse(code: &str, detail: Option<&str>) -> Code {
        match code {
            "ERR" if detail == Some(FUNCTION_NOT_FOUND) => Code::NoScript,
            "READONLY" => Code::ReadOnly,
            "OOM" => Code::OutOfMemory,
            "NOSCRIPT" => Code::NoScript,
            "LOADING" => Code::Loading,
            "MASTERDOWN" => Code::MasterDown,
            "BUSY" => Code::Busy,
            "NOAUTH" => Code::NoAuth,
            "NOPERM" => Code::NoPerm,
            "MOVED" => Code::Moved,
            "ASK" => Code::Ask,
            "TRYAGAIN" => Code::TryAgain,
            "CLUSTERDOWN" => Code::ClusterDown,
            "CROSSSLOT" => Code::CrossSlot,
            "EXECABORT" => Code::ExecAbort,
            "NAMESPACE_LOST" => Code::NamespaceLost,
            "DAMAGED" => Code::Damaged,
            "BODY_MISSING" => Code::BodyMissing,
            "LAYOUT" => Code::Layout,
            "SHARED" => Code::SharedModeLive,
            "FENCED" => Code::Fenced,
            "OUT_OF_ORDER" => Code::OutOfOrder,
            _ => Code::Other,
        }
    }

    /// Whether Redis refuses every call for a while (it is a replica, full, loading,
    /// busy, lacks the script, or does not let this client in), as opposed to refusing
    /// this call for its data.
    pub fn refuses_every_call(self) -> bool {
        matches!(
            self,
            Code::ReadOnly
                | Code::OutOfMemory
                | Code::NoScript
                | Code::Loading
                | Code::MasterDown
                | Code::Busy
                | Code::NoAuth
                | Code::NoPerm
                | Code::Moved
                | Code::Ask
                | Code::TryAgain
                | Code::ClusterDown
        )
    }

    /// Whether a reply of this code says the cluster sent the call elsewhere or could
    /// not take it, before running anything: the call may be sent again.
    pub fn redirected(self) -> bool {
        matches!(
            self,
            Code::Moved | Code::Ask | Code::TryAgain | Code::ClusterDown
        )
    }

    /// Whether a connection that got this code should be given up and made again to
    /// the slot's current owner (the node is a replica now, or no longer owns the
    /// slot, or the cluster lost it for now).
    pub fn owner_changed(self) -> bool {
        matches!(self, Code::ReadOnly | Code::Moved | Code::ClusterDown)
    }
}

/// The Redis error along `err`'s sources, if any: a store error keeps the Redis error
/// it came from as its source (found by type, never by its text).
pub fn redis_error_in<'e>(err: &'e (dyn std::error::Error + 'static)) -> Option<&'e RedisError> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(redis) = e.downcast_ref::<RedisError>() {
            return Some(redis);
        }
        next = e.source();
    }
    None
}

/// What became of a failed call, as its caller must take it (not the engine's
/// `Outcome`, which is a command's reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Redis never ran it (a refused connection, an error reply: READONLY, OOM,
    /// NOAUTH...): nothing was applied.
    NotApplied,
    /// It was sent and no answer came in time (or the connection dropped while it was
    /// in flight): it may have been applied, or may still be.
    MayHaveApplied,
    /// Redis answered something this code cannot read: a bug, or damaged data.
    BadReply,
    /// A script refused a call made for a namespace that is gone: nothing was applied.
    NamespaceLost,
}

impl Fate {
    /// What `e` means for the call that got it.
    pub fn of(e: &RedisError) -> Fate {
        if Code::of(e) == Some(Code::NamespaceLost) {
            return Fate::NamespaceLost;
        }
        match e.kind() {
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Fate::BadReply,
            // Extension: an error reply whose code redis-rs has no name for (WRONGPASS...).
            ErrorKind::Server(_)
            | ErrorKind::Extension
            | ErrorKind::AuthenticationFailed
            | ErrorKind::InvalidClientConfig
            | ErrorKind::Client => Fate::NotApplied,
            _ if e.is_connection_refusal() => Fate::NotApplied,
            _ => Fate::MayHaveApplied,
        }
    }
}

/// A Redis call that failed: which (`op` names the script or command), what that means
/// for the caller, and why.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {}", describe(*fate))]
pub struct CallError {
    pub op: &'static str,
    pub fate: Fate,
    #[source]
    pub source: BoxError,
}

fn describe(fate: Fate) -> &'static str {
    match fate {
        Fate::NotApplied => "Redis did not run it; nothing was applied",
        Fate::MayHaveApplied => "no answer from Redis in time; it may have been applied",
        Fate::BadReply => "unexpected reply from Redis",
        Fate::NamespaceLost => "the Redis namespace it was made for is gone",
    }
}

impl CallError {
    /// `op` failed with `e`.
    pub fn new(op: &'static str, e: RedisError) -> CallError {
        CallError {
            op,
            fate: Fate::of(&e),
            source: Box::new(e),
        }
    }

    /// A connection that could not be made (no answer, refused credentials, a
    /// certificate not trusted, options that cannot be used): nothing was sent, so
    /// nothing was applied.
    pub fn connect(e: impl Into<BoxError>) -> CallError {
        CallError {
            op: "connect",
            fate: Fate::NotApplied,
            source: e.into(),
        }
    }

    /// This failure, of one call made for several (shared mode's `many`), as the failure
    /// of `op`, one of them: the same fate, and the same source where it can be copied
    /// (Redis' error, which its code is read from), else its text.
    pub fn shared_with(&self, op: &'static str) -> CallError {
        if let Some(e) = self.source.downcast_ref::<RedisError>() {
            return CallError::new(op, e.clone());
        }
        CallError {
            op,
            fate: self.fate,
            source: self.source.to_string().into(),
        }
    }

    /// `op` was answered something this code cannot read (`detail` says what).
    pub fn bad_reply(op: &'static str, detail: impl Into<String>) -> CallError {
        CallError {
            op,
            fate: Fate::BadReply,
            source: detail.into().into(),
        }
    }
}

/// The error a call gets for the error reply `code_and_detail` (for tests).
#[cfg(test)]
pub(crate) fn error_reply(code_and_detail: &str) -> RedisError {
    let parsed = redis::parse_redis_value(format!("-{code_and_detail}\r\n").as_bytes())
        .expect("an error reply parses");
    match parsed {
        redis::Value::ServerError(e) => e.into(),
        other => panic!("not an error reply: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code_and_detail: &str) -> RedisError {
        error_reply(code_and_detail)
    }

    #[test]
    fn error_replies_are_told_apart_by_their_code() {
        for (text, code) in [
            (
                "READONLY You can't write against a read only replica.",
                Code::ReadOnly,
            ),
            (
                "OOM command not allowed when used memory > 'maxmemory'. script: x",
                Code::OutOfMemory,
            ),
            ("NOSCRIPT No matching script.", Code::NoScript),
            ("ERR Function not found", Code::NoScript),
            ("ERR Function not founded", Code::Other),
            (
                "LOADING Redis is loading the dataset in memory",
                Code::Loading,
            ),
            ("BUSY Redis is busy running a script.", Code::Busy),
            (
                "NAMESPACE_LOST the namespace this call was made for is gone",
                Code::NamespaceLost,
            ),
            (
                "DAMAGED job 7 in tube t lost its body in Redis",
                Code::Damaged,
            ),
            (
                "ERR user_script:3: attempt to compare nil with number script: abc",
                Code::Other,
            ),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                Code::Other,
            ),
            ("MOVED 12682 127.0.0.1:7002", Code::Moved),
            ("ASK 12682 127.0.0.1:7002", Code::Ask),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                Code::TryAgain,
            ),
            ("CLUSTERDOWN The cluster is down", Code::ClusterDown),
            (
                "CROSSSLOT Keys in request don't hash to the same slot",
                Code::CrossSlot,
            ),
            (
                "EXECABORT Transaction discarded because of previous errors.",
                Code::ExecAbort,
            ),
        ] {
            let e = reply(text);
            assert_eq!(Code::of(&e), Some(code), "{text}");
            eprintln!("{text:?} -> {code:?}, {:?}", Fate::of(&e));
        }
        // The text alone decides nothing: a script error that names READONLY in its
        // message is still a script error.
        assert_eq!(
            Code::of(&reply(
                "ERR user_script:1: READONLY in a message script: abc"
            )),
            Some(Code::Other)
        );
        let io: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert_eq!(Code::of(&io), None);
    }

    #[test]
    fn fates_follow_the_kind_and_code() {
        assert_eq!(Fate::of(&reply("READONLY no")), Fate::NotApplied);
        for redirect in ["MOVED 1 h:1", "ASK 1 h:1", "TRYAGAIN x", "CLUSTERDOWN x"] {
            let e = reply(redirect);
            assert_eq!(Fate::of(&e), Fate::NotApplied, "{redirect}");
            assert!(Code::of(&e).unwrap().redirected(), "{redirect}");
        }
        assert_eq!(Fate::of(&reply("NAMESPACE_LOST gone")), Fate::NamespaceLost);
        let refused: RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert_eq!(Fate::of(&refused), Fate::NotApplied);
        let timed_out: RedisError = std::io::Error::from(std::io::ErrorKind::TimedOut).into();
        assert_eq!(Fate::of(&timed_out), Fate::MayHaveApplied);
    }

    #[test]
    fn a_code_is_found_behind_the_errors_that_wrap_it() {
        let call = CallError::new("tick", reply("BUSY Redis is busy"));
        assert_eq!(Code::found_in(&call), Some(Code::Busy));
        assert_eq!(
            Code::found_in(&CallError::bad_reply("tick", "garbage")),
            None
        );
    }
}
