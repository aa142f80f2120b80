#!/usr/bin/env python3
"""Report import cycles between top-level modules of each crate.

For every .rs file under crates/<c>/src (library and binary roots), find
references `use crate::X`, `crate::X::...`, `super::...` (resolved against the
file's module path and any inline `mod name { }` blocks), and build a graph of
top-level modules.  Names that lib.rs re-exports (`pub use m::Name`) resolve to
the module they come from; items defined in lib.rs itself resolve to <root>.

Usage: modcycles.py [--root] [--tests] [crate-dir ...]
  --root   also show edges to/from <root> (lib.rs items) in cycles
  --tests  include code inside `#[cfg(test)]` modules (default: included too;
           use --no-tests to exclude)
"""
import os
import re
import sys
from collections import defaultdict


def strip(src):
    """Remove comments, string and char literals (keeps braces of code only)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            continue
        m = re.match(r'b?r(#*)"', src[i:i + 40])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = m.group(1)
            end = src.find('"' + hashes, i + m.end())
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
            continue
        if c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
            continue
        if c == "'":
            # char literal vs lifetime
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12])
            if m:
                i += m.end()
                out.append("' '")
                continue
        out.append(c)
        i += 1
    return "".join(out)


def module_path(src_dir, path):
    rel = os.path.relpath(path, src_dir)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main") and len(rel) == 1:
        return []
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel and rel[0] == "bin":
        return None  # separate binary crates
    return rel


def split_use_tree(tree):
    """Expand a use tree `a::{b, c::d}` into full paths."""
    tree = tree.strip()
    depth, parts, cur = 0, [], ""
    # find top-level '{'
    idx = -1
    for k, ch in enumerate(tree):
        if ch == "{":
            idx = k
            break
    if idx < 0:
        return [tree]
    prefix = tree[:idx]
    inner = tree[idx + 1: tree.rfind("}")]
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        for sub in split_use_tree(p):
            res.append(prefix + sub if sub != "self" else prefix.rstrip(":"))
    return res


def resolve(path, modpath):
    """Resolve a path string (crate::.. / super::.. / self::..) to absolute segments."""
    segs = [s.strip() for s in re.split(r"::", path)]
    segs = [re.sub(r"\s+as\s+\w+$", "", s) for s in segs]
    if not segs:
        return None
    if segs[0] == "crate":
        return segs[1:]
    if segs[0] in ("super", "self"):
        cur = list(modpath)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                if not cur:
                    return None
                cur.pop()
            segs = segs[1:]
        return cur + segs
    return None


def scan(src_dir, include_tests=True):
    files = []
    for d, _, fs in os.walk(src_dir):
        for f in fs:
            if f.endswith(".rs"):
                files.append(os.path.join(d, f))
    roots = [p for p in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src_dir, p))]
    lib = os.path.join(src_dir, roots[0]) if roots else None
    # top-level modules
    top = set()
    reexport = {}
    if lib:
        ltext = strip(open(lib).read())
        for m in re.finditer(r"\bmod\s+(\w+)\s*;", ltext):
            top.add(m.group(1))
        for m in re.finditer(r"\bmod\s+(\w+)\s*\{", ltext):
            top.add(m.group(1))
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", ltext):
            for p in split_use_tree(m.group(1)):
                segs = [s.strip() for s in p.split("::")]
                if segs[0] in ("crate", "self"):
                    segs = segs[1:]
                if segs and segs[0] in top and segs[-1] == "*":
                    # glob re-export: every pub item of that module's file
                    for cand in (os.path.join(src_dir, segs[0] + ".rs"),
                                 os.path.join(src_dir, segs[0], "mod.rs")):
                        if os.path.exists(cand):
                            body = strip(open(cand).read())
                            for im in re.finditer(r"\bpub\s+(?:async\s+)?(?:struct|enum|fn|const|type|trait|static|mod)\s+(\w+)", body):
                                reexport.setdefault(im.group(1), segs[0])
                    continue
                if segs and segs[0] in top:
                    name = segs[-1]
                    am = re.search(r"\bas\s+(\w+)$", name)
                    name = am.group(1) if am else name
                    reexport[name] = segs[0]
    edges = defaultdict(lambda: defaultdict(list))
    for path in sorted(files):
        mp = module_path(src_dir, path)
        if mp is None:
            continue
        if mp == [] and os.path.basename(path) == "main.rs" and lib and lib.endswith("lib.rs"):
            continue  # binary root of a lib+bin crate: uses the lib by name
        text = strip(open(path).read())
        # inline modules: walk braces
        stack = []  # (name, depth, is_test)
        depth = 0
        pending = None
        lines = text.split("\n")
        pos_mod = []  # (offset, modpath, in_test)
        offset = 0
        if mp == []:
            # crate root: plain `module::item` paths in code (not the `pub use`
            # facade) are edges from <root>
            code = re.sub(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]+;", "", text)
            for m in re.finditer(r"(?<![\w:])(\w+)\s*::\s*(\w+)", code):
                if m.group(1) in top:
                    edges["<root>"][m.group(1)].append(f"root: {m.group(0)}")
        tokens = re.finditer(r"(#\[cfg\(test\)\])|\bmod\s+(\w+)\s*\{|[{}]|(?:\$?crate|super|self)(?:\s*::\s*(?:\w+|\{[^;]*?\}|\*))+|\buse\s+[^;]+;", text)
        cfg_test = False
        for t in tokens:
            s = t.group(0)
            if t.group(1):
                cfg_test = True
                continue
            if t.group(2):
                depth += 1
                stack.append((t.group(2), depth, cfg_test or (stack and stack[-1][2])))
                cfg_test = False
                continue
            if s == "{":
                depth += 1
                continue
            if s == "}":
                if stack and stack[-1][1] == depth:
                    stack.pop()
                depth -= 1
                continue
            cur = mp + [x[0] for x in stack]
            in_test = bool(stack and stack[-1][2])
            if in_test and not include_tests:
                continue
            if s.startswith("$crate"):
                continue
            if s.startswith("use"):
                body = s[3:-1].strip()
                paths = split_use_tree(body)
            else:
                s2 = re.sub(r"\s+", "", s)
                if "{" in s2:
                    paths = split_use_tree(s2)
                else:
                    paths = [s2]
            for p in paths:
                p = re.sub(r"\s+", " ", p).strip()
                if not re.match(r"(crate|super|self)\b", p):
                    continue
                segs = resolve(p, cur)
                if segs is None:
                    continue
                src_top = mp[0] if mp else "<root>"
                if not segs:
                    continue
                first = segs[0]
                if first == "*":
                    dst = "<root>"
                elif first in top:
                    dst = first
                elif first in reexport:
                    dst = reexport[first]
                else:
                    dst = "<root>"
                if dst != src_top:
                    where = os.path.relpath(path, src_dir)
                    edges[src_top][dst].append(f"{where}: {p}" + (" [test]" if in_test else ""))
    return top, edges


def sccs(nodes, adj):
    index, low, on, st, out = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        st.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def main():
    args = sys.argv[1:]
    with_root = "--root" in args
    include_tests = "--no-tests" not in args
    verbose = "-v" in args
    dirs = [a for a in args if not a.startswith("-")]
    if not dirs:
        dirs = sorted(os.path.join("crates", d) for d in os.listdir("crates"))
    total = 0
    for c in dirs:
        src = os.path.join(c, "src")
        if not os.path.isdir(src):
            continue
        top, edges = scan(src, include_tests)
        nodes = set(top) | set(edges) | {d for s in edges for d in edges[s]}
        if not with_root:
            nodes.discard("<root>")
        adj = {s: [d for d in edges[s] if d in nodes] for s in edges if s in nodes}
        comps = [sorted(x) for x in sccs(sorted(nodes), adj) if len(x) > 1]
        print(f"{c}: {len(top)} top-level modules, {len(comps)} cycle(s)")
        for comp in comps:
            total += 1
            print("  cycle: " + " <-> ".join(comp))
            for s in comp:
                for d in sorted(edges[s]):
                    if d in comp:
                        refs = edges[s][d]
                        print(f"    {s} -> {d} ({len(refs)} refs)")
                        for r in refs[: (50 if verbose else 3)]:
                            print(f"        {r}")
    print(f"TOTAL cycles: {total}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
