#!/usr/bin/env python3
"""Where a relay's CPU goes at a steady rate, thread by thread.

    benches/tools/thread_cost.py <outbox-relay binary> <events/s> [seconds] [more binaries...]

For each binary, on the services of `scripts/services up`: a fresh outbox
table, publication and slot; the relay started on them (at-least-once,
defaults); `outbox-loadgen --open-loop` at the rate (eight connections,
500-byte payloads, one single-row transaction per event); after a 3 s
warm-up, the CPU time and the context switches (voluntary and not) of each
of the relay's threads over the measured seconds (default 10), from
/proc/<pid>/task/*/stat and status, per event. Binaries given together run
one after the other on the same services, so their figures compare side by
side. A measurement, not a test: nothing is asserted.

Needs target/release/outbox-loadgen (`cargo build --release --bin
outbox-loadgen`). Used for benches/cpu-notes.md's twenty-sixth round.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def services_env() -> dict[str, str]:
    out = subprocess.run([str(ROOT / "scripts" / "services"), "env"], capture_output=True, text=True,
                         check=True).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


def psql(url: str, script: str) -> None:
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url], input=script, text=True,
                   check=True, capture_output=True)


def threads(pid: int) -> dict[str, tuple[int, int]]:
    """Thread id:name -> (CPU ticks, context switches)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            base = f"/proc/{pid}/task/{tid}"
            name = Path(f"{base}/comm").read_text().strip()
            stat = Path(f"{base}/stat").read_text().rsplit(")", 1)[1].split()
            switches = sum(int(line.split()[1]) for line in Path(f"{base}/status").read_text().splitlines()
                           if "ctxt_switches" in line)
            out[f"{tid}:{name}"] = (int(stat[11]) + int(stat[12]), switches)
        except FileNotFoundError:
            pass
    return out


def measure(binary: str, rate: int, secs: float, env: dict[str, str]) -> None:
    name = "tc" + uuid.uuid4().hex[:8]
    work = Path(f"/tmp/{name}")
    work.mkdir()
    psql(env["PG_URL"], f"""
CREATE TABLE public.{name} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
  type text NOT NULL, payload jsonb NOT NULL, "timestamp" timestamptz NOT NULL DEFAULT now());
GRANT SELECT, INSERT ON public.{name} TO relay;
CREATE PUBLICATION {name}_pub FOR TABLE public.{name} WITH (publish = 'insert');
SELECT 1 FROM pg_create_logical_replication_slot('{name}_slot', 'pgoutput');
""")
    parked = (ROOT / "sql" / "outbox_parked.sql").read_text().replace("outbox_parked", f"{name}_parked")
    psql(env["PG_URL"], parked + f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.{name}_parked TO relay;\n")
    config = work / "relay.toml"
    config.write_text(f"""[postgres]
url = "{env['PG_RELAY_URL']}"
slot = "{name}_slot"
publication = "{name}_pub"
table = "public.{name}"
heartbeat_interval_secs = 0
[kafka]
brokers = "{env['KAFKA_BROKERS']}"
topic = "{name}.{{aggregatetype}}"
dlq_topic = "{name}.dlq"
[cloudevents]
source = "/bench"
""")
    relay = subprocess.Popen([binary, "run", "--config", str(config)], stdout=open(work / "relay.log", "w"),
                             stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"})
    loadgen = str(ROOT / "target" / "release" / "outbox-loadgen")

    def load(at: int, seconds: float) -> subprocess.Popen:
        return subprocess.Popen([loadgen, "--url", env["PG_URL"], "--table", f"public.{name}", "--open-loop",
                                 "--rate", str(at), "--duration-secs", str(int(seconds)), "--events", "0",
                                 "--connections", "8", "--payload-bytes", "500"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    try:
        load(200, 3).wait()  # the topic exists and the producer knows it
        writer = load(rate, secs + 4)
        time.sleep(3)  # the rate is steady (a warm-up, left out)
        t0, before = time.monotonic(), threads(relay.pid)
        time.sleep(secs)
        t1, after = time.monotonic(), threads(relay.pid)
        writer.wait()
        events = rate * (t1 - t0)
        print(f"{binary} at {rate}/s over {t1 - t0:.1f} s:")
        total_cpu = total_switches = 0.0
        for key, (cpu, switches) in sorted(after.items()):
            cpu0, switches0 = before.get(key, (0, 0))
            us = (cpu - cpu0) / CLK_TCK * 1e6 / events
            per = (switches - switches0) / events
            total_cpu += us
            total_switches += per
            if us or per:
                print(f"  {key:28s} {us:7.1f} µs/event {per:5.2f} switches/event")
        print(f"  {'all threads':28s} {total_cpu:7.1f} µs/event {total_switches:5.2f} switches/event")
    finally:
        relay.terminate()
        relay.wait()
        psql(env["PG_URL"], f"SELECT pg_drop_replication_slot('{name}_slot');")


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, rate = sys.argv[1], int(sys.argv[2])
    secs = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    env = services_env()
    for b in [binary] + sys.argv[4:]:
        measure(b, rate, secs, env)


if __name__ == "__main__":
    main()
