//! Leader mode's writer of large bodies: each body of at least `LARGE_BODY` bytes
//! is written into its job's hash ahead of its job, on a fenced connection of its
//! own, while the committer's batches (every other client's changes) go on
//! without waiting behind its transfer.
//!
//! Why this order is safe: until the job is made it is in no set, has no metadata and
//! is visible to no client, so nothing can delete it while its body is on the way; the
//! tube's keys are kept meanwhile (`Tube::staging`), and the body is sent only once
//! every batch taken before that was applied (one of them may have dropped the tube's
//! keys). A leader that dies in between leaves a body without metadata, noted in the
//! namespace's `ahead` set in the same transaction, which the next leader's load
//! removes; a put whose body write did not start in time (or failed) has
//! its job written whole by its batch instead, and a write that started is always
//! waited for, so no body lands after its job was deleted (unless the put itself is
//! dropped, at shutdown: the next leader's load removes that body).
//!
//! Ownership: one task per leadership owns the writer and its connection; it ends when
//! the leadership's stop token is cancelled or every stager handle is gone.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::redis::fenced::{FenceError, Fenced, body_ahead};
use crate::redis::keys::Keys;
use crate::store::durable::StageRequest;
use crate::time::unix_ms;

/// Serve `requests` until `stop` is cancelled.
pub async fn run(
    mut fenced: Fenced,
    keys: Keys,
    mut requests: mpsc::Receiver<StageRequest>,
    stop: CancellationToken,
) {
    loop {
        let request = tokio::select! {
            r = requests.recv() => match r {
                Some(r) => r,
                None => return,
            },
            _ = stop.cancelled() => return,
        };
        // Claimed, or skipped when the asker gave up waiting: its job is written with
        // its batch, and a body written now could land after that job was deleted.
        if request.start.send(()).is_err() {
            continue;
        }
        let write = body_ahead(&keys, request.id, &request.body, unix_ms());
        let landed = tokio::select! {
            r = fenced.send_all(write) => r,
            _ = stop.cancelled() => return,
        };
        if let Err(e) = &landed {
            // Not an outage report: the batch writing the job whole says that.
            if !matches!(e, FenceError::Fenced) {
                tracing::debug!(error = %e, "writing a large body ahead of its job failed");
            }
        }
        let _ = request.done.send(landed.is_ok());
    }
}
