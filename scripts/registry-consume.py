#!/usr/bin/env python3
"""Reads records from a Kafka topic with the official Confluent
deserializers (confluent-kafka's AvroDeserializer or JSONDeserializer,
given the schema registry, or its ProtobufDeserializer, given the message
class protoc generates from a .proto file) and prints each value as one
JSON line.

What a Python consumer of the relay's events would do: if this decodes a
record, so does any client that follows Confluent's wire format and asks the
registry for the writer's schema by the id in the record.

    scripts/services registry-consume TOPIC [--max N] [--timeout SECS] [--format avro|json]
    scripts/services registry-consume TOPIC --format protobuf --proto FILE.proto --message NAME

(`scripts/services` runs it in its virtualenv with the brokers and the
registry of the running services.) Exits 0 after N records, 1 when fewer
came within SECS, 2 when one could not be decoded (the reason on stderr).

A Protobuf message is printed as protobuf's json_format writes it with
proto field names (64-bit integers as strings, default values left out).
Values JSON cannot hold are printed as: bytes as base64 (as outbox-relay
reads `bytes` and `fixed` from a JSON payload), decimals as strings,
dates and times in ISO 8601, UUIDs as strings.
"""

import argparse
import base64
import datetime
import decimal
import importlib
import json
import os
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from google.protobuf import json_format
from confluent_kafka.serialization import MessageField, SerializationContext


def plain(value):
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot print a {type(value).__name__} as JSON")


def protoc_message_class(proto, name):
    """The class protoc generates for message `name` (its short name) of
    `proto`, as a consumer's build would make it."""
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="registry-consume-")
    directory, file_name = os.path.split(os.path.abspath(proto))
    # Google's well-known types (timestamp.proto, ...) ship with grpc_tools.
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    command = ["protoc", f"-I{directory}", f"-I{well_known}", f"--python_out={out}", file_name]
    if protoc.main(command) != 0:
        raise SystemExit(f"registry-consume: protoc could not compile {proto}")
    sys.path.insert(0, out)
    module = importlib.import_module(file_name[: -len(".proto")] + "_pb2")
    return getattr(module, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("topic")
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--registry", required=True, help="the registry's base URL")
    parser.add_argument("--max", type=int, default=1, help="records to read (default 1)")
    parser.add_argument("--timeout", type=float, default=30, help="seconds in all (default 30)")
    parser.add_argument("--format", choices=["avro", "json", "protobuf"], default="avro")
    parser.add_argument("--proto", help="protobuf: the .proto file of the message")
    parser.add_argument("--message", help="protobuf: the message's name in it")
    args = parser.parse_args()

    registry = SchemaRegistryClient({"url": args.registry})
    to_json = lambda value: value  # noqa: E731
    if args.format == "avro":
        deserializer = AvroDeserializer(registry)
    elif args.format == "protobuf":
        if not args.proto or not args.message:
            parser.error("--format protobuf needs --proto and --message")
        message_class = protoc_message_class(args.proto, args.message)
        # As Confluent's Protobuf consumer example: the generated class, no
        # registry (a Protobuf record needs none to be read).
        deserializer = ProtobufDeserializer(message_class, {"use.deprecated.format": False})
        to_json = lambda value: json_format.MessageToDict(  # noqa: E731
            value, preserving_proto_field_name=True
        )
    else:
        # No schema given: the writer's, by the id in each record.
        deserializer = JSONDeserializer(None, schema_registry_client=registry)
    consumer = Consumer(
        {
            "bootstrap.servers": args.brokers,
            "group.id": f"registry-consume-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([args.topic])
    context = SerializationContext(args.topic, MessageField.VALUE)
    read = 0
    deadline = time.monotonic() + args.timeout
    try:
        while read < args.max and time.monotonic() < deadline:
            message = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
            if message is None:
                continue
            if message.error():
                print(f"registry-consume: {message.error()}", file=sys.stderr)
                continue
            try:
                value = deserializer(message.value(), context)
            except Exception as e:  # the reason, never the record
                print(
                    f"registry-consume: record at offset {message.offset()} of partition "
                    f"{message.partition()}: {type(e).__name__}: {e}",
                    file=sys.stderr,
                )
                return 2
            print(json.dumps(to_json(value), default=plain, sort_keys=True), flush=True)
            read += 1
    finally:
        consumer.close()
    if read < args.max:
        print(
            f"registry-consume: {read} of {args.max} records on {args.topic} within {args.timeout}s",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
