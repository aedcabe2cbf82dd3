//! The operator API's types for changes (each needs the token): a job put, moved,
//! re-prioritised, delayed, kicked or deleted, a tube kicked, flushed or paused, the
//! bulk changes, and the console's session.

use serde::{Deserialize, Serialize};

use super::JobState;

/// `POST /tubes/{tube}/jobs`: one of `body` (text) or `body_base64`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PutJob {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    #[serde(default = "PutJob::default_pri")]
    pub pri: u32,
    #[serde(default)]
    pub delay: u32,
    #[serde(default = "PutJob::default_ttr")]
    pub ttr: u32,
}

impl PutJob {
    fn default_pri() -> u32 {
        1024
    }
    fn default_ttr() -> u32 {
        60
    }
}

/// The answer of a put (201).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Created {
    pub id: u64,
}

/// The answer of `DELETE /jobs/{id}`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: u64,
}

/// `POST /jobs/{id}/move`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MoveJob {
    pub tube: String,
}

/// `POST /jobs/{id}/pri`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SetPri {
    pub pri: u32,
}

/// `POST /jobs/{id}/delay` and `POST /tubes/{tube}/pause`: seconds from now.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SetDelay {
    pub delay: u32,
}

/// `POST /tubes/{tube}/kick`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct KickTube {
    pub bound: u32,
}

/// `POST /tubes/{tube}/flush`: the states to empty (none named, or no body field: all
/// four), as `flush-tube <tube> [<state>...]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FlushTube {
    #[serde(default)]
    pub states: Vec<JobState>,
}

/// The answer of a flush: how many jobs it deleted.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct FlushedTube {
    pub flushed: u64,
}

/// The answer of a tube's kick.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Kicked {
    pub kicked: u32,
}

/// The answer of a pause.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Paused {
    pub paused: u32,
}

/// What `POST /bulk` does to each matching job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkChange {
    Move,
    Pri,
    Delay,
    Bury,
    Kick,
    Delete,
}

impl BulkChange {
    pub fn name(self) -> &'static str {
        match self {
            BulkChange::Move => "move",
            BulkChange::Pri => "pri",
            BulkChange::Delay => "delay",
            BulkChange::Bury => "bury",
            BulkChange::Kick => "kick",
            BulkChange::Delete => "delete",
        }
    }
}

/// `POST /bulk`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BulkRequest {
    pub action: BulkChange,
    pub filter: BulkFilter,
    #[serde(default)]
    pub args: BulkArgs,
    #[serde(default)]
    pub dry_run: bool,
}

/// Which jobs a bulk change takes (at most `limit`, in the state's order).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BulkFilter {
    pub tube: String,
    pub state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    pub limit: usize,
}

/// The arguments of a bulk change (`move`: `tube`; `pri`: `pri`; `delay`: `delay`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BulkArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tube: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pri: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<u32>,
}

/// The answer of `POST /bulk`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct BulkResult {
    pub matched: u64,
    pub changed: u64,
    pub scanned: u64,
    pub dry_run: bool,
}

// ---- the console's session ----

/// `POST /console/login`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Login {
    pub token: String,
}

/// The answer of a login or logout (the cookie is in `Set-Cookie`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Done {
    pub ok: bool,
}

/// `GET /console/session`: whether this browser has a session, and could have one.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SessionState {
    pub logged_in: bool,
    pub token_configured: bool,
}
