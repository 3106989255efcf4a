"""Renders benches/RESULTS.md and benches/plots/*.png from a run's raw results.

Called by benches/run.py at the end of a run, or on its own:
    benches/run.py --report-only benches/results/raw-YYYYmmdd-HHMMSS.json
Every number in the report comes from the raw results; the targets are
judged here, with the numbers, and nothing is rounded into a pass.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

BENCHES = Path(__file__).resolve().parent
PLOTS = BENCHES / "plots"

SYSTEMS = {
    "relay": "outbox-relay",
    "relay_eos": "outbox-relay (exactly-once)",
    "relay_contract": "outbox-relay (JSON Schema contract)",
    "relay_avro": "outbox-relay (Avro registry contract)",
    "relay_parked": "outbox-relay (a parked aggregate among the W3 backlog's)",
    "relay_base": "outbox-relay (baseline build)",
    "relay_base_eos": "outbox-relay (baseline build, exactly-once)",
    "dbz_default": "Debezium (defaults)",
    "dbz_tuned": "Debezium (tuned)",
    "bare_librdkafka": "bare librdkafka producer",
    "bare_window": "bare librdkafka producer, the relay's window",
    "bare_java": "bare Java producer",
    "broker": "broker alone",
    "broker_now": "broker alone, linger.ms = 0",
    "broker_writers": "broker alone beside the writers",
    "broker_txn": "transactional producer alone (librdkafka)",
    "broker_txn_java": "transactional producer alone (Java)",
    "postgres": "PostgreSQL only",
}


def mmm(values) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(m: dict | None, scale: float = 1.0, digits: int = 0, unit: str = "") -> str:
    if m is None:
        return "n/a"
    f = lambda v: f"{v * scale:,.{digits}f}"  # noqa: E731
    if m["n"] == 1 or m["min"] == m["max"]:
        return f"{f(m['median'])}{unit}"
    return f"{f(m['median'])}{unit} ({f(m['min'])}–{f(m['max'])})"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def at_most(value: float, limit: float, unit: str, digits: int = 2) -> tuple[str, bool]:
    """A "≤ limit" target's measured text and verdict: the value, and when
    it misses, by how much (absolute and as a share of the limit)."""
    text = f"{value:.{digits}f} {unit}"
    if value > limit:
        text += f"; short by {value - limit:.{digits}f} {unit} ({(value - limit) / limit * 100:.0f} % over)"
    return text, value <= limit


def at_least(value: float, limit: float, unit: str, digits: int = 2) -> tuple[str, bool]:
    """The same for a "≥ limit" target."""
    text = f"{value:.{digits}f}{unit}"
    if value < limit:
        text += f"; short by {limit - value:.{digits}f}{unit} ({(limit - value) / limit * 100:.0f} % under)"
    return text, value >= limit


def drain_stats(runs: list[dict]) -> dict:
    return {
        "rate": mmm([r["drain_events_per_s"] for r in runs]),
        "startup": mmm([r["startup_to_first_event_s"] for r in runs]),
        "cpu": mmm([r["cpu_us_per_event"] for r in runs]),
        "rss": mmm([r["peak_rss_mb"] for r in runs]),
        "total": mmm([r["total_secs"] for r in runs]),
    }


def budget_rows(wl: dict) -> list[tuple[str, dict]]:
    """Per system: µs of CPU per event for the system itself, its walsender,
    the broker, everything else, and the whole machine (medians of the runs)."""
    out = []
    rows = wl["rows"]
    for key, label in [("recv", "pg_recvlogical"), ("recv_streaming", "pg_recvlogical, streaming=on")] + [(k, SYSTEMS[k]) for k in
                                                       ("relay", "relay_parked", "relay_contract", "relay_avro", "relay_eos", "relay_base",
                                                        "relay_base_eos", "dbz_default", "dbz_tuned")]:
        runs = [r for r in wl.get(key) or [] if r.get("budget")]
        if not runs:
            continue
        per = lambda v: v / rows * 1e6 if v is not None else None  # noqa: E731
        own = [per(r["cpu_s"]) for r in runs]
        ws = [per(r["budget"]["walsender_cpu_s"]) for r in runs]
        br = [per(r["budget"]["broker_cpu_s"]) for r in runs]
        total = [per(r["budget"]["machine_busy_s"]) for r in runs]
        rest = [t - o - (a or 0) - (b or 0) for t, o, a, b in zip(total, own, ws, br)]
        busy = [r["budget"]["machine_busy_s"] / (r["budget"]["secs"] * r["budget"]["cpus"]) for r in runs]
        out.append((label, {"own": mmm(own), "walsender": mmm(ws), "broker": mmm(br), "rest": mmm(rest),
                            "total": mmm(total), "busy": mmm(busy), "cpus": runs[0]["budget"]["cpus"]}))
    return out


def write_budget(w, wl: dict, name: str) -> dict | None:
    """The CPU budget table of a drain; returns the relay's row, if any."""
    rows = budget_rows(wl)
    if not rows:
        return None
    w(f"**Where the machine's CPU went in {name}** (CPU µs per event over the whole run of each system, "
      "from its start to its last event: the system's own process, the walsender that decoded for it, "
      "the Kafka broker, everything else on the machine, and all CPUs together; busy = the share of all "
      "CPUs' time that was not idle; the kernel accounts processes and CPUs apart, so \"everything else\", "
      "their difference, can come out a little below zero):\n")
    w("| system | itself | its walsender | Kafka broker | everything else | whole machine | CPUs busy |")
    w("|---|---|---|---|---|---|---|")
    relay = None
    for label, b in rows:
        w(f"| {label} | {fmt(b['own'], digits=1)} | {fmt(b['walsender'], digits=1)} | {fmt(b['broker'], digits=1)} | "
          f"{fmt(b['rest'], digits=1)} | {fmt(b['total'], digits=1)} | {fmt(b['busy'], scale=100, digits=0, unit=' %')} |")
        if label == SYSTEMS["relay"]:
            relay = b
    w("")
    return relay


def lat(runs: list[dict], key: str, part: str = "commit_to_consume") -> dict | None:
    vals = [(r.get(part) or {}).get(key) for r in runs]
    return mmm([v / 1000 for v in vals if v is not None])


# A step's writer kept its schedule when it committed at least this share of
# the rate asked of it (run.py's `sustained` holds W2 steps to the same share).
WRITER_KEPT = 0.95


def writer_kept(reached: float, rate: float) -> bool:
    return reached >= WRITER_KEPT * rate


def reached_rate(runs: list[dict], rate: int) -> tuple[bool, str]:
    """Whether a W1 step's writer kept its schedule (≥ 95 % of the rate),
    and the note a target measured in a step that did not carries."""
    reached = (mmm([r.get("commit_rate") for r in runs]) or {"median": 0})["median"]
    if writer_kept(reached, rate):
        return True, ""
    return False, f" (writer reached only {reached:,.0f}/s: {rate:,}/s not achieved, not judged)"


# The steps of the steady-state CPU table: the relay (and a baseline
# build), and the producer alone with the relay's linger and without one.
STEADY_CPU_STEPS = ("relay", "relay_base", "broker", "broker_now")


def steady_cpu_per_event(runs: list[dict] | None, group: str, rate: int) -> dict | None:
    """CPU µs per event of `group` over the measured part of W1 steps (the
    CPUs it used, from /proc, over the rate the writer reached): the same
    measure for the relay and for a producer alone."""
    values = []
    for r in runs or []:
        used = ((r.get("cpu_share") or {}).get("groups") or {}).get(group, {}).get("cpus")
        reached = r.get("commit_rate") or rate
        if used is not None and reached:
            values.append(used / reached * 1e6)
    return mmm(values)


def steady_cpu(w, get, rates: list[int]) -> list[tuple[str, str, bool | None]]:
    """Relay CPU per event at each steady W1 rate beside a librdkafka
    producer alone at that rate (with the relay's linger, and with none: a
    record sent the moment it is due, the latency class of the relay's
    nudged sends), and the steady-state CPU targets (≤ 10 µs/event at 1k/s
    and 5k/s)."""
    rows, targets = [], []
    for rate in rates:
        cells = {key: steady_cpu_per_event(get(key, rate), MEASURED_GROUP[key], rate) for key in STEADY_CPU_STEPS}
        if cells["relay"] is None:
            continue
        p50 = {key: lat(get(key, rate), "p50_us") if get(key, rate) else None for key in STEADY_CPU_STEPS}
        rows.append(f"| {rate:,} | " + " | ".join(
            f"{fmt(cells[key], digits=1)} (p50 {fmt(p50[key], digits=2)} ms)" if cells[key] else "n/a"
            for key in STEADY_CPU_STEPS) + " |")
        if rate in (1000, 5000):
            judged, note = reached_rate(get("relay", rate), rate)
            text, ok = at_most(cells["relay"]["median"], 10, "µs/event")
            floor = [f"{SYSTEMS[key]} {cells[key]['median']:.1f}" for key in ("broker", "broker_now") if cells[key]]
            if floor:
                text += f" (a librdkafka producer alone: {', '.join(floor)} µs/event)"
            targets.append((f"relay CPU ≤ 10 µs/event at a steady {rate // 1000}k/s (W1, measured part)",
                            text + note, ok if judged else None))
    if rows:
        w("CPU per event at a steady rate (µs, medians of the repeats, over the measured part of each step, "
          "from `/proc`; the median commit-to-consume latency beside it). The producer alone is "
          "`outbox-latency produce` (librdkafka as the relay builds it, acks=all, idempotent) sending the "
          "relay's records on the same open-loop schedule: with the relay's `linger.ms`, and with "
          "`linger.ms = 0`, each record sent the moment it is due, as the relay sends an event it reads "
          "alone. Its own timer wakes it for each record as the WAL wakes the relay.\n")
        w("| rate/s | " + " | ".join(SYSTEMS[key] for key in STEADY_CPU_STEPS) + " |")
        w("|---|" + "---|" * len(STEADY_CPU_STEPS))
        for row in rows:
            w(row)
        w("")
    return targets


def w1_latency_targets(get, rates: list[int]) -> list[tuple[str, str, bool | None]]:
    """The low-rate latency targets (commit-to-consume at 1,000/s, both
    delivery modes) and "never worse than Debezium tuned" at every W1 rate,
    by medians of p50 and p99."""
    out: list[tuple[str, str, bool | None]] = []
    for key, mode, p50_max, p99_max in (("relay", "at-least-once", 1.5, 5), ("relay_eos", "exactly-once", 5, 15)):
        runs = get(key, 1000)
        if not runs:
            continue
        judged, note = reached_rate(runs, 1000)
        for q, limit in (("p50", p50_max), ("p99", p99_max)):
            text, ok = at_most(lat(runs, f"{q}_us")["median"], limit, "ms")
            out.append((f"W1 at 1k/s, {mode}: {q} ≤ {limit:g} ms", text + note, ok if judged else None))
    worse = []
    compared = []
    for rate in rates:
        relay, tuned = get("relay", rate), get("dbz_tuned", rate)
        if not (relay and tuned):
            continue
        for q in ("p50", "p99"):
            r, d = lat(relay, f"{q}_us")["median"], lat(tuned, f"{q}_us")["median"]
            compared.append(f"{rate:,}/s {q} {r:.2f} vs {d:.2f}")
            if r > d:
                worse.append(f"{rate:,}/s {q} by {r - d:.2f} ms")
    if compared:
        out.append(("W1 never worse than Debezium tuned (p50 and p99 at every rate)",
                    "; ".join(compared) + " ms" + (f"; worse at {', '.join(worse)}" if worse else ""),
                    not worse))
    return out


# W1's kinds of step, in the order its tables list them.
W1_STEPS = ("broker", "broker_now", "broker_writers", "broker_txn", "broker_txn_java", "postgres", "relay", "relay_base", "relay_eos",
            "relay_base_eos", "dbz_default", "dbz_tuned")

# The columns of the W1 CPU table: process groups of run.py's PROCESS_GROUPS.
SHARE_COLUMNS = (
    ("postgres", "PostgreSQL backends (writers) and workers"),
    ("loadgen", "outbox-loadgen"),
    ("walsender", "walsender"),
    ("measured", "the system measured"),
    ("kafka", "Kafka broker"),
    ("consumer", "latency consumer"),
    ("other", "everything else"),
)
# Which group is "the system measured" in each kind of step.
MEASURED_GROUP = {"broker": "producer", "broker_now": "producer", "broker_writers": "producer", "broker_txn": "producer",
                  "broker_txn_java": "producer", "postgres": "pg_recvlogical",
                  "relay": "relay", "relay_base": "relay", "relay_eos": "relay", "relay_base_eos": "relay",
                  "dbz_default": "debezium",
                  "dbz_tuned": "debezium"}


def write_cpu_share(w, steps: dict, rate: int) -> None:
    """Where the machine's CPU went in each system's step at `rate`
    (medians of the repeats): CPUs used, and in brackets the seconds per
    second its processes were runnable but waiting for a CPU."""
    rows = []
    for key, runs in steps.items():
        shares = [r["cpu_share"] for r in runs or [] if r.get("cpu_share")]
        if not shares:
            continue
        cells = []
        for group, _ in SHARE_COLUMNS:
            g = MEASURED_GROUP[key] if group == "measured" else group
            used = mmm([sh["groups"].get(g, {}).get("cpus", 0.0) for sh in shares])
            waiting = mmm([sh["groups"].get(g, {}).get("waiting", 0.0) for sh in shares])
            cells.append(f"{used['median']:.2f} ({waiting['median']:.2f})")
        idle = mmm([sh["idle_cpus"] for sh in shares])
        rows.append(f"| {SYSTEMS[key]} | " + " | ".join(cells) + f" | {idle['median']:.2f} |")
    if not rows:
        return
    w(f"Where the machine's CPU went in the measured part of each step at {rate:,}/s (medians of the repeats; "
      f"from `/proc`: CPUs used and, in brackets, seconds per second that the group's threads were "
      f"runnable but waited for a CPU):\n")
    w("| step | " + " | ".join(label for _, label in SHARE_COLUMNS) + " | idle CPUs |")
    w("|---|" + "---|" * (len(SHARE_COLUMNS) + 1))
    for row in rows:
        w(row)
    w("")
    w("The system measured is the relay, Debezium's Kafka Connect, `pg_recvlogical`, or the broker-alone "
      "producer. Time a walsender or a producer thread spends waiting for a CPU is time its records wait "
      "too (benches/cpu-notes.md, tenth round: the relay's stalls before the hand-over are its walsender "
      "waiting for a CPU).\n")


# ---------------------------------------------------------------- cost curves

CURVE_TITLES = {
    "payload": ("Payload size", "payload"),
    "topics": ("Distinct topics (aggregatetypes)", "topics"),
    "backlog": ("Backlog size", "backlog (events)"),
    "txn": ("Transaction size", "rows per transaction"),
}
CURVE_SYSTEMS = ("relay", "dbz_default")
# Beside them in the topics curve: producers alone, sending the same records.
CURVE_BARE = ("bare_librdkafka", "bare_window", "bare_java")
# Column names of the systems the relay is compared with.
CURVE_SHORT = {"dbz_default": "Debezium", "bare_librdkafka": "bare librdkafka",
               "bare_window": "bare librdkafka, window", "bare_java": "Java producer"}
# A curve is flat for a system when its CPU µs/event and its peak RSS each
# stay within this factor (max / min) over the points.
CURVE_FLAT = 1.5


def curve_x(curve: str, x: int) -> str:
    if curve == "payload":
        for unit, size in (("MB", 1_000_000), ("KB", 1_000)):
            if x >= size:
                return f"{x / size:g} {unit}"
        return f"{x} B"
    return f"{x:,}"


def sig(y: float) -> str:
    """A figure to about three significant digits."""
    a = abs(y)
    return f"{y:,.0f}" if a >= 100 else f"{y:.1f}" if a >= 10 else f"{y:.2f}" if a >= 0.1 else f"{y:.2g}"


def fmt_sig(m: dict | None) -> str:
    """fmt() with about three significant digits."""
    if m is None:
        return "n/a"
    if m["n"] == 1 or m["min"] == m["max"]:
        return sig(m["median"])
    return f"{sig(m['median'])} ({sig(m['min'])}–{sig(m['max'])})"


def curve_shape(curve: str, vals: list[tuple[int, float]], what: str, unit: str) -> tuple[bool, str]:
    """Whether `vals` (x, median) is flat (max / min within CURVE_FLAT) and,
    if not, where it first leaves CURVE_FLAT times the first point's value."""
    v = lambda y: f"{sig(y)}{unit}"  # noqa: E731
    lo, hi = min(y for _, y in vals), max(y for _, y in vals)
    spread = hi / lo if lo > 0 else float("inf")
    x0, y0 = vals[0]
    if spread <= CURVE_FLAT:
        return True, f"{what} flat ({v(lo)} to {v(hi)}, max/min {sig(spread)}×)"
    for x, y in vals[1:]:
        if y > CURVE_FLAT * y0 or y < y0 / CURVE_FLAT:
            xl, yl = vals[-1]
            then = f", {v(yl)} at {curve_x(curve, xl)}" if xl != x else ""
            return False, (f"{what} {'rises' if y > y0 else 'falls'} past {CURVE_FLAT:g}× the {curve_x(curve, x0)} "
                           f"point's at {curve_x(curve, x)} ({v(y0)} → {v(y)}{then}; max/min {sig(spread)}×)")
    return False, (f"{what} varies {v(lo)} to {v(hi)} (max/min {sig(spread)}×) without leaving {CURVE_FLAT:g}× "
                   f"the first point's")


def topics_targets(curves: dict) -> list[tuple[str, str, bool | None]]:
    """Issue 45's many-topics targets, from the topics curve: at 1,000 and
    10,000 topics the relay drains ≥ 3 × Debezium and at least as fast as
    the bare producers (librdkafka handed every record at once, and Kafka's
    Java producer), with the windowed librdkafka producer named beside; the
    relay's CPU per event at 1,000 topics ≤ 2 × its 1-topic figure."""
    pts = {p["x"]: p for p in (curves.get("topics") or {}).get("points", [])}
    out: list[tuple[str, str, bool | None]] = []

    def rate(p: dict, key: str) -> float | None:
        return drain_stats(p[key])["rate"]["median"] if p.get(key) else None

    for k in (1000, 10000):
        p = pts.get(k)
        if p is None or rate(p, "relay") is None:
            continue
        relay = rate(p, "relay")
        for key, factor in (("dbz_default", 3), ("bare_librdkafka", 1), ("bare_java", 1)):
            other = rate(p, key)
            name = f"topics curve at {k:,} topics: relay drain ≥ {f'{factor} × ' if factor > 1 else ''}" \
                   f"{CURVE_SHORT[key]}"
            if other is None:
                out.append((name, f"{CURVE_SHORT[key]} not run", None))
                continue
            text, ok = at_least(relay / other, factor, " ×")
            text += f" ({relay:,.0f} vs {other:,.0f} events/s"
            window = rate(p, "bare_window")
            if key == "bare_librdkafka" and window is not None:
                text += f"; held to the relay's window it drained {window:,.0f}, the relay {relay / window:.2f} × that"
            out.append((name, text + ")", ok))
    one, many = pts.get(1), pts.get(1000)
    if one and many and one.get("relay") and many.get("relay"):
        a, b = (drain_stats(p["relay"])["cpu"]["median"] for p in (one, many))
        text, ok = at_most(b / a, 2, "×")
        out.append(("topics curve: relay CPU/event at 1,000 topics ≤ 2 × at 1 topic",
                    f"{text} ({b:.1f} vs {a:.1f} µs/event)", ok))
    return out


def write_curves(w, curves: dict, s: dict) -> None:
    w("## Cost curves: how the cost grows with the work\n")
    w(f"Each point is a backlog drain of fresh WAL: a new outbox table and publication, one slot per system "
      f"(and repeat) made before the load, then each system drains it alone, as in W3: the relay "
      f"(at-least-once, this build) and, where it ran, Debezium with its defaults. Drain events/s = the events counted after the "
      f"watcher's first poll that saw one, over the time from that poll to the last event on the topic(s); CPU µs/event = the process's CPU from its start to the last event "
      f"(start-up included, so the JVM's start weighs on Debezium's small points) over the events; peak RSS = "
      f"VmHWM. {s.get('curve_repeat', 1)} run(s) per point (median, min–max when more). A ratio column is relay ÷ "
      f"the system it names (Debezium; in the topics curve also each bare producer) for drain events/s, CPU "
      f"µs/event and peak RSS. A system's curve is called flat when its CPU "
      f"µs/event and peak RSS each stay within {CURVE_FLAT:g}× (max/min) over the points; otherwise the sentence "
      f"names the first point that leaves {CURVE_FLAT:g}× the first point's value. WAL MiB (load) = the WAL the "
      f"whole cluster wrote while the point's rows were loaded (other work on a shared cluster included).\n")
    for curve, (title, xname) in CURVE_TITLES.items():
        c = curves.get(curve)
        if not c or not c.get("points"):
            continue
        pts = c["points"]
        w(f"### {title}\n")
        if curve == "payload":
            w(f"Payloads padded to each size (jsonb, as in W3), single-row transactions, each point "
              f"min({c['events']:,} events, {c['bytes'] / 1e6:,.0f} MB / size), at least 100. At every point the "
              f"topics are made with `max.message.bytes` = {c['topic_max_bytes']:,}, the relay's "
              f"`kafka.properties` `message.max.bytes` and Debezium's producer `max.request.size` are "
              f"{c['producer_max_bytes']:,} (defaults refuse a 1 MB record: the relay would dead-letter it). "
              f"PostgreSQL compresses the padding, so the WAL is much smaller than what is published.\n")
        elif curve == "topics":
            most = max(p["x"] for p in pts)
            w(f"{c['events']:,} events of {s['payload']} B in single-row transactions, the aggregatetype cycling "
              f"over K values, each routed to its own topic (made before the start, counted together: one "
              f"ListOffsets request for all of them every max(10, K/20) ms; each drain's topics deleted after it). "
              f"A 10,000-topic point takes a few minutes more per system, mostly waiting for the broker to remove "
              f"the previous drain's 10,000 partitions (it keeps a file open for each until then, and may open "
              f"20,000 here)."
              + ("" if most >= 10_000 else
                 f" This run stopped at {most:,} topics (BENCH_CURVE_TOPICS, or quick mode); the default goes to "
                 f"10,000.")
              + "\n")
            if any(p.get(key) for p in pts for key in CURVE_BARE):
                w("Beside them, at every point, producers alone send the same records to topics of their own "
                  "named alike: key = the aggregate id, value = the payload's jsonb text as the relay sends it, no "
                  "headers (the relay adds its CloudEvents headers, `ce_id`, `ce_source`, `ce_type`, … in binary "
                  "mode; Debezium's outbox router an `id` and a `type` header), record n to topic n mod K, sent as "
                  "fast as the client takes them, starting with no topic's metadata known, exiting once every "
                  "record is acknowledged. *bare librdkafka*: `outbox-latency burst`, the relay's own producer "
                  "settings (idempotent, acks=all, gapless, murmur2_random, linger.ms 5, its queue size; no "
                  "statistics) on the same librdkafka build, handed every record at once. *bare librdkafka, "
                  "window*: the same, but with at most the relay's default window unacknowledged "
                  "(`relay.channel_capacity`, 10,000 records), as the relay reads ahead of the acknowledgements. "
                  "*Java producer*: benches/tools/BareProducer.java, "
                  "Kafka's Java client with its idempotent defaults (acks=all, enable.idempotence) and linger.ms 5, "
                  "the JVM's start in its CPU as for Debezium (compiled before, not counted). No PostgreSQL and no "
                  "slot behind them: what remains of the relay's cost over theirs is reading, decoding and "
                  "confirming the WAL, and the CloudEvents it builds.\n")
        elif curve == "backlog":
            w(f"Single-row transactions of {s['payload']} B payloads, as W3; Debezium up to "
              f"{s.get('curve_debezium_max', 0):,} events. Peak RSS should not grow with the backlog.\n")
        elif curve == "txn":
            w(f"{c['events']:,} events of {s['payload']} B (or as many as one transaction holds, when more) "
              f"committed in transactions of the size given.\n")
        systems = CURVE_SYSTEMS + tuple(k for k in CURVE_BARE if any(k in p for p in pts))
        head = ["relay events/s", "relay CPU µs/event", "relay peak RSS MiB"]
        for key in systems[1:]:
            name = CURVE_SHORT[key]
            head += [f"{name} events/s", f"{name} CPU µs/event", f"{name} peak RSS MiB"]
        head += [f"relay ÷ {CURVE_SHORT[key]} (drain / CPU / RSS)" for key in systems[1:]]
        w(f"| {xname} | events | WAL MiB (load) | " + " | ".join(head) + " |")
        w("|---" * (3 + len(head)) + "|")
        notes: list[str] = []
        series: dict[str, list] = {key: [] for key in systems}
        for p in pts:
            cells = []
            stats = {}
            for key in systems:
                errs = [e for e in p.get("errors", []) if e["system"] == key]
                if p.get(key):
                    st = stats[key] = drain_stats(p[key])
                    series[key].append((p["x"], st))
                    # Drained within ten of the watcher's polls: timed coarsely.
                    coarse = any(r.get("drain_secs", 1e9) < 10 * r.get("poll_s", 0.01) for r in p[key])
                    cells += [fmt(st["rate"]) + (" ⚠" if coarse else ""), fmt_sig(st["cpu"]), fmt(st["rss"], digits=1)]
                    if coarse:
                        notes.append(f"⚠ {SYSTEMS[key]} at {curve_x(curve, p['x'])}: drained within ten polls of "
                                     f"the watcher ({p[key][0].get('poll_s', 0.01) * 1000:g} ms each): its rate is "
                                     f"coarse; a point of more events times it better")
                    mark = ""
                else:
                    mark = "failed" if errs else "not run"
                    cells += [mark, "", ""]
                for e in errs:
                    notes.append(f"{SYSTEMS[key]} at {curve_x(curve, p['x'])}, run {e['run']}: {e['error']}")
            for key in systems[1:]:
                if "relay" in stats and key in stats:
                    r, d = stats["relay"], stats[key]
                    cells.append(" / ".join(f"{sig(r[m]['median'] / d[m]['median'])}×" for m in ("rate", "cpu", "rss")))
                else:
                    cells.append("")
            wal = p.get("wal_bytes")
            w(f"| {curve_x(curve, p['x'])} | {p['rows']:,} | {'' if wal is None else f'{wal / 2**20:,.1f}'} | "
              + " | ".join(cells) + " |")
        w("")
        for n in notes:
            w(f"* {n}")
        if notes:
            w("")
        said = []
        for key in systems:
            ser = series[key]
            if len(ser) < 2:
                continue
            flat_cpu, cpu = curve_shape(curve, [(x, st["cpu"]["median"]) for x, st in ser], "CPU/event", " µs")
            flat_rss, rss = curve_shape(curve, [(x, st["rss"]["median"]) for x, st in ser], "peak RSS", " MiB")
            (x0, a), (x1, b) = ser[0], ser[-1]
            span = f"{curve_x(curve, x0)} to {curve_x(curve, x1)}"
            verdict = "**flat**" if flat_cpu and flat_rss else "**not flat**"
            said.append(f"{SYSTEMS[key]} is {verdict} from {span}: {cpu}; {rss}; drain "
                        f"{a['rate']['median']:,.0f} → {b['rate']['median']:,.0f} events/s.")
        if said:
            w(" ".join(said) + "\n")


def plots(results: dict, py: Path, raw_path: Path) -> list[str]:
    PLOTS.mkdir(exist_ok=True)
    code = BENCHES / "plots.py"
    try:
        subprocess.run([str(py), str(code), str(raw_path), str(PLOTS)], check=True)
    except subprocess.CalledProcessError as e:
        print(f"plotting failed: {e}")
        return []
    return sorted(p.name for p in PLOTS.glob("*.png"))


def writer_bound(runs: list[dict]) -> str:
    """When every run's first unsustained step failed because the writer
    itself fell short of the rate (not the relay's latency or losses), the
    relay's figure is a floor: say so, with what the writer reached."""
    reached = []
    for run in runs:
        failed = [st for st in run.get("steps", []) if not st.get("sustained", True)]
        if not failed:
            return ""
        st = failed[0]
        rate = st.get("rate") or 0
        if not rate or writer_kept(st.get("commit_rate", rate), rate) or st.get("lost"):
            return ""
        reached.append((rate, st["commit_rate"]))
    if not reached:
        return ""
    rate = reached[0][0]
    top = max(r for _, r in reached)
    return (f" or more (the relay's limit here is the writer's: at {rate:,}/s the writer reached at most "
            f"{top:,.0f}/s)")


def write_ratios(w, results: dict) -> None:
    """One table of relay ÷ Debezium, each measured side by side in this
    run: latency at every W1 rate (below 1 the relay is faster), the
    highest W2 rate sustained, and the W3 and W4 drains (above 1 the relay
    is faster), with CPU per event and peak RSS where both were measured."""
    rows = []
    w1 = results.get("w1") or {}
    get = lambda key, rate: w1.get(key, {}).get(str(rate)) or w1.get(key, {}).get(rate)  # noqa: E731
    for rate in sorted({int(r) for k in w1 if k != "errors" for r in w1[k]}):
        relay = get("relay", rate)
        for key in ("dbz_tuned", "dbz_default"):
            dbz = get(key, rate)
            if relay and dbz:
                p50 = lat(relay, "p50_us")["median"] / lat(dbz, "p50_us")["median"]
                p99 = lat(relay, "p99_us")["median"] / lat(dbz, "p99_us")["median"]
                rows.append((f"W1 at {rate:,}/s, latency", SYSTEMS[key], f"p50 {sig(p50)}, p99 {sig(p99)}", "lower is better"))
    w2 = results.get("w2") or {}
    bound = writer_bound(w2.get("relay") or [])
    for key in ("dbz_tuned", "dbz_default"):
        if w2.get("relay") and w2.get(key):
            r = mmm([x["max_sustained"] for x in w2["relay"]])["median"] / mmm([x["max_sustained"] for x in w2[key]])["median"]
            rows.append(("W2 max sustained rate", SYSTEMS[key], f"{sig(r)}{bound}", "higher is better"))
    for name in ("w3", "w4"):
        wl = results.get(name) or {}
        for key in ("dbz_tuned", "dbz_default"):
            if wl.get("relay") and wl.get(key):
                a, b = drain_stats(wl["relay"]), drain_stats(wl[key])
                rows.append((f"{name.upper()} drain", SYSTEMS[key],
                             f"drain {sig(a['rate']['median'] / b['rate']['median'])}, CPU/event "
                             f"{sig(a['cpu']['median'] / b['cpu']['median'])}, peak RSS "
                             f"{sig(a['rss']['median'] / b['rss']['median'])}",
                             "drain higher, CPU and RSS lower is better"))
    if not rows:
        return
    w("## Relay ÷ Debezium, side by side\n")
    w("Every ratio is of medians measured in this run, the two systems one after the other on the same "
      "machine, load and WAL.\n")
    w("| workload | against | outbox-relay ÷ Debezium | reading |")
    w("|---|---|---|---|")
    for row in rows:
        w("| " + " | ".join(row) + " |")
    w("")


def render(results: dict, py: Path, raw_path: Path | None = None) -> None:
    if raw_path is None:
        raw_path = BENCHES / "results" / "latest.json"
        raw_path.parent.mkdir(exist_ok=True)
        raw_path.write_text(json.dumps(results, default=str))
    pngs = plots(results, py, raw_path)
    s = results["settings"]
    m = results["machine"]
    out: list[str] = []
    w = out.append
    mode = "quick" if s["quick"] else "full"
    w("# outbox-relay benchmark results\n")
    w(f"Generated by `{results['command']}` (`benches/run.py`) on "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(results['started']))}: **{mode} run**, "
      f"every figure the median of {s['repeat']} run(s) with (min–max) when there were several. "
      f"Whole run: {results.get('elapsed_s', 0) / 60:.1f} min. Relay commit `{m['relay_commit']}`.\n")
    if s["quick"]:
        w("> A quick run uses small sizes and short steps (see Settings below): it shows the harness "
          "works end to end and the rough shape; the full run (`make bench`) gives the figures to publish.\n")
    la0 = m.get("loadavg_at_start") or [0, 0, 0]
    la1 = results.get("loadavg_at_end") or [0, 0, 0]
    w("## Machine\n")
    w(f"* {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB memory, Linux {m['kernel']}")
    w(f"* load average at start {la0[0]:.1f}, at end {la1[0]:.1f} (1 min). The machine is shared: when it is "
      f"above the CPU count other work competed with the benchmark, so absolute numbers are noisy; the ratios "
      f"between systems measured side by side in this run are the figures to quote.")
    w(f"* PostgreSQL {m['postgres']} (fsync=off, synchronous_commit=on, TCP loopback, TLS off for every client), "
      f"Kafka {m['kafka']}, single broker, 1 partition per topic")
    w(f"* {m['rustc']}; {m['java']}; Debezium {m['debezium']}\n")

    targets: list[tuple[str, str, bool | None]] = []
    w3 = results.get("w3")
    w4 = results.get("w4")
    w1 = results.get("w1")
    w2 = results.get("w2")
    bc = results.get("broker_ceiling")

    # ---------------------------------------------------------------- ceilings + W3
    w("## Ceilings\n")
    decode = mmm([r["events_per_s"] for r in w3["recv"]]) if w3 else None
    broker = mmm([r["records_per_s"] for r in bc]) if bc else None
    w("| ceiling | what | events/s |")
    w("|---|---|---|")
    w(f"| decode | `pg_recvlogical` (pgoutput, the W3 WAL, own slot) to /dev/null | {fmt(decode)} |")
    w(f"| broker | `ProducerPerformance` {s['broker_records']:,} records of {s['payload']} B, acks=all, "
      f"idempotent, linger.ms=5: best 5 s window (whole run incl. JVM warm-up: "
      f"{fmt(mmm([r.get('overall_records_per_s') for r in bc]) if bc else None)}) | {fmt(broker)} |\n")
    w("The decode ceiling is what PostgreSQL's walsender can stream to a client that does nothing; "
      "the broker ceiling what one Java producer gets acknowledged. A ceiling below the relay's rate means "
      "the ceiling tool itself was the limit (CPU shared with other work, JVM warm-up), not the service.\n")

    if w3:
        w(f"## W3: backlog drain ({w3['rows']:,} single-row transactions, {s['payload']}-byte payload, "
          f"{w3.get('aggregates', 100):,} aggregates)\n")
        w("Every system drains the same WAL from its own slot, all created before the load. Drain rate = "
          "events / (last event on the topic − first event on the topic); start-up = process start → first "
          "event on the topic (both from the topic's high watermark, polled every 10 ms).\n")
        w("| system | drain events/s | start-up to first event (s) | CPU µs/event | peak RSS (MiB) |")
        w("|---|---|---|---|---|")
        w(f"| pg_recvlogical (decode ceiling) | {fmt(decode)} | | "
          f"{fmt(mmm([r['cpu_s'] / w3['rows'] * 1e6 for r in w3['recv']]), digits=2)} | |")
        stats = {}
        if w3.get("relay_parked"):
            SYSTEMS["relay_parked"] = f"outbox-relay (a parked aggregate among {w3.get('aggregates', 100):,})"
        for key in ("relay", "relay_parked", "relay_contract", "relay_avro", "relay_eos", "relay_base", "relay_base_eos",
                    "dbz_default", "dbz_tuned"):
            if w3.get(key):
                st = stats[key] = drain_stats(w3[key])
                w(f"| {SYSTEMS[key]} | {fmt(st['rate'])} | {fmt(st['startup'], digits=3)} | "
                  f"{fmt(st['cpu'], digits=2)} | {fmt(st['rss'], digits=1)} |")
        w("")
        quiet = [r["quiet"] for key in stats for r in w3[key] if r.get("quiet")]
        if quiet:
            busy = sum(q["busy_cpus"] >= s["quiet_cpus"] for q in quiet)
            w(f"Each relay drain started once the machine's CPUs had been busy less than {s['quiet_cpus']:g} CPUs "
              f"over 2 s (BENCH_QUIET_CPUS; this run's own idle services included): it waited "
              f"{fmt(mmm([q['waited_s'] for q in quiet]), digits=0)} s"
              + (f"; {busy} of {len(quiet)} drains started on a busier machine after "
                 f"{s['quiet_max_secs']:g} s" if busy else "") + ".\n")
        relay = stats.get("relay")
        if relay and stats.get("relay_base"):
            base = stats["relay_base"]
            w(f"The baseline build ({s.get('relay_baseline')}) drained the same WAL from its own slot beside "
              f"the relay in each repeat (alternating which went first): CPU {base['cpu']['median']:.2f} → {relay['cpu']['median']:.2f} µs/event, "
              f"drain {base['rate']['median']:,.0f} → {relay['rate']['median']:,.0f} events/s (baseline → this build).\n")
        if relay and stats.get("relay_eos"):
            r = stats["relay_eos"]["rate"]["median"] / relay["rate"]["median"]
            w(f"* exactly-once / at-least-once drain: **{r:.2f}** (same build, same WAL, own slots, "
              f"alternating order; default transaction bounds)")
        if stats.get("relay_base") and stats.get("relay_base_eos"):
            r = stats["relay_base_eos"]["rate"]["median"] / stats["relay_base"]["rate"]["median"]
            w(f"* the baseline build's exactly-once / at-least-once drain: **{r:.2f}**")
        contract_targets = []
        # What parking costs: the same build with one aggregate of the
        # backlog parked before the drain (its events, one in `aggregates`,
        # written to the parking table by the writer; every event's
        # aggregate looked up), beside the plain drain.
        if relay and stats.get("relay_parked"):
            par = stats["relay_parked"]
            rate = par["rate"]["median"] / relay["rate"]["median"]
            cpu = par["cpu"]["median"] / relay["cpu"]["median"]
            paired = [c["cpu_us_per_event"] / p["cpu_us_per_event"] for p, c in zip(w3["relay"], w3["relay_parked"])]
            checks = [r["check"] for r in w3["relay_parked"] if r.get("check")]
            parked = ", ".join(f"{c['parked_rows']:,}" for c in checks)
            w(f"* with {w3.get('parked_aggregate', 'one aggregate')} parked / plain: drain **{rate:.2f}**, CPU "
              f"{relay['cpu']['median']:.2f} → {par['cpu']['median']:.2f} µs/event (**×{cpu:.2f}**; per repeat "
              f"{', '.join(f'×{d:.2f}' for d in paired)}, their median ×{statistics.median(paired):.2f}), peak RSS {relay['rss']['median']:.1f} → "
              f"{par['rss']['median']:.1f} MiB (same build, same WAL, own slots, alternating order); events parked "
              f"per drain {parked} of {w3.get('parked_events', 0):,} (EVENT rows in its parking table), every "
              f"other aggregate's events on the topic in all {len(checks)} drains "
              f"({checks[0]['aggregates_expected'] if checks else 0:,} aggregates, "
              f"{checks[0]['topic_expected'] if checks else 0:,} events)")
            contract_targets.append(("a parked aggregate costs ≤ 5 % (W3 drain events/s and relay CPU/event)",
                                     f"drain ×{rate:.2f}, CPU ×{cpu:.2f} (medians of the same run)",
                                     rate >= 0.95 and cpu <= 1.05))
        # What a contract costs: the relay with a JSON Schema (benches/
        # decode.rs's W3_SCHEMA; contract/check_w3_payload times the check
        # alone), or an Avro registry subject (W3_AVRO;
        # contract/encode_w3_payload_avro), on every event, beside the same
        # build without, drained side by side.
        for key, what in (("relay_contract", "a JSON Schema contract"), ("relay_avro", "an Avro registry contract")):
            if not (relay and stats.get(key)):
                continue
            con = stats[key]
            extra = con["cpu"]["median"] - relay["cpu"]["median"]
            paired = [c["cpu_us_per_event"] - p["cpu_us_per_event"] for p, c in zip(w3["relay"], w3[key])]
            r = con["rate"]["median"] / relay["rate"]["median"]
            w(f"* with {what} / without: drain **{r:.2f}**, CPU {relay['cpu']['median']:.2f} → "
              f"{con['cpu']['median']:.2f} µs/event (**{extra:+.2f}**; per repeat "
              f"{', '.join(f'{d:+.2f}' for d in paired)}, their median {statistics.median(paired):+.2f}), peak RSS {relay['rss']['median']:.1f} → "
              f"{con['rss']['median']:.1f} MiB (same build, same WAL, own slots, alternating order)")
            contract_targets.append((f"{what} adds ≤ 2 µs relay CPU/event in W3",
                                     f"{extra:+.2f} µs/event ({con['cpu']['median']:.2f} with it − "
                                     f"{relay['cpu']['median']:.2f} without, medians of the same run)", extra <= 2))
        if relay and decode:
            r = relay["rate"]["median"] / decode["median"]
            w(f"* relay / decode ceiling: **{r:.2f}**")
            targets.append(("W3 drain ≥ 0.9 × decode ceiling", f"{r:.2f} × ({relay['rate']['median']:,.0f} vs {decode['median']:,.0f} events/s)", r >= 0.9))
        if relay and broker:
            w(f"* relay / broker ceiling: **{relay['rate']['median'] / broker['median']:.2f}**")
        best_dbz = None
        for key in ("dbz_default", "dbz_tuned"):
            if key in stats and relay:
                r = relay["rate"]["median"] / stats[key]["rate"]["median"]
                w(f"* relay / {SYSTEMS[key]}: **{r:.2f}**")
                best_dbz = max(best_dbz or 0, stats[key]["rate"]["median"])
        if relay and best_dbz:
            r = relay["rate"]["median"] / best_dbz
            targets.append(("W3 drain ≥ 4 × Debezium (its faster configuration)", f"{r:.2f} ×", r >= 4))
        elif relay:
            targets.append(("W3 drain ≥ 4 × Debezium", "Debezium not run", None))
        if relay:
            c = relay["cpu"]["median"]
            targets.append(("relay CPU ≤ 5 µs/event in W3", f"{c:.2f} µs/event", c <= 5))
            targets.append(("relay CPU ≤ 2.5 µs/event in W3", *at_most(c, 2.5, "µs/event")))
            recv_cpu = mmm([r["cpu_s"] / w3["rows"] * 1e6 for r in w3["recv"]])
            if recv_cpu:
                ratio = c / recv_cpu["median"]
                targets.append(("relay CPU ≤ 0.5 × `pg_recvlogical`'s CPU per event in W3",
                                at_most(ratio, 0.5, "×")[0] + f" ({c:.2f} vs {recv_cpu['median']:.2f} µs/event)",
                                ratio <= 0.5))
            if stats.get("relay_eos"):
                r = stats["relay_eos"]["rate"]["median"] / relay["rate"]["median"]
                targets.append(("exactly-once drain ≥ 0.9 × at-least-once (W3)", *at_least(r, 0.9, " ×")))
            targets.extend(contract_targets)
            st = relay["startup"]["median"]
            if not results.get("startup"):
                targets.append(("start-up to first event < 0.5 s (W3)", f"{st:.3f} s", st < 0.5))
        w("")
        b = write_budget(w, w3, "W3")
        if b and b["walsender"] and b["broker"]:
            floor = b["walsender"]["median"] + b["broker"]["median"]
            cpus = b["cpus"]
            w(f"The walsender and the broker alone took {floor:.1f} µs of CPU per event for the relay's drain: "
              f"on {cpus} CPUs no client could drain faster than about {cpus * 1e6 / floor:,.0f} events/s here "
              f"even if it used no CPU itself; with the relay's own {b['own']['median']:.1f} µs the bound is "
              f"{cpus * 1e6 / (floor + b['own']['median']):,.0f} events/s.\n")

    if w4:
        w(f"## W4: one transaction of {w4['rows']:,} rows\n")
        w("| system | drain events/s | start-up to first event (s) | CPU µs/event | peak RSS (MiB) |")
        w("|---|---|---|---|---|")
        w(f"| pg_recvlogical | {fmt(mmm([r['events_per_s'] for r in w4['recv']]))} | | | |")
        if w4.get("recv_streaming"):
            w(f"| pg_recvlogical, protocol 2 with streaming=on | "
              f"{fmt(mmm([r['events_per_s'] for r in w4['recv_streaming']]))} | | | |")
        for key in ("relay", "dbz_default", "dbz_tuned"):
            if w4.get(key):
                st = drain_stats(w4[key])
                w(f"| {SYSTEMS[key]} | {fmt(st['rate'])} | {fmt(st['startup'], digits=3)} | "
                  f"{fmt(st['cpu'], digits=2)} | {fmt(st['rss'], digits=1)} |")
        w("\nThe first event of a transaction can only leave once its COMMIT is decoded, so start-up here "
          "includes PostgreSQL decoding (and spilling) the whole transaction.\n")
        spilled = [(label, w4.get(key)) for key, label in (("recv", "without streaming"),
                                                           ("recv_streaming", "with streaming=on"))
                   if w4.get(key) and all(r.get("decoding") for r in w4[key])]
        if spilled:
            w("What the walsender did with the transaction (`pg_stat_replication_slots` after each "
              "`pg_recvlogical` drain, medians): "
              + "; ".join(f"{label}: spilled {fmt(mmm([r['decoding']['spill_bytes'] / 2**20 for r in runs]))} MiB "
                          f"in {fmt(mmm([r['decoding']['spill_count'] for r in runs]))} writes, streamed "
                          f"{fmt(mmm([r['decoding']['stream_bytes'] / 2**20 for r in runs]))} MiB"
                          for label, runs in spilled)
              + ". The relay reads with protocol 1: it sends nothing of a transaction before its commit, "
                "and would have to hold a streamed transaction itself until then (docs/design.md, "
                "\"Large transactions\").\n")
        write_budget(w, w4, "W4")

    # ---------------------------------------------------------------- start-up
    su = results.get("startup")
    if su:
        w(f"## Start-up to first event ({su['runs']} starts of each)\n")
        w(f"Each start on its own slot holding the same {su['rows']} single-row transactions (made before the load) "
          "and with topics of its own, as in W3: the event topic created by the watcher before the start, the "
          "dead-letter and checkpoint topics new, created by the broker on the relay's request. Process start → "
          "first event on the topic (its high watermark, polled every 10 ms; in exactly-once mode the first "
          "transaction's commit, after at most `kafka.transaction_max_ms`, 100 ms). The order of the builds and "
          "modes turns round every start.\n")
        w("| relay | start-up (s) |")
        w("|---|---|")
        for key in ("relay", "relay_eos", "relay_base", "relay_base_eos"):
            if su.get(key):
                w(f"| {SYSTEMS[key]} | {fmt(mmm(su[key]), digits=3)} |")
        w("")
        worst = max((statistics.median(su[k]), k) for k in ("relay", "relay_eos") if su.get(k))
        targets.append(("start-up to first event < 0.5 s (both delivery modes)",
                        ", ".join(f"{SYSTEMS[k]} {statistics.median(su[k]):.3f} s" for k in ("relay", "relay_eos")
                                  if su.get(k)), worst[0] < 0.5))

    # ---------------------------------------------------------------- W1
    rss5 = None
    if w1:
        w(f"## W1: latency under open-loop load ({s['w1_secs']:g} s per rate after a {s['w1_warmup']:g} s warm-up, "
          f"{s['w1_connections']} writer connections; each system first gets {s.get('system_warmup', 0):g} s of "
          f"load at the lowest rate that is left out)\n")
        w("Commit-to-consume latency: from the moment the writer's COMMIT returned to the moment a Kafka "
          "consumer on this host received the record (PostgreSQL only: the moment `pg_recvlogical` with "
          "`test_decoding` printed the row). The writer (`outbox-loadgen --open-loop`) schedules each "
          "transaction at a fixed time whatever the previous ones took, and every event is measured, so "
          "stalls are not hidden (no coordinated omission). HDR histograms; milliseconds. The broker alone "
          "is an idempotent acks=all producer at the same open-loop rate (send returned → consumed).")
        if w1.get("broker_writers"):
            # Runs from before the broker-alone records carried headers
            # have no "beside the writers" rows either.
            w(" Its records are of the relay's shape (payload size, key, the binary-mode CloudEvents headers). "
              "Beside the writers: the same while `outbox-loadgen` writes the same load into an outbox no slot "
              "reads, so the broker and the consumer share the machine as they do beside a relay.")
        w("\n")
        w("| rate/s | system | p50 | p99 | p99.9 | max | writer reached events/s | events measured | lost |")
        w("|---|---|---|---|---|---|---|---|---|")
        rates = sorted({int(r) for k in w1 if k != "errors" for r in w1[k]})
        for rate in rates:
            for key in W1_STEPS:
                runs = w1.get(key, {}).get(str(rate)) or w1.get(key, {}).get(rate)
                if not runs:
                    continue
                measured = sum(r["measured"] for r in runs)
                lost = sum(r["lost"] for r in runs)
                reached = mmm([r.get("commit_rate") for r in runs])
                short = reached is not None and not writer_kept(reached["median"], rate)
                w(f"| {rate:,} | {SYSTEMS[key]} | {fmt(lat(runs, 'p50_us'), digits=2)} | {fmt(lat(runs, 'p99_us'), digits=2)} | "
                  f"{fmt(lat(runs, 'p999_us'), digits=2)} | {fmt(lat(runs, 'max_us'), digits=1)} | "
                  f"{fmt(reached)}{' ⚠' if short else ''} | {measured:,} | {lost} |")
        w("")
        w("⚠ = the writer could not keep the schedule (its commits returned late: PostgreSQL and the "
          "writer did not get the CPU for that rate), so the step ran at the lower rate shown; its "
          "latencies are still measured per event from commit-returned.\n")
        get = lambda key, rate: w1.get(key, {}).get(str(rate)) or w1.get(key, {}).get(rate)  # noqa: E731
        slow_pg = [r for r in rates if get("postgres", r) and lat(get("postgres", r), "p50_us")["median"] > 1000]
        if slow_pg:
            w(f"**Doubtful rows:** the PostgreSQL-only path (`pg_recvlogical` with `test_decoding`, which prints "
              f"every column of both tables as text, read by `outbox-latency stdin`) lagged by a near-constant "
              f"amount from the first quarter of the step on at {', '.join(f'{r:,}' for r in slow_pg)} events/s, "
              f"more than the relay that reads the same WAL. Not explained yet: neither the reader nor the "
              f"walsender's share of the CPU is the cause (with `cat` as the reader, and with the walsender at "
              f"a higher priority, it still falls behind while the walsender uses about a quarter of one core; "
              f"benches/cpu-notes.md); do not read those rows as PostgreSQL's latency.\n")
        relay5, broker5, pg5 = get("relay", 5000), get("broker", 5000), get("postgres", 5000)
        if relay5:
            p50, p99 = lat(relay5, "p50_us")["median"], lat(relay5, "p99_us")["median"]
            # A step whose writer fell short was not run at 5k/s: its
            # latencies are real but do not answer the 5k/s question.
            judged, note = reached_rate(relay5, 5000)
            targets.append(("W1 at 5k/s: p50 ≤ 5 ms", f"{p50:.2f} ms{note}", (p50 <= 5) if judged else None))
            targets.append(("W1 at 5k/s: p99 ≤ 10 ms", f"{p99:.2f} ms{note}", (p99 <= 10) if judged else None))
            if broker5:
                b99 = lat(broker5, "p99_us")["median"]
                b50 = lat(broker5, "p50_us")["median"]
                ok = p99 - b99 <= 5 and p50 - b50 <= 5
                targets.append(("W1 at 5k/s within 5 ms of the broker alone",
                                f"p50 {p50 - b50:+.2f} ms, p99 {p99 - b99:+.2f} ms over the broker alone{note}",
                                ok if judged else None))
            w("What the relay adds at 5k/s (medians): ")
            if pg5:
                w(f"* PostgreSQL alone (commit → walsender → client) p50 {lat(pg5, 'p50_us')['median']:.2f} ms, "
                  f"p99 {lat(pg5, 'p99_us')['median']:.2f} ms")
            if broker5:
                w(f"* the broker alone (send → consumer) p50 {lat(broker5, 'p50_us')['median']:.2f} ms, "
                  f"p99 {lat(broker5, 'p99_us')['median']:.2f} ms")
            w(f"* the relay end to end p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            # Split at each record's CreateTime (librdkafka stamps it when
            # the relay hands it over; millisecond resolution).
            loaded5 = get("broker_writers", 5000)
            if loaded5:
                w(f"* the broker alone while the same writers load PostgreSQL (no slot read, no relay) p50 "
                  f"{lat(loaded5, 'p50_us')['median']:.2f} ms, p99 {lat(loaded5, 'p99_us')['median']:.2f} ms")
            split = [(label, runs) for label, runs in (("the relay", relay5), ("the broker alone", broker5),
                                                         ("the broker beside the writers", loaded5))
                     if runs and lat(runs, "p99_us", "commit_to_produce")]
            for label, runs in split:
                a50, a99 = (lat(runs, q, "commit_to_produce")["median"] for q in ("p50_us", "p99_us"))
                b50, b99 = (lat(runs, q, "produce_to_consume")["median"] for q in ("p50_us", "p99_us"))
                w(f"  * {label}, split at the record's `CreateTime`: commit-returned (send) → handed to the "
                  f"producer p50 {a50:.2f} ms, p99 {a99:.2f} ms; handed to the producer → consumed p50 "
                  f"{b50:.2f} ms, p99 {b99:.2f} ms")
            if split:
                w("  (`CreateTime` is librdkafka's stamp when the record is handed to it, in whole milliseconds, "
                  "taken as the middle of its millisecond; the two parts' percentiles do not add up to the "
                  "whole's)")
            w("")
            rss5 = mmm([r["max_rss_mb"] for r in relay5])
            cpu5 = mmm([r["cpu_s"] / max(r["measured"], 1) * 1e6 for r in relay5])
            w(f"Relay at a steady 5k/s: peak RSS {fmt(rss5, digits=1)} MiB, CPU {fmt(cpu5, digits=2)} µs/event.\n")
            text, ok = at_most(cpu5["median"], 8, "µs/event")
            targets.append(("relay CPU ≤ 8 µs/event at a steady 5k/s (W1)", text + note, ok if judged else None))
        eos1 = get("relay_eos", 1000)
        txn1 = [(key, get(key, 1000)) for key in ("broker_txn", "broker_txn_java") if get(key, 1000)]
        if eos1 and txn1:
            w("Exactly-once at 1k/s beside the transactional producers alone (medians): the relay "
              f"p50 {lat(eos1, 'p50_us')['median']:.2f} ms, p99 {lat(eos1, 'p99_us')['median']:.2f} ms; "
              + "; ".join(f"{SYSTEMS[key]} p50 {lat(runs, 'p50_us')['median']:.2f} ms, "
                          f"p99 {lat(runs, 'p99_us')['median']:.2f} ms" for key, runs in txn1)
              + ". They send what is due as one transaction, commit, and begin the next, the relay's cadence "
                "at a trickle; the librdkafka one also sends a record to a second topic before each commit, "
                "as the relay sends its checkpoint. Each record is measured from its due time.")
            said = [r.get("producer_said") for _, runs in txn1 for r in runs if r.get("producer_said")]
            for line in said:
                w(f"* `{line}`")
            w("")
        for e in w1.get("errors", []):
            name = SYSTEMS.get(e["system"], "`kafka-producer-perf-test`, transactional")
            w(f"* {name} at {e['rate']:,}/s, run {e['run']}: failed twice, left out ({e['error']})")
        if w1.get("errors"):
            w("")
        perf1 = get("perf_txn", 1000)
        if perf1:
            w("`kafka-producer-perf-test` with a transactional id at 1k/s, a transaction per record "
              "(`--transaction-duration-ms 1`): "
              + "; ".join(f"{r['records_per_s']:,.0f} records/s kept, send → acknowledged p50 {r['p50_ms']:g} ms, "
                          f"p99 {r['p99_ms']:g} ms" for r in perf1)
              + ". Its latency ends at the acknowledgement of the record, before the commit that makes it "
                "visible to read_committed consumers.\n")
        write_cpu_share(w, {key: get(key, 5000) for key in W1_STEPS}, 5000)
        targets.extend(steady_cpu(w, get, rates))
        targets.extend(w1_latency_targets(get, rates))
        linger = s.get("relay_linger_ms") or ""
        relay_linger = f"linger_ms = {linger} (BENCH_RELAY_LINGER_MS)" if linger else "its defaults (linger_ms = 5)"
        w(f"The relay runs with {relay_linger}; the broker-alone producer uses the same "
          f"linger.ms = {linger or 5}, acks=all and idempotence. Debezium tuned = `poll.interval.ms=1`, producer "
          "`linger.ms=0`.\n")

    # ---------------------------------------------------------------- W2
    if w2:
        w("## W2: maximum sustainable rate\n")
        w(f"The open-loop rate is stepped up ({', '.join(f'{r:,}' for r in s['w2_rates'])} events/s, "
          f"{s['w2_secs']:g} s each) until a step is not sustained: sustained = the writer reached ≥ 95 % of the "
          "rate, no event was lost, and the p99 commit-to-consume latency in the step's last quarter stayed "
          "under 1 s (a growing backlog shows there first). Slot lag (`pg_current_wal_lsn() − "
          "confirmed_flush_lsn` from `pg_replication_slots`, sampled every 0.5 s) is listed beside it; Debezium "
          "confirms its slot only when Connect flushes offsets (every 60 s by default), so its slot lag says "
          "little.\n")
        w("| system | max sustained events/s | steps (rate: last-quarter p99 ms, max slot lag MiB, writer events/s) |")
        w("|---|---|---|")
        for key, runs in w2.items():
            best = mmm([r["max_sustained"] for r in runs])
            steps = runs[0]["steps"]
            desc = []
            for st in steps:
                q = [x for x in st["quarters_p99_us"] if x is not None]
                lag = max((v for _, v in st.get("slot_lag") or []), default=0)
                desc.append(f"{st['rate']:,}: {q[-1] / 1000 if q else float('nan'):.1f}, {lag / 2**20:.1f}, "
                            f"{st.get('commit_rate', 0):,.0f}{'' if st['sustained'] else ' ✗'}")
            note = " (every step sustained: the limit is above the last step)" if runs[0].get("limit_reached") else ""
            w(f"| {SYSTEMS[key]} | {fmt(best)}{note} | {'; '.join(desc)} |")
        w("")

    # ---------------------------------------------------------------- cost curves
    if results.get("curves"):
        write_curves(w, results["curves"], s)
        targets.extend(topics_targets(results["curves"]))

    # ---------------------------------------------------------------- cost
    if w3 and w3.get("relay"):
        w("## Cost of the relay\n")
        st = drain_stats(w3["relay"])
        w(f"* CPU: {fmt(st['cpu'], digits=2)} µs per event in W3 (user + system time of the relay process from "
          f"/proc/<pid>/stat, start-up included), i.e. {st['cpu']['median']:.2f} CPU-seconds per million events")
        w(f"* peak RSS: {fmt(st['rss'], digits=1)} MiB in W3" + (f", {fmt(rss5, digits=1)} MiB at a steady 5k/s" if rss5 else ""))
        w(f"* start-up to first event: {fmt(st['startup'], digits=3)} s\n")
        rss_vals = [st["rss"]["max"]] + ([rss5["max"]] if rss5 else [])
        if w4 and w4.get("relay"):
            rss_vals.append(drain_stats(w4["relay"])["rss"]["max"])
        targets.append(("peak RSS ≤ 64 MB (W1, W3, W4)", f"{max(rss_vals):.1f} MiB at most", max(rss_vals) <= 64 * 1e6 / 2**20))

    write_ratios(w, results)

    # ---------------------------------------------------------------- targets
    w("## Targets\n")
    w("| target | measured | verdict |")
    w("|---|---|---|")
    for name, measured, ok in targets:
        w(f"| {name} | {measured} | {verdict(ok)} |")
    w("")

    # ---------------------------------------------------------------- flame graph
    fg = (w3 or {}).get("flamegraph")
    if fg:
        top = fg["top"]
        w("## Where the CPU goes (W3 drain under perf)\n")
        w(f"[`{Path(fg['svg']).name}`]({Path(fg['svg']).name}): `perf record -F 499 --call-graph dwarf` on the relay "
          f"draining the W3 backlog from one more slot ({top['samples']:,} samples; hover a frame for its share). "
          f"perf runs on a software clock here (no hardware counters in this VM).\n")
        w("By thread: " + ", ".join(f"{t['function']} {t['share'] * 100:.0f} %" for t in top["threads"][:6]) + ".\n")
        w("| self time | share | | including callees | share |")
        w("|---|---|---|---|---|")
        for a, b in zip(top["self"][:12], top["total"][:12]):
            w(f"| `{a['function'][:70]}` | {a['share'] * 100:.1f} % | | `{b['function'][:70]}` | {b['share'] * 100:.1f} % |")
        w("")
        notes = BENCHES / "cpu-notes.md"
        if notes.exists():
            w(notes.read_text().strip() + "\n")

    if pngs:
        w("## Plots\n")
        for p in pngs:
            w(f"![{p}](plots/{p})\n")

    # ---------------------------------------------------------------- reproduce
    w("## Reproduce\n")
    w("```sh")
    w("make bench          # decoder microbenchmark, then benches/run.py: the full run (3 repeats, 1M rows, 60 s per rate)")
    w("make bench-quick    # benches/run.py --quick: small sizes, one repeat")
    w("BENCH_REPEAT=5 BENCH_W1_SECS=120 BENCH_W3_ROWS=2000000 benches/run.py   # sizes by environment")
    w("benches/run.py --only w1,w3 --no-debezium                               # a subset")
    w("BENCH_ONLY=curves benches/run.py                                         # the cost curves alone")
    w("BENCH_ONLY=curves BENCH_CURVES=topics BENCH_CURVE_TOPICS=1,1000 BENCH_BARE=0 benches/run.py  # no bare producers")
    w("```\n")
    w("It starts its own PostgreSQL and Kafka (`scripts/services up`, stop them with `scripts/services down`), "
      "builds the release binaries, fetches Kafka Connect and Debezium into `benches/debezium/target/libs` with "
      "Maven, and creates `benches/.venv` for matplotlib. Raw results: `benches/results/` (git-ignored).\n")
    w("### Settings of this run\n")
    w("```json")
    w(json.dumps(s, indent=1))
    w("```")
    (BENCHES / "RESULTS.md").write_text("\n".join(out) + "\n")
    print(f"wrote {BENCHES / 'RESULTS.md'}")
