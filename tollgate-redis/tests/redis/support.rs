// Servers the tests start for themselves, and worker processes: the test binary itself, run
// again with `TOLLGATE_WORKER` naming the role it plays.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `redis-server`, `nginx` and libfaketime: found on this machine, or installed by the first
/// test that misses one.
pub mod system {
    include!("system.rs");
}

/// The tests run one at a time: the real-time ones must not share two cores with each other,
/// nor with an agreement test driving its own server flat out.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Microseconds since the Unix epoch: the clock Redis `TIME` reads too.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

fn scratch_dir(what: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-{what}-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn wait_until(deadline: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A `redis-server` on a loopback port, without persistence, stopped when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    password: Option<String>,
    /// The file the server reads its clock's offset from, when it runs under libfaketime.
    clock: Option<PathBuf>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    pub fn start_on(port: u16) -> Self {
        let mut server = Self {
            child: None,
            port,
            dir: scratch_dir("redis", port),
            password: None,
            clock: None,
        };
        server.restart();
        server
    }

    /// A server whose clock ([`set_clock`](Self::set_clock)) can be stepped while it runs:
    /// `redis-server` under libfaketime, which fakes its wall clock (`TIME`, key expiry) and
    /// leaves its monotonic clock (its timers) alone.
    pub fn start_with_movable_clock() -> Self {
        let port = free_port();
        let dir = scratch_dir("redis", port);
        let clock = dir.join("clock");
        let mut server = Self {
            child: None,
            port,
            dir,
            password: None,
            clock: Some(clock),
        };
        server.set_clock(0);
        server.restart();
        server
    }

    /// Steps the server's wall clock to `offset_s` seconds from the real time, at once. The
    /// offset is written whole, by a rename, so that the server never reads half of it.
    pub fn set_clock(&self, offset_s: i64) {
        let clock = self.clock.as_ref().expect("a server with a movable clock");
        let next = clock.with_extension("next");
        std::fs::write(&next, format!("{offset_s:+}\n")).expect("clock offset");
        std::fs::rename(&next, clock).expect("clock offset");
    }

    /// The server's wall clock (Redis `TIME`), in microseconds since the Unix epoch.
    pub fn time_us(&self) -> u64 {
        let time = self.cli(None, &["TIME"]);
        let mut fields = time.lines().map(|n| n.trim().parse::<u64>().expect("TIME"));
        let (s, us) = (fields.next().expect("TIME"), fields.next().expect("TIME"));
        s * 1_000_000 + us
    }

    /// A server that requires `password`.
    pub fn start_with_password(password: &str) -> Self {
        let port = free_port();
        let mut server = Self {
            child: None,
            port,
            dir: scratch_dir("redis", port),
            password: Some(password.to_string()),
            clock: None,
        };
        server.restart();
        server
    }

    /// The server's URL with `password`.
    pub fn url_with_password(&self, password: &str) -> String {
        format!("redis://:{password}@127.0.0.1:{}/", self.port)
    }

    /// Runs `redis-cli` with `args` (authenticating with `password`); its output.
    pub fn cli(&self, password: Option<&str>, args: &[&str]) -> String {
        let mut command = Command::new(system::program("redis-cli", "redis-server"));
        command.args(["-p", &self.port.to_string()]);
        if let Some(password) = password {
            command.args(["--no-auth-warning", "-a", password]);
        }
        let out = command.args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// Starts the server again on the same port (after `kill`).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server first");
        let mut command = Command::new(system::program("redis-server", "redis-server"));
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        if let Some(clock) = &self.clock {
            command
                .env("LD_PRELOAD", faketime_preload())
                .env("FAKETIME_TIMESTAMP_FILE", clock)
                // Read the file at every call, so that a step takes effect at once.
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--loglevel", "warning", "--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let port = self.port;
        assert!(
            wait_until(Duration::from_secs(10), || TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "redis-server did not listen on port {port}"
        );
        if self.password.is_none() {
            assert!(
                wait_until(Duration::from_secs(10), || ping(port)),
                "redis-server did not answer on port {port}"
            );
        }
    }

    /// Kills the server at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes (`STOP`) or thaws (`CONT`) the server: it keeps its connections and answers
    /// nothing.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Runs one command over a plain connection; the reply as text.
    pub fn command(&self, args: &[&str]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request += &format!("${}\r\n{arg}\r\n", arg.len());
        }
        stream.write_all(request.as_bytes()).expect("write");
        let mut reply = [0u8; 512];
        let read = stream.read(&mut reply).expect("read");
        String::from_utf8_lossy(&reply[..read])
            .trim_end()
            .to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `LD_PRELOAD` for a `redis-server` under libfaketime (`apt-get install faketime`).
///
/// libfaketime alone hangs Debian's `redis-server` before `main`: the server links jemalloc,
/// whose first use (by a library's constructor) reads `clock_gettime`; libfaketime, not yet
/// set up, sets itself up there, and a failed `dlsym` in it allocates, which waits for
/// jemalloc's set-up lock, held by the same thread. glibc's `libc_malloc_debug.so.0`, preloaded
/// first, serves `malloc`, `free` and the rest from glibc's allocator to everyone, so jemalloc
/// is set up only later (by the server's `mallctl` calls), when libfaketime is ready.
fn faketime_preload() -> String {
    // The package that brings libfaketime brings the `faketime` command too.
    system::program("faketime", "faketime");
    let triplet = format!("{}-linux-gnu", std::env::consts::ARCH);
    let find = |name: &str, dirs: &[String]| {
        dirs.iter()
            .map(|dir| std::path::Path::new(dir).join(name))
            .find(|path| path.exists())
            .map(|path| path.display().to_string())
    };
    let faketime = find(
        "libfaketime.so.1",
        &[
            format!("/usr/lib/{triplet}/faketime"),
            "/usr/local/lib/faketime".to_string(),
            "/usr/lib/faketime".to_string(),
        ],
    )
    .expect("libfaketime is installed (apt-get install faketime)");
    let malloc = find(
        "libc_malloc_debug.so.0",
        &[format!("/lib/{triplet}"), format!("/usr/lib/{triplet}")],
    )
    .expect("glibc's libc_malloc_debug.so.0 (glibc 2.34 or later)");
    format!("{malloc}:{faketime}")
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// nginx on a loopback port: `limit_req` at 100 r/s, burst 10, 429 beyond, in front of a
/// static file, one zone per location so each run starts from a fresh limiter.
pub struct Nginx {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Nginx {
    pub fn start(locations: &[&str]) -> Self {
        let port = free_port();
        let dir = scratch_dir("nginx", port);
        let www = dir.join("www");
        std::fs::create_dir_all(&www).expect("www");
        let d = dir.display();
        let mut zones = String::new();
        let mut blocks = String::new();
        for name in locations {
            std::fs::write(www.join(name), "ok\n").expect("stub file");
            zones += &format!("  limit_req_zone $server_port zone={name}:1m rate=100r/s;\n");
            // A static file, served in the content phase: `return 200` would answer in the
            // rewrite phase, before limit_req ever ran.
            blocks +=
                &format!("    location = /{name} {{ limit_req zone={name} burst=10 nodelay; }}\n");
        }
        let config = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  default_type text/plain;\n\
               client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n  keepalive_requests 100000;\n\
               limit_req_status 429;\n{zones}\
               server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n{blocks}  }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), config).expect("nginx.conf");
        let child = Command::new(system::program("nginx", "nginx"))
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let nginx = Self { child, port, dir };
        assert!(
            wait_until(Duration::from_secs(10), || TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "nginx did not listen on port {port}: {}",
            std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default()
        );
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The role this process plays, when it is a worker.
pub fn worker_role() -> Option<String> {
    std::env::var("TOLLGATE_WORKER").ok()
}

/// A setting the parent passed to this worker.
pub fn setting(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker setting {name}"))
}

/// Starts this test binary again, running only `test`, in `role`, with `settings`.
pub fn spawn_worker(test: &str, role: &str, settings: &[(&str, String)]) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env("TOLLGATE_WORKER", role)
        .envs(settings.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn worker")
}

/// Waits for a worker (at most `limit`) and returns its report lines (those starting `@@ `).
pub fn report(mut child: Child, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a worker hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .expect("worker output");
    assert!(status.success(), "a worker failed: {status}\n{out}");
    out.lines()
        .filter_map(|line| line.strip_prefix("@@ "))
        .map(str::to_string)
        .collect()
}

/// A fleet's window on `server`: it starts 1.5 s from now (time for the workers to start and
/// connect) and runs for `seconds`. Its start in Unix microseconds, and the settings that pass
/// the server's URL, `START_US` and `END_US` to the workers.
pub fn fleet_window(server: &RedisServer, seconds: u64) -> (u64, Vec<(&'static str, String)>) {
    let start_us = unix_us() + 1_500_000;
    let settings = std::vec![
        ("REDIS_URL", server.url()),
        ("START_US", start_us.to_string()),
        ("END_US", (start_us + seconds * 1_000_000).to_string()),
    ];
    (start_us, settings)
}

/// Four copies of this test binary running `test` in `role` with `settings`, all at once:
/// their report lines, one each (each worker has 30 s).
pub fn fleet_of_four(test: &str, role: &str, settings: &[(&str, String)]) -> Vec<String> {
    let workers: Vec<_> = (0..4).map(|_| spawn_worker(test, role, settings)).collect();
    let reports: Vec<String> = workers
        .into_iter()
        .flat_map(|worker| report(worker, Duration::from_secs(30)))
        .collect();
    assert_eq!(reports.len(), 4, "{reports:?}");
    reports
}

/// `key=value` fields of a report line.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// A single-threaded tokio runtime for a worker or a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Sleeps until the Unix time `at_us`.
pub async fn sleep_until_unix(at_us: u64) {
    let now = unix_us();
    if at_us > now {
        tokio::time::sleep(Duration::from_micros(at_us - now)).await;
    }
}

/// A TCP proxy on loopback in front of a server, which can hold every byte (a partition: both
/// sides see a silent link, and what was sent arrives when it heals), or cut every connection
/// and refuse new ones.
pub struct Proxy {
    pub port: u16,
    held: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub fn start(target: u16) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let (h, c) = (Arc::clone(&held), Arc::clone(&cut));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let (h, c) = (Arc::clone(&h), Arc::clone(&c));
                    std::thread::spawn(move || pump(from, to, &h, &c));
                }
            }
        });
        Self { port, held, cut }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Holds every byte (`true`) or lets them through again (`false`).
    pub fn hold(&self, held: bool) {
        self.held.store(held, std::sync::atomic::Ordering::SeqCst);
    }

    /// Cuts every connection and refuses new ones (`true`), or accepts them again.
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    held: &std::sync::atomic::AtomicBool,
    cut: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering;
    let _ = from.set_read_timeout(Some(Duration::from_millis(5)));
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if cut.load(Ordering::SeqCst) {
            let _ = from.shutdown(std::net::Shutdown::Both);
            let _ = to.shutdown(std::net::Shutdown::Both);
            return;
        }
        if held.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => {
                let _ = to.shutdown(std::net::Shutdown::Both);
                return;
            }
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    return;
                }
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                let _ = to.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

/// A TCP proxy on loopback, run on the caller's tokio runtime, that delays every byte from the
/// server to the client by an amount that can change while it runs (a return path that turns
/// slow); the client's bytes pass at once. Bytes keep their order.
pub struct DelayProxy {
    pub port: u16,
    delay_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl DelayProxy {
    /// Starts the proxy in front of `target`, delaying its replies by `delay`. Call it within a
    /// tokio runtime with I/O and timers enabled.
    pub async fn start(target: u16, delay: Duration) -> Self {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy port");
        let port = listener.local_addr().expect("address").port();
        let delay_us = Arc::new(AtomicU64::new(delay.as_micros() as u64));
        let shared = Arc::clone(&delay_us);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(client_read, server_write));
                tokio::spawn(delayed(server_read, client_write, Arc::clone(&shared)));
            }
        });
        Self { port, delay_us }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Delays the replies that arrive from now on by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us.store(
            delay.as_micros() as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let _ = tokio::io::copy(&mut from, &mut to).await;
}

/// Copies `from` to `to`, each chunk written `delay_us` after it was read.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks, mut due) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let delay = delay_us.load(std::sync::atomic::Ordering::SeqCst);
                let at = tokio::time::Instant::now() + Duration::from_micros(delay);
                if chunks.send((at, buffer[..read].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}
