#!/usr/bin/env python3
"""pgoutput's text and binary modes side by side: the walsender's CPU per
event for the same WAL, with no relay in the way.

    eval "$(scripts/services env)"
    benches/binary_mode.py [--rows 200000] [--pairs 3]

Makes an outbox table of the W3 shape and one slot per mode and pair, all
before the load; commits `rows` single-row transactions (500-byte jsonb
payloads); then drains each slot with `pg_recvlogical` (pgoutput,
proto_version 1, to /dev/null), text and binary in turn, the order turning
round every pair. The walsender's CPU is read from /proc while it streams.
Prints each drain and the medians; no figure is asserted. Drops what it made.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

TCK = os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    url = os.environ["PG_URL"] + "?sslmode=disable"

    def sql(q: str) -> str:
        return subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", url, "-c", q],
                              check=True, capture_output=True, text=True).stdout.strip()

    t = f"binmode_{os.getpid()}"
    sql(f"""CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
      type text NOT NULL, payload jsonb NOT NULL, "timestamp" timestamptz NOT NULL DEFAULT now())""")
    sql(f"CREATE PUBLICATION {t}_pub FOR TABLE {t} WITH (publish = 'insert')")
    pairs = []
    for i in range(args.pairs):
        pair = []
        for mode in ("text", "binary"):
            slot = f"{t}_{mode}_{i}"
            sql(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
            pair.append((mode, slot))
        pairs.append(pair if i % 2 == 0 else pair[::-1])
    payload = ("jsonb_build_object('n', i, 'aggregate', 'agg-' || (i % 100), 'seq', i / 100 + 1, "
               "'total', 42.5, 'pad', repeat('x', 410))")
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url], check=True, text=True, input=f"""
DO $$ BEGIN FOR i IN 0..{args.rows - 1} LOOP
  INSERT INTO {t} (id, aggregatetype, aggregateid, type, payload)
  VALUES (gen_random_uuid(), 'order', 'agg-' || (i % 100), 'OrderPlaced', {payload});
  COMMIT;
END LOOP; END $$;""")
    end = sql("SELECT pg_current_wal_lsn()")
    results: dict[str, list[float]] = {"text": [], "binary": []}
    try:
        for pair in pairs:
            for mode, slot in pair:
                opts = ["-o", "proto_version=1", "-o", f"publication_names={t}_pub"]
                if mode == "binary":
                    opts += ["-o", "binary=true"]
                start = time.time()
                proc = subprocess.Popen(["pg_recvlogical", "-d", url, "--slot", slot, "--start", "--endpos", end,
                                         "--no-loop", "-f", "/dev/null", "-F", "0", *opts])
                walsender, cpu = None, None
                while proc.poll() is None:
                    if walsender is None:
                        pid = sql(f"SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{slot}' "
                                  "AND active_pid IS NOT NULL")
                        walsender = int(pid) if pid else None
                    if walsender is not None:
                        try:
                            fields = open(f"/proc/{walsender}/stat").read().rsplit(")", 1)[1].split()
                            cpu = (int(fields[11]) + int(fields[12])) / TCK
                        except OSError:
                            pass
                    time.sleep(0.02)
                if proc.returncode != 0 or cpu is None:
                    raise SystemExit(f"{mode} drain of {slot} failed (exit {proc.returncode})")
                secs = time.time() - start
                results[mode].append(cpu / args.rows * 1e6)
                print(f"{mode:6} {slot}: walsender {cpu / args.rows * 1e6:.2f} µs/event, "
                      f"{args.rows / secs:,.0f} events/s", flush=True)
    finally:
        for pair in pairs:
            for _, slot in pair:
                sql(f"SELECT pg_drop_replication_slot('{slot}')")
        sql(f"DROP PUBLICATION {t}_pub")
        sql(f"DROP TABLE {t}")
    for mode, values in results.items():
        if values:
            print(f"{mode}: median walsender {statistics.median(values):.2f} µs/event over {len(values)} drains")


if __name__ == "__main__":
    main()
