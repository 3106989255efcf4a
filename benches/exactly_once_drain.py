#!/usr/bin/env python3
"""The cost of exactly-once delivery: one backlog drained at-least-once and
exactly-once, back to back, on this worktree's services.

    eval "$(scripts/services env)"
    benches/exactly_once_drain.py [--rows 100000] [--repeat 3] [--relay PATH]

Each repeat creates two slots, then commits the backlog (transactions of 10
outbox rows), so both slots hold the same WAL; then one relay drains each
slot in turn (the order alternates between repeats, so a machine getting
busier does not favour one mode). A drain is timed from the relay's
"streaming from the slot" line to the slot's confirmed_flush_lsn reaching
the WAL position after the backlog: for exactly-once that is the last Kafka
commit, for at-least-once the last acknowledgement. Prints each pair and
the ratio of the rates (exactly-once / at-least-once); no figure is
asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def psql(sql: str) -> str:
    bindir = os.environ.get("PG_BINDIR", "")
    psql_bin = str(Path(bindir) / "psql") if bindir else "psql"
    out = subprocess.run(
        [psql_bin, os.environ["PG_URL"], "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def drain(
    relay: Path, work: Path, table: str, pub: str, slot: str, target: int, mode: str, max_ms: int | None
) -> float:
    prefix = f"bench_{uuid.uuid4().hex[:8]}"
    conf = work / f"{prefix}.toml"
    extra = ""
    if mode == "exactly-once":
        extra = f'delivery = "exactly-once"\ncheckpoint_topic = "{prefix}.checkpoints"\n'
        if max_ms is not None:
            extra += f"transaction_max_ms = {max_ms}\n"
    conf.write_text(
        f"""[postgres]
url = "{os.environ['PG_RELAY_URL']}"
slot = "{slot}"
publication = "{pub}"
table = "public.{table}"
heartbeat_interval_secs = 0
status_interval_secs = 1
[kafka]
brokers = "{os.environ['KAFKA_BROKERS']}"
topic = "{prefix}.{{aggregatetype}}"
dlq_topic = "{prefix}.dlq"
{extra}[cloudevents]
source = "/bench"
"""
    )
    log = work / f"{prefix}.log"
    if mode == "exactly-once":
        # The relay refuses to start without its checkpoint topic; init
        # creates it (the publication and the slot exist already).
        subprocess.run(
            [str(relay), "init", "--config", str(conf)], check=True, stdout=subprocess.DEVNULL
        )
    proc = subprocess.Popen(
        [str(relay), "run", "--config", str(conf)],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "RUST_LOG": "info"},
    )
    try:
        deadline = time.monotonic() + 120
        while "streaming from the slot" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{mode} relay did not start:\n{log.read_text()}")
            time.sleep(0.02)
        started = time.monotonic()
        while True:
            confirmed = psql(
                f"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
            )
            if lsn(confirmed) >= target:
                return time.monotonic() - started
            if proc.poll() is not None or time.monotonic() - started > 1800:
                raise RuntimeError(f"{mode} relay did not drain:\n{log.read_text()[-4000:]}")
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--transaction-max-ms", type=int, default=None, help="kafka.transaction_max_ms (default: the relay's)"
    )
    parser.add_argument(
        "--relay",
        type=Path,
        default=Path(os.environ.get("CARGO_TARGET_DIR", "/work/target-wt-eos")) / "debug" / "outbox-relay",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eos_drain_"))
    table = f"bench_{uuid.uuid4().hex[:8]}"
    pub = f"{table}_pub"
    psql(
        f"""CREATE TABLE public.{table} (id uuid PRIMARY KEY, aggregatetype text NOT NULL,
        aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL);
        GRANT SELECT ON public.{table} TO relay;
        CREATE PUBLICATION {pub} FOR TABLE public.{table} WITH (publish = 'insert');"""
    )
    ratios = []
    try:
        for repeat in range(args.repeat):
            slots = {}
            for mode in ("at-least-once", "exactly-once"):
                slot = f"{table}_{mode[:5].replace('-', '')}_{repeat}"
                psql(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
                slots[mode] = slot
            txns = args.rows // 10
            psql(
                f"""DO $$ BEGIN FOR t IN 1..{txns} LOOP
                INSERT INTO public.{table} SELECT gen_random_uuid(), 'order', (t % 100)::text,
                  'Created', jsonb_build_object('n', t, 'pad', repeat('x', 200))
                FROM generate_series(1, 10);
                COMMIT; END LOOP; END $$;"""
            )
            target = lsn(psql("SELECT pg_current_wal_lsn()"))
            order = ["at-least-once", "exactly-once"]
            if repeat % 2:
                order.reverse()
            secs = {}
            for mode in order:
                secs[mode] = drain(
                    args.relay, work, table, pub, slots[mode], target, mode, args.transaction_max_ms
                )
                psql(f"SELECT pg_drop_replication_slot('{slots[mode]}')")
            rate = {m: args.rows / s for m, s in secs.items()}
            ratio = rate["exactly-once"] / rate["at-least-once"]
            ratios.append(ratio)
            print(
                f"repeat {repeat}: at-least-once {secs['at-least-once']:.1f} s "
                f"({rate['at-least-once']:.0f} rows/s), exactly-once {secs['exactly-once']:.1f} s "
                f"({rate['exactly-once']:.0f} rows/s), ratio {ratio:.2f}",
                flush=True,
            )
    finally:
        psql(f"DROP PUBLICATION IF EXISTS {pub}; DROP TABLE IF EXISTS public.{table}")
    print(
        f"ratio exactly-once/at-least-once: median {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {len(ratios)} repeats"
    )


if __name__ == "__main__":
    main()
