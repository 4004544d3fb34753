#!/usr/bin/env python3
"""The relative links of every markdown file the repository tracks, as a repository's web view
follows them: each `](path)`, `](path#anchor)`, `](#anchor)` and `[label]: path` must name a file
or directory that exists, and an anchor into a markdown file must name one of its headings (the
web view's anchor: the heading's text in lower case, punctuation dropped, spaces as hyphens, a
repeated one numbered). Links with a scheme (https:, mailto:) are not followed; links in code
are not links.

    scripts/check-md-links.py          # every tracked *.md
    scripts/check-md-links.py FILE…    # these

Fails listing each dead link as file:line: link (why).
"""

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
# `](destination)` of an inline link or image; `[label]: destination` of a definition.
INLINE = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:(?!:)")  # `crate::x` is no scheme


def tracked_markdown():
    out = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return [line for line in out.stdout.splitlines() if line]


def prose_lines(text, blank_code=True):
    """(line number, line) outside fenced code, code spans blanked unless told."""
    fenced = None
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence.group(1)
            elif fenced == fence.group(1):
                fenced = None
            continue
        if fenced is None and blank_code:
            yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        elif fenced is None:
            yield number, line


def slug(heading):
    """A heading's anchor as the web view writes it."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line in prose_lines(f.read(), blank_code=False):
                heading = HEADING.match(line)
                if heading:
                    base = slug(heading.group(2))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def dead(source, destination):
    """Why `destination`, linked from `source`, does not resolve; None when it does."""
    if not destination or SCHEME.match(destination):
        return None
    path, _, anchor = destination.partition("#")
    target = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
    if not os.path.exists(target):
        return "no such file"
    if anchor and target.endswith(".md") and anchor.lower() not in anchors(target):
        return f"no heading #{anchor} in {os.path.relpath(target, ROOT)}"
    return None


def main(files):
    os.chdir(ROOT)
    failures = 0
    for name in files or tracked_markdown():
        source = os.path.join(ROOT, name)
        with open(source, encoding="utf-8") as f:
            text = f.read()
        for number, line in prose_lines(text):
            links = [m.group(1) for m in INLINE.finditer(line)]
            definition = DEFINITION.match(line)
            if definition:
                links.append(definition.group(1))
            for link in links:
                why = dead(source, link)
                if why:
                    print(f"{name}:{number}: {link} ({why})")
                    failures += 1
    if failures:
        print(f"{failures} dead relative link(s) in markdown")
        return 1
    print("markdown links: every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
