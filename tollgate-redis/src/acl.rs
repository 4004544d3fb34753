//! Running as a Redis ACL user with only the commands the buckets need.
//!
//! Give the user in the URL, `redis://user:password@host:port/` (or `rediss://`), and grant it
//! [`ACL_COMMANDS`] on the keys it owns, say every key under the prefix `rate:`:
//!
//! ```text
//! ACL SETUSER limiter on >password resetkeys ~rate:* resetchannels -@all +ping +evalsha +eval +time +get +set +del
//! ```
//!
//! What each is for: `PING` is
//! [`RedisConnection::connect`](crate::RedisConnection::connect)'s check; `EVALSHA` runs the
//! script, and `EVAL` sends it with its text when the server does not hold it yet (after a
//! restart, a failover or a `SCRIPT FLUSH`: on the key's own node, which `SCRIPT LOAD` would
//! not reach on a cluster); within the script, `TIME` reads Redis's clock, `GET` the bucket,
//! `SET` and `DEL` write it back. Redis checks the commands a script runs against the user's
//! ACL as it runs them, so each is needed. No command that reads other keys is sent.
//! The client's own `CLIENT SETINFO` at connection, refused to such a user, is ignored.
//!
//! A permission missing (a command, or a key outside the user's patterns) is
//! [`Error::Rejected`](crate::Error::Rejected) whatever the fault policy, its message naming
//! the command Redis refused (`NOPERM … 'time' command`), and
//! [`SetupError::Refused`](crate::SetupError::Refused) at `connect`.

/// The commands a user needs, in `ACL SETUSER`'s syntax: see the [module](self).
pub const ACL_COMMANDS: &str = "-@all +ping +evalsha +eval +time +get +set +del";
