//! `AvroEncoder` against fastavro as Confluent's Python `AvroSerializer`
//! drives it (`avro.py`): generated schemas (every primitive and logical
//! type, unions with `null` first and not, defaults, aliases, enums, fixed,
//! nested and referenced records, arrays, maps) and payloads for them
//! (numbers at the edges of each type, unicode, missing, extra and null
//! fields).
//!
//! The rule: where the reference refuses, the relay refuses; where it
//! accepts, the relay's bytes are the same (a `bytes` decimal, whose
//! encoding is not unique, may differ in its bytes but must decode to the
//! same value); where the relay's documented mapping refuses by one of its
//! deliberate rules (docs/contracts.md, "Avro"), the relay refuses. A
//! failing case is shrunk (fields, keys, items and union branches dropped
//! while it still fails) and printed with the seed.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use outbox_relay::registry::AvroEncoder;
use serde_json::{Map, Value, json};

use super::support::{self, Rng};

impl Rng {
    /// `n` random digits, the first not zero.
    fn digits(&mut self, n: usize) -> String {
        (0..n)
            .map(|i| {
                let d = self.below(10) as u8;
                // No leading zero: the digit count is the number's.
                char::from(b'0' + if i == 0 && d == 0 { 1 } else { d })
            })
            .collect()
    }
}

/// A JSON number with exactly this text.
fn num(text: &str) -> Value {
    Value::Number(serde_json::from_str(text).expect("a JSON number"))
}

/// Schema and payload generation for one case.
struct Gen {
    rng: Rng,
    /// Named types by full name, for payloads of later references.
    named: HashMap<String, Value>,
    counter: usize,
}

const PRIMITIVES: &[&str] = &[
    "null", "boolean", "int", "long", "float", "double", "string", "bytes",
];
const LOGICAL_INT: &[&str] = &["date", "time-millis"];
const LOGICAL_LONG: &[&str] = &[
    "time-micros",
    "timestamp-millis",
    "timestamp-micros",
    "timestamp-nanos",
    "local-timestamp-millis",
    "local-timestamp-micros",
    "local-timestamp-nanos",
];
const STRINGS: &[&str] = &[
    "",
    "a",
    "héllo",
    "日本語",
    "🎉 party",
    "tab\tnew\nline",
    "quote\" back\\slash",
    "nul\u{0}",
    "Ωμέγα",
];
const SYMBOLS: &[&str] = &["A", "B", "C_1", "déjà"];

impl Gen {
    fn name(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    /// What a union keeps one branch of: the Avro type, or a named type's
    /// full name.
    fn base(schema: &Value, ns: &str) -> Option<String> {
        match schema {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => match (o["type"].as_str(), o.get("name")) {
                (Some(_), Some(name)) => Some(format!("{ns}.{}", name.as_str()?)),
                (Some(t), None) => Some(t.to_string()),
                _ => None,
            },
            Value::Array(_) => Some("union".into()),
            _ => None,
        }
    }

    fn schema(&mut self, depth: usize, ns: &str) -> Value {
        let r = self.rng.below(100);
        let complex = depth < 3;
        match r {
            0..=34 => json!(self.rng.pick(&PRIMITIVES[1..])),
            35..=39 => {
                let p = 1 + self.rng.below(38);
                let s = self.rng.below(p + 1);
                json!({"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s})
            }
            40..=42 => {
                let size = 1 + self.rng.below(16);
                // The most digits size bytes hold: floor(log10(2^(8·size-1) - 1)).
                let max = ((8 * size - 1) as f64 * 2f64.log10()).floor() as usize;
                let p = 1 + self.rng.below(max.clamp(1, 38));
                let s = self.rng.below(p + 1);
                let name = self.name("Dec");
                let schema = json!({"type": "fixed", "name": name, "size": size,
                    "logicalType": "decimal", "precision": p, "scale": s});
                self.define(&name, ns, &schema);
                schema
            }
            43..=44 => json!({"type": "string", "logicalType": "uuid"}),
            45..=47 => json!({"type": "int", "logicalType": self.rng.pick(LOGICAL_INT)}),
            48..=53 => json!({"type": "long", "logicalType": self.rng.pick(LOGICAL_LONG)}),
            54..=55 => {
                let name = self.name("Dur");
                let schema =
                    json!({"type": "fixed", "name": name, "size": 12, "logicalType": "duration"});
                self.define(&name, ns, &schema);
                schema
            }
            56..=59 => {
                let name = self.name("E");
                let n = 1 + self.rng.below(SYMBOLS.len());
                let symbols: Vec<&str> = SYMBOLS
                    .iter()
                    .copied()
                    .filter(|s| s.is_ascii())
                    .take(n)
                    .collect();
                let schema = json!({"type": "enum", "name": name, "symbols": symbols});
                self.define(&name, ns, &schema);
                schema
            }
            60..=62 => {
                let name = self.name("F");
                let schema = json!({"type": "fixed", "name": name, "size": self.rng.below(9)});
                self.define(&name, ns, &schema);
                schema
            }
            63..=66 if !self.named.is_empty() => {
                // A reference to a named type defined earlier.
                let mut names: Vec<&String> = self.named.keys().collect();
                names.sort();
                json!(self.rng.pick(&names))
            }
            63..=72 if complex => self.record(depth + 1, ns),
            73..=78 if complex => json!({"type": "array", "items": self.schema(depth + 1, ns)}),
            79..=84 if complex => json!({"type": "map", "values": self.schema(depth + 1, ns)}),
            85..=99 if complex => self.union(depth + 1, ns),
            _ => json!(self.rng.pick(&PRIMITIVES[1..])),
        }
    }

    fn define(&mut self, name: &str, ns: &str, schema: &Value) {
        self.named.insert(format!("{ns}.{name}"), schema.clone());
    }

    fn union(&mut self, depth: usize, ns: &str) -> Value {
        let mut branches: Vec<Value> = Vec::new();
        let mut bases: Vec<String> = Vec::new();
        let null_at = self.rng.below(4); // 0: null first; 3: no null
        for _ in 0..1 + self.rng.below(3) {
            let before: Vec<String> = self.named.keys().cloned().collect();
            let b = self.schema(depth, ns);
            let base = Self::base(&b, ns);
            // A union holds no union and one branch per unnamed type; a
            // branch left out takes the names it defined with it.
            let dropped = matches!(base.as_deref(), Some("union" | "null"))
                || base.as_ref().is_some_and(|base| bases.contains(base));
            if dropped {
                self.named.retain(|name, _| before.contains(name));
                continue;
            }
            bases.extend(base);
            branches.push(b);
        }
        if null_at < 3 || branches.is_empty() {
            let at = null_at.min(branches.len());
            branches.insert(at, json!("null"));
        }
        Value::Array(branches)
    }

    fn record(&mut self, depth: usize, ns: &str) -> Value {
        let name = self.name("R");
        let mut fields = Vec::new();
        for i in 0..self.rng.below(5) {
            let field_name = format!("f{i}");
            let schema = self.schema(depth, ns);
            let mut field = json!({"name": field_name, "type": schema});
            if self.rng.chance(20) {
                field["aliases"] = json!([format!("old_f{i}")]);
            }
            if self.rng.chance(35)
                && let Some(default) = self.default(&field["type"])
            {
                field["default"] = default;
            }
            fields.push(field);
        }
        let schema = json!({"type": "record", "name": name, "fields": fields});
        self.define(&name, ns, &schema);
        schema
    }

    /// A default in Avro's JSON encoding, for the types whose default the
    /// reference writes as the spec says (not `bytes`, `fixed`, decimals,
    /// durations: fastavro writes their text default as a Python str and
    /// fails; see docs/contracts.md).
    fn default(&mut self, schema: &Value) -> Option<Value> {
        let schema = self.resolve(schema);
        Some(match &schema {
            Value::Array(branches) if branches.first() == Some(&json!("null")) => Value::Null,
            Value::String(t) => match t.as_str() {
                "boolean" => json!(self.rng.chance(50)),
                "int" | "long" => {
                    let n = 1 + self.rng.below(6);
                    num(&self.rng.digits(n))
                }
                "float" | "double" => num(self.rng.pick(&["1.5", "-0.25", "3", "0.1"])),
                "string" => json!(self.rng.pick(STRINGS)),
                _ => return None,
            },
            Value::Object(o) => match (o["type"].as_str(), o.get("logicalType")) {
                (Some("enum"), _) => json!(o["symbols"][0]),
                (Some("array"), _) => json!([]),
                (Some("map"), _) => json!({}),
                (Some("int" | "long"), Some(_)) => {
                    let n = 1 + self.rng.below(5);
                    num(&self.rng.digits(n))
                }
                (Some("string"), Some(_)) => json!("0b4e28ba-2fa1-11d2-883f-0016d3cca427"),
                _ => return None,
            },
            _ => return None,
        })
    }

    fn resolve(&self, schema: &Value) -> Value {
        match schema {
            Value::String(name) if self.named.contains_key(name) => self.named[name].clone(),
            other => other.clone(),
        }
    }

    /// A value of one of the JSON kinds, whatever the schema.
    fn wild(&mut self) -> Value {
        match self.rng.below(10) {
            0 => Value::Null,
            1 => json!(true),
            2 => num("1"),
            3 => num("1.0"),
            4 => num("-0"),
            5 => json!("1"),
            6 => json!([]),
            7 => json!({}),
            8 => num("9223372036854775808"),
            _ => num("1e400"),
        }
    }

    fn value(&mut self, schema: &Value, ns: &str) -> Value {
        if self.rng.chance(4) {
            return self.wild();
        }
        let schema = self.resolve(schema);
        match &schema {
            Value::Array(branches) => self.union_value(branches, ns),
            Value::String(t) => self.primitive(t),
            Value::Object(o) => {
                let kind = o["type"].as_str().unwrap_or_default();
                match (kind, o.get("logicalType").and_then(Value::as_str)) {
                    (_, Some("decimal")) => self.decimal(o),
                    (_, Some("uuid")) => self.uuid(),
                    (_, Some("date")) => self.date(),
                    (_, Some(t @ ("time-millis" | "time-micros"))) => self.time(t),
                    (_, Some(t)) if t.contains("timestamp") => self.timestamp(t),
                    (_, Some("duration")) => self.duration(),
                    ("enum", _) => {
                        let symbols = o["symbols"].as_array().expect("symbols");
                        if self.rng.chance(10) {
                            json!("ZZ")
                        } else {
                            symbols[self.rng.below(symbols.len())].clone()
                        }
                    }
                    ("fixed", _) => {
                        let size = o["size"].as_u64().expect("size") as usize;
                        let size = match self.rng.below(10) {
                            0 => size + 1,
                            1 if size > 0 => size - 1,
                            _ => size,
                        };
                        self.base64(size)
                    }
                    ("array", _) => {
                        let n = self.rng.below(4);
                        Value::Array((0..n).map(|_| self.value(&o["items"], ns)).collect())
                    }
                    ("map", _) => {
                        let n = self.rng.below(4);
                        let mut map = Map::new();
                        for _ in 0..n {
                            let key = self.rng.pick(STRINGS).to_string();
                            map.insert(key, self.value(&o["values"], ns));
                        }
                        Value::Object(map)
                    }
                    ("record", _) => self.record_value(o, ns),
                    (t, None) => self.primitive(t),
                    _ => self.wild(),
                }
            }
            _ => self.wild(),
        }
    }

    fn union_value(&mut self, branches: &[Value], ns: &str) -> Value {
        if self.rng.chance(15) || branches.len() == 1 && branches[0] == json!("null") {
            return Value::Null;
        }
        let others: Vec<&Value> = branches.iter().filter(|b| **b != json!("null")).collect();
        let branch = (*self.rng.pick(&others)).clone();
        let value = self.value(&branch, ns);
        if !self.rng.chance(20) {
            return value;
        }
        // Avro's JSON encoding: {"<type name>": value}.
        let resolved = self.resolve(&branch);
        let name = match (&branch, &resolved) {
            (Value::String(full), Value::Object(o)) if o.contains_key("name") => {
                if self.rng.chance(50) {
                    full.clone()
                } else {
                    o["name"].as_str().expect("name").to_string()
                }
            }
            (_, Value::Object(o)) if o.contains_key("name") => {
                let short = o["name"].as_str().expect("name");
                if self.rng.chance(50) {
                    format!("{ns}.{short}")
                } else {
                    short.to_string()
                }
            }
            _ => Self::base(&resolved, ns).unwrap_or_default(),
        };
        json!({ name: value })
    }

    fn record_value(&mut self, record: &Map<String, Value>, ns: &str) -> Value {
        let mut out = Map::new();
        for field in record["fields"].as_array().expect("fields") {
            let name = field["name"].as_str().expect("name");
            if self.rng.chance(10) {
                continue; // missing: the default, null, or refused
            }
            let key = match field.get("aliases") {
                Some(aliases) if self.rng.chance(15) => {
                    aliases[0].as_str().expect("alias").to_string()
                }
                _ => name.to_string(),
            };
            let value = if self.rng.chance(4) {
                Value::Null
            } else {
                self.value(&field["type"], ns)
            };
            out.insert(key, value);
        }
        if self.rng.chance(4) {
            out.insert("extra".into(), num("1"));
        }
        Value::Object(out)
    }

    fn primitive(&mut self, t: &str) -> Value {
        match t {
            "null" => Value::Null,
            "boolean" => match self.rng.below(10) {
                0 => num("1"),
                1 => json!("true"),
                n => json!(n % 2 == 0),
            },
            "int" => self.integer(&[
                "0",
                "1",
                "-1",
                "-0",
                "2147483647",
                "-2147483648",
                "2147483648",
                "-2147483649",
                "1.0",
                "1e3",
                "1.5",
            ]),
            "long" => self.integer(&[
                "0",
                "-0",
                "9007199254740991",
                "9007199254740992",
                "9007199254740993",
                "-9007199254740993",
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775808",
                "-9223372036854775809",
                "18446744073709551616",
                "1.0",
                "1E2",
                "2147483648",
            ]),
            "float" | "double" => match self.rng.below(3) {
                0 => {
                    // Short decimals: one rounding from the text and one
                    // through a double agree on them.
                    let n = 1 + self.rng.below(8);
                    let digits = self.rng.digits(n);
                    let exp = self.rng.below(80) as i64 - 40;
                    let sign = if self.rng.chance(30) { "-" } else { "" };
                    num(&format!("{sign}{digits}e{exp}"))
                }
                _ => num(self.rng.pick(&[
                    "0",
                    "-0",
                    "-0.0",
                    "0.1",
                    "1.5e3",
                    "1E-2",
                    "3.4028235e38",
                    "3.5e38",
                    "1e39",
                    "1e308",
                    "1.7976931348623157e308",
                    "1e309",
                    "1e400",
                    "-1e-400",
                    "4.9e-324",
                    "1e-46",
                    "9007199254740993",
                    "16777217",
                    "123456789",
                ])),
            },
            "string" => {
                if self.rng.chance(5) {
                    num("5")
                } else {
                    json!(self.rng.pick(STRINGS))
                }
            }
            "bytes" => {
                let n = self.rng.below(9);
                self.base64(n)
            }
            _ => self.wild(),
        }
    }

    fn integer(&mut self, edges: &[&str]) -> Value {
        if self.rng.chance(40) {
            let n = 1 + self.rng.below(9);
            let sign = if self.rng.chance(30) { "-" } else { "" };
            num(&format!("{sign}{}", self.rng.digits(n)))
        } else {
            num(self.rng.pick(edges))
        }
    }

    fn base64(&mut self, n: usize) -> Value {
        use base64::Engine as _;
        match self.rng.below(20) {
            0 => json!("!!!!"),
            1 => json!("A"),
            _ => {
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.next() as u8).collect();
                let text = base64::engine::general_purpose::STANDARD.encode(bytes);
                if self.rng.chance(50) {
                    json!(text.trim_end_matches('='))
                } else {
                    json!(text)
                }
            }
        }
    }

    fn decimal(&mut self, schema: &Map<String, Value>) -> Value {
        let precision = schema["precision"].as_u64().expect("precision") as usize;
        let scale = schema.get("scale").and_then(Value::as_u64).unwrap_or(0) as usize;
        if self.rng.chance(5) {
            return num(self.rng.pick(&["-0", "-0.0", "0", "0e-3"]));
        }
        // Digits and places at the edges: the precision, the scale, one more.
        let n = match self.rng.below(4) {
            0 => precision,
            1 => precision + 1,
            _ => 1 + self.rng.below(precision),
        };
        let places = match self.rng.below(4) {
            0 => scale,
            1 => scale + 1,
            _ => self.rng.below(scale + 1),
        };
        let digits = self.rng.digits(n);
        let sign = if self.rng.chance(30) { "-" } else { "" };
        let text = match self.rng.below(4) {
            // digits × 10^-places
            0 => format!("{sign}{digits}e-{places}"),
            1 if n > 1 => {
                let exp = n as i64 - 1 - places as i64;
                format!("{sign}{}.{}E{exp}", &digits[..1], &digits[1..])
            }
            _ if places >= n => {
                format!("{sign}0.{}{digits}", "0".repeat(places - n))
            }
            _ if places == 0 => format!("{sign}{digits}"),
            _ => {
                let (whole, fraction) = digits.split_at(n - places);
                format!("{sign}{whole}.{fraction}")
            }
        };
        if self.rng.chance(30) {
            json!(text)
        } else {
            num(&text)
        }
    }

    fn uuid(&mut self) -> Value {
        let hex: String = (0..32)
            .map(|_| char::from(b"0123456789abcdef"[self.rng.below(16)]))
            .collect();
        let text = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        json!(match self.rng.below(6) {
            0 => text.to_uppercase(),
            1 => hex,
            2 => format!("{{{text}}}"),
            _ => text,
        })
    }

    fn date(&mut self) -> Value {
        match self.rng.below(5) {
            0 => num(&format!("{}", self.rng.below(40_000) as i64 - 10_000)),
            // A day that does not exist, and forms the mapping does not take.
            1 => json!(
                self.rng
                    .pick(&["2024-02-30", "2024-3-1", "+2024-03-01", "20240301"])
            ),
            _ => json!(format!(
                "{:04}-{:02}-{:02}",
                1900 + self.rng.below(200),
                1 + self.rng.below(12),
                1 + self.rng.below(28)
            )),
        }
    }

    fn fraction(&mut self) -> String {
        match self.rng.below(3) {
            0 => String::new(),
            _ => {
                let n = 1 + self.rng.below(9);
                let digits: String = (0..n)
                    .map(|_| char::from(b'0' + self.rng.below(10) as u8))
                    .collect();
                format!(".{digits}")
            }
        }
    }

    fn time(&mut self, t: &str) -> Value {
        if self.rng.chance(30) {
            let per_day: i64 = if t == "time-millis" {
                86_400_000
            } else {
                86_400_000_000
            };
            return num(&format!("{}", self.rng.next() as i64 % per_day));
        }
        if self.rng.chance(5) {
            return json!(
                self.rng
                    .pick(&["13:45", "1:02:03", "24:00:00", "13:45:00Z"])
            );
        }
        let fraction = self.fraction();
        json!(format!(
            "{:02}:{:02}:{:02}{fraction}",
            self.rng.below(24),
            self.rng.below(60),
            self.rng.below(60)
        ))
    }

    fn timestamp(&mut self, t: &str) -> Value {
        if self.rng.chance(30) {
            return self.integer(&[
                "0",
                "-1",
                "9223372036854775807",
                "-9223372036854775808",
                "1709300700250",
                "1.0",
            ]);
        }
        if self.rng.chance(5) {
            return json!(self.rng.pick(&[
                "2024-03-01 13:45:00Z",
                "2024-03-01t13:45:00z",
                "2024-03-01T13:45Z",
                "2024-03-01T13:45:00",
                "2024-03-01T13:45:00+0100",
                "2024-03-01",
            ]));
        }
        let year = match self.rng.below(10) {
            0 => 1677 + self.rng.below(2),
            1 => 2262 + self.rng.below(40),
            _ => 1900 + self.rng.below(200),
        };
        let fraction = self.fraction();
        let zone = if t.starts_with("local-") {
            String::new()
        } else if self.rng.chance(50) {
            "Z".into()
        } else {
            let sign = if self.rng.chance(50) { '+' } else { '-' };
            format!(
                "{sign}{:02}:{:02}",
                self.rng.below(15),
                15 * self.rng.below(4)
            )
        };
        json!(format!(
            "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}{zone}",
            1 + self.rng.below(12),
            1 + self.rng.below(28),
            self.rng.below(24),
            self.rng.below(60),
            self.rng.below(60)
        ))
    }

    fn duration(&mut self) -> Value {
        let part = |rng: &mut Rng| {
            num(rng.pick(&["0", "1", "30", "4294967295", "4294967296", "-1", "1.0"]))
        };
        let mut value = json!({
            "months": part(&mut self.rng),
            "days": part(&mut self.rng),
            "millis": part(&mut self.rng),
        });
        if self.rng.chance(5) {
            value.as_object_mut().expect("object").remove("days");
        }
        value
    }
}

/// One generated case: a record schema and a payload for it.
fn generate(seed: u64, index: usize) -> (Value, Value) {
    let mut g = Gen {
        rng: Rng(seed ^ (index as u64).wrapping_mul(0x2545_f491_4f6c_dd1d)),
        named: HashMap::new(),
        counter: 0,
    };
    let ns = "ns.t";
    let mut schema = g.record(0, ns);
    schema["namespace"] = json!(ns);
    let payload = g.value(
        &json!(format!("{ns}.{}", schema["name"].as_str().unwrap())),
        ns,
    );
    (schema, payload)
}

/// What the relay did with a case.
enum Relay {
    /// The schema is not one the relay takes.
    Schema(String),
    Bytes(Vec<u8>),
    Refused(String),
}

fn relay(schema: &Value, payload: &Value) -> Relay {
    match AvroEncoder::new(&schema.to_string()) {
        Err(e) => Relay::Schema(e.to_string()),
        Ok(encoder) => match encoder.encode(payload) {
            Ok(bytes) => Relay::Bytes(bytes),
            Err(e) => Relay::Refused(e.to_string()),
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the schema holds a type whose encoding is not unique: a `bytes`
/// decimal (the reference may write a longer two's complement) or a map
/// (the relay's entries go in no set order).
fn encoding_not_unique(schema: &Value) -> bool {
    match schema {
        Value::Object(o) => {
            (o.get("type") == Some(&json!("bytes"))
                && o.get("logicalType") == Some(&json!("decimal")))
                || o.get("type") == Some(&json!("map"))
                || o.values().any(encoding_not_unique)
        }
        Value::Array(items) => items.iter().any(encoding_not_unique),
        _ => false,
    }
}

/// The verdict on one case: `Ok(kind)` where relay and reference agree by
/// the rule, `Err(why)` where they do not.
fn judge(schema: &Value, relay: &Relay, answer: &Value) -> Result<String, String> {
    let reference = answer["ref"].as_str().unwrap_or_default();
    match (relay, reference) {
        (Relay::Schema(_), "schema-error") => Ok("schema refused by both".into()),
        (Relay::Schema(e), _) => Err(format!("the relay refused the schema: {e}")),
        (_, "schema-error") => Err(format!("the reference refused the schema: {answer}")),
        (Relay::Bytes(bytes), "ok") => {
            if answer["hex"].as_str() == Some(hex(bytes).as_str()) {
                Ok("same bytes".into())
            } else if answer["fixed_hex"].as_str() == Some(hex(bytes).as_str()) {
                Ok(format!(
                    "same bytes but for a fault of the reference ({})",
                    answer["fault"].as_str().unwrap_or_default()
                ))
            } else if answer["same_value"] == json!(true) && encoding_not_unique(schema) {
                Ok(match answer["fault"].as_str() {
                    Some(fault) => format!(
                        "same value (a decimal's bytes or a map's order) but for a fault of \
                         the reference ({fault})"
                    ),
                    None => "same value (a decimal's bytes or a map's order)".into(),
                })
            } else {
                Err(format!(
                    "different bytes: relay {}, reference {}",
                    hex(bytes),
                    answer["hex"]
                ))
            }
        }
        (Relay::Refused(e), "ok") => Err(format!(
            "the relay refused ({e}) what the reference wrote, by no documented rule"
        )),
        (Relay::Refused(_), "refused") => Ok("refused by both".into()),
        (Relay::Bytes(_), "refused") => Err(format!(
            "the relay wrote what the reference refused ({})",
            answer["why"]
        )),
        (Relay::Refused(_), "strict") => Ok(format!(
            "refused by rule {} (the reference {})",
            answer["rule"].as_str().unwrap_or_default(),
            if answer["reference_accepts"] == json!(true) {
                "writes it"
            } else {
                "refuses it too"
            }
        )),
        (Relay::Bytes(_), "strict") => Err(format!(
            "the relay wrote what its documented rule {} refuses",
            answer["rule"]
        )),
        _ => Err(format!("an answer the test does not know: {answer}")),
    }
}

/// Runs the cases through the relay and, in one Python process, the
/// reference; the verdicts in order.
fn run(cases: &[(Value, Value)]) -> Vec<Result<String, String>> {
    let relays: Vec<Relay> = cases.iter().map(|(s, p)| relay(s, p)).collect();
    let lines: Vec<String> = cases
        .iter()
        .zip(&relays)
        .map(|((schema, payload), relay)| {
            let relay = match relay {
                Relay::Bytes(b) => json!(hex(b)),
                _ => Value::Null,
            };
            json!({"schema": schema.to_string(), "payload": payload.to_string(), "relay": relay})
                .to_string()
        })
        .collect();
    let started = Instant::now();
    let answers = support::run_script("avro.py", &[], &lines);
    eprintln!(
        "avro: the reference answered {} cases in {:.1?}",
        lines.len(),
        started.elapsed()
    );
    cases
        .iter()
        .zip(&relays)
        .zip(&answers)
        .map(|(((schema, _), relay), answer)| {
            let answer: Value = serde_json::from_str(answer).expect("a JSON answer");
            judge(schema, relay, &answer)
        })
        .collect()
}

/// Smaller variants of a case: one field, key, item or union branch less.
fn shrinks(schema: &Value, payload: &Value) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for s in smaller(schema) {
        out.push((s, payload.clone()));
    }
    for p in smaller(payload) {
        out.push((schema.clone(), p));
    }
    out
}

/// Every value with one array element or object member removed, anywhere.
fn smaller(value: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    match value {
        Value::Array(items) => {
            for i in 0..items.len() {
                let mut fewer = items.clone();
                fewer.remove(i);
                out.push(Value::Array(fewer));
                for inner in smaller(&items[i]) {
                    let mut changed = items.clone();
                    changed[i] = inner;
                    out.push(Value::Array(changed));
                }
            }
        }
        Value::Object(map) => {
            for (key, member) in map {
                if !["type", "name", "items", "values", "symbols", "size"].contains(&key.as_str()) {
                    let mut fewer = map.clone();
                    fewer.remove(key);
                    out.push(Value::Object(fewer));
                }
                for inner in smaller(member) {
                    let mut changed = map.clone();
                    changed.insert(key.clone(), inner);
                    out.push(Value::Object(changed));
                }
            }
        }
        _ => {}
    }
    out
}

/// Whether two failures are of one kind (their first words): a shrink
/// must not trade the failure for another.
fn same_kind(a: &str, b: &str) -> bool {
    a.split_whitespace()
        .take(3)
        .eq(b.split_whitespace().take(3))
}

/// The smallest variant of a failing case that still fails, one step at a
/// time, each step's candidates in one batch.
fn shrink(mut case: (Value, Value), mut why: String) -> ((Value, Value), String) {
    for _ in 0..200 {
        let candidates = shrinks(&case.0, &case.1);
        if candidates.is_empty() {
            break;
        }
        let verdicts = run(&candidates);
        match candidates.into_iter().zip(verdicts).find(|(_, v)| {
            v.as_ref()
                .is_err_and(|e| same_kind(e, &why) && !e.contains("refused the schema"))
        }) {
            Some((smaller, verdict)) => {
                case = smaller;
                why = verdict.unwrap_err();
            }
            None => break,
        }
    }
    (case, why)
}

#[test]
fn the_relay_writes_what_fastavro_writes_and_refuses_what_it_refuses() {
    let (count, seed) = (support::cases(), support::seed(0x0a77_0001));
    let started = Instant::now();
    let cases: Vec<(Value, Value)> = (0..count).map(|i| generate(seed, i)).collect();
    let verdicts = run(&cases);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, verdict) in verdicts.iter().enumerate() {
        match verdict {
            Ok(kind) => *tally.entry(kind.clone()).or_default() += 1,
            Err(why) => failures.push((i, why.clone())),
        }
    }
    eprintln!(
        "avro: {count} cases (OUTBOX_REFERENCE_SEED={seed}) in {:.1?}:",
        started.elapsed()
    );
    for (kind, n) in &tally {
        eprintln!("  {n:>6}  {kind}");
    }
    let mut kinds: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (i, why) in &failures {
        let kind: String = why.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        kinds.entry(kind).or_insert((0, *i)).0 += 1;
    }
    for (kind, (n, first)) in &kinds {
        eprintln!("  {n:>6}  FAILED: {kind}… (first: case {first})");
    }
    if let Some((i, why)) = failures.first() {
        eprintln!(
            "case {i}: {why}\n  schema:  {}\n  payload: {}",
            cases[*i].0, cases[*i].1
        );
        let ((schema, payload), why) = shrink(cases[*i].clone(), why.clone());
        panic!(
            "{} of {count} cases differ from the reference; the first, case {i} of \
             OUTBOX_REFERENCE_SEED={seed}, shrunk:\n  schema:  {schema}\n  payload: {payload}\n  \
             {why}",
            failures.len()
        );
    }
    // The cases reach every verdict the rule has, or the generator has
    // gone blind somewhere.
    for kind in ["same bytes", "refused by both"] {
        assert!(tally.contains_key(kind), "no case was {kind}: {tally:?}");
    }
}
