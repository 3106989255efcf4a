#!/usr/bin/env python3
"""How many records each key has on a topic (partition 0, from the start up
to its high watermark at the time of the call), as one JSON object
{"records": n, "keys": {key: count}} on stdout. Run with scripts/services'
Python (it has confluent-kafka): benches/run.py checks with it that a
drain delivered every event it should and none it should not."""

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--timeout-secs", type=float, default=300)
    args = ap.parse_args()
    consumer = Consumer({"bootstrap.servers": args.brokers, "group.id": "bench-topic-keys",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    tp = TopicPartition(args.topic, 0)
    low, high = consumer.get_watermark_offsets(tp, timeout=30)
    consumer.assign([TopicPartition(args.topic, 0, low)])
    keys: dict[str, int] = {}
    records = 0
    offset = low
    deadline = time.monotonic() + args.timeout_secs
    while offset < high:
        # consume() returns after a second with what it has: the last
        # batch is short.
        batch = consumer.consume(10_000, timeout=1)
        if time.monotonic() > deadline:
            sys.exit(f"{args.topic}: at offset {offset} of {high} after {args.timeout_secs:g} s")
        for msg in batch:
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    continue
                sys.exit(f"{args.topic}: {msg.error()}")
            offset = msg.offset() + 1
            if msg.offset() >= high:
                continue
            records += 1
            key = (msg.key() or b"").decode(errors="replace")
            keys[key] = keys.get(key, 0) + 1
    consumer.close()
    json.dump({"records": records, "keys": keys}, sys.stdout)


if __name__ == "__main__":
    main()
