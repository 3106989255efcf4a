"""The reference for the relay's Avro encoder: fastavro, as Confluent's
Python AvroSerializer drives it (the schema loaded through the serializer's
own `parse_schema_with_repo`, the record written by `schemaless_writer`
with the serializer's default options; the body, without the 5-byte frame).

Each input line is a case {"schema": TEXT, "payload": TEXT, "relay": HEX or
null}; each output line answers it:

* {"ref": "ok", "hex": HEX, "same_value": BOOL}: the reference wrote HEX;
  same_value says whether the relay's bytes, if any and different, decode
  (by fastavro) to a strictly equal value (floats bit for bit). Where the
  value meets a known fault of the reference (a fixed decimal -0, which
  fastavro writes as a negative number), "fault" names it and "fixed_hex"
  is what it writes for the same value in a form it gets right (0), which
  same_value then compares with.
* {"ref": "refused", "why": TEXT}: fastavro refused the value.
* {"ref": "strict", "rule": NAME, "reference_accepts": BOOL}: the relay's
  documented mapping refuses the payload by one of its deliberate rules
  (docs/contracts.md, "Avro"), where fastavro may be looser;
  reference_accepts says whether fastavro writes it when the rule is left
  out.

The payload is read with every number exact (integers as int, others as
Decimal, and an integer's text kept so that -0 stays negative zero for a
double), and converted only as the relay's documented JSON mapping says:
base64 to bytes, date and time text to Avro's numbers, decimal text to
Decimal, a duration object to its 12 bytes, a union's value to the branch
the mapping chooses (the first branch it fits, else Avro's JSON encoding
{"type": value}), pinned with fastavro's tuple notation.
"""
import base64
import binascii
import calendar
import datetime
import io
import json
import math
import re
import struct
import sys
from decimal import Decimal

from confluent_kafka.schema_registry.common.avro import parse_schema_with_repo
from fastavro import schemaless_reader, schemaless_writer
from fastavro._write_py import write_data
from fastavro.io.binary_encoder import BinaryEncoder
from fastavro.schema import extract_record_type

NAMED = ("record", "enum", "fixed", "error")


class JInt(int):
    """A JSON integer that keeps its text (-0 is 0 as an int)."""

    def __new__(cls, text):
        value = int.__new__(cls, text)
        value.text = text
        return value


class Strict(Exception):
    """The relay's mapping refuses this by a deliberate rule."""

    def __init__(self, rule):
        super().__init__(rule)
        self.rule = rule


def number_text(v):
    return v.text if isinstance(v, JInt) else str(v)


def is_number(v):
    return isinstance(v, (JInt, Decimal)) and not isinstance(v, bool)


DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$")
STAMP = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})?$"
)
DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
B64 = re.compile(r"^[A-Za-z0-9+/]*$")


def b64(text):
    """Standard base64, padding optional, canonical; None if not."""
    body = text.rstrip("=")
    if not B64.match(body) or len(body) % 4 == 1 or len(text) - len(body) > 2:
        return None
    if len(text) != len(body) and len(text) % 4 != 0:
        return None
    try:
        data = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(data).decode().rstrip("=") != body:
        return None  # bits left over that the text form does not carry
    return data


def fraction(digits, per_second):
    """The fraction's digits in units of 1/per_second, cut not rounded."""
    if not digits:
        return 0
    width = len(str(per_second)) - 1
    return int((digits + "0" * width)[:width] or "0")


def stamp(text, per_second, local):
    m = STAMP.match(text)
    if not m or (m.group(8) is None) != local:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    try:
        datetime.datetime(y, mo, d, h, mi, s)
    except ValueError:
        return None
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    zone = m.group(8)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            return None
        seconds -= sign * (hours * 3600 + minutes * 60)
    return seconds * per_second + fraction(m.group(7), per_second)


class CheckedEncoder(BinaryEncoder):
    """fastavro's Python encoder (which writes a union's trial branch) with
    the range its compiled writer (which writes the record) checks: an
    integer beyond 64 bits is an OverflowError there."""

    def write_int(self, datum):
        if not -(2**63) <= datum < 2**63:
            raise OverflowError("Python int too large to convert to C long")
        super().write_int(datum)

    write_long = write_int


class Mapping:
    def __init__(self, parsed, named, strict, work_around=False):
        self.parsed = parsed
        self.named = named
        self.strict = strict
        # The reference's faults met (names), and whether to give it the
        # same value in a form it writes right.
        self.faults = []
        self.work_around = work_around

    def rule(self, name):
        if self.strict:
            raise Strict(name)

    def fits(self, value, schema):
        try:
            write_data(CheckedEncoder(io.BytesIO()), value, schema, self.named, "", {})
            return True
        except Exception:  # noqa: BLE001 - any refusal of the reference
            return False

    def convert(self, v, schema):
        if isinstance(schema, str) and schema in self.named:
            schema = self.named[schema]
        if isinstance(schema, list):
            return self.union(v, schema)
        kind = extract_record_type(schema)
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        if kind in ("int", "long"):
            return self.integer(v, kind, logical)
        if kind in ("float", "double"):
            if not is_number(v):
                self.rule("number-kind")
                return v
            d = Decimal(number_text(v))
            try:
                struct.pack("<f" if kind == "float" else "<d", float(d))
                finite = not math.isinf(float(d))
            except OverflowError:
                finite = False
            if not finite:
                # fastavro writes infinity for it.
                self.rule("float-range")
            return d
        if kind == "boolean":
            if not isinstance(v, bool):
                self.rule("boolean-kind")
            return v
        if kind == "string":
            if logical == "uuid" and isinstance(v, str) and not UUID.match(v):
                self.rule("uuid-text")
            return v
        if kind in ("bytes", "fixed"):
            return self.binary(v, schema, kind, logical)
        if kind == "enum":
            return v
        if kind == "array":
            if not isinstance(v, list):
                self.rule("array-kind")
                return v
            return [self.convert(item, schema["items"]) for item in v]
        if kind == "map":
            if not isinstance(v, dict):
                self.rule("map-kind")
                return v
            return {k: self.convert(item, schema["values"]) for k, item in v.items()}
        if kind in ("record", "error"):
            return self.record(v, schema)
        return v

    def integer(self, v, kind, logical):
        per_second = {"time-millis": 1000, "time-micros": 1000000}.get(logical)
        if isinstance(v, str):
            if logical == "date":
                m = DATE.match(v)
                if m:
                    try:
                        day = datetime.date(*(int(g) for g in m.groups()))
                        return (day - datetime.date(1970, 1, 1)).days
                    except ValueError:
                        pass
            elif per_second:
                m = TIME.match(v)
                if m and int(m.group(1)) < 24 and int(m.group(2)) < 60 and int(m.group(3)) < 60:
                    h, mi, s = (int(g) for g in m.groups()[:3])
                    return (h * 3600 + mi * 60 + s) * per_second + fraction(m.group(4), per_second)
            elif logical and "timestamp" in logical:
                unit = {"millis": 10**3, "micros": 10**6, "nanos": 10**9}[logical.rsplit("-", 1)[1]]
                at = stamp(v, unit, logical.startswith("local-"))
                if at is not None:
                    return at
            if logical in ("date", "time-millis", "time-micros") or "timestamp" in (logical or ""):
                # fastavro parses some other ISO 8601 forms itself
                # ("20240301"); the mapping takes only the ones it names.
                self.rule("date-time-text")
            return v  # the reference refuses text where an int goes
        if isinstance(v, bool):
            self.rule("integer-kind")
            return v
        if isinstance(v, Decimal):
            self.rule("integer-syntax")
            return v
        if isinstance(v, JInt):
            bits = 32 if kind == "int" else 64
            if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
                self.rule("integer-range")
            return int(v)
        return v

    def binary(self, v, schema, kind, logical):
        if logical == "decimal":
            if isinstance(v, str) and DECIMAL.match(v):
                v = Decimal(v)
            elif is_number(v):
                v = Decimal(number_text(v))
            else:
                return v
            scale = schema.get("scale", 0)
            sign, digits, exp = v.as_tuple()
            if kind == "fixed" and sign and not any(digits):
                # fastavro writes a fixed decimal -0 as a negative number.
                self.faults.append("fixed-decimal-negative-zero")
                if self.work_around:
                    v = abs(v)
            if -exp <= scale:
                unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exp + scale)
                if len(str(unscaled)) > schema["precision"]:
                    self.rule("decimal-precision")
            return v
        if logical == "duration" and kind == "fixed":
            parts = ("months", "days", "millis")
            if isinstance(v, dict) and sorted(v) == sorted(parts):
                if all(isinstance(v[p], JInt) and 0 <= v[p] < 2**32 for p in parts):
                    return struct.pack("<III", *(int(v[p]) for p in parts))
            return v
        if isinstance(v, str):
            data = b64(v)
            if data is None:
                return v
            if kind == "fixed" and len(data) != schema["size"]:
                self.rule("fixed-size")
            return data
        return v

    def record(self, v, schema):
        if not isinstance(v, dict):
            self.rule("record-kind")
            return v
        names = {f["name"] for f in schema["fields"]}
        aliases = {a for f in schema["fields"] for a in f.get("aliases", [])}
        out = {}
        for key, value in v.items():
            if key in names:
                continue
            self.rule("alias" if key in aliases else "unknown-field")
        for field in schema["fields"]:
            if field["name"] in v:
                out[field["name"]] = self.convert(v[field["name"]], field["type"])
        return out

    def union(self, v, branches):
        if v is None:
            return None
        named = []
        for b in branches:
            full = b if isinstance(b, str) and b in self.named else None
            s = self.named.get(full, b) if full else b
            kind = extract_record_type(s)
            if kind in NAMED:
                name = s["name"]
                named.append((name, [name, name.rsplit(".", 1)[-1]], b))
            else:
                named.append((kind, [kind], b))
        strict_error = None
        for tag, _, b in named:
            if tag == "null":
                continue
            try:
                value = self.convert(v, b)
            except Strict as e:
                strict_error = strict_error or e
                continue
            if self.fits(value, b):
                return (tag, value)
        if isinstance(v, dict) and len(v) == 1:
            (key, inner), = v.items()
            for tag, aka, b in named:
                if tag != "null" and key in aka:
                    return (tag, self.convert(inner, b))
        if strict_error:
            raise strict_error
        return v


def loads(text):
    return json.loads(text, parse_float=Decimal, parse_int=JInt)


def same(a, b):
    """Strictly equal decoded values: floats bit for bit."""
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return a.as_tuple() == b.as_tuple()
    return type(a) is type(b) and a == b


def reference(parsed, value):
    fo = io.BytesIO()
    # The serializer's defaults: validate.strict and
    # validate.strict.allow.default both False.
    schemaless_writer(fo, parsed, value, strict=False, strict_allow_default=False)
    return fo.getvalue()


def plain_types(schema):
    """The schema without its logical types, decimals kept."""
    if isinstance(schema, list):
        return [plain_types(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: plain_types(v) for k, v in schema.items()}
        if out.get("logicalType") not in (None, "decimal"):
            del out["logicalType"]
        return out
    return schema


def answer(case):
    try:
        parsed = parse_schema_with_repo(case["schema"], named_schemas={})
    except Exception as e:  # noqa: BLE001 - the reference refused the schema
        return {"ref": "schema-error", "why": f"{type(e).__name__}: {e}"[:300]}
    named = dict(parsed.get("__named_schemas", {})) if isinstance(parsed, dict) else {}
    payload = loads(case["payload"])
    mapping = Mapping(parsed, named, True)
    try:
        value = mapping.convert(payload, parsed)
    except Strict as e:
        lenient = Mapping(parsed, named, False).convert(payload, parsed)
        try:
            reference(parsed, lenient)
            accepts = True
        except Exception:  # noqa: BLE001
            accepts = False
        return {"ref": "strict", "rule": e.rule, "reference_accepts": accepts}
    try:
        body = reference(parsed, value)
    except Exception as e:  # noqa: BLE001 - the reference refused
        return {"ref": "refused", "why": f"{type(e).__name__}: {e}"[:300]}
    out = {"ref": "ok", "hex": body.hex(), "same_value": None}
    relay = case.get("relay")
    if relay is not None and relay != body.hex() and mapping.faults:
        fixed = Mapping(parsed, named, True, work_around=True).convert(payload, parsed)
        out["fault"] = ", ".join(sorted(set(mapping.faults)))
        body = reference(parsed, fixed)
        out["fixed_hex"] = body.hex()
    if relay is not None and relay != body.hex():
        try:
            # Read as Avro's plain types but decimals: a timestamp at the
            # edge of a long has no Python datetime.
            plain = parse_schema_with_repo(json.dumps(plain_types(json.loads(case["schema"]))), {})
            mine = schemaless_reader(io.BytesIO(body), plain, None)
            theirs_io = io.BytesIO(bytes.fromhex(relay))
            theirs = schemaless_reader(theirs_io, plain, None)
            out["same_value"] = same(mine, theirs) and theirs_io.read() == b""
        except Exception:  # noqa: BLE001 - the relay's bytes do not read back
            out["same_value"] = False
    return out


for line in sys.stdin:
    try:
        out = answer(json.loads(line))
    except Exception as e:  # noqa: BLE001 - this script's fault: the case fails
        out = {"ref": "test-error", "why": f"{type(e).__name__}: {e}"[:300]}
    print(json.dumps(out), flush=False)
sys.stdout.flush()
