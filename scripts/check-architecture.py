#!/usr/bin/env python3
"""Keeps ARCHITECTURE.md true to the tree. Fails when

- a file or directory of the set the page states (its section "What this page names": the
  globs after "every file:" and "every directory:") is not named on the page;
- the page names a file under those globs that the tree does not have (a path that is neither
  a file nor the end of one);
- an invariant stated as a grep disagrees with the tree: "`grep …` finds only `a` and `b`"
  (exactly those files) or "`grep …` finds nothing". The grep runs as written, without a shell.

A file is named by its path from the repository's root, or by the end of that path (whole
components: `swiss.rs`, `map/tables.rs`) that no other file of the set ends with; a directory
by its path. Files are those git tracks.

    scripts/check-architecture.py
"""

import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PAGE = "ARCHITECTURE.md"
SECTION = "What this page names"

# A path as the page writes it: components of letters, digits, `_`, `-`, `.`, joined by `/`.
TOKEN = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]*)*")
INVARIANT = re.compile(
    r"`(grep [^`]+)` finds (nothing|only ((?:`[^`]+`(?:,\s*|\s+and\s+)?)+))"
)


def tracked():
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line]


def matches(path, glob):
    """`*` within one component, `**` across any number of them."""
    pattern = re.escape(glob).replace(r"\*\*", "\0").replace(r"\*", "[^/]*")
    return re.fullmatch(pattern.replace("\0", ".*"), path) is not None


def the_set(page):
    """(file globs, directory globs) from the page's section on what it names, and the page
    without that section: its globs name nothing."""
    section = re.search(rf"^## {SECTION}\n(.*?)(?=^## |\Z)", page, re.S | re.M)
    if not section:
        sys.exit(f"{PAGE}: no section '## {SECTION}' stating what it names")
    globs = {}
    for kind in ("every file", "every directory"):
        item = re.search(rf"^- {kind}:(.*?)(?=^- |^\s*$)", section.group(1), re.S | re.M)
        if not item:
            sys.exit(f"{PAGE}: its section '{SECTION}' has no item '- {kind}: …'")
        globs[kind] = re.findall(r"`([^`]+)`", item.group(1))
    rest = page[: section.start()] + page[section.end() :]
    return globs["every file"], globs["every directory"], rest


def named(path, tokens, others):
    """Whether a token names `path`: the path itself, or an end of it no other path shares."""
    for token in tokens:
        if token == path:
            return True
        if path.endswith("/" + token) and not any(
            o == token or o.endswith("/" + token) for o in others if o != path
        ):
            return True
    return False


def main():
    os.chdir(ROOT)
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    file_globs, dir_globs, page = the_set(page)
    files_tracked = tracked()
    failures = []

    files = sorted({p for p in files_tracked for g in file_globs if matches(p, g)})
    directories = set()
    for p in files_tracked:
        parts = p.split("/")
        directories.update("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    directories = sorted(d for d in directories for g in dir_globs if matches(d, g))
    for glob in file_globs + dir_globs:
        if not any(matches(p, glob) for p in files + directories):
            failures.append(f"the glob `{glob}` matches nothing in the tree")

    tokens = {t.rstrip(".") for t in TOKEN.findall(page)}
    tokens.discard("")
    for path in files:
        if not named(path, tokens, files):
            failures.append(f"{path} is not named")
    for directory in directories:
        if directory not in tokens and directory.rstrip("/") not in tokens:
            failures.append(f"{directory} is not named")

    # A path under the set's globs that names no file of the tree: a name gone stale.
    for token in sorted(tokens):
        if "." in os.path.basename(token) and any(matches(token, g) for g in file_globs):
            if token not in files_tracked and not any(named(f, [token], files) for f in files):
                failures.append(f"names {token}, which the tree does not have")

    # The invariants stated as greps.
    prose = re.sub(r"\s+", " ", page)
    invariants = INVARIANT.findall(prose)
    for command, verdict, listed in invariants:
        argv = shlex.split(command)
        run = subprocess.run(argv, capture_output=True, text=True)
        if run.returncode > 1:
            failures.append(f"`{command}` failed: {run.stderr.strip()}")
            continue
        found = {line.split(":", 1)[0] for line in run.stdout.splitlines() if line}
        stated = set(re.findall(r"`([^`]+)`", listed)) if verdict != "nothing" else set()
        if found != stated:
            failures.append(
                f"`{command}` finds {sorted(found) or 'nothing'}, where the page says "
                f"{sorted(stated) or 'nothing'}"
            )

    for failure in failures:
        print(f"{PAGE}: {failure}")
    if failures:
        print(f"{PAGE} is behind the tree: {len(failures)} finding(s) above")
        return 1
    print(
        f"{PAGE}: names all {len(files)} files and {len(directories)} directories of its set; "
        f"{len(invariants)} invariant(s) hold"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
