//! `rediss://` against a real `redis-server` serving TLS with certificates that `openssl` makes
//! for the test: a CA, a server certificate for 127.0.0.1, and a client certificate.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::tls::{self, Tls};
use tollgate_redis::{Client, Error, RedisBucket, RedisConnection, SetupError};

use crate::support::{free_port, runtime, serial, system};

/// A CA, a server certificate it signed for `127.0.0.1`, a client certificate it signed, and a
/// second CA that signed nothing here.
pub struct Certificates {
    pub dir: PathBuf,
}

impl Certificates {
    pub fn make(dir: &Path) -> Self {
        let openssl = system::program("openssl", "openssl");
        let run = |args: &[&str]| {
            let out = Command::new(&openssl)
                .current_dir(dir)
                .args(args)
                .output()
                .expect("openssl runs");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let mut args = vec!["req", "-x509", "-days", "2", "-subj"];
            let subject = format!("/CN=tollgate test {ca}");
            args.push(&subject);
            args.extend(key);
            let (keyout, out) = (format!("{ca}.key"), format!("{ca}.crt"));
            args.extend(["-keyout", &keyout, "-out", &out]);
            run(&args);
        }
        std::fs::write(
            dir.join("server.ext"),
            // The cluster bus shows the server certificate as a client too.
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .expect("extensions");
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")
            .expect("extensions");
        for who in ["server", "client"] {
            let (keyout, csr, crt, ext) = (
                format!("{who}.key"),
                format!("{who}.csr"),
                format!("{who}.crt"),
                format!("{who}.ext"),
            );
            let subject = format!("/CN=tollgate test {who}");
            let mut args = vec!["req", "-subj", &subject];
            args.extend(key);
            args.extend(["-keyout", &keyout, "-out", &csr]);
            run(&args);
            run(&[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-extfile",
                &ext,
                "-out",
                &crt,
            ]);
        }
        Self {
            dir: dir.to_path_buf(),
        }
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).expect("certificate")
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// `redis-server` serving TLS only, on a loopback port; stopped when dropped.
pub struct TlsServer {
    child: Child,
    pub port: u16,
    pub certificates: Certificates,
}

impl TlsServer {
    /// With `mutual`, the server refuses a client without a certificate its CA signed.
    pub fn start(mutual: bool) -> Self {
        Self::start_serving(mutual, None)
    }

    /// Serves `plain` without TLS as well, for comparing the two on one server.
    pub fn start_serving(mutual: bool, plain: Option<u16>) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("tollgate-tls-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let certificates = Certificates::make(&dir);
        let child = Command::new(system::program("redis-server", "redis-server"))
            .args(["--port", &plain.unwrap_or(0).to_string()])
            .args(["--tls-port", &port.to_string()])
            .args(["--tls-cert-file", &certificates.path("server.crt")])
            .args(["--tls-key-file", &certificates.path("server.key")])
            .args(["--tls-ca-cert-file", &certificates.path("ca.crt")])
            .args(["--tls-auth-clients", if mutual { "yes" } else { "no" }])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--loglevel", "warning"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not listen on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            port,
            certificates,
        }
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }

    /// A client trusting the test CA, with the client certificate if `mutual`.
    pub fn client(&self, mutual: bool) -> Client {
        let mut settings = Tls::new().ca(self.certificates.read("ca.crt"));
        if mutual {
            settings = settings.client_certificate(
                self.certificates.read("client.crt"),
                self.certificates.read("client.key"),
            );
        }
        tls::client(&self.url(), settings).expect("a TLS client")
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.certificates.dir);
    }
}

fn quota() -> Quota {
    Quota::new(Rate::per_second(1)).burst(5)
}

/// Over TLS the bucket grants its burst and refuses the next call, as over TCP.
#[test]
fn a_bucket_over_tls_grants_its_burst_and_refuses_beyond() {
    let _serial = serial();
    let server = TlsServer::start(false);
    runtime().block_on(async {
        let redis = RedisConnection::connect(server.client(false))
            .await
            .expect("TLS connection");
        let bucket = RedisBucket::builder(&redis, "tls:burst", quota())
            .connect()
            .await
            .expect("bucket");
        for i in 0..5 {
            bucket
                .try_acquire(1)
                .await
                .unwrap_or_else(|error| panic!("call {i} of the burst: {error}"));
        }
        match bucket.try_acquire(1).await {
            Err(Error::Denied { .. }) => {}
            other => panic!("the sixth call within a second: {other:?}"),
        }
    });
}

/// A server whose certificate another CA signed is a TLS error naming the address, at
/// `connect`; nothing is sent in plain text, and the system's roots (which do not hold the
/// test CA) refuse it too.
#[test]
fn a_certificate_that_does_not_verify_is_a_tls_setup_error_naming_the_address() {
    let _serial = serial();
    let server = TlsServer::start(false);
    let address = format!("127.0.0.1:{}", server.port);
    runtime().block_on(async {
        let wrong_ca = Tls::new().ca(server.certificates.read("other-ca.crt"));
        let system_roots = Client::open(server.url()).expect("a rediss:// client");
        for client in [
            tls::client(&server.url(), wrong_ca).expect("client"),
            system_roots,
        ] {
            match RedisConnection::connect(client).await {
                Err(SetupError::Tls(error)) => {
                    let text = error.to_string();
                    assert!(text.contains(&address), "{text}");
                    assert!(text.contains("certificate"), "{text}");
                    assert_eq!(error.address(), address);
                }
                other => panic!("a server certificate from an unknown CA: {other:?}"),
            }
        }
    });
}

/// A lazily set-up connection meets a certificate that does not verify at its calls: a
/// rejection, even for a bucket that fails open, never a grant.
#[test]
fn a_certificate_that_does_not_verify_is_rejected_even_failing_open() {
    let _serial = serial();
    let server = TlsServer::start(false);
    runtime().block_on(async {
        let wrong_ca = Tls::new().ca(server.certificates.read("other-ca.crt"));
        let client = tls::client(&server.url(), wrong_ca).expect("client");
        let redis = RedisConnection::connect_lazy(client).expect("lazy connection");
        let bucket = RedisBucket::builder(&redis, "tls:open", quota())
            .policy(tollgate_redis::FaultPolicy::FailOpen)
            .connect_lazy()
            .expect("bucket");
        for _ in 0..3 {
            match bucket.try_acquire(1).await {
                Err(Error::Rejected(error)) => {
                    assert!(error.to_string().contains("certificate"), "{error}")
                }
                other => panic!("a certificate from an unknown CA, failing open: {other:?}"),
            }
        }
        match RedisBucket::builder(&redis, "tls:open", quota())
            .connect()
            .await
        {
            Err(SetupError::Refused { .. }) => {}
            other => panic!("Builder::connect, wrong CA: {other:?}"),
        }
    });
}

/// A server that requires client certificates refuses a client without one, and serves the
/// one that shows the certificate its CA signed.
#[test]
fn mutual_tls_serves_only_a_client_with_a_certificate() {
    let _serial = serial();
    let server = TlsServer::start(true);
    runtime().block_on(async {
        match RedisConnection::connect(server.client(false)).await {
            Err(SetupError::Tls(error)) => {
                assert_eq!(error.address(), format!("127.0.0.1:{}", server.port));
            }
            other => panic!("no client certificate, mutual TLS required: {other:?}"),
        }
        let redis = RedisConnection::connect(server.client(true))
            .await
            .expect("mutual TLS");
        let bucket = RedisBucket::builder(&redis, "tls:mutual", quota())
            .connect()
            .await
            .expect("bucket");
        bucket.try_acquire(5).await.expect("the burst");
        assert!(bucket.try_acquire(1).await.is_err());
    });
}

/// A `redis://` URL with TLS settings is refused rather than used without TLS.
#[test]
fn tls_settings_on_a_plain_url_are_refused() {
    let settings = Tls::new();
    match tls::client("redis://127.0.0.1:6379/", settings) {
        Err(SetupError::Refused { error, .. }) => assert!(error.to_string().contains("rediss://")),
        other => panic!("TLS settings on redis://: {other:?}"),
    }
}

/// The cost of TLS, printed beside plain TCP to the same server (no speed is asserted: the
/// machine is shared): one call at a time, 64 in flight on the one connection, and a leased
/// bucket's calls. Every call must be answered, by a grant.
#[test]
fn tls_cost_beside_plain_tcp() {
    use futures_util::future::join_all;

    let _serial = serial();
    let plain_port = free_port();
    let server = TlsServer::start_serving(false, Some(plain_port));
    let plain = Client::open(format!("redis://127.0.0.1:{plain_port}/")).unwrap();
    let calls = std::env::var("TOLLGATE_TLS_COST_CALLS")
        .ok()
        .and_then(|calls| calls.parse::<u32>().ok())
        .unwrap_or(4000);
    let roomy = Quota::new(Rate::per_second(10_000_000)).burst(10_000_000);
    runtime().block_on(async {
        for (name, client) in [("tcp", plain), ("tls", server.client(false))] {
            let redis = RedisConnection::connect(client).await.expect("connects");
            let bucket = RedisBucket::builder(&redis, format!("cost:{name}"), roomy)
                .connect()
                .await
                .expect("bucket");
            let mut latencies = Vec::with_capacity(calls as usize);
            let start = Instant::now();
            for _ in 0..calls {
                let call = Instant::now();
                bucket.try_acquire(1).await.expect("a grant");
                latencies.push(call.elapsed());
            }
            let serial_rate = calls as f64 / start.elapsed().as_secs_f64();
            latencies.sort();
            let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
            let start = Instant::now();
            for _ in 0..calls / 64 {
                let batch = join_all((0..64).map(|_| bucket.try_acquire(1))).await;
                assert!(batch.iter().all(Result::is_ok), "{batch:?}");
            }
            let flight_rate = (calls / 64 * 64) as f64 / start.elapsed().as_secs_f64();
            let leased = tollgate_redis::LeasedBucket::new(
                RedisBucket::builder(&redis, format!("cost:{name}:leased"), roomy)
                    .connect()
                    .await
                    .expect("bucket"),
                Duration::from_millis(100),
            );
            let start = Instant::now();
            for _ in 0..calls * 10 {
                leased.try_acquire(1).await.expect("a leased grant");
            }
            let leased_rate = (calls * 10) as f64 / start.elapsed().as_secs_f64();
            leased.release().await.expect("release");
            eprintln!(
                "{name}: one at a time p50 {:?} p99 {:?} ({serial_rate:.0}/s); \
                 64 in flight {flight_rate:.0}/s; leased {leased_rate:.0}/s",
                at(0.5),
                at(0.99),
            );
        }
    });
}

/// Three masters in cluster mode serving TLS only, their bus over TLS too; killed when dropped.
struct TlsCluster {
    nodes: Vec<(u16, Child)>,
    certificates: Certificates,
}

impl TlsCluster {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("tollgate-tls-cluster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let certificates = Certificates::make(&dir);
        let mut nodes = Vec::new();
        for _ in 0..3 {
            // `redis-cli --cluster create` introduces the nodes on their port + 10000.
            let (port, bus) = loop {
                let port = free_port();
                if port < 55_000
                    && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
                {
                    break (port, port + 10_000);
                }
            };
            let node_dir = dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("node directory");
            let child = Command::new(system::program("redis-server", "redis-server"))
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--cluster-port", &bus.to_string(), "--tls-cluster", "yes"])
                .args(["--tls-cert-file", &certificates.path("server.crt")])
                .args(["--tls-key-file", &certificates.path("server.key")])
                .args(["--tls-ca-cert-file", &certificates.path("ca.crt")])
                .args(["--tls-auth-clients", "no", "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            nodes.push((port, child));
        }
        let cluster = Self {
            nodes,
            certificates,
        };
        for &(port, _) in &cluster.nodes {
            let start = Instant::now();
            while cluster.cli(port, &["PING"]) != "PONG" {
                assert!(start.elapsed() < Duration::from_secs(10), "node {port}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let created = cluster
            .cli_command()
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stdout)
        );
        for &(port, _) in &cluster.nodes {
            let start = Instant::now();
            while !cluster
                .cli(port, &["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
            {
                assert!(start.elapsed() < Duration::from_secs(20), "cluster state");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    fn cli_command(&self) -> Command {
        let mut command = Command::new(system::program("redis-cli", "redis-server"));
        command.args(["--tls", "--cacert", &self.certificates.path("ca.crt")]);
        command
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = self
            .cli_command()
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(port, _)| format!("rediss://127.0.0.1:{port}/"))
            .collect()
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.certificates.dir);
    }
}

/// A cluster over TLS: buckets on every master grant their burst and refuse beyond; a wrong
/// CA is a TLS error naming the nodes.
#[test]
fn a_cluster_over_tls_grants_and_refuses_and_verifies_its_certificates() {
    let _serial = serial();
    let cluster = TlsCluster::start();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    runtime().block_on(async {
        let wrong_ca = Tls::new().ca(cluster.certificates.read("other-ca.crt"));
        match tls::connect_cluster(&urls, wrong_ca).await {
            Err(SetupError::Tls(error)) => {
                let first = format!("127.0.0.1:{}", cluster.nodes[0].0);
                assert_eq!(error.address(), first, "{error}");
            }
            other => panic!("a cluster whose CA is not trusted: {other:?}"),
        }
        let settings = Tls::new().ca(cluster.certificates.read("ca.crt"));
        let redis = tls::connect_cluster(&urls, settings)
            .await
            .expect("the cluster over TLS");
        // Keys spread over the slots, hence over the three masters.
        for key in ["a", "b", "c", "d", "e", "f"] {
            let bucket = RedisBucket::builder(&redis, format!("tls:{key}"), quota())
                .connect()
                .await
                .expect("bucket");
            bucket.try_acquire(5).await.expect("the burst");
            match bucket.try_acquire(1).await {
                Err(Error::Denied { .. }) => {}
                other => panic!("beyond the burst on {key}: {other:?}"),
            }
        }
    });
}
