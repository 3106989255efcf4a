"""The jsonschema package's verdict on each case, one JSON line in, one out.

In: {"draft": "4"|"6"|"7"|"2019-09"|"2020-12", "schema": TEXT, "instance": TEXT}
(the schema and the payload as JSON text). Out: {"schema_ok": bool,
"valid": bool, "plain": bool}: whether the schema passes its draft's
meta-schema, the verdict with the deliberate differences docs/contracts.md
lists applied, and the package's verdict as it is.

Numbers are read exactly: integers as int, the others as Decimal (with a
context wide enough that `%` and comparisons never round). The package
calls a float with a zero fraction an integer in drafts 6 and later; the
same rule is applied to a Decimal, the exact form of such a number. Format
is not asserted (the cases carry no `format`).

The deliberate differences, applied to "valid":
* `pattern`: Python's `$` also matches before a final newline; ECMA-262's
  (and the relay's) only at the end of the string.
* `pattern`: Python's `\d` matches the digits of every script (`١٢٣`);
  ECMA-262's (and the relay's) only 0 to 9.
"""
import decimal
import json
import re
import sys
from decimal import Decimal

import jsonschema
from jsonschema import validators

decimal.setcontext(decimal.Context(prec=5000, Emax=10**9, Emin=-(10**9)))

BASE = {
    "4": jsonschema.Draft4Validator,
    "6": jsonschema.Draft6Validator,
    "7": jsonschema.Draft7Validator,
    "2019-09": jsonschema.Draft201909Validator,
    "2020-12": jsonschema.Draft202012Validator,
}


def exact_class(draft):
    base = BASE[draft]
    if draft == "4":
        return base
    checker = base.TYPE_CHECKER

    def is_integer(_, instance):
        if checker.is_type(instance, "integer"):
            return True
        return isinstance(instance, Decimal) and instance == instance.to_integral_value()

    return validators.extend(base, type_checker=checker.redefine("integer", is_integer))


def ecma_pattern(validator, pattern, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    # `$` as the end of the string only (the cases' patterns use `$` only as
    # that anchor).
    ecma = pattern.replace("$", r"\Z").replace(r"\d", "[0-9]")
    if not re.search(ecma, instance):
        yield jsonschema.ValidationError(f"does not match {pattern!r}")


PLAIN = {draft: exact_class(draft) for draft in BASE}
ADJUSTED = {
    draft: validators.extend(cls, validators={"pattern": ecma_pattern})
    for draft, cls in PLAIN.items()
}


def load(text):
    return json.loads(text, parse_float=Decimal)


for line in sys.stdin:
    case = json.loads(line)
    draft = case["draft"]
    schema = load(case["schema"])
    instance = load(case["instance"])
    try:
        PLAIN[draft].check_schema(schema)
    except jsonschema.SchemaError:
        print(json.dumps({"schema_ok": False, "valid": False, "plain": False}), flush=True)
        continue
    try:
        plain = PLAIN[draft](schema).is_valid(instance)
        # The differences only touch `pattern`.
        valid = ADJUSTED[draft](schema).is_valid(instance) if '"pattern"' in case["schema"] else plain
    except Exception as e:  # the package's own fault: no verdict
        print(json.dumps({"schema_ok": True, "valid": False, "plain": False,
                          "crashed": f"{type(e).__name__}: {e}"}), flush=True)
        continue
    print(json.dumps({"schema_ok": True, "valid": valid, "plain": plain}))
sys.stdout.flush()
