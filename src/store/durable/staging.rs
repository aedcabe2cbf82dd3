//! Large bodies written ahead of their jobs (leader mode): a put of at least
//! [`LARGE_BODY`](crate::store::LARGE_BODY) bytes takes its id, hands its body to a
//! writer of its own (a task of the persistence layer, `persist::redis::stager`), and
//! makes its job once the body landed, so other clients' batches never wait behind the
//! transfer.
//!
//! Invariants: the body is sent only once every batch taken before the put held its
//! tube was written (one of them may drop the tube's keys, and the body with them); a
//! write that started is always waited for, so no body lands after its put stopped
//! waiting for it; a put dropped before its job is made leaves its id used and its
//! body for the next cut to remove ([`Begun`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::DurableStore;
use crate::protocol::TubeName;
use crate::store::{JobId, NewJob};

/// How long a put waits for its body's write to start (the batches before it applied,
/// the writer free); then the job is made anyway and its batch writes the body with it
/// (as for a small job). A write that started is waited for: it is bounded by the
/// writer's Redis timeouts.
const STAGE_TIMEOUT: Duration = Duration::from_millis(500);

/// How many bodies may wait for the writer: a put beyond that waits to hand its body
/// over (within [`STAGE_TIMEOUT`], then its job is written whole by its batch).
const STAGE_QUEUE: usize = 64;

/// A request to write one job's body ahead of the job. The writer claims it on `start`
/// before sending, and skips it when that fails (the asker gave up: its job is written
/// with its batch instead); an asker whose request was claimed waits for `done`, so no
/// body lands after its put stopped waiting for it.
#[derive(Debug)]
pub struct StageRequest {
    pub tube: TubeName,
    pub id: JobId,
    pub body: Bytes,
    pub start: oneshot::Sender<()>,
    pub done: oneshot::Sender<bool>,
}

/// The asking side of a writer of large bodies (a task of the persistence layer).
#[derive(Clone, Debug)]
pub struct Stager {
    requests: mpsc::Sender<StageRequest>,
}

impl Stager {
    /// A stager, and the queue its writer serves.
    pub fn channel() -> (Stager, mpsc::Receiver<StageRequest>) {
        let (requests, queue) = mpsc::channel(STAGE_QUEUE);
        (Stager { requests }, queue)
    }

    /// Whether the body of job `id` landed ahead of it; given up when its write has
    /// not started by `deadline`.
    async fn stage(&self, tube: TubeName, id: JobId, body: Bytes, deadline: Instant) -> bool {
        let (start, mut started) = oneshot::channel();
        let (done, landed) = oneshot::channel();
        let request = StageRequest {
            tube,
            id,
            body,
            start,
            done,
        };
        let claimed =
            async { self.requests.send(request).await.is_ok() && (&mut started).await.is_ok() };
        let claimed = match tokio::time::timeout_at(deadline.into(), claimed).await {
            Ok(claimed) => claimed,
            Err(_) => {
                // Withdrawn, unless the writer claimed it at the last moment.
                started.close();
                started.try_recv().is_ok()
            }
        };
        claimed && landed.await == Ok(true)
    }
}

/// A put begun with its body written ahead: if the put is dropped before its job is
/// made, the id stays used and whatever body landed is removed by the next cut.
struct Begun<'a> {
    store: &'a DurableStore,
    id: JobId,
    tube: Option<TubeName>,
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if let Some(tube) = self.tube.take() {
            self.store.memory.abandon_staged(self.id, &tube);
            self.store.wake_committer();
        }
    }
}

impl DurableStore {
    /// A put whose body is written ahead of its job. The id is taken first, as
    /// beanstalkd takes it once the body is in; the job is made (visible) once its body
    /// landed, or once that took too long, and then waits for its batch like any put.
    pub(super) async fn put_staged(&self, stager: &Stager, job: NewJob) -> JobId {
        let (id, begun_at) = self.memory.begin_staged(&job.tube);
        self.wake_committer();
        let mut begun = Begun {
            store: self,
            id,
            tube: Some(job.tube.clone()),
        };
        let deadline = Instant::now() + STAGE_TIMEOUT;
        // Every batch taken before the tube was held is applied first: one of them may
        // drop the tube's keys (it held no job then), and the body with them.
        let clear = tokio::time::timeout_at(deadline.into(), self.link.written(begun_at))
            .await
            .unwrap_or(false);
        let landed = clear
            && stager
                .stage(job.tube.clone(), id, job.body.clone(), deadline)
                .await;
        begun.tube = None;
        // The put takes effect now, as beanstalkd's does once the body is in.
        self.memory.put_staged(id, job, self.clock.now(), landed);
        self.wake_committer();
        id
    }
}
