"""Plots for benches/RESULTS.md; run by report.py in benches/.venv (matplotlib).

    plots.py RAW_JSON OUT_DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {
    "relay": "outbox-relay",
    "relay_eos": "outbox-relay (exactly-once)",
    "relay_base": "outbox-relay (baseline build)",
    "relay_base_eos": "outbox-relay (baseline build, exactly-once)",
    "dbz_default": "Debezium (defaults)",
    "dbz_tuned": "Debezium (tuned)",
    "bare_librdkafka": "bare librdkafka producer",
    "bare_window": "bare librdkafka producer, the relay's window",
    "bare_java": "bare Java producer",
    "broker": "broker alone",
    "broker_writers": "broker alone beside the writers",
    "broker_txn": "transactional producer alone (librdkafka)",
    "broker_txn_java": "transactional producer alone (Java)",
    "postgres": "PostgreSQL only",
}
COLOURS = {"relay": "tab:red", "relay_eos": "tab:orange", "relay_base": "tab:purple",
           "relay_base_eos": "tab:pink", "dbz_default": "tab:blue", "dbz_tuned": "tab:cyan",
           "broker": "tab:green", "broker_writers": "tab:olive", "postgres": "tab:gray", "recv": "black",
           "bare_librdkafka": "tab:brown", "bare_window": "tab:pink", "bare_java": "tab:green", "broker_txn": "goldenrod",
           "broker_txn_java": "darkkhaki"}
# The systems of a cost curve: the relay, Debezium and (topics curve) the
# bare producers, dashed: they read no WAL.
CURVE_KEYS = ("relay", "dbz_default", "bare_librdkafka", "bare_window", "bare_java")


def latency_plot(w1: dict, out: Path) -> None:
    quantiles = [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9"), ("max_us", "max")]
    # "errors": the baseline steps that failed, a list, not runs by rate.
    steps = {k: v for k, v in w1.items() if k != "errors"}
    rates = sorted({int(r) for k in steps for r in steps[k]})
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4.5), sharey=True, squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for key, runs_by_rate in steps.items():
            runs = runs_by_rate.get(str(rate)) or runs_by_rate.get(rate)
            # perf_txn: kafka-producer-perf-test's own figures, no latency
            # of the kind plotted here.
            if not runs or key not in NAMES:
                continue
            ys = []
            for q, _ in quantiles:
                vals = [(r.get("commit_to_consume") or {}).get(q) for r in runs]
                vals = [v / 1000 for v in vals if v is not None]
                ys.append(statistics.median(vals) if vals else float("nan"))
            ax.plot([label for _, label in quantiles], ys, marker="o", label=NAMES[key], color=COLOURS[key])
        ax.set_yscale("log")
        ax.set_title(f"{rate:,} events/s")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("commit-to-consume latency (ms, log)")
    # One legend for all panels: a system measured at some rates only (exactly-once at the
    # lowest) has its line in another panel than the last.
    seen = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    axes[0][-1].legend(list(seen.values()), list(seen.keys()), fontsize=8)
    fig.suptitle("W1: latency percentiles per rate (open-loop load, median of runs)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def drain_plot(w: dict, title: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for key in ("relay", "dbz_default", "dbz_tuned"):
        runs = w.get(key) or []
        if not runs:
            continue
        curve = runs[0]["curve"]
        # events/s over 0.25 s windows of the first run
        pts, i, step = [], 0, 0.25
        t_end = curve[-1][0]
        t = 0.0
        while t < t_end:
            def count_at(x):
                c = 0
                for tt, cc in curve:
                    if tt > x:
                        break
                    c = cc
                return c
            pts.append((t + step / 2, (count_at(t + step) - count_at(t)) / step))
            t += step
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=NAMES[key], color=COLOURS[key])
    rec = w.get("recv") or []
    if rec:
        ax.axhline(statistics.median(r["events_per_s"] for r in rec), color="black", linestyle="--",
                   label="pg_recvlogical (decode ceiling, mean)")
    ax.set_xlabel("seconds since the first event on the topic")
    ax.set_ylabel("events/s (0.25 s windows)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


CURVE_AXES = {"payload": "payload bytes", "topics": "distinct topics (aggregatetypes)",
              "backlog": "backlog events", "txn": "rows per transaction"}


def curve_plot(curve: str, c: dict, out: Path) -> None:
    """A cost curve: drain events/s, CPU µs/event and peak RSS per point
    (medians of the runs), each system a line (the bare producers dashed);
    log axes."""
    metrics = [("drain_events_per_s", "drain events/s"), ("cpu_us_per_event", "CPU µs/event"),
               ("peak_rss_mb", "peak RSS (MiB)")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(15, 4.2), squeeze=False)
    for ax, (metric, label) in zip(axes[0], metrics):
        for key in CURVE_KEYS:
            pts = [(p["x"], statistics.median(r[metric] for r in p[key])) for p in c["points"] if p.get(key)]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=NAMES[key], color=COLOURS[key],
                        linestyle="--" if key.startswith("bare_") else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(CURVE_AXES[curve])
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Cost curve: {CURVE_AXES[curve]} (backlog drains, median of runs)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    raw = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()
    if raw.get("w1"):
        latency_plot(raw["w1"], out / "w1-latency.png")
    if raw.get("w3"):
        drain_plot(raw["w3"], f"W3: backlog drain rate over time ({raw['w3']['rows']:,} rows, first run)", out / "w3-drain.png")
    if raw.get("w4"):
        drain_plot(raw["w4"], f"W4: one {raw['w4']['rows']:,}-row transaction, drain rate over time", out / "w4-drain.png")
    for curve, c in (raw.get("curves") or {}).items():
        if any(p.get(key) for key in CURVE_KEYS for p in c.get("points", [])):
            curve_plot(curve, c, out / f"curve-{curve}.png")


if __name__ == "__main__":
    main()
