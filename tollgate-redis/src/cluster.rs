//! Redis Cluster: [`RedisConnection::connect_cluster`], over the `redis` crate's cluster client.
//!
//! Every bucket lives on one key, so its whole state is on one slot and each call is one
//! script run on the slot's master, as on a single server. The cluster client follows `MOVED`
//! and `ASK` redirections and refreshes its map of slots by itself; while a slot has no
//! reachable master (a master killed, until a replica takes over), calls fail with a fault and
//! the bucket's [`FaultPolicy`](super::FaultPolicy) decides, as for a single server that is
//! down. Replication is asynchronous: a failover may lose the writes the replica had not yet
//! received, as a restart loses a bucket, so the fleet may take at most what was taken in that
//! moment again (bounded by one burst, the same as a restart).
//!
//! **Keys that must share a slot** use a hash tag: only the part between the first `{` and
//! the next `}` is hashed, so `"{tenant42}:user:alice"` and `"{tenant42}:user:bob"` share one.
//! Each bucket here touches its own key alone, so no key needs a tag to work. Two things do:
//! [`RedisKeyed`](super::RedisKeyed) decides keys on different slots concurrently, one
//! pipeline per slot, so keys usually asked for together take one round trip only if they
//! share a tag; and several Redis buckets taken all or none, as [`Limits`](tollgate::Limits) takes
//! local ones, could be decided by one script only if their keys share a slot (Redis refuses a
//! script whose keys span slots with `CROSSSLOT`, an error the caller sees, never a fault). No
//! such combined call exists yet: give those keys one tag now so that it can.

use std::string::ToString;
use std::vec::Vec;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

use super::connection::setup_error;
use super::{RedisConnection, SetupError};

/// What a [`RedisConnection`] sends its calls over: one server, or a cluster.
#[derive(Clone)]
pub(super) enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Link {
    /// Whether keys on different slots need separate pipelines.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Link::Cluster(_))
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(link) => link.req_packed_command(cmd),
            Link::Cluster(link) => link.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(link) => link.req_packed_commands(pipeline, offset, count),
            Link::Cluster(link) => link.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(link) => link.get_db(),
            Link::Cluster(link) => link.get_db(),
        }
    }
}

impl RedisConnection {
    /// Connects to a Redis Cluster through any of `nodes` (`"redis://127.0.0.1:7000/"`), and
    /// checks it within a second: the client has read the cluster's slots and a master answers
    /// `PING`. Buckets built from it keep each key's state on the key's slot.
    ///
    /// The cluster client holds one connection per node and follows redirections and failovers
    /// by itself, within each call's timeout. While a slot has no master (one killed, until its
    /// replica takes over), calls on it are faults that the bucket's policy decides. Replication
    /// is asynchronous: a failover may lose the writes the replica had not yet received, and
    /// the fleet may take those tokens again (at most one burst for calls that run no debt, as
    /// after a restart). A key's hash tag (`"{tenant42}:alice"`: only the part in braces is
    /// hashed) chooses its slot: [`RedisKeyed`](super::RedisKeyed) sends one pipeline per
    /// slot, and several buckets taken all or none by one script would need one slot.
    pub async fn connect_cluster(nodes: &[&str]) -> Result<Self, SetupError> {
        let address = nodes.join(", ");
        let timeout = |after| SetupError::Timeout {
            address: address.clone(),
            after,
        };
        let client = ClusterClient::builder(nodes.iter().map(|node| node.to_string()))
            .connection_timeout(core::time::Duration::from_millis(500))
            // Each call times itself out; redirections and retries within that.
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(100)
            .build()
            .map_err(|error| setup_error(&address, error))?;
        let connect = client.get_async_connection();
        let mut link = match tokio::time::timeout(core::time::Duration::from_secs(1), connect).await
        {
            Ok(Ok(link)) => link,
            Ok(Err(error)) => return Err(setup_error(&address, error)),
            Err(_) => return Err(timeout(core::time::Duration::from_secs(1))),
        };
        let command = ::redis::cmd("PING");
        let ping = command.query_async::<()>(&mut link);
        match tokio::time::timeout(core::time::Duration::from_secs(1), ping).await {
            Ok(Ok(())) => Ok(Self::over(None, Link::Cluster(link), address)),
            Ok(Err(error)) => Err(setup_error(&address, error)),
            Err(_) => Err(timeout(core::time::Duration::from_secs(1))),
        }
    }
}
