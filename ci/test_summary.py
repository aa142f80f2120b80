#!/usr/bin/env python3
"""Passed/failed per test binary, from the log of a `cargo test` run.

Cargo names each test binary before it runs it (`Running unittests
src/lib.rs (target/debug/deps/llmwatch_core-…)`, `Running tests/api.rs
(…)`, `Doc-tests llmwatch_core`) and libtest ends each with `test result:
ok. N passed; M failed; …`. This prints one line per binary, then the
totals alone on the last line (`N passed, M failed`). A binary that was
started but printed no result (it crashed, was killed, or timed out) is
listed as such and counts as one failed test in the totals.

Usage: test_summary.py LOG   (or the log on stdin)
Exit status: 0 when every binary printed a result with no failed test,
1 otherwise (also when the log names no test binary at all: the build
failed).
"""
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RUNNING = re.compile(r"^\s*Running (.+?)\s*$")
DOC_TESTS = re.compile(r"^\s*Doc-tests (\S+)\s*$")
RESULT = re.compile(r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed;")
# `unittests src/lib.rs (target/debug/deps/llmwatch_core-0123abcd)`
BINARY = re.compile(r"^(.*?) \((?:.*/)?([^/()]+?)(?:-[0-9a-f]{16})?(?:\.exe)?\)$")


def label(running):
    """A short name for a `Running …` line: its source and binary name."""
    m = BINARY.match(running)
    return f"{m.group(1)} [{m.group(2)}]" if m else running


def parse(lines):
    """[(label, passed, failed, result)], result `ok`, `FAILED` or None."""
    binaries = []
    for raw in lines:
        line = ANSI.sub("", raw.rstrip("\n"))
        m = RUNNING.match(line)
        if m:
            binaries.append([label(m.group(1)), 0, 0, None])
            continue
        m = DOC_TESTS.match(line)
        if m:
            binaries.append([f"doc-tests [{m.group(1)}]", 0, 0, None])
            continue
        m = RESULT.match(line)
        if m and binaries:
            # The last one counts (a test's own output comes before it).
            binaries[-1][1:] = [int(m.group(2)), int(m.group(3)), m.group(1)]
    return [tuple(b) for b in binaries]


def render(binaries):
    """The summary lines and whether everything passed."""
    out = ["", f"test summary ({len(binaries)} test binaries):"]
    passed = failed = 0
    clean = bool(binaries)
    for name, p, f, result in binaries:
        passed, failed = passed + p, failed + f
        if result is None:
            clean, failed = False, failed + 1
            out.append(
                f"  {'NO RESULT':<9}  {'-':>5} passed  {'-':>4} failed  {name} "
                "(crashed or killed; counted as 1 failed)"
            )
        else:
            clean = clean and result == "ok" and f == 0
            status = "ok" if result == "ok" else "FAILED"
            out.append(f"  {status:<9}  {p:>5} passed  {f:>4} failed  {name}")
    if not binaries:
        out.append("  no test binary ran (did the build fail?)")
    out.append(f"{passed} passed, {failed} failed")
    return out, clean


def main(argv):
    if len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    if len(argv) == 2:
        with open(argv[1], encoding="utf-8", errors="replace") as log:
            binaries = parse(log)
    else:
        binaries = parse(sys.stdin)
    lines, clean = render(binaries)
    print("\n".join(lines))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
