#!/usr/bin/env python3
"""Fails when a function in crates/*/src (outside #[cfg(test)] modules) is
longer than MAX_LINES, unless it is one of the tables listed in TABLES: a
function that long is doing more than one job (issue 17, STYLE.md).
Prints every function over MIN lines (default 80), longest first."""
import re, sys, glob

def strip(src):
    # blank out comments, strings, chars so braces in them don't count; keep newlines
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            depth = 0; j = i
            while j < n:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j):
                    depth -= 1; j += 2
                    if depth == 0: break
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', src[i:i+10]) and (i == 0 or not (src[i-1].isalnum() or src[i-1]=='_')):
            m = re.match(r'r(#*)"', src[i:]); hashes = m.group(1)
            end = src.find('"' + hashes, i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", src[i:])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else:
                out.append(c); i += 1  # lifetime
        else:
            out.append(c); i += 1
    return ''.join(out)

def match_brace(s, k):
    depth = 0
    for j in range(k, len(s)):
        if s[j] == '{': depth += 1
        elif s[j] == '}':
            depth -= 1
            if depth == 0: return j
    return len(s) - 1

def analyse(path):
    src = open(path).read(); s = strip(src)
    skip = []
    for m in re.finditer(r'#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{', s):
        k = m.end() - 1; skip.append((k, match_brace(s, k)))
    res = []
    for m in re.finditer(r'\bfn\s+(\w+)', s):
        if any(a <= m.start() <= b for a, b in skip): continue
        # find body start: first '{' or ';' after signature at paren depth 0
        j = m.end(); depth = 0
        while j < len(s):
            ch = s[j]
            if ch in '(<[': depth += 1
            elif ch in ')>]': depth -= 1
            elif ch == ';' and depth <= 0: j = -1; break
            elif ch == '{' and depth <= 0: break
            j += 1
        if j < 0 or j >= len(s): continue
        e = match_brace(s, j)
        l0 = s.count('\n', 0, m.start()) + 1; l1 = s.count('\n', 0, e) + 1
        res.append((l1 - l0 + 1, path, l0, m.group(1)))
    return res

MAX_LINES = 100
# Declarative tables, not logic: one entry per route.
TABLES = {("crates/web/src/api/mod.rs", "routes")}

files = sys.argv[1:] or glob.glob('crates/*/src/**/*.rs', recursive=True)
allr = []
for f in files: allr += analyse(f)
allr.sort(reverse=True)
thr = int(__import__('os').environ.get('MIN', 80))
for ln, p, l0, name in allr:
    if ln >= thr: print(f'{ln:5d}  {p}:{l0}  {name}')
too_long = [(ln, p, l0, name) for ln, p, l0, name in allr if ln > MAX_LINES and (p, name) not in TABLES]
for ln, p, l0, name in too_long:
    print(f"error: {p}:{l0} fn {name} is {ln} lines (at most {MAX_LINES}): split it", file=sys.stderr)
sys.exit(1 if too_long else 0)
