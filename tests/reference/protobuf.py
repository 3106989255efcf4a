"""The reference for the Protobuf differential test: Google's
json_format.Parse into the message class of a .proto compiled by protoc
(grpc_tools), then SerializeToString(deterministic=True).

Reads JSON lines {"schema": K, "proto": TEXT?, "message": NAME,
"payload": TEXT}; a schema's text comes with its first case only. Answers
one line per case: {"ok": HEX} with the bytes, or {"err": WHY} where the
reference refuses the payload (json_format's ParseError, or serialization
refusing a message without its proto2 required fields)."""
import json
import os
import sys
import tempfile

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_tools import protoc

INCLUDE = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
WORK = tempfile.mkdtemp(prefix="outbox-reference-protobuf-")
POOLS = {}


def compile_schema(key, text):
    """The descriptor pool of one schema: protoc to a descriptor set with
    its imports, each file added to a pool of its own."""
    source = os.path.join(WORK, "schema%s.proto" % key)
    with open(source, "w", encoding="utf-8") as f:
        f.write(text)
    out = os.path.join(WORK, "schema%s.pb" % key)
    # protoc's warnings (an unused import) go to a file, shown on failure.
    log = os.path.join(WORK, "protoc.log")
    saved = os.dup(2)
    with open(log, "w") as f:
        os.dup2(f.fileno(), 2)
        try:
            code = protoc.main(["protoc", "-I" + WORK, "-I" + INCLUDE, "--include_imports",
                                "--descriptor_set_out=" + out, source])
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    if code != 0:
        with open(log, encoding="utf-8") as f:
            sys.stderr.write(f.read())
        raise SystemExit("protoc refused schema %s" % key)
    with open(out, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


def answer(case):
    key = case["schema"]
    if "proto" in case:
        POOLS[key] = compile_schema(key, case["proto"])
    pool = POOLS[key]
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(case["message"]))
    message = cls()
    try:
        json_format.Parse(case["payload"], message, descriptor_pool=pool)
        return {"ok": message.SerializeToString(deterministic=True).hex()}
    except Exception as e:  # every refusal is a refusal; its kind is the text
        why = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
        # The text may quote a lone surrogate, which a JSON line cannot carry.
        return {"err": why.encode("ascii", "backslashreplace").decode("ascii")}


for line in sys.stdin:
    print(json.dumps(answer(json.loads(line))), flush=False)
sys.stdout.flush()
