"""Answers each JSON line {"module": NAME} with {"version": ...}: the
installed version of the distribution that provides that importable
module. The differential tests' check that the reference implementations
are there."""
import importlib
import importlib.metadata
import json
import sys

DISTRIBUTIONS = {"google.protobuf": "protobuf", "confluent_kafka": "confluent-kafka"}

for line in sys.stdin:
    name = json.loads(line)["module"]
    importlib.import_module(name)
    version = importlib.metadata.version(DISTRIBUTIONS.get(name, name))
    print(json.dumps({"version": version}), flush=True)
