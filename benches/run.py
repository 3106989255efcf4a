#!/usr/bin/env python3
"""outbox-relay benchmark: the relay beside its ceilings and Debezium, in one run.

    benches/run.py            full run (make bench)
    benches/run.py --quick    small sizes, one repeat (make bench-quick)

What runs, one system at a time, on this worktree's own PostgreSQL and Kafka
(`scripts/services up`, under .services/):

* ceilings: pg_recvlogical to /dev/null (decode ceiling) and Kafka's
  ProducerPerformance, acks=all, idempotent (broker ceiling);
* W1 latency: open-loop load at fixed rates (outbox-loadgen --open-loop),
  commit-returned -> consumed on this host, HDR histograms (outbox-latency),
  for the relay, Debezium, the broker alone (a librdkafka producer with the
  relay's linger, and with none) and the PostgreSQL-only path, with CPU per
  event at each steady rate;
* W2 max sustainable rate: the open-loop rate stepped up until the lag grows;
* W3 backlog drain and W4 one big transaction: every system drains the same
  WAL from its own slot, all created before the load;
* exactly-once delivery (kafka.delivery = "exactly-once") beside the default
  at-least-once: in W3, draining the same WAL from its own slot, and in W1
  at 1000 events/s (or the first BENCH_W1_RATES rate), where transactional
  producers alone run at the same rate too: librdkafka (outbox-latency
  produce --transactional-id, the relay's transaction shape), Kafka's Java
  producer (benches/tools/TxnProducer.java) and kafka-producer-perf-test
  with a transactional id;
* an event contract: in W3, this build with a `[[contracts]]` entry whose
  JSON Schema (benches/decode.rs's W3_SCHEMA) covers every W3 payload, and
  with one whose registry subject (Apicurio, started for it) holds the
  Avro schema of the same shape (W3_AVRO), each draining the same WAL from
  its own slot beside the plain relay (BENCH_CONTRACT=0 leaves both out,
  BENCH_CONTRACT_AVRO=0 the Avro one);
* parking: in W3, this build with one of the backlog's aggregates
  (BENCH_W3_AGGREGATES, 1,000) parked before the drain starts (a live
  HEAD row in the drain's own parking table), so that its events (one in
  1,000) go to the parking table through the relay's writer while the
  others are sent; on its own slot beside the plain relay, and checked
  after each drain: the parked events all in the table, every other
  aggregate's on the topic (BENCH_PARKED=0 leaves it out);
* cost curves (BENCH_ONLY=curves): how the cost of the relay and of Debezium
  (defaults) grows with the work, each point a backlog drain of fresh WAL
  from slots made before the load (drain events/s, CPU µs/event, peak RSS):
  payload size 100 B -> 1 MB (BENCH_CURVE_PAYLOADS; each point at most
  BENCH_CURVE_EVENTS events and BENCH_CURVE_BYTES bytes, at least 100
  events), distinct topics (aggregatetypes) 1 -> 10,000 (BENCH_CURVE_TOPICS;
  1 -> 100 in quick mode), backlog 10k -> 1M events (BENCH_CURVE_BACKLOGS;
  Debezium up to BENCH_CURVE_DEBEZIUM_MAX events) and transaction size
  1 -> 1M rows with BENCH_CURVE_TXN_EVENTS events in all (more for a larger
  transaction; BENCH_CURVE_TXN_ROWS); BENCH_CURVES picks curves,
  BENCH_CURVE_REPEAT repeats each point (1); at every point of the topics
  curve, beside them, two bare producers send the same records (key the
  aggregate id, value the payload's jsonb text, no headers) round robin
  over the same topics, each starting cold and exiting once all are
  acknowledged, measured through the same watcher (BENCH_BARE=0 leaves them
  out): librdkafka with the relay's producer settings (`outbox-latency
  burst`, the same librdkafka build) and Kafka's Java producer with its
  idempotent defaults and linger.ms 5 (benches/tools/BareProducer.java, on
  scripts/services' Kafka jars, compiled once per run); every curve's
  topics are written twice before a drain is timed (`outbox-latency watch
  --warm`: the broker's first index entry of a new partition costs it some
  5 ms, once; BENCH_CURVE_WARM=0 times cold topics);
* start-up: BENCH_STARTUP_RUNS starts of the relay in each delivery mode
  (and of the baseline build, when given), each on its own slot and fresh
  topics with a small backlog waiting, to the first event on the topic;
* cost: relay CPU per event, peak RSS, start-up to first event; and, in
  W3 and W4, where the machine's CPU went per event (each system, the
  walsender decoding for it, the Kafka broker, the rest of the machine),
  and in every W1 step the CPUs each group of processes used and the time
  its threads waited for a CPU (writers, walsender, system, broker, consumer);
* a flame graph of the relay during a W3 drain (perf, DWARF unwinding).

Every figure is the median of BENCH_REPEAT runs (min and max beside it).
Results: benches/RESULTS.md, benches/plots/*.png, benches/flamegraph-w3.svg;
raw JSON in benches/results/ (git-ignored). Sizes and rates are overridable
by environment variables (see `Settings`); BENCH_RELAY_LINGER_MS sets the
relay's kafka.linger_ms and the W1 broker-alone producer's linger.ms (both 5,
the relay's default, otherwise); BENCH_RELAY_BASELINE=<another outbox-relay
binary> runs that build beside this one in W1, W3, W4 and start-up; BENCH_RELAY_BIN=<another
outbox-relay binary, or a script that execs one> runs it in place of this build's everywhere (the
curves' before/after: one run per binary); BENCH_QUIET_CPUS=<CPUs> makes
each relay drain of W3 wait until the machine's CPUs were busy less than that over 2 s (for a
shared machine; at most BENCH_QUIET_MAX_SECS, 300). No figure is asserted: this is a measurement,
not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field, asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHES = ROOT / "benches"
RESULTS_DIR = BENCHES / "results"
PLOTS_DIR = BENCHES / "plots"
DEBEZIUM_DIR = BENCHES / "debezium"
DEBEZIUM_LIBS = DEBEZIUM_DIR / "target" / "libs"
KAFKA_LIBS = ROOT / "services" / "kafka" / "target" / "libs"
VENV = BENCHES / ".venv"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_list(name: str, default: list[int]) -> list[int]:
    v = os.environ.get(name)
    return [int(x) for x in v.split(",")] if v else default


@dataclass
class Settings:
    quick: bool
    repeat: int
    payload: int
    w1_rates: list[int]
    w1_secs: float
    w1_warmup: float
    w1_connections: int
    system_warmup: float
    w2_rates: list[int]
    w2_secs: float
    w3_rows: int
    w4_rows: int
    broker_records: int
    debezium: bool
    flamegraph: bool
    workloads: list[str]
    relay_baseline: str
    # kafka.linger_ms for the relay ("" = the relay's default).
    relay_linger_ms: str
    # Starts of each relay build and mode in the start-up workload.
    startup_runs: int
    # W3 also drains with a JSON Schema contract on every event, and with
    # an Avro registry contract.
    contract: bool
    contract_avro: bool
    # The W3 backlog's aggregates ('agg-0' .. 'agg-<n-1>', round robin),
    # and whether W3 also drains with one of them parked.
    w3_aggregates: int
    parked: bool
    # Before each relay drain of W3, wait (at most quiet_max_secs) until
    # the machine's CPUs were busy less than this many CPUs over 2 s
    # (0 = do not wait).
    quiet_cpus: float
    quiet_max_secs: float
    # Cost curves: which, the points of each, and their sizes.
    curves: list[str]
    curve_events: int
    curve_bytes: int
    curve_payloads: list[int]
    curve_topics: list[int]
    curve_backlogs: list[int]
    curve_txn_rows: list[int]
    curve_txn_events: int
    curve_repeat: int
    # The curves' topics written twice before each drain (watch --warm).
    curve_warm: bool
    # Debezium drains curve points of at most this many events.
    curve_debezium_max: int
    # The bare producers beside the relay in the topics curve.
    bare: bool

    @staticmethod
    def from_env(quick: bool, only: str | None, no_debezium: bool) -> "Settings":
        return Settings(
            quick=quick,
            repeat=env_int("BENCH_REPEAT", 1 if quick else 3),
            payload=env_int("BENCH_PAYLOAD_BYTES", 500),
            w1_rates=env_list("BENCH_W1_RATES", [1000, 5000, 10000]),
            w1_secs=env_float("BENCH_W1_SECS", 8 if quick else 60),
            w1_warmup=env_float("BENCH_W1_WARMUP_SECS", 2 if quick else 10),
            w1_connections=env_int("BENCH_W1_CONNECTIONS", 8),
            system_warmup=env_float("BENCH_SYSTEM_WARMUP_SECS", 10 if quick else 30),
            w2_rates=env_list(
                "BENCH_W2_RATES",
                [2000, 5000, 10000, 15000] if quick else [2000, 4000, 6000, 8000, 10000, 12000, 15000, 20000],
            ),
            w2_secs=env_float("BENCH_W2_STEP_SECS", 6 if quick else 30),
            w3_rows=env_int("BENCH_W3_ROWS", 50_000 if quick else 1_000_000),
            w4_rows=env_int("BENCH_W4_ROWS", 50_000 if quick else 1_000_000),
            broker_records=env_int("BENCH_BROKER_RECORDS", 100_000 if quick else 1_000_000),
            debezium=not no_debezium and os.environ.get("BENCH_DEBEZIUM", "1") != "0",
            flamegraph=os.environ.get("BENCH_FLAMEGRAPH", "1") != "0",
            workloads=(only or os.environ.get("BENCH_ONLY") or "ceilings,w1,w2,w3,w4,curves,startup").split(","),
            relay_baseline=os.environ.get("BENCH_RELAY_BASELINE", ""),
            relay_linger_ms=os.environ.get("BENCH_RELAY_LINGER_MS", ""),
            startup_runs=env_int("BENCH_STARTUP_RUNS", 5 if quick else 9),
            contract=os.environ.get("BENCH_CONTRACT", "1") != "0",
            contract_avro=os.environ.get("BENCH_CONTRACT", "1") != "0"
            and os.environ.get("BENCH_CONTRACT_AVRO", "1") != "0",
            w3_aggregates=env_int("BENCH_W3_AGGREGATES", 1_000),
            parked=os.environ.get("BENCH_PARKED", "1") != "0",
            quiet_cpus=env_float("BENCH_QUIET_CPUS", 0),
            quiet_max_secs=env_float("BENCH_QUIET_MAX_SECS", 300),
            curves=os.environ.get("BENCH_CURVES", ",".join(CURVES)).split(","),
            curve_events=env_int("BENCH_CURVE_EVENTS", 5_000 if quick else 20_000),
            curve_bytes=env_int("BENCH_CURVE_BYTES", 50_000_000 if quick else 200_000_000),
            curve_payloads=env_list("BENCH_CURVE_PAYLOADS", [100, 1_000, 10_000, 100_000, 1_000_000]),
            curve_topics=env_list("BENCH_CURVE_TOPICS", [1, 10, 100] if quick else [1, 10, 100, 1_000, 10_000]),
            curve_backlogs=env_list("BENCH_CURVE_BACKLOGS",
                                    [10_000, 50_000] if quick else [10_000, 100_000, 1_000_000]),
            curve_txn_rows=env_list("BENCH_CURVE_TXN_ROWS",
                                    [1, 100, 10_000, 20_000] if quick else [1, 100, 10_000, 1_000_000]),
            curve_txn_events=env_int("BENCH_CURVE_TXN_EVENTS", 20_000 if quick else 200_000),
            curve_repeat=env_int("BENCH_CURVE_REPEAT", 1),
            curve_warm=os.environ.get("BENCH_CURVE_WARM", "1") != "0",
            curve_debezium_max=env_int("BENCH_CURVE_DEBEZIUM_MAX", 1_000_000),
            bare=os.environ.get("BENCH_BARE", "1") != "0",
        )


# ------------------------------------------------------------------ helpers


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("check", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, **kw)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def median_min_max(values: list[float]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def wait_file(path: Path, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what or proc.args[0]} exited ({proc.returncode}) before {path.name} appeared")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout} s ({what})")
        time.sleep(0.02)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stops one process we started, by its pid; SIGKILL if it does not go."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class ProcSampler:
    """Samples a process's CPU time and memory from /proc while it runs."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, float, int]] = []  # (unix s, cpu s, rss bytes)
        self.hwm = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def read(self) -> tuple[float, int, int] | None:
        cpu = proc_cpu_s(self.pid)
        if cpu is None:
            return None
        try:
            rss = hwm = 0
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
                    elif line.startswith("VmHWM:"):
                        hwm = int(line.split()[1]) * 1024
            return cpu, rss, hwm
        except (OSError, IndexError, ValueError):
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            r = self.read()
            if r is None:
                return
            cpu, rss, hwm = r
            self.samples.append((time.time(), cpu, rss))
            self.hwm = max(self.hwm, hwm)
            self._stop.wait(self.interval)

    def finish(self) -> None:
        r = self.read()
        if r is not None:
            self.samples.append((time.time(), r[0], r[1]))
            self.hwm = max(self.hwm, r[2])
        self._stop.set()
        self._t.join(2)

    def cpu(self) -> float:
        return self.samples[-1][1] if self.samples else 0.0

    def cpu_between(self, t0: float, t1: float) -> float:
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        return inside[-1][1] - inside[0][1] if len(inside) >= 2 else 0.0

    def max_rss_between(self, t0: float, t1: float) -> int:
        return max((s[2] for s in self.samples if t0 <= s[0] <= t1), default=0)


def proc_cpu_s(pid: int) -> float | None:
    """CPU-seconds (user + system, all threads) a process has used, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu_s() -> tuple[float, float]:
    """CPU-seconds all CPUs have spent since boot (/proc/stat): on anything
    but idling, and idling (waiting for I/O included)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal.
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / CLK_TCK, idle / CLK_TCK


def wait_quiet(s: "Settings") -> dict | None:
    """With BENCH_QUIET_CPUS: waits until the machine's CPUs were busy less
    than that many CPUs over 2 s (this run's own services idling included),
    at most BENCH_QUIET_MAX_SECS. On a shared machine other work that lands
    on one drain of a side-by-side pair and not the other moves its CPU per
    event by more than the difference measured; this keeps it from
    starting a drain in the middle of someone's build. Returns how long it
    waited and the busy CPUs it last saw."""
    if s.quiet_cpus <= 0:
        return None
    t0 = time.monotonic()
    while True:
        b0 = machine_busy_s()
        time.sleep(2)
        busy = (machine_busy_s() - b0) / 2
        waited = time.monotonic() - t0
        if busy < s.quiet_cpus or waited >= s.quiet_max_secs:
            if busy >= s.quiet_cpus:
                log(f"machine still busy ({busy:.2f} CPUs) after {waited:.0f} s: draining anyway")
            return {"waited_s": waited, "busy_cpus": busy}


def machine_busy_s() -> float:
    """CPU-seconds all CPUs have spent on anything but idling since boot."""
    return machine_cpu_s()[0]


class CpuBudget:
    """Where the machine's CPU went while one system drained: the walsender
    serving its slot, the Kafka broker, and every CPU of the machine.

    On two cores the relay shares the CPU with the walsender that decodes for
    it and the broker that stores what it sends, so what those two cost per
    event bounds how fast any client could drain here. A bare producer reads
    no slot (`slot` None): no walsender then."""

    def __init__(self, env: "Env", slot: str | None):
        self.env = env
        self.slot = slot
        pid_file = ROOT / ".services" / "kafka.pid"
        self.broker_pid = int(pid_file.read_text()) if pid_file.exists() else None
        self.broker0 = proc_cpu_s(self.broker_pid) if self.broker_pid else None
        self.machine0 = machine_busy_s()
        self.t0 = time.time()
        self.walsender: ProcSampler | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._find_walsender, daemon=True)
        if slot is not None:
            self._t.start()

    def _find_walsender(self) -> None:
        # The walsender starts when the system connects: its whole life is
        # this drain, so its total CPU is the drain's.
        while not self._stop.is_set():
            try:
                pid = self.env.sql(
                    f"SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{self.slot}'")
            except subprocess.CalledProcessError:
                pid = ""
            if pid:
                self.walsender = ProcSampler(int(pid))
                return
            self._stop.wait(0.02)

    def finish(self) -> dict:
        """Call when the drain is complete, before the system stops."""
        machine = machine_busy_s() - self.machine0
        secs = time.time() - self.t0
        broker1 = proc_cpu_s(self.broker_pid) if self.broker_pid else None
        self._stop.set()
        if self._t.is_alive():
            self._t.join(5)
        walsender = None
        if self.walsender is not None:
            self.walsender.finish()
            walsender = self.walsender.cpu()
        return {
            "walsender_cpu_s": walsender,
            "broker_cpu_s": broker1 - self.broker0 if broker1 is not None and self.broker0 is not None else None,
            "machine_busy_s": machine,
            "secs": secs,
            "cpus": os.cpu_count() or 1,
        }


# Relay builds given by path (BENCH_RELAY_BIN, BENCH_RELAY_BASELINE), whose
# file names need not say outbox-relay: their processes are the relay's too.
RELAY_BINARIES = {path for path in (os.environ.get("BENCH_RELAY_BIN"), os.environ.get("BENCH_RELAY_BASELINE"))
                  if path}

# Who is who on the machine during a W1 step, by command line.
PROCESS_GROUPS = (
    ("walsender", lambda c: c.startswith("postgres:") and "walsender" in c),
    # Before "postgres": Debian's wrapper runs it from /usr/lib/postgresql/.
    ("pg_recvlogical", lambda c: "pg_recvlogical" in c.split(" ")[0]),
    ("postgres", lambda c: c.startswith("postgres") or "/postgresql/" in c.split(" ")[0]),
    ("loadgen", lambda c: "outbox-loadgen" in c.split(" ")[0]),
    ("relay", lambda c: "outbox-relay" in c.split(" ")[0] or c.split(" ")[0] in RELAY_BINARIES),
    ("debezium", lambda c: c.startswith("java") and "ConnectStandalone" in c),
    ("kafka", lambda c: c.startswith("java") and "kafka.Kafka" in c),
    ("producer", lambda c: ("outbox-latency" in c.split(" ")[0] and " produce " in c)
     or (c.startswith("java") and "TxnProducer" in c)),
    ("consumer", lambda c: "outbox-latency" in c.split(" ")[0]),
)


def process_table() -> tuple[dict[int, tuple[str, float, float]], tuple[float, float]]:
    """Every process: (group, CPU-seconds, seconds it was runnable but waited
    for a CPU, summed over its threads from /proc/<pid>/task/*/schedstat),
    and the machine's busy and idle CPU-seconds."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cpu = proc_cpu_s(int(entry))
            wait_ns = 0
            for task in os.listdir(f"/proc/{entry}/task"):
                try:
                    wait_ns += int(Path(f"/proc/{entry}/task/{task}/schedstat").read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        except OSError:
            continue
        if cpu is None:
            continue
        group = next((g for g, match in PROCESS_GROUPS if match(cmd)), "other")
        table[int(entry)] = (group, cpu, wait_ns / 1e9)
    return table, machine_cpu_s()


class StepShare:
    """Where the machine's CPU went in the measured part of a W1 step: CPUs
    used and seconds per second spent runnable but waiting for a CPU (run
    queue), per group of processes (the writers' backends, the walsender,
    the system measured, the broker, the consumer, ...). On two cores the
    walsender and the relay's producer wait their turn behind the writers
    and the broker, which is what lengthens the tail; this measures it.
    Snapshots taken by timers from the moment the writers start, inside
    their run (they leave /proc when they exit)."""

    def __init__(self, warmup: float, secs: float):
        margin = min(0.5, secs / 10)
        self.snaps: list = []
        self.timers = [threading.Timer(at, lambda: self.snaps.append((time.time(), *process_table())))
                       for at in (warmup + margin, warmup + secs - margin)]
        for t in self.timers:
            t.daemon = True
            t.start()

    def finish(self) -> dict | None:
        for t in self.timers:
            t.join(10)
        if len(self.snaps) != 2:
            return None
        (t0, a, (busy0, idle0)), (t1, b, (busy1, idle1)) = self.snaps
        secs = t1 - t0
        groups: dict[str, dict] = {}
        for pid, (group, cpu, wait) in b.items():
            if pid in a and a[pid][0] == group:
                g = groups.setdefault(group, {"cpus": 0.0, "waiting": 0.0})
                g["cpus"] += (cpu - a[pid][1]) / secs
                g["waiting"] += (wait - a[pid][2]) / secs
        return {"secs": secs, "groups": groups, "idle_cpus": (idle1 - idle0) / secs,
                "busy_cpus": (busy1 - busy0) / secs}


# ------------------------------------------------------------------ environment


class Env:
    """Services, binaries and per-run names."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.work = Path(tempfile.mkdtemp(prefix="outbox-bench-"))
        self.run_id = uuid.uuid4().hex[:6]
        self.counter = 0
        out = run([str(ROOT / "scripts/services"), "up"], capture_output=True).stdout
        self.vars = dict(re.findall(r"export (\w+)='([^']*)'", out))
        port = self.vars["PG_PORT"]
        # TLS off for every PostgreSQL client alike: the comparison is about
        # decoding and publishing, not about ciphers.
        self.pg_url = f"postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
        self.relay_url = self.vars["PG_RELAY_URL"] + "?sslmode=disable"
        self.pg_port = port
        self.brokers = self.vars["KAFKA_BROKERS"]
        target = Path(json.loads(run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT,
                                     capture_output=True).stdout)["target_directory"]) / "release"
        self.relay_bin = Path(os.environ.get("BENCH_RELAY_BIN") or target / "outbox-relay")
        self.loadgen_bin = target / "outbox-loadgen"
        self.latency_bin = target / "examples" / "outbox-latency"

    def name(self, what: str) -> str:
        self.counter += 1
        return f"b{self.run_id}_{what}{self.counter}"

    def registry(self) -> str:
        """The schema registry's Confluent API (Apicurio, started on first
        use) with the W3 Avro schema under W3_AVRO_SUBJECT."""
        if getattr(self, "registry_url", None):
            return self.registry_url
        out = run([str(ROOT / "scripts/services"), "start-registry"], capture_output=True).stdout
        url = dict(re.findall(r"export (\w+)='([^']*)'", out))["OUTBOX_TEST_REGISTRY_URL"]
        body = json.dumps({"schema": decode_rs_schema("W3_AVRO")}).encode()
        request = urllib.request.Request(f"{url}/subjects/{W3_AVRO_SUBJECT}/versions", data=body, method="POST",
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            json.load(response)
        self.registry_url = url
        return url

    def sql(self, q: str, quiet: bool = True) -> str:
        return run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", self.pg_url, "-c", q], capture_output=True).stdout.strip()

    def psql_script(self, script: str) -> None:
        run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", self.pg_url], input=script, capture_output=True)

    def create_outbox(self) -> tuple[str, str]:
        """A fresh outbox table (Debezium's column names) and its insert-only publication."""
        table = self.name("outbox")
        pub = table + "_pub"
        self.psql_script(
            f"""
CREATE TABLE public.{table} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
  type text NOT NULL, payload jsonb NOT NULL, "timestamp" timestamptz NOT NULL DEFAULT now());
CREATE TABLE public.{table}_orders (id bigserial PRIMARY KEY, aggregateid text NOT NULL, seq bigint NOT NULL);
GRANT SELECT, INSERT ON public.{table}, public.{table}_orders TO relay;
GRANT USAGE ON SEQUENCE public.{table}_orders_id_seq TO relay;
CREATE PUBLICATION {pub} FOR TABLE public.{table} WITH (publish = 'insert');
"""
        )
        # Its parking table, postgres.parked_table's default name: under
        # after_dead_letter = "park" (the default) the relay reads the live
        # heads from it at every start and refuses to start without it.
        self.create_parked_table(f"{table}_parked")
        return table, pub

    def create_parked_table(self, name: str) -> None:
        """A parking table `public.<name>` from sql/outbox_parked.sql (its
        indexes named after it, as `outbox-relay init` names them), with the
        privileges the relay's role needs."""
        sql = (ROOT / "sql" / "outbox_parked.sql").read_text()
        sql = re.sub(r"\boutbox_parked", name, sql)
        self.psql_script(sql + f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.{name} TO relay;\n")

    def create_slot(self, plugin: str = "pgoutput") -> str:
        slot = self.name("slot")
        self.sql(f"SELECT pg_create_logical_replication_slot('{slot}', '{plugin}')")
        return slot

    def drop_slot(self, slot: str) -> None:
        try:
            self.sql(f"SELECT pg_drop_replication_slot('{slot}')")
        except subprocess.CalledProcessError:
            pass

    def probe_row(self, table: str) -> None:
        """One unnumbered outbox row: a system is streaming once it arrives."""
        self.sql(
            f"INSERT INTO public.{table} (id, aggregatetype, aggregateid, type, payload) "
            f"VALUES (gen_random_uuid(), 'order', 'probe', 'Probe', '{{\"probe\": true}}')"
        )

    def slot_lag(self, slot: str) -> int | None:
        out = self.sql(
            f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = '{slot}'"
        )
        return int(out) if out else None


# ------------------------------------------------------------------ systems under test


def decode_rs_schema(name: str) -> str:
    """A schema of the W3 payloads from benches/decode.rs, read from there so
    that the drain checks what the micro-benchmarks `contract/*` time:
    W3_SCHEMA, the JSON Schema (required n, aggregate, seq, total; their
    types; a pattern on aggregate); W3_AVRO, the Avro record."""
    m = re.search(rf'const {name}: &str = r#"(.*?)"#;', (BENCHES / "decode.rs").read_text(), re.S)
    if m is None:
        raise RuntimeError(f"benches/decode.rs has no {name} raw string")
    json.loads(m.group(1))
    return m.group(1)


def w3_schema() -> str:
    return decode_rs_schema("W3_SCHEMA")


# The registry subject of the W3 Avro contract.
W3_AVRO_SUBJECT = "bench.w3.order-placed"


class Relay:
    label = "outbox-relay"

    def __init__(self, env: Env, table: str, pub: str, slot: str, prefix: str, perf_out: Path | None = None,
                 binary: Path | None = None, exactly_once: bool = False, contract: str | None = None,
                 kafka_properties: dict[str, str] | None = None, parked_table: str | None = None):
        self.env = env
        self.slot = slot
        if binary is not None:
            self.label = "outbox-relay (baseline)"
        # kafka.delivery = "exactly-once": Kafka transactions with a
        # checkpoint record, on a checkpoint topic of this run's own, which
        # `outbox-relay init` creates before the start is timed (the relay
        # refuses to start without it).
        delivery = ""
        if exactly_once:
            self.label = ("outbox-relay (baseline, exactly-once)" if binary is not None
                          else "outbox-relay (exactly-once)")
            delivery = f'delivery = "exactly-once"\ncheckpoint_topic = "{prefix}.checkpoints"\n'
        self.topic = f"{prefix}.order"
        if env.s.relay_linger_ms:
            delivery += f"linger_ms = {int(env.s.relay_linger_ms)}\n"
        # A contract on every event the backlog holds (aggregatetype
        # "order", type "OrderPlaced"), its schema file beside the config
        # and named relative to it, as docs/contracts.md shows.
        contracts = ""
        if contract == "json":
            self.label = "outbox-relay (JSON Schema contract)"
            schema = env.work / f"{prefix}.order-placed.schema.json"
            schema.write_text(w3_schema())
            contracts = f'[[contracts]]\naggregatetype = "order"\ntype = "OrderPlaced"\nschema = "{schema.name}"\n'
        elif contract == "avro":
            # The subject's latest version, fetched once at start; every
            # event encoded to Avro and framed.
            self.label = "outbox-relay (Avro registry contract)"
            contracts = (f'[registry]\nurl = "{env.registry()}"\n\n[[contracts]]\naggregatetype = "order"\n'
                         f'type = "OrderPlaced"\nsubject = "{W3_AVRO_SUBJECT}"\n')
        # A parking table of its own (W3's parked drains: each starts with
        # one aggregate parked in it).
        postgres = ""
        if parked_table:
            self.label = "outbox-relay (parked aggregate)"
            postgres = f'parked_table = "public.{parked_table}"\n'
        # librdkafka properties (the cost curves' larger message.max.bytes).
        if kafka_properties:
            delivery += "[kafka.properties]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in kafka_properties.items())
        conf = env.work / f"{prefix}.toml"
        conf.write_text(
            f"""[postgres]
url = "{env.relay_url}"
slot = "{slot}"
publication = "{pub}"
table = "public.{table}"
heartbeat_interval_secs = 0
{postgres}[kafka]
brokers = "{env.brokers}"
topic = "{prefix}.{{aggregatetype}}"
dlq_topic = "{prefix}.dlq"
{delivery}[cloudevents]
source = "/bench"
{contracts}"""
        )
        self.log = env.work / f"{prefix}.log"
        if exactly_once:
            # This build's init, also for a baseline build: the publication
            # and the slot exist, so it only creates the checkpoint topic.
            run([str(env.relay_bin), "init", "--config", str(conf)], stdout=subprocess.DEVNULL)
        cmd = [str(binary or env.relay_bin), "run", "--config", str(conf)]
        self.perf = None
        if perf_out is not None:
            self.perf = subprocess.Popen(
                ["perf", "record", "-F", "499", "--call-graph", "dwarf,16384", "-o", str(perf_out), "--"] + cmd,
                stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"},
            )
            deadline = time.monotonic() + 10
            while True:
                kids = Path(f"/proc/{self.perf.pid}/task/{self.perf.pid}/children").read_text().split()
                if kids:
                    self.pid = int(kids[0])
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("perf did not start the relay")
                time.sleep(0.005)
            self.proc = None
        else:
            self.proc = subprocess.Popen(
                cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"}
            )
            self.pid = self.proc.pid
        self.spawned = time.time()
        self.sampler = ProcSampler(self.pid)

    def alive(self) -> bool:
        p = self.proc or self.perf
        return p.poll() is None

    def stop(self) -> None:
        self.sampler.finish()
        if self.proc is not None:
            stop(self.proc)
        else:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self.perf.wait(120)


class Debezium:
    """Kafka Connect standalone running Debezium's PostgreSQL connector with
    the outbox event router, producing with acks=all and idempotence."""

    def __init__(self, env: Env, table: str, pub: str, slot: str, prefix: str, tuned: bool,
                 producer_props: dict[str, str] | None = None):
        self.env = env
        self.slot = slot
        self.label = "Debezium (tuned)" if tuned else "Debezium (defaults)"
        self.topic = f"{prefix}.order"
        d = env.work / prefix
        d.mkdir()
        rest = free_port()
        producer_tuning = "producer.linger.ms=0\n" if tuned else ""
        # The cost curves' larger max.request.size.
        producer_tuning += "".join(f"producer.{k}={v}\n" for k, v in (producer_props or {}).items())
        (d / "worker.properties").write_text(
            f"""bootstrap.servers={env.brokers}
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename={d}/offsets.dat
listeners=http://127.0.0.1:{rest}
plugin.discovery=service_load
producer.acks=all
producer.enable.idempotence=true
producer.max.in.flight.requests.per.connection=5
producer.compression.type=none
{producer_tuning}"""
        )
        tuning = "poll.interval.ms=1\n" if tuned else ""
        (d / "connector.properties").write_text(
            f"""name={prefix}
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
plugin.name=pgoutput
database.hostname=127.0.0.1
database.port={env.pg_port}
database.user=relay
database.password=relay-test-password
database.dbname=postgres
database.sslmode=disable
topic.prefix={prefix}
slot.name={slot}
slot.drop.on.stop=false
publication.name={pub}
publication.autocreate.mode=disabled
table.include.list=public.{table}
snapshot.mode=no_data
tombstones.on.delete=false
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.route.topic.replacement={prefix}.${{routedByValue}}
transforms.outbox.table.fields.additional.placement=type:header:type
{tuning}"""
        )
        (d / "log4j2.properties").write_text(
            f"""status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {d}/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""
        )
        self.log = d / "connect.out"
        self.proc = subprocess.Popen(
            ["java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
             f"-Dlog4j2.configurationFile={d}/log4j2.properties",
             "-cp", f"{DEBEZIUM_LIBS}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
             str(d / "worker.properties"), str(d / "connector.properties")],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid
        self.spawned = time.time()
        self.sampler = ProcSampler(self.pid)
        self.dir = d

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.sampler.finish()
        stop(self.proc, timeout=60)


BARE_JAVA_SOURCE = BENCHES / "tools" / "BareProducer.java"


TXN_JAVA_SOURCE = BENCHES / "tools" / "TxnProducer.java"


def compile_txn_java(env: Env) -> Path:
    """TxnProducer.java compiled once per run, as BareProducer."""
    classes = env.work / "txn-java"
    if not (classes / "TxnProducer.class").exists():
        run(["javac", "-d", str(classes), "-cp", f"{KAFKA_LIBS}/*", str(TXN_JAVA_SOURCE)], capture_output=True)
    return classes


def compile_bare_java(env: Env) -> Path:
    """BareProducer.java compiled once per run (into the run's work
    directory), so that no drain counts javac's CPU as the producer's."""
    classes = env.work / "bare-java"
    if not (classes / "BareProducer.class").exists():
        run(["javac", "-d", str(classes), "-cp", f"{KAFKA_LIBS}/*", str(BARE_JAVA_SOURCE)], capture_output=True)
    return classes


class BareProducer:
    """A producer alone, for the topics curve: no PostgreSQL and no slot,
    it sends a drain's records itself, round robin over `topics`, and exits
    once every one is acknowledged; the drain is timed by the same watcher
    as the relay's. `kind`: "librdkafka" (`outbox-latency burst`, the relay's
    producer settings, handed every record at once), "window" (the same, at
    most the relay's default window unacknowledged) or "java"
    (BareProducer.java, Kafka's Java producer).

    Its CPU and peak RSS are its whole life's, from its rusage when it is
    reaped (it may exit between two samples)."""

    slot = None

    def __init__(self, env: Env, kind: str, topics: list[str], rows: int, prefix: str):
        self.env = env
        self.topic = topics[0]
        listing = env.work / f"{prefix}.topics"
        listing.write_text("".join(t + "\n" for t in topics))
        linger = env.s.relay_linger_ms or "5"
        args = ["--brokers", env.brokers, "--topics-file", str(listing), "--records", str(rows),
                "--payload-bytes", str(env.s.payload), "--linger-ms", linger]
        if kind == "librdkafka":
            self.label = "bare librdkafka producer"
            cmd = [str(env.latency_bin), "burst"] + args
        elif kind == "window":
            # The same producer held to the relay's window: at most
            # relay.channel_capacity records unacknowledged, as the relay
            # reads ahead of the broker's acknowledgements.
            self.label = "bare librdkafka producer, the relay's window"
            cmd = [str(env.latency_bin), "burst", "--relay-window"] + args
        elif kind == "java":
            self.label = "bare Java producer"
            # Kafka's client logs through log4j2: warnings and errors only,
            # into the log counted for warnings.
            log4j = env.work / "bare-java-log4j2.properties"
            log4j.write_text("status = warn\nappender.out.type = Console\nappender.out.name = out\n"
                             "appender.out.layout.type = PatternLayout\n"
                             "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
                             "rootLogger.level = warn\nrootLogger.appenderRef.out.ref = out\n")
            # The heap Debezium's Kafka Connect gets: the same Java client in both.
            cmd = ["java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                   f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{compile_bare_java(env)}:{KAFKA_LIBS}/*",
                   "BareProducer"] + args
        else:
            raise ValueError(kind)
        self.log = env.work / f"{prefix}.log"
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        self.spawned = time.time()
        self.sampler = ProcSampler(self.pid)
        self.usage = None

    def _reap(self, block: bool) -> None:
        # Reaped here, not by Popen, for the rusage.
        if self.proc.returncode is None:
            pid, status, usage = os.wait4(self.pid, 0 if block else os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.usage = usage

    def alive(self) -> bool:
        """Running, or done with every record acknowledged."""
        self._reap(False)
        return self.proc.returncode in (None, 0)

    def exit_cpu_s(self) -> float | None:
        """Its CPU-seconds (user + system, all threads), once reaped."""
        return None if self.usage is None else self.usage.ru_utime + self.usage.ru_stime

    def stop(self) -> None:
        # Once its records are on the topics it only closes: waited for
        # (at most 60 s), then stopped.
        deadline = time.monotonic() + 60
        while self.proc.returncode is None and time.monotonic() < deadline:
            self._reap(False)
            time.sleep(0.02)
        self.sampler.finish()
        if self.proc.returncode is None:
            self.proc.terminate()
            self._reap(True)
        if self.usage is not None:
            self.sampler.hwm = max(self.sampler.hwm, self.usage.ru_maxrss * 1024)


# ------------------------------------------------------------------ measuring tools


def watch(env: Env, topic: str, expect: int, timeout: float = 1800, more_topics: list[str] | None = None,
          topic_config: dict[str, str] | None = None, interval_ms: int | None = None,
          warm: bool = False) -> tuple[subprocess.Popen, Path]:
    """`outbox-latency watch`: creates the topic (and `more_topics`, with
    `topic_config`) and writes its record count (their sum) over time;
    `warm`: writes each topic twice first (`--warm`), left out of the count."""
    out = env.work / f"watch-{uuid.uuid4().hex[:6]}.txt"
    ready = out.with_suffix(".ready")
    extra: list[str] = []
    if more_topics:
        listing = out.with_suffix(".topics")
        listing.write_text("".join(t + "\n" for t in more_topics))
        extra += ["--topics-file", str(listing)]
    for k, v in (topic_config or {}).items():
        extra += ["--topic-config", f"{k}={v}"]
    if interval_ms is not None:
        extra += ["--interval-ms", str(interval_ms)]
    if warm:
        extra += ["--warm"]
    p = subprocess.Popen(
        [str(env.latency_bin), "watch", "--brokers", env.brokers, "--topic", topic, "--expect", str(expect),
         "--out", str(out), "--timeout-secs", str(int(timeout)), "--ready-file", str(ready)] + extra,
    )
    # Creating (and warming) many topics takes the broker a while.
    try:
        wait_file(ready, 60 + (0.1 if warm else 0.05) * len(more_topics or []), p, "watch")
    except RuntimeError:
        stop(p)
        raise
    return p, out


def read_watch(path: Path) -> list[tuple[float, int]]:
    pts = []
    for line in path.read_text().split("\n"):
        if line.strip():
            t, c = line.split()
            pts.append((int(t) / 1e9, int(c)))
    return pts


def wait_streaming(env: Env, sut, table: str, timeout: float = 180) -> float:
    """Writes a probe row and waits until it is on the system's topic; returns when."""
    w, out = watch(env, sut.topic, 1, timeout)
    env.probe_row(table)
    deadline = time.monotonic() + timeout
    while w.poll() is None:
        if not sut.alive():
            stop(w)
            raise RuntimeError(f"{sut.label} exited during start-up; see {sut.log}")
        if time.monotonic() > deadline:
            stop(w)
            raise RuntimeError(f"{sut.label} did not deliver a probe event within {timeout} s; see {sut.log}")
        time.sleep(0.05)
    if w.returncode != 0:
        raise RuntimeError(f"watch on {sut.topic} failed")
    return time.time()


def latency_step(env: Env, table: str, rate: int, secs: float, warmup: float, reader: str,
                 topic: str | None = None, slot_for_lag: str | None = None) -> dict:
    """One open-loop step: a reader positioned first, then the load; returns
    the reader's JSON report plus the writer's own summary."""
    tag = uuid.uuid4().hex[:6]
    timing = env.work / f"timing-{tag}.bin"
    ready = env.work / f"ready-{tag}"
    extra: list[subprocess.Popen] = []
    if reader == "kafka":
        rd = subprocess.Popen(
            [str(env.latency_bin), "consume", "--brokers", env.brokers, "--topic", topic,
             "--timing-file", str(timing), "--ready-file", str(ready), "--idle-secs", "30"],
            stdout=subprocess.PIPE, text=True,
        )
    elif reader == "postgres":
        slot = env.create_slot("test_decoding")
        recv = subprocess.Popen(
            ["pg_recvlogical", "-d", env.pg_url, "--slot", slot, "--start", "-o", "include-xids=0",
             "-o", "include-timestamp=0", "-f", "-", "-s", "1"],
            stdout=subprocess.PIPE,
        )
        extra.append(recv)
        rd = subprocess.Popen(
            [str(env.latency_bin), "stdin", "--timing-file", str(timing), "--ready-file", str(ready),
             "--idle-secs", "30"],
            stdin=recv.stdout, stdout=subprocess.PIPE, text=True,
        )
        recv.stdout.close()
    else:
        raise ValueError(reader)
    wait_file(ready, 60, rd, "latency reader")
    lag: list[tuple[float, int]] = []
    stop_lag = threading.Event()
    if slot_for_lag:
        def sample_lag():
            while not stop_lag.is_set():
                v = env.slot_lag(slot_for_lag)
                if v is not None:
                    lag.append((time.time(), v))
                stop_lag.wait(0.5)
        lt = threading.Thread(target=sample_lag, daemon=True)
        lt.start()
    t0 = time.time()
    share = StepShare(warmup, secs)
    load = run(writers_cmd(env, table, rate, secs, warmup, timing), capture_output=True)
    t1 = time.time()
    out, _ = rd.communicate(timeout=3600)
    stop_lag.set()
    for p in extra:
        stop(p)
    if reader == "postgres":
        env.drop_slot(slot)
    if rd.returncode != 0:
        raise RuntimeError(f"latency reader failed ({rd.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["writer"] = load.stdout.strip()
    res["load_window"] = [t0, t1]
    res["slot_lag"] = lag
    res["cpu_share"] = share.finish()
    return res


def writers_cmd(env: Env, table: str, rate: int, secs: float, warmup: float, timing: Path) -> list[str]:
    """W1's open-loop writers: `outbox-loadgen` at `rate` into `table`."""
    return [str(env.loadgen_bin), "--url", env.pg_url, "--table", f"public.{table}", "--open-loop",
            "--rate", str(rate), "--duration-secs", str(int(round(secs + warmup))), "--events", "0",
            "--connections", str(env.s.w1_connections), "--payload-bytes", str(env.s.payload),
            "--warmup-secs", str(warmup), "--timing-file", str(timing)]


def broker_step(env: Env, rate: int, secs: float, warmup: float, writers_into: str | None = None,
                txn: str | None = None, linger_ms: str | None = None) -> dict:
    """The broker alone at `rate`; with `writers_into` (an outbox table no
    slot reads) while `outbox-loadgen` writes the same load into PostgreSQL,
    so the broker and the consumer share the machine as they do beside a
    relay, without a relay.

    `txn`: a transactional producer instead, the baseline of the relay's
    exactly-once mode, each transaction holding every record due when it
    begins (what came while the last commit ran, the relay's cadence at a
    trickle): "librdkafka" (`outbox-latency produce`, with a checkpoint-sized
    record to a second topic before each commit, as the relay) or "java"
    (benches/tools/TxnProducer.java, Kafka's Java producer). Each record is
    measured from its due time.

    `linger_ms`: the librdkafka producer's linger instead of the relay's
    (`"0"`: each record sent as it is due, the latency class of the relay's
    nudged sends, and their cost per event)."""
    topic = env.name("broker") + ".order"
    tag = uuid.uuid4().hex[:6]
    timing = env.work / f"timing-{tag}.bin"
    ready = env.work / f"ready-{tag}"
    rd = subprocess.Popen(
        [str(env.latency_bin), "consume", "--brokers", env.brokers, "--topic", topic,
         "--timing-file", str(timing), "--ready-file", str(ready), "--idle-secs", "30"],
        stdout=subprocess.PIPE, text=True,
    )
    wait_file(ready, 60, rd, "latency reader")
    writers = None
    share = StepShare(warmup, secs)
    if writers_into:
        writers = subprocess.Popen(
            writers_cmd(env, writers_into, rate, secs, warmup, env.work / f"timing-writers-{tag}.bin"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    if txn == "java":
        cmd = ["java", "-Xmx256m", "-cp", f"{compile_txn_java(env)}:{KAFKA_LIBS}/*", "TxnProducer",
               "--brokers", env.brokers, "--topic", topic, "--rate", str(rate),
               "--duration-secs", str(secs + warmup), "--warmup-secs", str(warmup),
               "--record-bytes", str(env.s.payload), "--timing-file", str(timing), "--per-transaction", "due",
               "--transactional-id", f"{topic}.txn"]
    else:
        cmd = [str(env.latency_bin), "produce", "--brokers", env.brokers, "--topic", topic, "--rate", str(rate),
               "--duration-secs", str(secs + warmup), "--warmup-secs", str(warmup),
               "--record-bytes", str(env.s.payload), "--timing-file", str(timing),
               # The same batching wait as the relay's producer, so the two differ
               # only by what the relay adds.
               "--linger-ms", linger_ms or env.s.relay_linger_ms or "5"]
        if txn == "librdkafka":
            cmd += ["--transactional-id", f"{topic}.txn", "--per-transaction", "due",
                    "--checkpoint-topic", f"{topic}.checkpoints"]
    produced = run(cmd, capture_output=True, check=False)
    if produced.returncode != 0:
        # The reader and the writers would wait out their idle time: ended
        # here, and the producer's last words go with the error.
        for proc in (rd, writers):
            if proc is not None:
                proc.kill()
                proc.wait()
        tail = " | ".join((produced.stdout + produced.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"{cmd[0] if txn != 'java' else 'TxnProducer'} exited {produced.returncode}: {tail}")
    if writers is not None and writers.wait(timeout=3600) != 0:
        raise RuntimeError(f"outbox-loadgen beside the broker failed ({writers.returncode})")
    out, _ = rd.communicate(timeout=3600)
    res = json.loads(out.strip().splitlines()[-1])
    res["cpu_share"] = share.finish()
    said = [line for line in produced.stdout.splitlines() if "records at" in line]
    if said:
        # The transactional producers' own count of transactions and their
        # commit times.
        res["producer_said"] = said[-1]
    return res


def kafka_perf_txn(env: Env, rate: int, secs: float) -> dict:
    """`kafka-producer-perf-test` (ProducerPerformance) with a
    transactional id at `rate`, committing after every record that finds its
    transaction open for 1 ms or more: at 1,000/s, one record a transaction.
    Its figures are its own: the rate it kept, and send → acknowledged
    latency, which leaves out the commit and what a read_committed consumer
    waits for."""
    topic = env.name("perftxn")
    r = run(
        ["java", "-Xmx512m", "-cp", f"{KAFKA_LIBS}/*", "org.apache.kafka.tools.ProducerPerformance",
         "--topic", topic, "--num-records", str(int(rate * secs)), "--record-size", str(env.s.payload),
         "--throughput", str(rate), "--transactional-id", f"{topic}.txn", "--transaction-duration-ms", "1",
         "--producer-props", f"bootstrap.servers={env.brokers}", "acks=all"],
        capture_output=True, check=False,
    )
    said = [line for line in r.stdout.splitlines() if "records sent" in line]
    if r.returncode != 0 or not said:
        tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"kafka-producer-perf-test exited {r.returncode}: {tail}")
    last = said[-1]
    num = lambda pattern: float(re.search(pattern, last).group(1))  # noqa: E731
    return {"line": last, "records_per_s": num(r"([\d.]+) records/sec"), "p50_ms": num(r"(\d+) ms 50th"),
            "p99_ms": num(r"(\d+) ms 99th"), "p999_ms": num(r"(\d+) ms 99.9th")}


# ------------------------------------------------------------------ workloads


def ceiling_broker(env: Env) -> list[dict]:
    out = []
    for i in range(env.s.repeat):
        topic = env.name("perf")
        r = run(
            ["java", "-Xmx512m", "-cp", f"{KAFKA_LIBS}/*", "org.apache.kafka.tools.ProducerPerformance",
             "--topic", topic, "--num-records", str(env.s.broker_records), "--record-size", str(env.s.payload),
             "--throughput", "-1", "--producer-props", f"bootstrap.servers={env.brokers}", "acks=all",
             "enable.idempotence=true", "linger.ms=5", "compression.type=none"],
            capture_output=True,
        )
        lines = [l for l in r.stdout.splitlines() if "records sent" in l]
        rate = lambda l: float(re.search(r"([\d.]+) records/sec", l).group(1))  # noqa: E731
        # The last line is the whole run, JVM warm-up included; the others are
        # 5 s windows, whose best is the steady rate (the ceiling we quote).
        windows = [rate(l) for l in lines[:-1]]
        out.append({"records_per_s": max(windows + [rate(lines[-1])]), "overall_records_per_s": rate(lines[-1]),
                    "line": lines[-1]})
        last = lines[-1]
        log(f"broker ceiling run {i + 1}: {last}")
    return out


def payload_sql(payload_bytes: int, aggregates: int = 100) -> str:
    """The SQL of the n-th backlog payload (`i`), padded to about
    `payload_bytes`: what every backlog and curve loads."""
    pad = max(payload_bytes - 90, 0)
    return (
        f"jsonb_build_object('n', i, 'aggregate', 'agg-' || (i % {aggregates}), 'seq', i / {aggregates} + 1, "
        f"'total', 42.5, 'pad', repeat('x', {pad}))"
    )


def load_backlog(env: Env, table: str, rows: int, one_txn: bool, aggregates: int = 100) -> None:
    """`rows` events of `aggregates` aggregates ('agg-0', 'agg-1', ...,
    round robin) in single-row transactions, or all in one."""
    payload = payload_sql(env.s.payload, aggregates)
    if one_txn:
        script = f"""INSERT INTO public.{table} (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), 'order', 'agg-' || (i % {aggregates}), 'OrderPlaced', {payload}
FROM generate_series(0, {rows - 1}) AS i;"""
    else:
        script = f"""DO $$
BEGIN
  FOR i IN 0..{rows - 1} LOOP
    INSERT INTO public.{table} (id, aggregatetype, aggregateid, type, payload)
    VALUES (gen_random_uuid(), 'order', 'agg-' || (i % {aggregates}), 'OrderPlaced', {payload});
    COMMIT;
  END LOOP;
END
$$;"""
    env.psql_script(script)


def slot_decoding_stats(env: Env, slot: str, timeout: float = 10) -> dict:
    """What the walsender reported for `slot` in pg_stat_replication_slots
    (bytes and transactions it spilled to disk, or streamed before their
    commit). The walsender reports after it decodes a commit; waited for
    until it has (`total_txns` > 0) or `timeout`."""
    cols = ("spill_txns", "spill_count", "spill_bytes", "stream_txns", "stream_count", "stream_bytes",
            "total_txns", "total_bytes")
    deadline = time.time() + timeout
    while True:
        row = env.sql(f"SELECT {', '.join(cols)} FROM pg_stat_replication_slots WHERE slot_name = '{slot}'")
        values = dict(zip(cols, (int(v) for v in row.split("|")))) if row else {}
        if values.get("total_txns", 0) > 0 or time.time() > deadline:
            return values
        time.sleep(0.1)


def recvlogical_drain(env: Env, slot: str, pub: str, end_lsn: str, rows: int, streaming: bool = False) -> dict:
    """`pg_recvlogical` reading the slot to `end_lsn` and throwing the
    pgoutput stream away: the decode ceiling. `streaming`: protocol 2 with
    `streaming=on`, so a transaction larger than `logical_decoding_work_mem`
    is sent while it is decoded instead of spilled to disk first."""
    options = ["-o", "proto_version=2", "-o", "streaming=on"] if streaming else ["-o", "proto_version=1"]
    t0 = time.time()
    budget = CpuBudget(env, slot)
    p = subprocess.Popen(
        ["pg_recvlogical", "-d", env.pg_url, "--slot", slot, "--start", "--endpos", end_lsn,
         *options, "-o", f"publication_names={pub}", "-f", "/dev/null", "--no-loop"],
        stderr=subprocess.PIPE, text=True,
    )
    # Reaped here for its rusage (CPU of the client; decoding itself is the walsender's).
    _, status, usage = os.wait4(p.pid, 0)
    t1 = time.time()
    spent = budget.finish()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"pg_recvlogical failed: {p.stderr.read()}")
    return {"events_per_s": rows / (t1 - t0), "secs": t1 - t0, "cpu_s": usage.ru_utime + usage.ru_stime,
            "budget": spent, "decoding": slot_decoding_stats(env, slot)}


def system_drain(env: Env, make_sut, rows: int, topics=None, topic_config: dict[str, str] | None = None,
                 timeout: float = 1800, interval_ms: int | None = None, stall_secs: float | None = None,
                 events: int | None = None, until=None, warm: bool = False) -> dict:
    """Starts a system on a slot holding `rows` events and measures until all are on its topic.

    `events`: how many events the system handles, when not all of them go
    to the topic (W3's parked drains park some): the rate and the CPU per
    event are per event handled; the drain ends with the `rows`-th on the
    topic. `until()`: once they are there, the system is stopped only when
    it says True too (the parked drains: every parked row committed),
    waiting at most 60 s.

    For the cost curves: `topics(prefix)` names the topics the events go to
    (counted together; default the one `prefix.order`), made with
    `topic_config`; `stall_secs`: gives up when the count has not moved for
    that long (an event dead-lettered would keep it short for ever); `warm`:
    the topics written twice first (`watch`)."""
    prefix = env.name("drain")
    names = topics(prefix) if topics else [f"{prefix}.order"]
    w, out = watch(env, names[0], rows, timeout, names[1:], topic_config, interval_ms, warm)
    try:
        sut = make_sut(prefix)
    except BaseException:
        stop(w)
        raise
    budget = CpuBudget(env, sut.slot)
    next_check = time.monotonic() + 5
    try:
        while w.poll() is None:
            if not sut.alive():
                raise RuntimeError(f"{sut.label} exited during the drain; see {sut.log}")
            if stall_secs is not None and time.monotonic() > next_check:
                next_check = time.monotonic() + 5
                try:
                    pts = read_watch(out) if out.exists() else []
                except ValueError:  # a line half written: next time
                    pts = None
                moved = max([sut.spawned] + [t for t, c in (pts or [])[-1:] if c > 0])
                if pts is not None and time.time() - moved > stall_secs:
                    got = pts[-1][1] if pts else 0
                    raise RuntimeError(f"{sut.label}: {got} of {rows} events on the topic, none for {stall_secs:g} s; "
                                       f"see {sut.log}")
            time.sleep(0.05)
        done = time.time()
        if w.returncode != 0:
            raise RuntimeError(f"{sut.label}: drain did not complete (watcher exit {w.returncode}); see {sut.log}")
        if until is not None:
            deadline = time.monotonic() + 60
            while not until():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{sut.label}: its topic is complete, and 60 s later the rest is not; "
                                       f"see {sut.log}")
                time.sleep(0.05)
        settled = time.time()
        cpu = sut.sampler.read()
        spent = budget.finish()
    finally:
        stop(w)
        sut.stop()
        # Its walsender search ends with the drain, complete or not.
        budget._stop.set()
    pts = read_watch(out)
    first = next(t for t, c in pts if c > 0)
    last = pts[-1][0]
    cpu_s = cpu[0] if cpu else sut.sampler.cpu()
    # A bare producer's whole life, up to its exit once all was acknowledged.
    exit_cpu = getattr(sut, "exit_cpu_s", lambda: None)()
    if exit_cpu is not None:
        cpu_s = exit_cpu
    handled = events or rows
    return {
        "system": sut.label,
        "topic": names[0],
        "startup_to_first_event_s": first - sut.spawned,
        "drain_events_per_s": handled / max(last - first, 1e-6),
        "total_secs": last - sut.spawned,
        "until_after_last_s": settled - last if until is not None else None,
        # A healthy drain logs no warning (RUST_LOG=warn: nothing else).
        "log_warnings": log_warnings(sut.log),
        "cpu_s": cpu_s,
        "cpu_us_per_event": cpu_s / handled * 1e6,
        "peak_rss_mb": sut.sampler.hwm / 2**20,
        "curve": [(t - first, c) for t, c in pts],
        "budget": spent,
    }


def log_warnings(path: Path) -> int:
    """WARN and ERROR lines in a system's log (the relay's, at RUST_LOG=warn)."""
    try:
        return sum(1 for line in path.read_text(errors="replace").splitlines() if " WARN " in line or "ERROR" in line)
    except OSError:
        return 0


def contract_keeps(env: Env, table: str) -> None:
    """The backlog's first and last payloads keep the W3 contract
    (`outbox-relay schema check`): a payload that broke it would be
    dead-lettered, and its drain would wait for the watcher's timeout
    instead of failing here."""
    schema = env.work / "w3-check.schema.json"
    schema.write_text(w3_schema())
    files = []
    for which in ("ASC", "DESC"):
        f = env.work / f"w3-check-{which.lower()}.json"
        f.write_text(env.sql(f"SELECT payload FROM public.{table} ORDER BY (payload->>'n')::int {which} LIMIT 1"))
        files.append(str(f))
    r = run([str(env.relay_bin), "schema", "check", "--schema", str(schema)] + files, check=False,
            capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"the W3 payloads break benches/decode.rs's W3_SCHEMA: {r.stdout}{r.stderr}")


# The aggregate W3's parked drains start with parked.
PARKED_AGGREGATE = "agg-0"


def park_before_drain(env: Env, table: str, parked_table: str, lsn: str) -> None:
    """Parks PARKED_AGGREGATE in `parked_table` as a dead letter would
    have: a live HEAD row placed at `lsn` (before the backlog), so that the
    relay, which loads the live heads at its start, parks every event of
    that aggregate the drain brings."""
    env.sql(f"INSERT INTO public.{parked_table} (aggregatetype, aggregateid, event_id, kind, reason, shard, "
            f"commit_lsn, position) VALUES ('order', '{PARKED_AGGREGATE}', gen_random_uuid()::text, 'HEAD', "
            f"'parked by the benchmark before the drain', 0, '{lsn}', 0)")


def parked_count(env: Env, parked_table: str) -> int:
    return int(env.sql(f"SELECT count(*) FROM public.{parked_table} WHERE kind = 'EVENT'"))


def topic_keys(env: Env, topic: str) -> dict:
    """Records per key on `topic` (benches/tools/topic_keys.py, in
    scripts/services' Python, which has confluent-kafka)."""
    py = run([str(ROOT / "scripts/services"), "venv"], capture_output=True).stdout.strip()
    out = run([py, str(BENCHES / "tools" / "topic_keys.py"), "--brokers", env.brokers, "--topic", topic],
              capture_output=True).stdout
    return json.loads(out)


def check_parked_drain(env: Env, table: str, parked_table: str, topic: str) -> dict:
    """After a parked drain: the parking table holds every event of
    PARKED_AGGREGATE (and nothing else but its head), and the topic every
    event of every other aggregate, once, and none of the parked one.
    Raises when not: a drain that parked the wrong events measured
    something else."""
    expected = dict(
        line.split("|") for line in env.sql(
            f"SELECT aggregateid, count(*) FROM public.{table} WHERE aggregateid <> 'probe' "
            f"GROUP BY aggregateid").splitlines())
    expected = {k: int(v) for k, v in expected.items()}
    parked_rows, parked_other, parked_ids, missing = (int(x) for x in env.sql(
        f"SELECT count(*) FILTER (WHERE kind = 'EVENT'), "
        f"count(*) FILTER (WHERE kind <> 'HEAD' AND aggregateid <> '{PARKED_AGGREGATE}'), "
        f"count(DISTINCT event_id) FILTER (WHERE kind = 'EVENT'), "
        f"(SELECT count(*) FROM public.{table} o WHERE o.aggregateid = '{PARKED_AGGREGATE}' AND NOT EXISTS "
        f"(SELECT 1 FROM public.{parked_table} p WHERE p.kind = 'EVENT' AND p.event_id = o.id::text)) "
        f"FROM public.{parked_table}").split("|"))
    on_topic = topic_keys(env, topic)
    keys = on_topic["keys"]
    others = {k: v for k, v in expected.items() if k != PARKED_AGGREGATE}
    short = {k: (keys.get(k, 0), v) for k, v in others.items() if keys.get(k, 0) < v}
    extra = {k: (keys.get(k, 0), v) for k, v in others.items() if keys.get(k, 0) > v}
    res = {
        "parked_expected": expected.get(PARKED_AGGREGATE, 0),
        "parked_rows": parked_rows,
        "parked_distinct": parked_ids,
        "parked_missing": missing,
        "parked_other_aggregates": parked_other,
        "topic_records": on_topic["records"],
        "topic_expected": sum(others.values()),
        "topic_parked_aggregate": keys.get(PARKED_AGGREGATE, 0),
        "aggregates_short": len(short),
        "aggregates_duplicated": len(extra),
        "aggregates_delivered": sum(1 for k, v in others.items() if keys.get(k, 0) >= v),
        "aggregates_expected": len(others),
    }
    ok = (parked_rows == parked_ids == res["parked_expected"] and missing == 0 and parked_other == 0
          and res["topic_parked_aggregate"] == 0 and not short)
    res["ok"] = ok
    if not ok:
        raise RuntimeError(f"the parked drain did not park exactly {PARKED_AGGREGATE}'s events: {res}; "
                           f"first aggregates short: {dict(list(short.items())[:5])}")
    return res


def backlog_workload(env: Env, name: str, rows: int, one_txn: bool, flame: bool, exactly_once: bool,
                     contracts: tuple[str, ...] = (), aggregates: int = 100, parked: bool = False) -> dict:
    s = env.s
    table, pub = env.create_outbox()
    slots = {
        "recv": [env.create_slot() for _ in range(s.repeat)],
        "relay": [env.create_slot() for _ in range(s.repeat)],
    }
    # W4: the decode ceiling with protocol 2's streaming of large
    # transactions too, beside the spilling one.
    if one_txn:
        slots["recv_streaming"] = [env.create_slot() for _ in range(s.repeat)]
    # W3 only: W4's single PostgreSQL transaction would become a single
    # Kafka transaction, bounded by the producer's transaction timeout.
    if exactly_once:
        slots["relay_eos"] = [env.create_slot() for _ in range(s.repeat)]
    # The drains with a contract, by kind: "json" a schema file, "avro" a
    # registry subject.
    contract_keys = {"json": "relay_contract", "avro": "relay_avro"}
    for kind in contracts:
        slots[contract_keys[kind]] = [env.create_slot() for _ in range(s.repeat)]
    # The parked drains: each on its own slot with a parking table of its
    # own, PARKED_AGGREGATE parked in it before the load.
    parked_tables: list[str] = []
    if parked:
        slots["relay_parked"] = [env.create_slot() for _ in range(s.repeat)]
        lsn = env.sql("SELECT pg_current_wal_insert_lsn()")
        for i in range(s.repeat):
            parked_tables.append(f"{table}_held{i + 1}")
            env.create_parked_table(parked_tables[-1])
            park_before_drain(env, table, parked_tables[-1], lsn)
    if s.relay_baseline:
        slots["relay_base"] = [env.create_slot() for _ in range(s.repeat)]
        if exactly_once:
            slots["relay_base_eos"] = [env.create_slot() for _ in range(s.repeat)]
    if s.debezium:
        slots["dbz_default"] = [env.create_slot() for _ in range(s.repeat)]
        slots["dbz_tuned"] = [env.create_slot() for _ in range(s.repeat)]
    if flame:
        slots["perf"] = [env.create_slot()]
    log(f"{name}: loading {rows} rows ({'one transaction' if one_txn else 'single-row transactions'})")
    t0 = time.time()
    load_backlog(env, table, rows, one_txn, aggregates)
    end_lsn = env.sql("SELECT pg_current_wal_insert_lsn()")
    log(f"{name}: loaded in {time.time() - t0:.1f} s; WAL up to {end_lsn}")
    if contracts:
        contract_keeps(env, table)
    res: dict = {"rows": rows, "aggregates": aggregates, "recv": [], "recv_streaming": [], "relay": [], "relay_eos": [],
                 "relay_contract": [], "relay_avro": [], "relay_parked": [], "relay_base": [], "relay_base_eos": [],
                 "dbz_default": [], "dbz_tuned": []}
    n_parked = 0
    if parked:
        n_parked = int(env.sql(f"SELECT count(*) FROM public.{table} WHERE aggregateid = '{PARKED_AGGREGATE}'"))
        res["parked_aggregate"] = PARKED_AGGREGATE
        res["parked_events"] = n_parked
    for i in range(s.repeat):
        r = recvlogical_drain(env, slots["recv"][i], pub, end_lsn, rows)
        d = r["decoding"]
        log(f"{name} run {i + 1}: pg_recvlogical {r['events_per_s']:.0f} events/s, "
            f"spilled {d.get('spill_bytes', 0) / 2**20:.0f} MiB")
        res["recv"].append(r)
        if one_txn:
            r = recvlogical_drain(env, slots["recv_streaming"][i], pub, end_lsn, rows, streaming=True)
            d = r["decoding"]
            log(f"{name} run {i + 1}: pg_recvlogical, streaming=on {r['events_per_s']:.0f} events/s, "
                f"spilled {d.get('spill_bytes', 0) / 2**20:.0f} MiB, streamed {d.get('stream_bytes', 0) / 2**20:.0f} MiB")
            res["recv_streaming"].append(r)

        def this_build() -> dict:
            r = system_drain(env, lambda p: Relay(env, table, pub, slots["relay"][i], p), rows)
            log(f"{name} run {i + 1}: relay {r['drain_events_per_s']:.0f} events/s, first event after "
                f"{r['startup_to_first_event_s']:.3f} s, {r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB")
            res["relay"].append(r)
            return r

        def baseline_build() -> dict:
            r = system_drain(env, lambda p: Relay(env, table, pub, slots["relay_base"][i], p,
                                                  binary=Path(s.relay_baseline)), rows)
            log(f"{name} run {i + 1}: baseline relay {r['drain_events_per_s']:.0f} events/s, "
                f"{r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB")
            res["relay_base"].append(r)
            return r

        def baseline_exactly_once_build() -> dict:
            r = system_drain(env, lambda p: Relay(env, table, pub, slots["relay_base_eos"][i], p,
                                                  binary=Path(s.relay_baseline), exactly_once=True), rows)
            log(f"{name} run {i + 1}: baseline relay exactly-once {r['drain_events_per_s']:.0f} events/s, "
                f"{r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB")
            res["relay_base_eos"].append(r)
            return r

        def exactly_once_build() -> dict:
            r = system_drain(env, lambda p: Relay(env, table, pub, slots["relay_eos"][i], p, exactly_once=True),
                             rows)
            log(f"{name} run {i + 1}: relay exactly-once {r['drain_events_per_s']:.0f} events/s, "
                f"{r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB")
            res["relay_eos"].append(r)
            return r

        def contract_build(kind: str):
            key = contract_keys[kind]

            def drain() -> dict:
                r = system_drain(env, lambda p: Relay(env, table, pub, slots[key][i], p, contract=kind), rows)
                log(f"{name} run {i + 1}: relay with a {kind} contract {r['drain_events_per_s']:.0f} events/s, "
                    f"{r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB")
                res[key].append(r)
                return r
            return drain

        def parked_build() -> dict:
            # Every event handled (rows) counts: the parked ones are written
            # to the parking table instead of the topic.
            r = system_drain(env, lambda p: Relay(env, table, pub, slots["relay_parked"][i], p,
                                                  parked_table=parked_tables[i]), rows - n_parked, events=rows,
                             until=lambda: parked_count(env, parked_tables[i]) >= n_parked)
            r["check"] = check_parked_drain(env, table, parked_tables[i], r["topic"])
            c = r["check"]
            log(f"{name} run {i + 1}: relay with {PARKED_AGGREGATE} parked {r['drain_events_per_s']:.0f} events/s, "
                f"{r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB; "
                f"{c['parked_rows']} of {c['parked_expected']} events parked, {c['topic_records']} of "
                f"{c['topic_expected']} on the topic ({c['aggregates_delivered']} of {c['aggregates_expected']} "
                f"aggregates complete), {r['log_warnings']} warnings logged")
            res["relay_parked"].append(r)
            return r

        # Another build of the relay (BENCH_RELAY_BASELINE), and this build
        # with a parked aggregate, with a contract and in exactly-once mode,
        # drain the same WAL from their own slots beside this one, the order
        # reversed on every other repeat: side by side in one run, not
        # biased by which drains first. The parked drain is next to the
        # plain one either way, then the contract drains: the closest in
        # time.
        order = ([this_build] + ([parked_build] if parked else []) + [contract_build(kind) for kind in contracts]
                 + ([exactly_once_build] if exactly_once else [])
                 + ([baseline_build] if s.relay_baseline else [])
                 + ([baseline_exactly_once_build] if s.relay_baseline and exactly_once else []))
        for drain in order if i % 2 == 0 else reversed(order):
            quiet = wait_quiet(s)
            r = drain()
            if quiet is not None:
                r["quiet"] = quiet
        if s.debezium:
            for key, tuned in (("dbz_default", False), ("dbz_tuned", True)):
                r = system_drain(env, lambda p: Debezium(env, table, pub, slots[key][i], p, tuned), rows)
                log(f"{name} run {i + 1}: {r['system']} {r['drain_events_per_s']:.0f} events/s, first event after "
                    f"{r['startup_to_first_event_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MiB")
                res[key].append(r)
    if flame:
        perf_data = env.work / "perf.data"
        r = system_drain(env, lambda p: Relay(env, table, pub, slots["perf"][0], p, perf_out=perf_data), rows)
        log(f"{name}: relay under perf {r['drain_events_per_s']:.0f} events/s; folding stacks")
        res["flamegraph"] = flamegraph(perf_data)
    for group in slots.values():
        for slot in group:
            env.drop_slot(slot)
    held = "".join(f", public.{t}" for t in parked_tables)
    env.sql(f"DROP PUBLICATION {pub}; DROP TABLE public.{table}, public.{table}_orders, public.{table}_parked{held}")
    return res


# ------------------------------------------------------------------ cost curves

# The cost curves, in the order they run: what grows along each.
CURVES = ("payload", "topics", "backlog", "txn")
# The payload curve's record limits, at every point of it, so that a 1 MB
# payload (a record of about 1.0 MB with its headers) is delivered, not
# refused as too large (the relay would dead-letter it, headers only, and
# the count on the event topic would stop short): its topics are made with
# max.message.bytes = CURVE_TOPIC_MAX_BYTES; the relay's librdkafka
# message.max.bytes and Debezium's producer max.request.size are
# CURVE_PRODUCER_MAX_BYTES, below the topic's, so whatever either sends fits.
CURVE_TOPIC_MAX_BYTES = 4 * 2**20
CURVE_PRODUCER_MAX_BYTES = 2 * 2**20
# A curve drain gives up when no event arrived for this long (a 1M-row
# transaction's first event waits for PostgreSQL to decode all of it).
CURVE_STALL_SECS = 300


def curve_topic_names(prefix: str, k: int) -> list[str]:
    """The topics of `k` distinct aggregatetypes as load_curve writes them:
    `prefix.order` for one, `prefix.order0` .. `prefix.order{k-1}` otherwise."""
    return [f"{prefix}.order"] if k == 1 else [f"{prefix}.order{j}" for j in range(k)]


def load_curve(env: Env, table: str, rows: int, payload_bytes: int, topics: int, txn_rows: int) -> None:
    """`rows` outbox rows as load_backlog writes them (the same payload
    shape, padded to about `payload_bytes`), their aggregatetype cycling
    over `topics` values, committed `txn_rows` rows to a transaction."""
    payload = payload_sql(payload_bytes)
    aggregatetype = "'order'" if topics == 1 else f"'order' || (i % {topics})"
    batches = -(-rows // txn_rows)
    env.psql_script(f"""DO $$
BEGIN
  FOR b IN 0..{batches - 1} LOOP
    INSERT INTO public.{table} (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), {aggregatetype}, 'agg-' || (i % 100), 'OrderPlaced', {payload}
    FROM generate_series(b * {txn_rows}, least((b + 1) * {txn_rows}, {rows}) - 1) AS i;
    COMMIT;
  END LOOP;
END
$$;""")


def delete_topics(prefix: str, topics: int) -> None:
    """Deletes a drain's topics (`prefix.*`, about `topics` of them): the
    curves make many and large ones on a broker that may be shared, whose
    open files are limited. The controller takes at most 10,000 records a
    request: more than 5,000 topics go in two halves (by last digit)."""
    everything = re.escape(prefix) + r"\..*"
    patterns = [everything] if topics <= 5000 else [everything + "[0-4]", everything + "[^0-4]"]
    for pattern in patterns:
        r = run([str(ROOT / "scripts/services"), "topics", "--delete", "--if-exists", "--topic", pattern],
                check=False, capture_output=True)
        if r.returncode != 0:
            log(f"deleting topics {pattern}: {(r.stdout + r.stderr).strip()[-300:]}")


def wait_broker_files(topics: int, max_secs: float = 1800) -> None:
    """Waits until the broker can open a file for each of `topics` new
    partitions and 2,000 more within its open-file limit. It holds one per
    partition, and a deleted topic's until its files are removed
    (file.delete.delay.ms, one minute, then a few dozen a second here):
    two 10,000-topic drains in a row would otherwise take it past its
    limit (20,000 here) and stop it."""
    pid_file = ROOT / ".services" / "kafka.pid"
    if topics < 100 or not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        limit = next(int(line.split()[3]) for line in open(f"/proc/{pid}/limits") if line.startswith("Max open files"))
    except (OSError, StopIteration, ValueError):
        return
    if topics + 2000 > limit:
        # Waiting would not help: it would stop once past its limit.
        raise RuntimeError(f"the broker may open {limit:,} files, {topics:,} topics need {topics + 2000:,}: start "
                           f"it (scripts/services start-kafka, which it inherits from) under a higher `ulimit -n`")
    t0 = time.monotonic()
    while True:
        try:
            used = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return
        if used + topics + 2000 <= limit:
            if time.monotonic() - t0 > 5:
                log(f"the broker holds {used:,} open files: room after {time.monotonic() - t0:.0f} s")
            return
        if time.monotonic() - t0 > max_secs:
            raise RuntimeError(f"the broker holds {used:,} of its {limit:,} open files: no room for {topics:,} "
                               f"more topics after {max_secs:g} s")
        if time.monotonic() - t0 < 5:
            log(f"the broker holds {used:,} of its {limit:,} open files: waiting for room for {topics:,} topics")
        time.sleep(5)


@contextlib.contextmanager
def broker_files_turn(topics: int):
    """Held from the wait for the broker's open files (wait_broker_files)
    until a drain's topics are deleted: two benchmark runs on one broker
    (scripts/services' is shared by every clone whose .services is the
    same) that both saw room for 10,000 more partitions would otherwise
    make 20,000 at once and stop it. A lock file beside the broker's pid
    file; only drains of 100 topics or more take turns."""
    pid_file = (ROOT / ".services" / "kafka.pid").resolve()
    if topics < 100 or not pid_file.parent.is_dir():
        yield
        return
    with open(pid_file.parent / "bench-topics.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another benchmark run drains many topics on this broker: waiting for its turn")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def curve_point(env: Env, name: str, x: int, rows: int, payload_bytes: int, topics: int, txn_rows: int,
                big_records: bool, debezium: bool, bare: bool = False) -> dict:
    """One point of a cost curve: a fresh outbox and a slot per system and
    repeat, made before the load; then each system drains the same WAL.
    `bare`: the bare producers (BareProducer) too, each sending the same
    records to topics of its own, after the systems that read the WAL."""
    s = env.s
    table, pub = env.create_outbox()
    slot_keys = ["relay"] + (["dbz_default"] if debezium else [])
    keys = slot_keys + (["bare_librdkafka", "bare_window", "bare_java"] if bare else [])
    slots = {key: [env.create_slot() for _ in range(s.curve_repeat)] for key in slot_keys}
    what = (f"{rows:,} events of {payload_bytes:,} B, {topics:,} topic(s), "
            f"{txn_rows:,} row(s) a transaction")
    log(f"curve {name} = {x:,}: loading {what}")
    t0 = time.time()
    lsn0 = env.sql("SELECT pg_current_wal_insert_lsn()")
    load_curve(env, table, rows, payload_bytes, topics, txn_rows)
    wal = int(env.sql(f"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '{lsn0}')::bigint"))
    point: dict = {"x": x, "rows": rows, "payload_bytes": payload_bytes, "topics": topics, "txn_rows": txn_rows,
                   "load_s": time.time() - t0, "wal_bytes": wal, "errors": [], **{key: [] for key in keys}}
    log(f"curve {name} = {x:,}: loaded in {point['load_s']:.1f} s, {wal / 2**20:,.1f} MiB of WAL")
    relay_props = {"message.max.bytes": str(CURVE_PRODUCER_MAX_BYTES)} if big_records else None
    dbz_props = {"max.request.size": str(CURVE_PRODUCER_MAX_BYTES)} if big_records else None
    topic_config = {"max.message.bytes": str(CURVE_TOPIC_MAX_BYTES)} if big_records else None
    # Watching many topics: one ListOffsets request for all of them every
    # `interval` ms, no more often than the broker answers it lightly.
    interval = max(10, topics // 20)
    # Generous: a stalled drain ends after CURVE_STALL_SECS anyway.
    timeout = 900 + rows / 200
    try:
        for i in range(s.curve_repeat):
            for key in keys:
                prefixes: list[str] = []

                def names(prefix: str) -> list[str]:
                    prefixes.append(prefix)
                    return curve_topic_names(prefix, topics)

                if key == "relay":
                    make = lambda p: Relay(env, table, pub, slots[key][i], p, kafka_properties=relay_props)  # noqa: E731
                elif key == "dbz_default":
                    make = lambda p: Debezium(env, table, pub, slots[key][i], p, False, producer_props=dbz_props)  # noqa: E731
                else:
                    kind = key.removeprefix("bare_")
                    make = lambda p: BareProducer(env, kind, curve_topic_names(p, topics), rows, p)  # noqa: E731
                try:
                    with broker_files_turn(topics):
                        try:
                            wait_broker_files(topics)
                            r = system_drain(env, make, rows, names, topic_config, timeout, interval,
                                             CURVE_STALL_SECS, warm=s.curve_warm)
                        finally:
                            for prefix in prefixes:
                                delete_topics(prefix, topics)
                except RuntimeError as e:
                    log(f"curve {name} = {x:,} run {i + 1}: {key} failed: {e}")
                    point["errors"].append({"system": key, "run": i + 1, "error": str(e)})
                    continue
                # The drain rate over the events counted after the first
                # poll that saw one (for a small point the first poll may
                # already see many); all in one poll: at least rows per poll
                # interval (the report marks a point drained within ten polls).
                first_count = next(c for _, c in r["curve"] if c > 0)
                r["delivered"] = r["curve"][-1][1]
                r["drain_secs"] = r["curve"][-1][0]
                r["poll_s"] = interval / 1000
                del r["curve"]
                if r["drain_secs"] >= r["poll_s"] and rows > first_count:
                    r["drain_events_per_s"] = (rows - first_count) / r["drain_secs"]
                else:
                    r["drain_events_per_s"] = rows / r["poll_s"]
                point[key].append(r)
                log(f"curve {name} = {x:,} run {i + 1}: {r['system']} {r['drain_events_per_s']:,.0f} events/s, "
                    f"{r['cpu_us_per_event']:.2f} us CPU/event, peak RSS {r['peak_rss_mb']:.1f} MiB, "
                    f"{r['delivered']:,} of {rows:,} delivered")
    finally:
        for group in slots.values():
            for slot in group:
                env.drop_slot(slot)
        env.sql(f"DROP PUBLICATION {pub}; DROP TABLE public.{table}, public.{table}_orders, public.{table}_parked")
    return point


def curves_workload(env: Env, out: dict, save) -> None:
    """How the cost grows with the work: BENCH_CURVES of payload size,
    distinct topics, backlog size and transaction size, each point a
    backlog drain (curve_point) by the relay (at-least-once, this build)
    and Debezium (defaults) beside it; written into `out` point by point
    (and saved), so that a run cut short keeps what it measured. The topics
    curve has the bare producers beside them (BENCH_BARE)."""
    s = env.s
    for curve in s.curves:
        if curve == "payload":
            meta = {"x_label": "payload bytes", "events": s.curve_events, "bytes": s.curve_bytes,
                    "topic_max_bytes": CURVE_TOPIC_MAX_BYTES, "producer_max_bytes": CURVE_PRODUCER_MAX_BYTES}
            points = [(size, max(100, min(s.curve_events, s.curve_bytes // size)), size, 1, 1) for size in
                      s.curve_payloads]
        elif curve == "topics":
            meta = {"x_label": "distinct topics", "events": s.curve_events}
            points = [(k, s.curve_events, s.payload, k, 1) for k in s.curve_topics]
        elif curve == "backlog":
            meta = {"x_label": "backlog events"}
            points = [(n, n, s.payload, 1, 1) for n in s.curve_backlogs]
        elif curve == "txn":
            meta = {"x_label": "rows per transaction", "events": s.curve_txn_events}
            points = [(r, max(s.curve_txn_events, r), s.payload, 1, r) for r in s.curve_txn_rows]
        else:
            raise ValueError(f"BENCH_CURVES: unknown curve {curve!r} (one of {', '.join(CURVES)})")
        res = out[curve] = {**meta, "points": []}
        for x, rows, payload_bytes, topics, txn_rows in points:
            dbz = s.debezium and rows <= s.curve_debezium_max
            res["points"].append(curve_point(env, curve, x, rows, payload_bytes, topics, txn_rows,
                                             curve == "payload", dbz, curve == "topics" and s.bare))
            save()


STARTUP_ROWS = 100


def startup_workload(env: Env) -> dict:
    """Start-up to first event, alone: many starts of each relay build in
    each delivery mode (W3 gives only one per repeat, and its spread is wide).
    Every start is on its own slot holding the same small backlog, made
    before the load, and with topics of its own, as in W3 (the watcher
    creates the event topic; the dead-letter and checkpoint topics are new)."""
    s = env.s
    kinds = [("relay", None, False), ("relay_eos", None, True)]
    if s.relay_baseline:
        kinds += [("relay_base", Path(s.relay_baseline), False), ("relay_base_eos", Path(s.relay_baseline), True)]
    table, pub = env.create_outbox()
    slots = {key: [env.create_slot() for _ in range(s.startup_runs)] for key, _, _ in kinds}
    load_backlog(env, table, STARTUP_ROWS, False)
    res: dict = {"rows": STARTUP_ROWS, "runs": s.startup_runs}
    for i in range(s.startup_runs):
        # The order turns round every start: no mode always follows another.
        for key, binary, eos in kinds if i % 2 == 0 else list(reversed(kinds)):
            r = system_drain(env, lambda p: Relay(env, table, pub, slots[key][i], p, binary=binary,
                                                  exactly_once=eos), STARTUP_ROWS)
            res.setdefault(key, []).append(r["startup_to_first_event_s"])
        log(f"start-up {i + 1}: " + ", ".join(f"{key} {res[key][-1]:.3f} s" for key, _, _ in kinds))
    for group in slots.values():
        for slot in group:
            env.drop_slot(slot)
    env.sql(f"DROP PUBLICATION {pub}; DROP TABLE public.{table}, public.{table}_orders, public.{table}_parked")
    return res


def flamegraph(perf_data: Path) -> dict:
    folded = perf_data.with_suffix(".folded")
    with open(folded, "w") as f:
        script = subprocess.Popen(["perf", "script", "-i", str(perf_data), "-F", "comm,tid,ip,sym"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        run([sys.executable, str(BENCHES / "flamegraph.py"), "fold"], stdin=script.stdout, stdout=f)
        script.wait()
    RESULTS_DIR.mkdir(exist_ok=True)
    shutil.copy(folded, RESULTS_DIR / "flamegraph-w3.folded")
    svg = BENCHES / "flamegraph-w3.svg"
    run([sys.executable, str(BENCHES / "flamegraph.py"), "svg", "--title",
         "outbox-relay, W3 backlog drain (perf, cpu-clock, DWARF)", str(folded), str(svg)])
    top = json.loads(run([sys.executable, str(BENCHES / "flamegraph.py"), "top", str(folded)],
                         capture_output=True).stdout)
    return {"svg": str(svg.relative_to(ROOT)), "top": top}


def live_system(env: Env, kind: str, rates: list[int], secs: float, warmup: float, stop_on_unbounded: bool) -> list[dict]:
    """Starts one system on a fresh slot and runs open-loop steps at `rates`."""
    table, pub = env.create_outbox()
    slot = env.create_slot()
    prefix = env.name("live")
    if kind in ("relay", "relay_eos"):
        sut = Relay(env, table, pub, slot, prefix, exactly_once=(kind == "relay_eos"))
    elif kind in ("relay_base", "relay_base_eos"):
        sut = Relay(env, table, pub, slot, prefix, binary=Path(env.s.relay_baseline),
                    exactly_once=(kind == "relay_base_eos"))
    else:
        sut = Debezium(env, table, pub, slot, prefix, tuned=(kind == "dbz_tuned"))
    steps = []
    try:
        ready = wait_streaming(env, sut, table)
        log(f"{sut.label} streaming {ready - sut.spawned:.2f} s after start")
        if env.s.system_warmup > 0:
            # Left out: a JVM that just started (or a relay's first batches)
            # would otherwise be measured in the first step only.
            r = latency_step(env, table, rates[0], env.s.system_warmup, 0.0, "kafka", sut.topic)
            c = r["commit_to_consume"] or {}
            log(f"{sut.label} warm-up at {rates[0]}/s for {env.s.system_warmup:g} s (left out): "
                f"p99 {c.get('p99_us', 0) / 1e3:.1f} ms")
        for rate in rates:
            r = latency_step(env, table, rate, secs, warmup, "kafka", sut.topic, slot_for_lag=slot)
            t0, t1 = r["load_window"]
            r["rate"] = rate
            r["cpu_s"] = sut.sampler.cpu_between(t0 + warmup, t1)
            r["max_rss_mb"] = sut.sampler.max_rss_between(t0, t1) / 2**20
            r["sustained"] = sustained(r, rate, secs)
            c = r["commit_to_consume"] or {}
            log(f"{sut.label} @ {rate}/s: p50 {c.get('p50_us', 0) / 1e3:.2f} ms p99 {c.get('p99_us', 0) / 1e3:.2f} ms "
                f"max {c.get('max_us', 0) / 1e3:.1f} ms, writer reached {r.get('commit_rate', 0):.0f}/s, lost {r['lost']}, "
                f"sustained={r['sustained']}")
            steps.append(r)
            if stop_on_unbounded and not r["sustained"]:
                break
    finally:
        sut.stop()
        env.drop_slot(slot)
    return steps


def sustained(r: dict, rate: int, secs: float) -> bool:
    """Lag stays bounded: the writer kept the rate (its commits, not its
    schedule, span the window at >= 95 % of it), nothing was lost, and the
    step's last quarter's p99 commit-to-consume latency is under a second.
    End-to-end lag is judged rather than slot lag because Debezium confirms
    its slot only when Connect flushes offsets; slot lag is reported beside."""
    if r["lost"] or r.get("commit_rate", 0) < 0.95 * rate:
        return False
    q = [x for x in r["quarters_p99_us"] if x is not None]
    if not q or q[-1] > 1_000_000:
        return False
    return True


def baseline_try(res: dict, key: str, rate: int, run_no: int, step) -> dict | None:
    """A producer-alone baseline step, tried twice: a baseline that fails
    (a Java client that could not reach its coordinator in time, say) is
    logged and kept in res["errors"], and the run goes on to the relay's
    own steps instead of ending without them."""
    for attempt in (1, 2):
        try:
            return step()
        except (RuntimeError, subprocess.SubprocessError, ValueError, IndexError) as e:
            log(f"{key} @ {rate}/s run {run_no}: attempt {attempt} failed: {e}")
            error = str(e)
    res["errors"].append({"system": key, "rate": rate, "run": run_no, "error": error})
    return None


def w1(env: Env) -> dict:
    s = env.s
    res: dict = {"broker": {}, "broker_now": {}, "broker_writers": {}, "broker_txn": {}, "broker_txn_java": {}, "perf_txn": {},
                 "postgres": {}, "relay": {}, "relay_eos": {}, "relay_base": {}, "relay_base_eos": {},
                 "dbz_default": {}, "dbz_tuned": {}, "errors": []}
    # Exactly-once delivery at one moderate rate: its latency adds up to
    # kafka.transaction_max_ms (100 ms) and a commit to at-least-once's.
    eos_rates = [r for r in s.w1_rates if r == 1000] or s.w1_rates[:1]
    for i in range(s.repeat):
        for rate in s.w1_rates:
            r = broker_step(env, rate, s.w1_secs, s.w1_warmup)
            c = r["commit_to_consume"] or {}
            log(f"broker alone @ {rate}/s run {i + 1}: p50 {c.get('p50_us', 0) / 1e3:.2f} ms p99 {c.get('p99_us', 0) / 1e3:.2f} ms")
            res["broker"].setdefault(rate, []).append(r)
            # The same producer without a linger: what a record sent the
            # moment it is due costs librdkafka and the broker at this rate,
            # the floor under the relay's steady-state CPU per event.
            r = broker_step(env, rate, s.w1_secs, s.w1_warmup, linger_ms="0")
            c = r["commit_to_consume"] or {}
            log(f"broker alone, linger 0, @ {rate}/s run {i + 1}: p50 {c.get('p50_us', 0) / 1e3:.2f} ms "
                f"p99 {c.get('p99_us', 0) / 1e3:.2f} ms")
            res["broker_now"].setdefault(rate, []).append(r)
        # The transactional producers alone, beside the relay's exactly-once
        # mode (at its rate only).
        for rate in eos_rates:
            for kind, txn in (("broker_txn", "librdkafka"), ("broker_txn_java", "java")):
                r = baseline_try(res, kind, rate, i + 1,
                                 lambda: broker_step(env, rate, s.w1_secs, s.w1_warmup, txn=txn))  # noqa: B023
                if r is None:
                    continue
                c = r["commit_to_consume"] or {}
                log(f"{kind} @ {rate}/s run {i + 1}: p50 {c.get('p50_us', 0) / 1e3:.2f} ms "
                    f"p99 {c.get('p99_us', 0) / 1e3:.2f} ms ({r.get('producer_said', '')})")
                res[kind].setdefault(rate, []).append(r)
            r = baseline_try(res, "perf_txn", rate, i + 1,
                             lambda: kafka_perf_txn(env, rate, s.w1_secs + s.w1_warmup))  # noqa: B023
            if r is not None:
                log(f"kafka-producer-perf-test, a transaction a record, @ {rate}/s run {i + 1}: {r['line']}")
                res["perf_txn"].setdefault(rate, []).append(r)
        table, _ = env.create_outbox()
        for rate in s.w1_rates:
            # No slot on this table yet: the writers' load without a reader.
            r = broker_step(env, rate, s.w1_secs, s.w1_warmup, writers_into=table)
            c = r["commit_to_consume"] or {}
            log(f"broker alone beside the writers @ {rate}/s run {i + 1}: p50 {c.get('p50_us', 0) / 1e3:.2f} ms "
                f"p99 {c.get('p99_us', 0) / 1e3:.2f} ms")
            res["broker_writers"].setdefault(rate, []).append(r)
        for rate in s.w1_rates:
            r = latency_step(env, table, rate, s.w1_secs, s.w1_warmup, "postgres")
            c = r["commit_to_consume"] or {}
            log(f"PostgreSQL only @ {rate}/s run {i + 1}: p50 {c.get('p50_us', 0) / 1e3:.2f} ms p99 {c.get('p99_us', 0) / 1e3:.2f} ms")
            res["postgres"].setdefault(rate, []).append(r)
        # The baseline build (BENCH_RELAY_BASELINE) right after this one,
        # on the same load, the order reversed on every other repeat.
        relays = ["relay"] + (["relay_base"] if s.relay_baseline else [])
        kinds = (relays if i % 2 == 0 else relays[::-1]) + (["dbz_default", "dbz_tuned"] if s.debezium else [])
        for kind in kinds:
            for r in live_system(env, kind, s.w1_rates, s.w1_secs, s.w1_warmup, False):
                res[kind].setdefault(r["rate"], []).append(r)
        # Exactly-once, and the baseline build's beside it when given.
        eos = ["relay_eos"] + (["relay_base_eos"] if s.relay_baseline else [])
        for kind in eos if i % 2 == 0 else eos[::-1]:
            for r in live_system(env, kind, eos_rates, s.w1_secs, s.w1_warmup, False):
                res[kind].setdefault(r["rate"], []).append(r)
    return res


def w2(env: Env) -> dict:
    s = env.s
    res: dict = {}
    kinds = ["relay"] + (["dbz_default", "dbz_tuned"] if s.debezium else [])
    for kind in kinds:
        res[kind] = []
        for i in range(s.repeat):
            steps = live_system(env, kind, s.w2_rates, s.w2_secs, 1.0, True)
            ok = [st["rate"] for st in steps if st["sustained"]]
            res[kind].append({"max_sustained": max(ok) if ok else 0, "steps": steps,
                              "limit_reached": all(st["sustained"] for st in steps)})
            log(f"W2 {kind} run {i + 1}: max sustained {res[kind][-1]['max_sustained']}/s")
    return res


# ------------------------------------------------------------------ setup


def build(env_settings: Settings) -> None:
    log("building release binaries (outbox-relay, outbox-loadgen, outbox-latency)")
    run(["cargo", "build", "--release", "--quiet", "--bin", "outbox-relay", "--bin", "outbox-loadgen",
         "--example", "outbox-latency"], cwd=ROOT)


def ensure_debezium_jars() -> None:
    stamp = DEBEZIUM_LIBS / ".complete"
    pom = DEBEZIUM_DIR / "pom.xml"
    if stamp.exists() and stamp.stat().st_mtime >= pom.stat().st_mtime:
        return
    log("fetching Kafka Connect and Debezium jars from Maven Central (first run only)")
    shutil.rmtree(DEBEZIUM_LIBS, ignore_errors=True)
    run(["mvn", "-B", "-q", "dependency:copy-dependencies", "-DoutputDirectory=target/libs",
         "-DincludeScope=runtime"], cwd=DEBEZIUM_DIR)
    stamp.touch()


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        log("creating the plotting venv (matplotlib from PyPI)")
        run([sys.executable, "-m", "venv", str(VENV)])
    r = run([str(py), "-c", "import matplotlib"], check=False, capture_output=True)
    if r.returncode != 0:
        run([str(py), "-m", "pip", "install", "-q", "matplotlib"])
    return py


def machine(env: "Env") -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))

    def ver(cmd: list[str]) -> str:
        try:
            return run(cmd, capture_output=True, check=False).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"

    java = run(["java", "-version"], capture_output=True, check=False).stderr.strip().splitlines()[0]
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem / 2**20, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
        "postgres": env.sql("SHOW server_version"),
        "rustc": ver(["rustc", "--version"]),
        "java": java,
        "kafka": "4.1.1 (broker, Connect, ProducerPerformance)",
        "debezium": "3.6.1.Final (debezium-connector-postgres, EventRouter)",
        "relay_commit": run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True).stdout.strip(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    ap.add_argument("--only", help="comma list of ceilings,w1,w2,w3,w4,curves,startup")
    ap.add_argument("--no-debezium", action="store_true")
    ap.add_argument("--report-only", help="re-render RESULTS.md from a raw JSON file")
    args = ap.parse_args()
    if args.report_only:
        sys.path.insert(0, str(BENCHES))
        import report

        report.render(json.loads(Path(args.report_only).read_text()), ensure_venv(), Path(args.report_only))
        return
    s = Settings.from_env(args.quick, args.only, args.no_debezium)
    py = ensure_venv()
    if s.debezium:
        ensure_debezium_jars()
    build(s)
    env = Env(s)
    os.environ["PGCONNECT_TIMEOUT"] = "10"
    info = machine(env)
    info["loadavg_at_start"] = os.getloadavg()
    log(f"settings: {asdict(s)}")
    started = time.time()
    results: dict = {"settings": asdict(s), "machine": info, "started": started,
                     "command": "make bench-quick" if s.quick else "make bench"}
    raw = RESULTS_DIR / f"raw-{time.strftime('%Y%m%d-%H%M%S')}.json"
    RESULTS_DIR.mkdir(exist_ok=True)

    def save() -> None:
        raw.write_text(json.dumps(results, indent=1, default=str))

    try:
        if "ceilings" in s.workloads:
            results["broker_ceiling"] = ceiling_broker(env)
            save()
        if "w3" in s.workloads:
            contracts = (("json",) if s.contract else ()) + (("avro",) if s.contract_avro else ())
            results["w3"] = backlog_workload(env, "W3", s.w3_rows, False, s.flamegraph, True, contracts,
                                             s.w3_aggregates, s.parked)
            save()
        if "w4" in s.workloads:
            results["w4"] = backlog_workload(env, "W4", s.w4_rows, True, False, False)
            save()
        if "w1" in s.workloads:
            results["w1"] = w1(env)
            save()
        if "w2" in s.workloads:
            results["w2"] = w2(env)
            save()
        if "curves" in s.workloads:
            curves_workload(env, results.setdefault("curves", {}), save)
            save()
        if "startup" in s.workloads:
            results["startup"] = startup_workload(env)
            save()
    finally:
        results["elapsed_s"] = time.time() - started
        results["loadavg_at_end"] = os.getloadavg()
        save()
        log(f"raw results: {raw}")
    sys.path.insert(0, str(BENCHES))
    import report

    report.render(results, py, raw)
    shutil.rmtree(env.work, ignore_errors=True)


if __name__ == "__main__":
    main()
