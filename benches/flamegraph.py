#!/usr/bin/env python3
"""Flame graphs from `perf script` output, without outside tools.

    perf script -F comm,tid,ip,sym | flamegraph.py fold > stacks.folded
    flamegraph.py svg [--title T] stacks.folded out.svg
    flamegraph.py top stacks.folded        # JSON: top functions by self and total share

Folded format: one line per distinct stack, "thread;root;...;leaf COUNT".
Thread names are the first frame so that librdkafka's threads, tokio's
workers and the replication reader show apart.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections import Counter, defaultdict

# Rust symbol noise that says nothing about where time goes.
HASH = re.compile(r"::h[0-9a-f]{16}$")


def clean(sym: str) -> str:
    sym = HASH.sub("", sym.strip())
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    return sym or "[unknown]"


def fold(lines) -> Counter:
    stacks: Counter = Counter()
    comm = None
    frames: list[str] = []

    def flush():
        if comm is not None and frames:
            stacks[";".join([comm] + list(reversed(frames)))] += 1

    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if not line[0].isspace():
            flush()
            # "comm tid" (comm may contain spaces: the tid is the last field)
            head = line.rsplit(None, 1)[0] if len(line.split()) > 1 else line
            comm = re.sub(r"\d+$", "N", head.strip().rstrip(":"))
            frames = []
        else:
            parts = line.strip().split(None, 1)
            sym = parts[1] if len(parts) > 1 else "[unknown]"
            sym = re.sub(r"\s+\(.*\)$", "", sym)
            frames.append(clean(sym).replace(";", ":"))
    flush()
    return stacks


def read_folded(path: str) -> Counter:
    c: Counter = Counter()
    for line in open(path):
        line = line.rstrip("\n")
        if line:
            stack, n = line.rsplit(" ", 1)
            c[stack] += int(n)
    return c


# Frames every stack passes through (thread start, runtime plumbing, futures
# glue): true for everything, so they say nothing in the "including callees" list.
PLUMBING = re.compile(
    r"^(\[unknown\]|clone3?|start_thread|_start|__libc_start.*|main|std::.*|core::ops::function.*"
    r"|<core::future::.*|<tokio::.*|tokio::runtime::.*|tokio::task::.*|.*\{\{closure\}\}$"
    r"|<alloc::boxed::Box<F,A> as core::ops::function::FnOnce.*)$"
)


def top(stacks: Counter, n: int = 15) -> dict:
    total = sum(stacks.values())
    self_c: Counter = Counter()
    incl: Counter = Counter()
    threads: Counter = Counter()
    for stack, cnt in stacks.items():
        frames = stack.split(";")
        threads[frames[0]] += cnt
        self_c[frames[-1]] += cnt
        for f in set(frames[1:]):
            if not PLUMBING.match(f):
                incl[f] += cnt
    pct = lambda c: [{"function": f, "share": v / total} for f, v in c.most_common(n)]
    return {"samples": total, "self": pct(self_c), "total": pct(incl), "threads": pct(threads)}


def svg(stacks: Counter, title: str, out: str, width: int = 1400, row: int = 16) -> None:
    tree = lambda: defaultdict(tree)  # noqa: E731
    counts: dict = {}
    children: dict = defaultdict(dict)
    total = sum(stacks.values())
    for stack, cnt in stacks.items():
        path = ()
        counts[path] = counts.get(path, 0) + cnt
        for f in stack.split(";"):
            parent = path
            path = path + (f,)
            counts[path] = counts.get(path, 0) + cnt
            children[parent][f] = path
    depth = max(len(p) for p in counts)
    height = (depth + 3) * row
    rects = []

    def colour(name: str) -> str:
        h = sum(ord(c) for c in name) % 60
        if "rdkafka" in name or name.startswith("rd_"):
            return f"rgb(90,{150 + h},{200})"
        if "outbox_relay" in name:
            return f"rgb(230,{100 + h},60)"
        return f"rgb(240,{170 + h // 2},{60 + h})"

    def walk(path: tuple, x: float, level: int) -> None:
        w = counts[path] / total * (width - 20)
        if path and w >= 0.3:
            name = path[-1]
            y = height - (level + 2) * row
            label = html.escape(name)
            share = counts[path] / total * 100
            text = ""
            if w > 30:
                chars = int(w / 7)
                shown = name if len(name) <= chars else name[: max(chars - 2, 1)] + ".."
                text = f'<text x="{x + 3:.1f}" y="{y + row - 4}">{html.escape(shown)}</text>'
            rects.append(
                f'<g><title>{label} ({counts[path]} samples, {share:.2f}%)</title>'
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" fill="{colour(name)}"/>{text}</g>'
            )
        cx = x
        for child in sorted(children.get(path, {}).values()):
            walk(child, cx, level + 1)
            cx += counts[child] / total * (width - 20)

    walk((), 10, -1)
    doc = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">'
        f'<rect width="100%" height="100%" fill="#fdfdf6"/>'
        f'<text x="10" y="16" font-size="14">{html.escape(title)} ({total} samples; hover for names)</text>'
        + "".join(rects)
        + "</svg>\n"
    )
    with open(out, "w") as f:
        f.write(doc)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fold")
    s = sub.add_parser("svg")
    s.add_argument("--title", default="flame graph")
    s.add_argument("folded")
    s.add_argument("out")
    t = sub.add_parser("top")
    t.add_argument("folded")
    a = ap.parse_args()
    if a.cmd == "fold":
        for stack, n in sorted(fold(sys.stdin).items()):
            print(f"{stack} {n}")
    elif a.cmd == "svg":
        svg(read_folded(a.folded), a.title, a.out)
    else:
        print(json.dumps(top(read_folded(a.folded))))


if __name__ == "__main__":
    main()
