#!/usr/bin/env python3
"""Every example's documented run line, checked as written.

An example's doc comment says how to run it: a `cargo run …` in backticks ("Run it with
`cargo run --release --example tour`") or on a line of a ```text block (with a `# comment`
after it). Every example of the workspace must document one. For each example:

- the line to run (the one whose comment says "for CI", else the first) is run as written,
  from the root of the workspace the example belongs to, and must exit 0, unless it is a
  server (its doc comment shows `curl` against it), which is started as written, must answer
  its first documented `curl` (any status below 500), and is stopped; or it is built for
  another target (firmware, which `examples/firmware/run.sh` runs under qemu), or its comment
  says it fails (a line that shows what goes wrong): those are built;
- every other documented line is built: `cargo build` with exactly its arguments before `--`.

    scripts/check-example-runs.py             # every example
    scripts/check-example-runs.py --build     # build every line, run none
    scripts/check-example-runs.py FILE…       # these examples

Fails listing each line that did not build, run, or answer, and each example without a line.
"""

import glob
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# The examples: every file here must document its run line.
EXAMPLES = [
    "examples/*.rs",
    "examples/tour/*.rs",
    "tollgate-tower/examples/*.rs",
    "tollgate-redis/examples/*.rs",
]
# Binaries that document one when a person runs them (the others are the size and cost
# scripts' own).
ALSO = ["examples/firmware/src/main.rs", "examples/firmware/src/bin/*.rs"]
SERVER_READY_SECS = 600  # the build before it listens included
HOST = subprocess.run(
    ["rustc", "-vV"], capture_output=True, text=True, check=True
).stdout.split("host: ")[1].split()[0]


def files(globs):
    found = []
    for pattern in globs:
        found += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return [os.path.relpath(f, ROOT) for f in found]


def doc_comment(path):
    """The file's leading `//!` lines, without the marker."""
    lines = []
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for line in f:
            if not line.startswith("//!"):
                break
            lines.append(line[3:].removeprefix(" ").rstrip("\n"))
    return lines


def run_lines(doc):
    """[(command, comment)] in the order the doc comment gives them, and the `curl` lines."""
    found, curls = [], []
    in_block = False
    for line in doc:
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            command, _, comment = line.partition("#")
            command = command.strip()
            if command.startswith("cargo run"):
                found.append((command, comment.strip()))
            elif command.startswith("curl"):
                curls.append(command)
    prose = " ".join(line for line in doc)
    for command in re.findall(r"`(cargo run[^`]*)`", prose):
        found.append((re.sub(r"\s+", " ", command).strip(), ""))
    unique = []
    for command, comment in found:
        if command not in [c for c, _ in unique]:
            unique.append((command, comment))
    return unique, curls


def workspace_of(path):
    """The root of the workspace that holds `path`: the nearest manifest with `[workspace]`."""
    directory = os.path.dirname(os.path.join(ROOT, path))
    while directory.startswith(ROOT):
        manifest = os.path.join(directory, "Cargo.toml")
        if os.path.exists(manifest):
            with open(manifest, encoding="utf-8") as f:
                if re.search(r"^\[workspace\]", f.read(), re.M):
                    return directory
        directory = os.path.dirname(directory)
    return ROOT


def build_args(argv):
    """`cargo run ARGS -- …` as `cargo build ARGS`."""
    args = argv[2:]
    if "--" in args:
        args = args[: args.index("--")]
    return ["cargo", "build"] + args


def target_of(argv):
    for i, arg in enumerate(argv):
        if arg == "--target" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--target="):
            return arg.split("=", 1)[1]
    return HOST


def port_of(curl):
    match = re.search(r"https?://[^/:]+:(\d+)", curl)
    return int(match.group(1)) if match else None


def listening(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def serve(argv, cwd, curl):
    """Starts a server as written, asks it `curl` once it listens, stops it: why not, or None."""
    port = port_of(curl)
    if port is None:
        return f"no port in `{curl}`"
    if listening(port):
        return f"port {port} is taken before the server starts"
    server = subprocess.Popen(argv, cwd=cwd, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_READY_SECS
        while not listening(port):
            if server.poll() is not None:
                return f"exited with {server.returncode} before it listened on {port}"
            if time.monotonic() > deadline:
                return f"not listening on {port} after {SERVER_READY_SECS} s"
            time.sleep(0.2)
        asked = shlex.split(curl) + ["--silent", "--output", "/dev/null", "--write-out", "%{http_code}"]
        answer = subprocess.run(asked, cwd=cwd, capture_output=True, text=True, timeout=30)
        status = answer.stdout.strip()
        print(f"    `{curl}`: HTTP {status}")
        if answer.returncode != 0 or not status.isdigit() or not 100 <= int(status) < 500:
            return f"`{curl}` answered {status or 'nothing'} (curl exit {answer.returncode})"
        return None
    finally:
        # The server and anything it started: its own process group, and nothing else.
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def main(args):
    build_only = "--build" in args
    chosen = [a for a in args if a != "--build"]
    required = files(EXAMPLES)
    examples = chosen or required + files(ALSO)
    failures = []
    checked = 0
    for path in examples:
        doc = doc_comment(path)
        lines, curls = run_lines(doc)
        if not lines:
            if path in required:
                failures.append(f"{path}: no run line (`cargo run …`) in its doc comment")
            continue
        cwd = workspace_of(path)
        marked = [c for c, comment in lines if "for CI" in comment]
        to_run = marked[0] if marked else lines[0][0]
        for command, comment in lines:
            checked += 1
            argv = shlex.split(command)
            where = os.path.relpath(cwd, ROOT)
            print(f"{path}: {command}" + (f"   (in {where})" if where != "." else ""), flush=True)
            runs = (
                command == to_run
                and not build_only
                and target_of(argv) == HOST
                and "fails" not in comment
            )
            if runs and curls:
                why = serve(argv, cwd, curls[0])
            elif runs:
                done = subprocess.run(argv, cwd=cwd)
                why = done.returncode and f"exited with {done.returncode}"
            else:
                done = subprocess.run(build_args(argv), cwd=cwd)
                why = done.returncode and f"`{shlex.join(build_args(argv))}` failed"
            if why:
                failures.append(f"{path}: `{command}`: {why}")
    for failure in failures:
        print(failure)
    if failures:
        print(f"{len(failures)} example run line(s) do not work as written")
        return 1
    print(f"example run lines: all {checked} work as written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
