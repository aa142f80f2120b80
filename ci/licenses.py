#!/usr/bin/env python3
"""Every crate in the dependency graph must be usable under a licence on the
allow-list below (its SPDX expression evaluated: OR takes either side, AND
needs both, WITH keeps the licence it qualifies).

This is the licence check of `cargo deny check licenses`, run from
`cargo metadata` so that it needs nothing beyond the toolchain and works
offline: cargo-deny itself would add minutes of compilation to every CI
run, and its advisory database is fetched from GitHub, which this project's
machines cannot reach. Usage: ci/licenses.py (from the repository root).
"""
import json
import re
import subprocess
import sys

# Permissive licences, compatible with llmwatch's Apache-2.0.
ALLOWED = {
    "0BSD", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "BSL-1.0",
    "CC0-1.0", "CDLA-Permissive-2.0", "ISC", "MIT", "MIT-0", "MPL-2.0",
    "Unicode-3.0", "Unicode-DFS-2016", "Unlicense", "Zlib",
}


def tokens(expression):
    # Old-style "MIT/Apache-2.0" means either.
    expression = expression.replace("/", " OR ")
    return re.findall(r"\(|\)|[A-Za-z0-9.+-]+", expression)


def evaluate(toks, pos=0):
    """Parses `term (OR term)*` from toks[pos:]; (allowed, next position)."""
    allowed, pos = evaluate_and(toks, pos)
    while pos < len(toks) and toks[pos] == "OR":
        right, pos = evaluate_and(toks, pos + 1)
        allowed = allowed or right
    return allowed, pos


def evaluate_and(toks, pos):
    allowed, pos = evaluate_atom(toks, pos)
    while pos < len(toks) and toks[pos] == "AND":
        right, pos = evaluate_atom(toks, pos + 1)
        allowed = allowed and right
    return allowed, pos


def evaluate_atom(toks, pos):
    if pos >= len(toks):
        raise ValueError("expression ends too early")
    if toks[pos] == "(":
        allowed, pos = evaluate(toks, pos + 1)
        if pos >= len(toks) or toks[pos] != ")":
            raise ValueError("unbalanced parentheses")
        return allowed, pos + 1
    licence = toks[pos]
    pos += 1
    if pos < len(toks) and toks[pos] == "WITH":
        pos += 2  # an exception only widens what the licence allows
    return licence in ALLOWED, pos


def main():
    metadata = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--locked"]))
    workspace = set(metadata["workspace_members"])
    refused = []
    for package in metadata["packages"]:
        if package["id"] in workspace:
            continue
        expression = package.get("license")
        name = f'{package["name"]} {package["version"]}'
        if not expression:
            refused.append(f"{name}: no SPDX licence expression (license-file only)")
            continue
        try:
            allowed, end = evaluate(tokens(expression))
            if end != len(tokens(expression)):
                raise ValueError("trailing text")
        except ValueError as why:
            refused.append(f"{name}: cannot read {expression!r}: {why}")
            continue
        if not allowed:
            refused.append(f"{name}: {expression}")
    if refused:
        print("licences outside the allow-list (ci/licenses.py):", file=sys.stderr)
        for line in refused:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    print(f"licences: {len(metadata['packages']) - len(workspace)} dependencies, all allowed")


if __name__ == "__main__":
    main()
