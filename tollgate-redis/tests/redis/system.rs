// The programs the tests start for themselves (`redis-server`, `redis-cli`, `nginx`, and
// libfaketime under `redis-server`), found on this machine or installed on it.
//
// `cargo test --all-features` on a fresh Debian machine has none of them. The first test that
// needs one, as root with `apt-get`, installs them all at once (`apt-get update`, then
// `apt-get install -y redis-server nginx faketime openssl`), holding a file lock so that the test
// threads and the test binaries running side by side neither race apt nor install twice.
// Elsewhere, a test that needs a missing program fails, naming the package that brings it. No
// test is ever skipped for want of one.

// Included by `tests/redis/support.rs`, which the library's own Redis tests include in turn, in
// a crate without std's prelude: hence the imports of std's macros.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::{eprintln, format};

/// The Debian packages the tests use, installed together by the first test that misses one.
pub const PACKAGES: [&str; 4] = ["redis-server", "nginx", "faketime", "openssl"];

/// The path of `program`, brought by the Debian package `package` (one of [`PACKAGES`]):
/// found on `PATH` or in the `sbin` directories (nginx lives in `/usr/sbin`), else installed.
///
/// Panics, naming `package`, when it is missing and cannot be installed here.
pub fn program(program: &str, package: &str) -> PathBuf {
    if let Some(path) = find(program) {
        return path;
    }
    // The threads of one binary wait here, and find the program there once one installed it;
    // the binaries wait on the file lock.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = find(program) {
        return path;
    }
    install(package);
    find(program).unwrap_or_else(|| {
        panic!("`{program}` is still missing after installing `{package}` (apt-get install {package})")
    })
}

fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Installs every package in [`PACKAGES`] that is missing, once per machine: the lock is a file
/// in the temporary directory, taken with `flock`, and whoever holds it checks again before
/// calling apt, so the binaries that waited for it find the work done.
fn install(package: &str) {
    let by_hand = format!(
        "the tests need `{package}`: install it (apt-get install {})",
        PACKAGES.join(" ")
    );
    if !is_root() || find("apt-get").is_none() {
        panic!("{by_hand}; the tests install it themselves only as root on a machine with apt-get");
    }
    if find("flock").is_none() {
        panic!("{by_hand}; installing it needs `flock` (util-linux) to keep test binaries from racing apt");
    }
    let lock = std::env::temp_dir().join("tollgate-test-packages.lock");
    let packages = PACKAGES.join(" ");
    // dpkg's status tells which packages are installed (`dpkg -s` also answers for a package
    // removed with its configuration kept, whose programs are gone); apt waits for another
    // apt's lock, and its output is shown only if it fails.
    let script = format!(
        "missing=''; for p in {packages}; do \
           [ \"$(dpkg-query -W -f='${{db:Status-Status}}' \"$p\" 2>/dev/null)\" = installed ] \
             || missing=\"$missing $p\"; \
         done; \
         [ -z \"$missing\" ] && exit 0; \
         echo \"tollgate tests: installing$missing (apt-get)\" >&2; \
         log=$(mktemp); \
         {{ apt-get -o DPkg::Lock::Timeout=600 update -qq && \
           apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing; \
         }} >\"$log\" 2>&1 || {{ cat \"$log\" >&2; rm -f \"$log\"; exit 1; }}; \
         rm -f \"$log\""
    );
    eprintln!("tollgate tests: `{package}` is missing; taking {lock:?} to install it");
    let status = Command::new("flock")
        .arg(&lock)
        .args(["sh", "-c", &script])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .unwrap_or_else(|err| panic!("{by_hand}; running apt-get under flock failed: {err}"));
    assert!(status.success(), "{by_hand}; apt-get failed ({status})");
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == b"0")
}
