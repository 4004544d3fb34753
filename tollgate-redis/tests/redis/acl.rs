//! An ACL user with only `tollgate_redis::acl::ACL_COMMANDS` on its own keys: every kind of
//! call works; each command taken away, and a key outside its pattern, is refused naming what
//! Redis refused.

use std::time::Duration;

use tollgate::{Quota, Rate};
use tollgate_redis::acl::ACL_COMMANDS;
use tollgate_redis::{
    Client, Error, Fault, LeasedBucket, RedisBucket, RedisConnection, RedisKeyed, SetupError,
};

use crate::support::{runtime, serial, RedisServer};

const USER: &str = "limiter";
const PASSWORD: &str = "limiter-secret";

/// Creates (or resets) the user with `rules` on keys under `acl:`, and empties the script
/// cache so that the next call must load the script again.
fn set_user(server: &RedisServer, rules: &str) {
    let mut args = vec!["ACL", "SETUSER", USER, "reset", "on"];
    let password = format!(">{PASSWORD}");
    args.push(&password);
    args.extend(["~acl:*", "resetchannels"]);
    args.extend(rules.split_whitespace());
    assert_eq!(server.cli(None, &args), "OK", "ACL SETUSER {rules}");
    assert_eq!(server.cli(None, &["SCRIPT", "FLUSH"]), "OK");
}

fn url(server: &RedisServer) -> String {
    format!("redis://{USER}:{PASSWORD}@127.0.0.1:{}/", server.port)
}

fn quota() -> Quota {
    Quota::new(Rate::per_second(1)).burst(3)
}

#[test]
fn a_user_with_the_documented_commands_runs_buckets_keyed_quotas_and_leases() {
    let _serial = serial();
    let server = RedisServer::start();
    set_user(&server, ACL_COMMANDS);
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(url(&server)).unwrap())
            .await
            .expect("the ACL user connects");
        let bucket = RedisBucket::builder(&redis, "acl:one", quota())
            .connect()
            .await
            .expect("bucket");
        bucket.try_acquire(3).await.expect("the burst");
        assert!(matches!(
            bucket.try_acquire(1).await,
            Err(Error::Denied { .. })
        ));

        // The keyed quotas send the script themselves (`EVAL` with its text, then `EVALSHA`).
        assert_eq!(server.cli(None, &["SCRIPT", "FLUSH"]), "OK");
        let keyed = RedisKeyed::new(&redis, "acl:keyed:", quota()).unwrap();
        let answers = keyed
            .try_acquire_many(&[("a", 3), ("b", 1), ("a", 1)])
            .await;
        assert!(answers[0].is_ok() && answers[1].is_ok(), "{answers:?}");
        assert!(
            matches!(answers[2], Err(Error::Denied { .. })),
            "{answers:?}"
        );

        let leased = LeasedBucket::new(
            RedisBucket::builder(&redis, "acl:leased", quota())
                .connect()
                .await
                .expect("bucket"),
            Duration::from_millis(200),
        );
        leased.try_acquire(1).await.expect("a leased token");
        leased.release().await.expect("release");
    });
}

/// Each command of the line taken away in turn: the call that needs it is refused, naming it.
#[test]
fn each_command_taken_away_is_a_rejection_naming_it() {
    let _serial = serial();
    let server = RedisServer::start();
    let commands: Vec<&str> = ACL_COMMANDS
        .split_whitespace()
        .filter(|rule| rule.starts_with('+'))
        .collect();
    runtime().block_on(async {
        for missing in &commands {
            let rules: Vec<&str> = ACL_COMMANDS
                .split_whitespace()
                .filter(|rule| rule != missing)
                .collect();
            set_user(&server, &rules.join(" "));
            // Each is refused by its name.
            let name = missing.trim_start_matches('+');
            let client = Client::open(url(&server)).unwrap();
            if name == "ping" {
                match RedisConnection::connect(client).await {
                    Err(SetupError::Refused { error, .. }) => {
                        let text = error.to_string();
                        assert!(
                            text.contains("permissions") && text.contains(name),
                            "{text}"
                        );
                    }
                    other => panic!("without {name}: {other:?}"),
                }
                continue;
            }
            let redis = RedisConnection::connect(client).await.expect("connects");
            let bucket = RedisBucket::builder(&redis, "acl:one", quota())
                .connect_lazy()
                .expect("bucket");
            // A key that holds no bucket: a peek heals it as a full one by deleting it (`DEL`),
            // and a take then writes it (`SET`); both read `TIME` and the key (`GET`).
            assert_eq!(server.cli(None, &["SET", "acl:one", "not a bucket"]), "OK");
            let refusal = match bucket.level().await {
                Err(Fault::Rejected(error)) => error,
                Err(other) => panic!("without {name}, a peek: {other:?}"),
                Ok(_) => match bucket.try_acquire(1).await {
                    Err(Error::Rejected(error)) => error,
                    other => panic!("without {name}: {other:?}"),
                },
            };
            let text = refusal.to_string();
            assert!(
                text.contains(&format!("'{name}'")) && text.contains("permissions"),
                "without {name}: {text}"
            );
        }
    });
}

/// A key outside the user's pattern is refused too, whatever the fault policy.
#[test]
fn a_key_outside_the_users_pattern_is_rejected() {
    let _serial = serial();
    let server = RedisServer::start();
    set_user(&server, ACL_COMMANDS);
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(url(&server)).unwrap())
            .await
            .expect("connects");
        let bucket = RedisBucket::builder(&redis, "other:one", quota())
            .policy(tollgate_redis::FaultPolicy::FailOpen)
            .connect_lazy()
            .expect("bucket");
        match bucket.try_acquire(1).await {
            Err(Error::Rejected(error)) => {
                assert!(error.to_string().contains("permissions"), "{error}")
            }
            other => panic!("a key outside ~acl:*: {other:?}"),
        }
    });
}
