#!/usr/bin/env python3
"""Finds modules that import each other in a cycle, inside each crate's `src/`.

Why: a module that calls back into the module that calls it (a "helper library"
its own sub-modules depend on) cannot be read, tested or moved on its own. The
rule (issue 12) is that the module graph of `worker/`, `dispatcher/` and
`client/` has no cycle; CI runs this script over every crate.

A module is one file (`foo.rs` or `foo/mod.rs`). File A depends on module B when
A's code (comments stripped) names a path through B: `crate::b::…`,
`super::…`, `self::…`, or a child module `b::…` from its parent. Unit-test
modules (`tests` and anything under it) are left out: tests may use anything.

Usage: scripts/module-cycles.py [CRATE_DIR ...]  (default: every workspace crate)
Exit status 1 and the cycles on stdout when there is one.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CRATES = ["proto", "dataset", "journal", "dispatcher", "worker", "client",
                  "bench", "chaos", "metrics", "testkit", "."]


def modules(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            if "tests" in parts or (parts and parts[0] == "bin"):
                continue
            out[tuple(parts)] = os.path.join(dirpath, f)
    return out


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def strip_cfg_test(text):
    """Drops `#[cfg(test)] mod x { ... }` blocks (unit tests inside a file)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def expand_use_groups(text):
    """`a::{b, c::d}` -> `a::b a::c::d` (one level of nesting is enough here)."""
    def repl(m):
        prefix, inner = m.group(1), m.group(2)
        items = [s.strip() for s in inner.split(",") if s.strip()]
        return " ".join(f"{prefix}::{item}" for item in items)
    for _ in range(3):
        text = re.sub(r"((?:\w+::)*\w+)::\{([^{}]*)\}", repl, text)
    return text


def deps(mod, text, mods):
    found = set()
    for m in re.finditer(r"\b((?:crate|super|self|\w+)(?:::\w+)+)", text):
        parts = m.group(1).split("::")
        if parts[0] == "crate":
            path = parts[1:]
        elif parts[0] in ("super", "self"):
            base = list(mod)
            while parts and parts[0] in ("super", "self"):
                if parts[0] == "super":
                    base = base[:-1]
                parts = parts[1:]
            path = base + parts
        elif tuple(mod) + (parts[0],) in mods:
            path = list(mod) + parts
        else:
            continue
        # The longest prefix that is a module.
        for n in range(len(path), -1, -1):
            target = tuple(path[:n])
            if target in mods:
                if target != mod:
                    found.add(target)
                break
    return found


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) or "lib"


def main():
    crates = sys.argv[1:] or DEFAULT_CRATES
    bad = 0
    for crate in crates:
        src = os.path.join(ROOT, crate, "src")
        if not os.path.isdir(src):
            continue
        mods = modules(src)
        graph = {}
        for mod, path in mods.items():
            with open(path, encoding="utf-8") as f:
                text = expand_use_groups(strip_cfg_test(strip_comments(f.read())))
            # The crate root names every module to declare it: not a dependency.
            graph[mod] = set() if mod == () else deps(mod, text, mods)
        for comp in cycles(graph):
            bad += 1
            print(f"{crate}: modules in a cycle: {', '.join(name(m) for m in comp)}")
            for m in comp:
                into = sorted(name(t) for t in graph[m] if t in comp)
                print(f"    {name(m)} -> {', '.join(into)}")
    if bad:
        sys.exit(1)
    print("no module cycles")


if __name__ == "__main__":
    main()
