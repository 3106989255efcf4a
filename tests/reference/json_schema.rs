//! The relay's JSON Schema contracts against the `jsonschema` Python
//! package: generated schemas of drafts 4, 6, 7, 2019-09 and 2020-12 and
//! payloads aimed at them (numbers at the edges of every machine type,
//! unicode keys and strings, missing, extra and null members), the relay's
//! verdict (valid, or a violation) beside the package's
//! (`json_schema.py`). They must agree, the deliberate differences of
//! docs/contracts.md ("JSON Schema") applied to the package's side; every
//! case the relay refuses to load must be one the package's meta-schema
//! refuses too.
//!
//! `OUTBOX_REFERENCE_CASES` cases (default 10,000) from
//! `OUTBOX_REFERENCE_SEED` (default fixed), through one Python process; a
//! disagreement is shrunk (smaller schemas and payloads that still
//! disagree, each round one more batch) and printed with its seed.

use std::time::Instant;

use outbox_relay::contracts::Schema;
use serde_json::{Map, Value, json};

use crate::support::{self, Rng};

const DEFAULT_SEED: u64 = 0x6a73_6f6e_5343_4841;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Draft {
    D4,
    D6,
    D7,
    D2019,
    D2020,
}

impl Draft {
    fn arg(self) -> &'static str {
        match self {
            Draft::D4 => "4",
            Draft::D6 => "6",
            Draft::D7 => "7",
            Draft::D2019 => "2019-09",
            Draft::D2020 => "2020-12",
        }
    }

    fn uri(self) -> &'static str {
        match self {
            Draft::D4 => "http://json-schema.org/draft-04/schema#",
            Draft::D6 => "http://json-schema.org/draft-06/schema#",
            Draft::D7 => "http://json-schema.org/draft-07/schema#",
            Draft::D2019 => "https://json-schema.org/draft/2019-09/schema",
            Draft::D2020 => "https://json-schema.org/draft/2020-12/schema",
        }
    }

    fn defs(self) -> &'static str {
        if self >= Draft::D2019 {
            "$defs"
        } else {
            "definitions"
        }
    }
}

/// Numbers as written: the edges of i64, u64 and f64, exponents, long
/// decimals, `-0`, `1.0`.
const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "3",
    "5",
    "10",
    "100",
    "1.0",
    "-0.0",
    "1e2",
    "1E2",
    "1.0e1",
    "100.00",
    "1.5",
    "-1.5",
    "0.1",
    "0.3",
    "0.35",
    "2.5",
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "-9007199254740993",
    "9007199254740992.5",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "18446744073709551617",
    "1e400",
    "-1e400",
    "1e-400",
    "99999999999999999.99",
    "99999999999999999.98",
    "12345678901234567890123456789012345678",
    "0.12345678901234567890123456789012345678",
    "0.09999999999999999999",
];

const DIVISORS: &[&str] = &[
    "1", "2", "3", "7", "0.1", "0.01", "0.5", "2.5", "1e-2", "1e2", "274177", "0.3",
];

/// Strings: empty, ASCII, 2-, 3- and 4-byte UTF-8, digits of other
/// scripts, a final newline.
const STRINGS: &[&str] = &[
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "abc\n",
    "é",
    "ééé",
    "日本",
    "😀",
    "😀😀😀",
    "a😀",
    "123",
    "١٢٣",
    "x-1",
    "A",
];

const KEYS: &[&str] = &["a", "b", "ключ", "😀", "x1", "B"];

const PATTERNS: &[&str] = &[
    "^a",
    "^[a-z]+$",
    "^\\d+$",
    "é",
    "^.{2}$",
    "^[^\\n]*$",
    "😀",
    "^x-",
];

const TYPES: &[&str] = &[
    "integer", "number", "string", "object", "array", "boolean", "null",
];

fn number(text: &str) -> Value {
    serde_json::from_str(text).expect("a JSON number")
}

/// A payload-like value, `depth` levels at most.
fn value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 | 1 => number(rng.pick::<&str>(NUMBERS)),
        2 => Value::String((*rng.pick_ref(STRINGS)).to_owned()),
        3 => Value::Bool(rng.chance(50)),
        4 => Value::Null,
        5 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        _ => {
            let mut members = Map::new();
            for _ in 0..rng.below(4) {
                members.insert((*rng.pick_ref(KEYS)).to_owned(), value(rng, depth - 1));
            }
            Value::Object(members)
        }
    }
}

/// A schema of `draft`, `depth` levels of subschemas at most; `defs`:
/// whether `$ref` to the root's `d` definition may be used.
fn schema(rng: &mut Rng, draft: Draft, depth: usize, defs: bool) -> Value {
    if draft >= Draft::D6 && rng.chance(5) {
        return Value::Bool(rng.chance(70));
    }
    let mut s = Map::new();
    let sub = |rng: &mut Rng| schema(rng, draft, depth.saturating_sub(1), defs);
    let keywords = 1 + rng.below(3);
    for _ in 0..keywords {
        let choice = rng.below(if depth == 0 { 8 } else { 22 });
        match choice {
            0 => {
                let t = if rng.chance(70) {
                    json!(rng.pick_ref(TYPES))
                } else {
                    json!([
                        rng.pick_ref(TYPES),
                        rng.pick_ref(&["integer", "string", "null"])
                    ])
                };
                s.insert("type".into(), t);
            }
            1 => {
                let n = 1 + rng.below(3);
                let values = (0..n).map(|_| value(rng, 1)).collect();
                s.insert("enum".into(), Value::Array(values));
            }
            2 | 3 => {
                let (plain, exclusive) = if rng.chance(50) {
                    ("minimum", "exclusiveMinimum")
                } else {
                    ("maximum", "exclusiveMaximum")
                };
                let limit = number(rng.pick::<&str>(NUMBERS));
                if draft == Draft::D4 {
                    s.insert(plain.into(), limit);
                    if rng.chance(50) {
                        s.insert(exclusive.into(), Value::Bool(rng.chance(50)));
                    }
                } else {
                    s.insert(
                        (if rng.chance(50) { plain } else { exclusive }).into(),
                        limit,
                    );
                }
            }
            4 => {
                s.insert("multipleOf".into(), number(rng.pick::<&str>(DIVISORS)));
            }
            5 => {
                let key = if rng.chance(50) {
                    "minLength"
                } else {
                    "maxLength"
                };
                s.insert(key.into(), json!(rng.below(4)));
            }
            6 => {
                s.insert("pattern".into(), json!(rng.pick_ref(PATTERNS)));
            }
            7 => {
                if draft >= Draft::D6 {
                    s.insert("const".into(), value(rng, 1));
                } else {
                    s.insert("uniqueItems".into(), json!(rng.chance(70)));
                }
            }
            8 => {
                let mut properties = Map::new();
                for _ in 0..1 + rng.below(3) {
                    properties.insert((*rng.pick_ref(KEYS)).to_owned(), sub(rng));
                }
                s.insert("properties".into(), Value::Object(properties));
            }
            9 => {
                let n = 1 + rng.below(2);
                let names: Vec<&str> = (0..n).map(|_| *rng.pick_ref(KEYS)).collect();
                let mut unique = names.clone();
                unique.sort_unstable();
                unique.dedup();
                s.insert("required".into(), json!(unique));
            }
            10 => {
                let additional = if rng.chance(50) {
                    Value::Bool(rng.chance(30))
                } else {
                    sub(rng)
                };
                s.insert("additionalProperties".into(), additional);
            }
            11 => {
                let mut patterns = Map::new();
                patterns.insert(
                    (*rng.pick_ref(&["^x", "^[a-z]$", "ю", "😀"])).to_owned(),
                    sub(rng),
                );
                s.insert("patternProperties".into(), Value::Object(patterns));
            }
            12 => {
                let key = if rng.chance(50) {
                    "minProperties"
                } else {
                    "maxProperties"
                };
                s.insert(key.into(), json!(rng.below(3)));
            }
            13 => {
                let key = *rng.pick_ref(&["minItems", "maxItems", "uniqueItems"]);
                let v = if key == "uniqueItems" {
                    json!(true)
                } else {
                    json!(rng.below(3))
                };
                s.insert(key.into(), v);
            }
            14 => {
                // items, tuples by the draft's spelling
                if rng.chance(50) {
                    s.insert("items".into(), sub(rng));
                } else {
                    let tuple: Vec<Value> = (0..1 + rng.below(2)).map(|_| sub(rng)).collect();
                    if draft == Draft::D2020 {
                        s.insert("prefixItems".into(), Value::Array(tuple));
                        if rng.chance(50) {
                            s.insert("items".into(), sub(rng));
                        }
                    } else {
                        s.insert("items".into(), Value::Array(tuple));
                        if rng.chance(50) {
                            s.insert("additionalItems".into(), sub(rng));
                        }
                    }
                }
            }
            15 => {
                if draft >= Draft::D6 {
                    s.insert("contains".into(), sub(rng));
                    if draft >= Draft::D2019 && rng.chance(40) {
                        let key = *rng.pick_ref(&["minContains", "maxContains"]);
                        s.insert(key.into(), json!(rng.below(3)));
                    }
                } else {
                    s.insert("not".into(), sub(rng));
                }
            }
            16..=18 => {
                let key = match choice {
                    16 => "allOf",
                    17 => "anyOf",
                    _ => "oneOf",
                };
                let list: Vec<Value> = (0..1 + rng.below(3)).map(|_| sub(rng)).collect();
                s.insert(key.into(), Value::Array(list));
            }
            19 => {
                if draft >= Draft::D7 {
                    s.insert("if".into(), sub(rng));
                    if rng.chance(80) {
                        s.insert("then".into(), sub(rng));
                    }
                    if rng.chance(60) {
                        s.insert("else".into(), sub(rng));
                    }
                } else {
                    s.insert("not".into(), sub(rng));
                }
            }
            20 => {
                if defs {
                    s.insert("$ref".into(), json!(format!("#/{}/d", draft.defs())));
                } else {
                    s.insert("not".into(), sub(rng));
                }
            }
            _ => {
                let key = *rng.pick_ref(KEYS);
                let other = *rng.pick_ref(KEYS);
                if draft >= Draft::D2019 {
                    s.insert("dependentRequired".into(), json!({ (key): [other] }));
                } else {
                    s.insert("dependencies".into(), json!({ (key): [other] }));
                }
                if draft >= Draft::D6 && rng.chance(30) {
                    s.insert("propertyNames".into(), json!({"maxLength": 1}));
                }
            }
        }
    }
    Value::Object(s)
}

/// A payload aimed at `schema`: its properties' names and values of its
/// kinds more often than chance would give.
fn payload(rng: &mut Rng) -> Value {
    if rng.chance(60) {
        let mut members = Map::new();
        for _ in 0..rng.below(5) {
            members.insert((*rng.pick_ref(KEYS)).to_owned(), value(rng, 2));
        }
        Value::Object(members)
    } else {
        value(rng, 3)
    }
}

#[derive(Debug, Clone)]
struct Case {
    draft: Draft,
    schema: Value,
    instance: String,
}

impl Case {
    fn line(&self) -> String {
        json!({
            "draft": self.draft.arg(),
            "schema": self.schema.to_string(),
            "instance": self.instance,
        })
        .to_string()
    }

    /// The relay's verdict: `None` when it refuses the schema.
    fn relay(&self) -> Option<bool> {
        let schema = Schema::from_value(&self.schema, "case.json", None).ok()?;
        Some(schema.check(self.instance.as_bytes()).is_ok())
    }
}

fn generate(rng: &mut Rng) -> Case {
    let draft = *rng.pick_ref(&[Draft::D4, Draft::D6, Draft::D7, Draft::D2019, Draft::D2020]);
    let defs = rng.chance(30);
    let mut root = schema(rng, draft, 3, defs);
    let mut object = match root {
        Value::Object(members) => members,
        Value::Bool(b) => {
            let mut m = Map::new();
            m.insert("not".into(), json!({"not": b}));
            m
        }
        _ => unreachable!(),
    };
    object.insert("$schema".into(), json!(draft.uri()));
    if defs {
        let definition = schema(rng, draft, 1, false);
        object.insert(draft.defs().into(), json!({ "d": definition }));
    }
    root = Value::Object(object);
    Case {
        draft,
        schema: root,
        instance: payload(rng).to_string(),
    }
}

/// The package's answer to one case.
#[derive(Debug, serde::Deserialize)]
struct Answer {
    schema_ok: bool,
    valid: bool,
    plain: bool,
    /// The package raised instead of answering (its own fault: draft 6
    /// and 7's `additionalItems` beside a boolean `items` takes `len` of
    /// the boolean): no verdict to compare with, counted apart.
    #[serde(default)]
    crashed: Option<String>,
}

/// Whether the relay and the reference disagree on `case`.
fn disagree(relay: Option<bool>, answer: &Answer) -> bool {
    if answer.crashed.is_some() {
        return false;
    }
    match (relay, answer.schema_ok) {
        (None, false) => false,
        (None, true) | (Some(_), false) => true,
        (Some(relay), true) => relay != answer.valid,
    }
}

fn ask(cases: &[Case]) -> Vec<Answer> {
    let lines: Vec<String> = cases.iter().map(Case::line).collect();
    support::run_script("json_schema.py", &[], &lines)
        .iter()
        .map(|line| serde_json::from_str(line).expect("an answer line"))
        .collect()
}

/// Smaller versions of `case`: one keyword or member fewer, a subschema
/// or value replaced by a trivial one.
fn smaller(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    for schema in shrink_value(&case.schema, true) {
        out.push(Case {
            schema,
            ..case.clone()
        });
    }
    let instance: Value = serde_json::from_str(&case.instance).expect("JSON");
    for smaller in shrink_value(&instance, false) {
        out.push(Case {
            instance: smaller.to_string(),
            ..case.clone()
        });
    }
    out
}

fn shrink_value(v: &Value, is_schema: bool) -> Vec<Value> {
    let mut out = Vec::new();
    match v {
        Value::Object(members) => {
            for key in members.keys() {
                if is_schema && key == "$schema" {
                    continue;
                }
                let mut fewer = members.clone();
                fewer.remove(key);
                out.push(Value::Object(fewer));
                for inner in shrink_value(&members[key], is_schema) {
                    let mut changed = members.clone();
                    changed.insert(key.clone(), inner);
                    out.push(Value::Object(changed));
                }
            }
        }
        Value::Array(items) => {
            for i in 0..items.len() {
                let mut fewer = items.clone();
                fewer.remove(i);
                out.push(Value::Array(fewer));
                for inner in shrink_value(&items[i], is_schema) {
                    let mut changed = items.clone();
                    changed[i] = inner;
                    out.push(Value::Array(changed));
                }
            }
        }
        Value::Null => {}
        _ if !is_schema => out.push(Value::Null),
        _ => {}
    }
    out
}

fn shrink(mut case: Case) -> Case {
    for _ in 0..60 {
        let candidates = smaller(&case);
        if candidates.is_empty() {
            break;
        }
        let answers = ask(&candidates);
        match candidates
            .into_iter()
            .zip(&answers)
            .find(|(c, a)| disagree(c.relay(), a))
        {
            Some((smaller, _)) => case = smaller,
            None => break,
        }
    }
    case
}

#[test]
fn contracts_agree_with_the_jsonschema_package() {
    let started = Instant::now();
    let (n, seed) = (support::cases(), support::seed(DEFAULT_SEED));
    let mut rng = Rng(seed);
    let cases: Vec<Case> = (0..n).map(|_| generate(&mut rng)).collect();
    // The relay's verdicts while the package works out its own.
    let (answers, verdicts) = std::thread::scope(|scope| {
        let relay = scope.spawn(|| cases.iter().map(Case::relay).collect::<Vec<_>>());
        let answers = ask(&cases);
        (answers, relay.join().expect("the relay's verdicts"))
    });
    let asked = started.elapsed();
    let mut documented = 0;
    let mut crashed = 0;
    let mut refused_schemas = 0;
    let mut valid = 0;
    let mut first = None;
    let mut mismatches = 0;
    for ((case, answer), relay) in cases.iter().zip(&answers).zip(&verdicts) {
        if disagree(*relay, answer) {
            mismatches += 1;
            if mismatches <= 8 {
                eprintln!(
                    "disagreement: draft {} schema {} payload {}: relay {:?}, package {answer:?}",
                    case.draft.arg(),
                    case.schema,
                    case.instance,
                    relay
                );
            }
            first.get_or_insert_with(|| case.clone());
            continue;
        }
        if answer.crashed.is_some() {
            crashed += 1;
            continue;
        }
        documented += usize::from(answer.schema_ok && answer.valid != answer.plain);
        refused_schemas += usize::from(!answer.schema_ok);
        valid += usize::from(answer.schema_ok && answer.valid);
    }
    eprintln!(
        "json_schema: {n} cases (seed {seed}): {valid} valid, {} violations, {refused_schemas} \
         schemas refused by both, {documented} on a documented difference, {crashed} the \
         package raised on (not compared), {mismatches} disagreements, in {:.1?} ({asked:.1?} \
         of it the package's)",
        n - valid - refused_schemas - crashed - mismatches,
        started.elapsed()
    );
    if let Some(case) = first {
        let answers = ask(std::slice::from_ref(&case));
        let case = shrink(case);
        let answer = &ask(std::slice::from_ref(&case))[0];
        panic!(
            "{mismatches} of {n} cases disagree (OUTBOX_REFERENCE_SEED={seed}); the first, \
             shrunk: draft {}, schema {}, payload {}: the relay says {:?} (None: refuses the \
             schema), the package {answer:?} (unshrunk: {:?})",
            case.draft.arg(),
            case.schema,
            case.instance,
            case.relay(),
            answers[0]
        );
    }
    // The generator reaches both verdicts.
    assert!(valid > n / 10 && n - valid > n / 10, "{valid} of {n} valid");
}
