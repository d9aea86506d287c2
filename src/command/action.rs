//! What running a command produces ([`Action`]), and the one way a command that touches keys
//! is put in line behind earlier operations on those keys ([`in_turn`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;

use crate::proxy::Proxy;
use crate::wire::reply::Reply;

/// A reply still being computed.
pub type Later = Pin<Box<dyn Future<Output = Reply> + Send + 'static>>;

/// What dispatching a command produced.
pub enum Action {
    /// The reply is known now.
    Reply(Reply),
    /// The reply comes when the masters have answered.
    Later(Later),
    /// Send this reply, then close the connection (`QUIT`).
    Close(Reply),
}

impl From<Reply> for Action {
    fn from(r: Reply) -> Action {
        Action::Reply(r)
    }
}

/// Runs `op` on the masters once every key in `keys` has its turn (see `keylock`):
/// the one way a command that reads or writes keys is put in line. The turn is taken now, at
/// dispatch, so pipelined commands keep their order on every key, and it is held until `op`'s
/// reply is ready.
pub fn in_turn<F, Fut>(proxy: &Arc<Proxy>, keys: &[Bytes], op: F) -> Action
where
    F: FnOnce(Arc<Proxy>) -> Fut + Send + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let proxy = proxy.clone();
    let ticket = proxy.keylocks().enqueue(keys);
    // `then`, not an `async` block: the operation's future takes the place of the wait for the
    // turn instead of being stored beside it, so each request's one allocation stays small.
    Action::Later(Box::pin(ticket.ready().then(move |held| async move {
        let reply = op(proxy).await;
        drop(held);
        reply
    })))
}
