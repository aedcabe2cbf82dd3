//! A connection's replies that wait for their acknowledgement: with a persisted store
//! (`-b`, leader mode), a reply the engine answered [`Ack::After`] a change may be
//! written only once the store's changes up to it are durable.
//!
//! Ownership: one [`PendingAcks`] per connection, beside its write buffer; it notes
//! where in that buffer each waiting reply was encoded.
//!
//! Invariants: the replies of one read wait together, for the latest change any of them
//! saw (one batch: group commit); until then nothing in the buffer is written, so a
//! reply that acknowledges at once still keeps its place in the order. If that change
//! does not become durable in time, every waiting reply becomes INTERNAL_ERROR in place
//! (the change may still be persisted later: at-least-once, as with any timeout), the
//! others stand, and the jobs whose RESERVED was so replaced are handed back to the
//! caller to give back (the client does not know it holds them).

use std::ops::Range;

use bytes::BytesMut;

use crate::engine::{Ack, Engine};
use crate::protocol::Reply;
use crate::store::{Change, JobId};

/// The replies in a write buffer that wait for a change to be durable.
#[derive(Debug, Default)]
pub struct PendingAcks {
    /// The latest change a waiting reply saw (`None`: no reply waits).
    last_change: Option<Change>,
    /// Where in the write buffer each waiting reply is, and its jobs if it reserved
    /// any (a RESERVED, a RESERVED_BATCH): a range of `reserved`.
    replies: Vec<(Range<usize>, Range<usize>)>,
    /// The jobs the waiting replies reserved, in order.
    reserved: Vec<JobId>,
    /// Jobs whose RESERVED was replaced by INTERNAL_ERROR, until they are given back.
    unsent: Vec<JobId>,
}

impl PendingAcks {
    /// `reply` was just encoded at `at` in the write buffer, with `ack`.
    pub fn note(&mut self, at: Range<usize>, reply: &Reply, ack: Ack) {
        let Ack::After(change) = ack else {
            return;
        };
        self.last_change = Some(self.last_change.map_or(change, |u| u.max(change)));
        let from = self.reserved.len();
        match reply {
            Reply::Reserved { id, .. } => self.reserved.push(*id),
            Reply::ReservedBatch(jobs) => self.reserved.extend(jobs.iter().map(|(id, _)| *id)),
            _ => {}
        }
        self.replies.push((at, from..self.reserved.len()));
    }

    /// The change every waiting reply may go out after (`None`: nothing waits).
    pub fn waiting_for(&self) -> Option<Change> {
        self.last_change
    }

    /// Wait until the replies in `wbuf` may be written: those whose change did not
    /// become durable in time are replaced there by INTERNAL_ERROR.
    pub async fn settle(&mut self, engine: &Engine, wbuf: &mut BytesMut) {
        let Some(upto) = self.waiting_for() else {
            return;
        };
        match engine.durable(upto).await {
            Ok(()) => self.confirmed(),
            Err(err) => {
                tracing::warn!(
                    %err,
                    "replies answered INTERNAL_ERROR: their changes were not persisted in time \
                     (they may still be; clients may retry)"
                );
                self.refused(wbuf);
            }
        }
    }

    /// The changes are durable: the waiting replies stand.
    fn confirmed(&mut self) {
        self.last_change = None;
        self.replies.clear();
        self.reserved.clear();
    }

    /// The changes did not become durable in time: every waiting reply in `wbuf`
    /// becomes INTERNAL_ERROR in place; a replaced RESERVED's job is kept for
    /// [`PendingAcks::take_unsent`].
    fn refused(&mut self, wbuf: &mut BytesMut) {
        self.last_change = None;
        let mut out = BytesMut::with_capacity(wbuf.len());
        let mut at = 0;
        for (r, reserved) in self.replies.drain(..) {
            out.extend_from_slice(&wbuf[at..r.start]);
            Reply::InternalError.encode(&mut out);
            at = r.end;
            self.unsent.extend_from_slice(&self.reserved[reserved]);
        }
        self.reserved.clear();
        out.extend_from_slice(&wbuf[at..]);
        *wbuf = out;
    }

    /// The jobs whose RESERVED was replaced by INTERNAL_ERROR since the last call: the
    /// caller gives them back once the buffer is written.
    pub fn take_unsent(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.unsent)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::protocol::TubeName;

    use super::*;

    /// Encode `replies` one after another, noting each with its ack.
    fn buffer(replies: &[(Reply, Ack)]) -> (BytesMut, PendingAcks) {
        let mut wbuf = BytesMut::new();
        let mut acks = PendingAcks::default();
        for (reply, ack) in replies {
            let start = wbuf.len();
            reply.encode(&mut wbuf);
            acks.note(start..wbuf.len(), reply, *ack);
        }
        (wbuf, acks)
    }

    fn change(n: u64) -> Change {
        (0..n).fold(Change::NONE, |c, _| c.next())
    }

    fn reserved(id: u64, body: &'static str) -> Reply {
        Reply::Reserved {
            id,
            body: Bytes::from_static(body.as_bytes()),
        }
    }

    #[test]
    fn replies_acknowledged_now_hold_nothing_back() {
        let (_, acks) = buffer(&[
            (Reply::Using(TubeName::default_tube()), Ack::Now),
            (Reply::Watching(2), Ack::Now),
        ]);
        assert_eq!(acks.waiting_for(), None);
    }

    #[test]
    fn the_replies_of_one_read_wait_for_the_latest_change_they_saw() {
        let (_, acks) = buffer(&[
            (Reply::Inserted(1), Ack::After(change(3))),
            (Reply::Inserted(2), Ack::After(change(7))),
            (Reply::Deleted, Ack::After(change(5))),
            (Reply::Watching(1), Ack::Now),
        ]);
        eprintln!("waiting for {:?}", acks.waiting_for());
        assert_eq!(acks.waiting_for(), Some(change(7)));
    }

    #[test]
    fn a_reserved_that_saw_no_new_change_still_waits_for_the_check() {
        let (_, acks) = buffer(&[(reserved(4, "job"), Ack::After(Change::NONE))]);
        assert_eq!(acks.waiting_for(), Some(Change::NONE));
    }

    #[test]
    fn confirmed_replies_stand_and_nothing_waits_after() {
        let (mut wbuf, mut acks) = buffer(&[
            (Reply::Inserted(1), Ack::After(change(1))),
            (reserved(1, "a"), Ack::After(change(1))),
        ]);
        let before = wbuf.clone();
        acks.confirmed();
        assert_eq!(wbuf, before);
        assert_eq!(acks.waiting_for(), None);
        assert!(acks.take_unsent().is_empty());
        // Confirmed replies are forgotten: a later refusal does not touch them.
        acks.refused(&mut wbuf);
        assert_eq!(wbuf, before);
    }

    #[test]
    fn refused_replies_become_internal_error_in_place_and_a_reserved_job_is_given_back() {
        let (mut wbuf, mut acks) = buffer(&[
            (Reply::Inserted(9), Ack::After(change(2))),
            (Reply::Using(TubeName::new(b"t").unwrap()), Ack::Now),
            (reserved(5, "hello"), Ack::After(change(1))),
            (Reply::Watching(3), Ack::Now),
        ]);
        acks.refused(&mut wbuf);
        let text = String::from_utf8(wbuf.to_vec()).unwrap();
        eprintln!("after a refused commit: {text:?}");
        assert_eq!(
            text,
            "INTERNAL_ERROR\r\nUSING t\r\nINTERNAL_ERROR\r\nWATCHING 3\r\n"
        );
        assert_eq!(acks.take_unsent(), vec![5]);
        assert!(acks.take_unsent().is_empty(), "given back once");
        assert_eq!(acks.waiting_for(), None);
    }

    #[test]
    fn a_refused_reserved_batch_gives_back_every_job_it_held() {
        let batch = Reply::ReservedBatch(vec![
            (7, Bytes::from_static(b"a")),
            (8, Bytes::from_static(b"b")),
        ]);
        let (mut wbuf, mut acks) = buffer(&[
            (reserved(5, "x"), Ack::After(change(1))),
            (Reply::ReservedBatch(Vec::new()), Ack::After(change(1))),
            (batch, Ack::After(change(2))),
        ]);
        acks.refused(&mut wbuf);
        assert_eq!(
            String::from_utf8(wbuf.to_vec()).unwrap(),
            "INTERNAL_ERROR\r\n".repeat(3)
        );
        assert_eq!(acks.take_unsent(), vec![5, 7, 8]);
    }
}
