#!/usr/bin/env python3
"""Lists import cycles between the modules of Rust crates.

Usage: scripts/module-cycles.py [--quiet|--all] CRATE_SRC_DIR...   e.g. runtime/src connectors/src

For every module, its child modules (a file `x.rs` or a folder `x/`) are the
nodes; there is an edge A -> B when code anywhere under A names something
under B: a `use` (groups and re-exports followed), or a path written in code
(`crate::…`, `super::…`, `self::…`). A child naming its own ancestors (items
of a `mod.rs`) is not an edge between siblings and is not counted. Every
strongly connected set of two or more siblings is printed with one place
that makes each of its edges (`--all`: every place). Exits 1 when any crate has a cycle, 0 when none
has, 2 on bad arguments.

It reads source text, not a compiled crate: macros that build paths and
`#[path]` attributes are not seen. `cargo modules dependencies --acyclic`
gives the compiler's view where cargo-modules is installed.
"""

import re
import sys
from pathlib import Path

USE_RE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
PATH_RE = re.compile(r"\b((?:crate|super|self)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)


def strip_comments_and_strings(text):
    """Blanks comments, string and char literals, keeping line numbers."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r(#*)"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append("\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}}` -> [a, b], [a, c, d], [a, c, e] (aliases and globs dropped)."""
    tree = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*", "", tree)
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for part in filter(None, parts):
            brace = part.find("{")
            if brace >= 0:
                head = [p for p in part[:brace].split("::") if p]
                walk(prefix + head, part[brace + 1:part.rindex("}")])
            else:
                segs = [p for p in part.split("::") if p and p != "*"]
                if segs:
                    paths.append(prefix + segs)

    walk([], tree)
    return paths


class Crate:
    def __init__(self, src):
        self.src = Path(src)
        root = self.src / "lib.rs"
        if not root.exists():
            root = self.src / "main.rs"
        if not root.exists():
            raise SystemExit(f"module-cycles: {src}: no lib.rs or main.rs")
        self.files = {}  # module path tuple -> (file, stripped text)
        self.aliases = {}  # (module, name) -> absolute path list
        self.load((), root)

    def load(self, module, file):
        text = strip_comments_and_strings(file.read_text())
        self.files[module] = (file, text)
        base = file.parent if file.name in ("lib.rs", "main.rs", "mod.rs") else file.with_suffix("")
        for m in MOD_RE.finditer(text):
            name = m.group(1)
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    self.load(module + (name,), cand)
                    break

    def is_module(self, path):
        return tuple(path) in self.files

    def absolute(self, module, segs):
        """Resolves `crate::`/`super::`/`self::` (or a child module's name) against `module`."""
        if not segs:
            return None
        cur = list(module)
        i = 0
        if segs[0] == "crate":
            cur, i = [], 1
        elif segs[0] in ("super", "self"):
            while i < len(segs) and segs[i] in ("super", "self"):
                if segs[i] == "super":
                    if not cur:
                        return None
                    cur.pop()
                i += 1
        elif self.is_module(module + (segs[0],)):
            pass
        else:
            return None
        return cur + segs[i:]

    def target_module(self, path, depth=0):
        """The module that defines what `path` names, through re-exports."""
        k = len(path)
        while k > 0 and not self.is_module(path[:k]):
            k -= 1
        module = tuple(path[:k])
        rest = path[k:]
        if rest and depth < 16:
            alias = self.aliases.get((module, rest[0]))
            if alias is not None:
                return self.target_module(alias + rest[1:], depth + 1)
        return module

    def references(self):
        """(from module, to module, file, line) for every path named in code."""
        uses = []
        for module, (file, text) in self.files.items():
            for m in USE_RE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                for segs in expand_use_tree(m.group(1)):
                    absolute = self.absolute(module, segs)
                    if not absolute:
                        continue
                    if segs[-1] != "self":
                        self.aliases[(module, absolute[-1])] = absolute
                    else:
                        absolute = absolute[:-1]
                    uses.append((module, absolute, file, line))
            body = USE_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
            for m in PATH_RE.finditer(body):
                segs = [s.strip() for s in m.group(1).split("::")]
                absolute = self.absolute(module, segs)
                if absolute is not None:
                    uses.append((module, absolute, file, body.count("\n", 0, m.start()) + 1))
        for module, absolute, file, line in uses:
            yield module, self.target_module(absolute), file, line


def sibling_edge(source, target):
    """The edge between the children of the deepest common ancestor, or None."""
    k = 0
    while k < min(len(source), len(target)) and source[k] == target[k]:
        k += 1
    if k == len(source) or k == len(target):
        return None
    return source[: k + 1], target[: k + 1]


def cycles(edges):
    """Strongly connected sets of two or more nodes (Tarjan)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def name(module):
    return "::".join(module) or "crate"


def check(src, quiet, every):
    crate = Crate(src)
    witness = {}
    for source, target, file, line in crate.references():
        edge = sibling_edge(source, target)
        if edge is not None:
            places = witness.setdefault(edge, [])
            if f"{file}:{line}" not in places:
                places.append(f"{file}:{line}")
    found = cycles(witness.keys())
    for component in found:
        members = set(component)
        print(f"{src}: cycle between {', '.join(name(m) for m in component)}")
        for (a, b), places in sorted(witness.items()):
            if a in members and b in members:
                shown = ", ".join(places) if every else places[0]
                print(f"  {name(a)} -> {name(b)}  ({shown})")
    if not found and not quiet:
        print(f"{src}: no import cycles between modules ({len(crate.files)} modules)")
    return bool(found)


def main(argv):
    quiet, every = "--quiet" in argv, "--all" in argv
    dirs = [a for a in argv if a not in ("--quiet", "--all")]
    if not dirs or any(a.startswith("-") for a in dirs):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    return 1 if any([check(d, quiet, every) for d in dirs]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
