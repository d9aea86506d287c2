//! The seam between a member's handle and a member made of several masters (a Redis Cluster,
//! see `super::cluster`): the handle hands each request to its router instead of a connection
//! of its own.

use std::sync::Arc;

use bytes::Bytes;

use super::health::MasterInfo;
use super::inbox::ReplyTx;

/// Sends a member's requests to the right master.
pub trait Router: Send + Sync {
    /// Sends `bytes` (`replies` commands; `time`: read the clock in the same round trip) and
    /// delivers the reply to `reply_to`, as a master's own queue does.
    fn route(&self, bytes: Bytes, replies: usize, time: bool, reply_to: Option<(ReplyTx, usize)>);

    /// The member's shards, for `INFO` and `/metrics`.
    fn shards(&self) -> Vec<ShardView>;
}

/// One shard as `INFO` and `/metrics` show it.
#[derive(Debug, Clone)]
pub struct ShardView {
    /// The primary's `host:port`.
    pub primary: String,
    /// Its slot ranges, `0-5460 7000`.
    pub slots: String,
    /// Its replicas.
    pub replicas: Vec<String>,
    /// The primary's connection and health.
    pub info: Arc<MasterInfo>,
    /// Why it is quarantined, while it is.
    pub quarantine_reason: Option<String>,
}
