//! A request on its way to one master, and the limit on how many may wait.

use bytes::Bytes;

use super::inbox::ReplyTx;
use crate::error::BackendError;
use crate::wire::master::command;
use crate::wire::reply::Reply;

/// A request on its way to a master.
pub struct Pending {
    pub(super) bytes: Bytes,
    pub(super) replies: usize,
    /// The reply counts only if the master's clock is steady: `TIME` is read in the same round
    /// trip (once per write batch, after the batch) and checked before the reply is delivered.
    pub(super) time: bool,
    /// Set by the writer: this request's reply waits for its batch's `TIME`.
    pub(super) hold: bool,
    pub(super) reply_to: Option<(ReplyTx, usize)>,
}

impl Pending {
    pub(super) fn deliver(&mut self, result: Result<Reply, BackendError>) {
        if let Some((tx, slot)) = self.reply_to.take() {
            tx.send(slot, result);
        }
    }

    /// The driver's own probe: `TIME` alone (or `PING`), answered to nobody.
    pub(super) fn probe(clock: bool) -> Pending {
        if clock {
            Pending {
                bytes: Bytes::new(),
                replies: 0,
                time: true,
                hold: false,
                reply_to: None,
            }
        } else {
            Pending {
                bytes: command(&[b"PING"]),
                replies: 1,
                time: false,
                hold: false,
                reply_to: None,
            }
        }
    }
}

impl Drop for Pending {
    // A request dropped without a reply (connection lost, driver gone) still tells its caller,
    // so no fan-out ever waits out its timeout for a master that is known to be gone.
    fn drop(&mut self) {
        self.deliver(Err(BackendError::Closed));
    }
}

/// Most requests waiting to be written to one master. Each client has at most `max_pipeline`
/// commands in flight, so this is reached only when a master falls far behind; requests beyond
/// it fail at once with [`BackendError::Overloaded`] instead of piling up in memory. (The
/// writer takes the queue whole, so at most one more such batch waits in its hands.)
pub const QUEUE_LIMIT: usize = 65_536;
