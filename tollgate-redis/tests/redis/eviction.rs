//! What an eviction costs, against a real server with `maxmemory` set and filled with other
//! keys: under `noeviction` writes are refused (every call is [`Error::Rejected`], `OOM`, and
//! nothing is lost); under `allkeys-lru` a bucket key is evicted only when it is among the
//! least recently used; under `volatile-lru` the bucket keys are the only candidates (each has
//! an expiry, the other keys none), so they are evicted first, whatever their use. An evicted
//! key is a full bucket: each eviction mints at most one burst.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{Error, RedisKeyed, Source};

use crate::connect;
use crate::support::{runtime, serial, RedisServer};

const KEYS: usize = 40;
const RATE: u64 = 10;
const BURST: u64 = 10;
const RUN: Duration = Duration::from_secs(3);

/// What a run under one policy saw.
#[derive(Debug, Default)]
struct Cost {
    /// Keys the server evicted, all kinds.
    evicted: u64,
    /// Of those, bucket keys: evicted minus the filler keys missing.
    bucket_keys_evicted: u64,
    /// The most grants to one key, and that key's grants beyond `burst + rate × elapsed`.
    most: u64,
    bound: u64,
    /// Grants beyond the bound, summed over keys.
    excess: u64,
    rejected: u64,
}

fn info_field(server: &RedisServer, section: &str, field: &str) -> u64 {
    server
        .cli(None, &["INFO", section])
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs 40 keys of 10/s burst 10, each asked for a token every 10 ms for 3 s, while a writer
/// keeps adding 1 KiB keys without expiry to a server whose memory is a mebibyte short of
/// full of them: the limit is crossed about half a second in.
fn run(policy: &str) -> Cost {
    let server = RedisServer::start();
    let used = info_field(&server, "memory", "used_memory");
    let limit = used + 4 * 1024 * 1024;
    server.cli(None, &["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    server.cli(None, &["CONFIG", "SET", "maxmemory-policy", policy]);
    // Both LRU policies sample this many keys per eviction: more samples, closer to true LRU.
    server.cli(None, &["CONFIG", "SET", "maxmemory-samples", "10"]);
    let filler = "x".repeat(1024);
    runtime().block_on(async {
        let redis = connect(&server).await;
        let plain = redis::Client::open(server.url()).unwrap();
        let mut writer = plain.get_multiplexed_async_connection().await.unwrap();
        // Fill to a mebibyte below the limit: the calls and the writer cross it together, so
        // that the bucket keys exist when eviction starts.
        let mut written = 0u64;
        'fill: loop {
            let mut pipe = redis::pipe();
            for _ in 0..100 {
                pipe.cmd("SET")
                    .arg(format!("fill:{written}"))
                    .arg(&filler)
                    .ignore();
                written += 1;
            }
            let full = pipe.query_async::<()>(&mut writer).await.is_err()
                || info_field(&server, "memory", "used_memory") + 1024 * 1024 > limit;
            if full {
                break 'fill;
            }
        }
        let keyed = RedisKeyed::new(
            &redis,
            "bucket:",
            Quota::new(Rate::per_second(RATE)).burst(BURST),
        )
        .unwrap();
        let names: Vec<String> = (0..KEYS).map(|n| format!("k{n}")).collect();
        let requests: Vec<(&str, u32)> = names.iter().map(|name| (name.as_str(), 1)).collect();
        let mut grants: BTreeMap<usize, u64> = BTreeMap::new();
        let mut rejected = 0;
        let began = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while began.elapsed() < RUN {
            tick.tick().await;
            // Pressure: more keys without expiry.
            let mut pipe = redis::pipe();
            for _ in 0..20 {
                pipe.cmd("SET")
                    .arg(format!("fill:{written}"))
                    .arg(&filler)
                    .ignore();
                written += 1;
            }
            let _ = pipe.query_async::<()>(&mut writer).await;
            for (i, answer) in keyed.try_acquire_many(&requests).await.iter().enumerate() {
                match answer {
                    Ok(grant) if grant.source == Source::Redis => {
                        *grants.entry(i).or_default() += 1
                    }
                    Err(Error::Rejected(_)) => rejected += 1,
                    _ => {}
                }
            }
        }
        let elapsed = began.elapsed();
        let bound = BURST + RATE * elapsed.as_millis() as u64 / 1_000;
        let evicted = info_field(&server, "stats", "evicted_keys");
        let mut fillers_left = 0u64;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("fill:*")
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut writer)
                .await
                .unwrap();
            fillers_left += keys.len() as u64;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        // Only `allkeys-*` evicts keys without expiry; elsewhere a filler write that is
        // missing was refused (OOM), not evicted.
        let fillers_evicted = if policy.starts_with("allkeys") {
            written.saturating_sub(fillers_left).min(evicted)
        } else {
            0
        };
        let most = grants.values().copied().max().unwrap_or(0);
        let excess = grants.values().map(|n| n.saturating_sub(bound)).sum();
        Cost {
            evicted,
            bucket_keys_evicted: evicted - fillers_evicted.min(evicted),
            most,
            bound,
            excess,
            rejected,
        }
    })
}

/// The eviction table: per policy, keys evicted (bucket keys among them), the most grants to
/// one key against `burst + rate × elapsed`, grants beyond it, and calls refused. The bound
/// stated in the crate's docs: every eviction of a bucket key mints at most one burst, so the
/// grants beyond the bound are at most `burst × bucket keys evicted`; `noeviction` evicts
/// nothing and refuses every call once memory is full; `volatile-lru` evicts bucket keys.
#[test]
fn what_an_eviction_costs_under_each_policy() {
    let _serial = serial();
    let mut table = Vec::new();
    for policy in ["noeviction", "allkeys-lru", "volatile-lru"] {
        let cost = run(policy);
        println!("{policy:13} {cost:?}");
        table.push((policy, cost));
    }
    println!("| policy | keys evicted | bucket keys evicted | most grants to one key (bound) | grants beyond the bound | calls Rejected (OOM) |");
    println!("|---|---|---|---|---|---|");
    for (policy, c) in &table {
        println!(
            "| {policy} | {} | {} | {} ({}) | {} | {} |",
            c.evicted, c.bucket_keys_evicted, c.most, c.bound, c.excess, c.rejected
        );
    }
    for (policy, c) in &table {
        assert!(
            c.excess <= BURST * c.bucket_keys_evicted,
            "{policy}: {} grants beyond the bound for {} bucket keys evicted",
            c.excess,
            c.bucket_keys_evicted
        );
    }
    let (_, noeviction) = &table[0];
    assert_eq!(noeviction.evicted, 0);
    assert_eq!(noeviction.excess, 0);
    assert!(noeviction.rejected > 0, "{noeviction:?}");
    let (_, volatile) = &table[2];
    // Under volatile-*, the bucket keys are what gets evicted.
    assert!(volatile.bucket_keys_evicted > 0, "{volatile:?}");
}
