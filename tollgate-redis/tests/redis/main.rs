//! The Redis bucket against a real `redis-server` (and nginx), each started on a free loopback
//! port by the test that needs it and stopped when it ends.
//!
//! `cargo test --release -p tollgate-redis --test redis` runs them all. The tests that span
//! processes start this binary again as their workers, with `TOLLGATE_WORKER` set.

mod acl;
mod bounds;
mod clock;
mod cluster;
mod corners;
mod durations;
mod eviction;
mod failovers;
mod faults;
mod giving_up;
mod jitter;
mod keyed;
mod late;
mod lease;
mod nginx;
mod restarts;
#[cfg(feature = "sentinel")]
mod sentinel;
mod sharing;
mod support;
#[cfg(feature = "tls")]
mod tls;
mod window;

/// A multiplexed connection to `server`.
async fn connect(server: &support::RedisServer) -> tollgate_redis::RedisConnection {
    tollgate_redis::RedisConnection::connect(tollgate_redis::Client::open(server.url()).unwrap())
        .await
        .unwrap()
}
