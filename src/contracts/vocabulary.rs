//! What a contract's JSON Schema may say, by its draft: the check that runs
//! when a contract is loaded, before the schema is compiled.
//!
//! A draft's meta-schema lets any unknown keyword through, so a misspelled
//! `requird` or a `prefixItems` in a draft-07 schema would compile and then
//! check nothing. Here every keyword of every subschema must be one of the
//! schema's draft, one of the annotations every draft may carry, or an
//! extension named `x-...` (ignored, whatever its value); and every `type`
//! names one of the seven JSON types. The meta-schema check proper (a
//! `minimum` that is not a number, ...) is jsonschema's, at compile.
//!
//! Invariant: the draft is the root's `$schema` (none: 2020-12, as the
//! jsonschema crate and the Python package default); a `$schema` that names
//! no draft is refused rather than guessed.

use std::fmt;

use serde_json::Value;

pub use super::draft::Draft;

/// Why a schema is refused: where in the schema (a JSON pointer) and what
/// to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub place: String,
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = if self.place.is_empty() {
            "/"
        } else {
            &self.place
        };
        write!(f, "at {place} in the schema: {}", self.what)
    }
}

/// The seven type names of every draft.
pub const TYPES: [&str; 7] = [
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// What every draft may carry: annotations that assert nothing, the places
/// subschemas are kept (`definitions` for drafts before 2019-09, `$defs`
/// after, both accepted everywhere), and `format` (see docs/contracts.md).
const ALWAYS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "format",
    "definitions",
    "$defs",
];

const DRAFT4: &[&str] = &[
    "id",
    "$ref",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "additionalItems",
    "items",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "additionalProperties",
    "properties",
    "patternProperties",
    "dependencies",
    "enum",
    "type",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
];

/// Draft 6 adds these to draft 4 (and drops `id` for `$id`).
const DRAFT6: &[&str] = &["const", "contains", "propertyNames"];

/// Draft 7 adds these to draft 6.
const DRAFT7: &[&str] = &[
    "if",
    "then",
    "else",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
];

/// 2019-09 adds these to draft 7 (and drops `dependencies` for
/// `dependentRequired` and `dependentSchemas`).
const DRAFT201909: &[&str] = &[
    "$anchor",
    "$vocabulary",
    "$recursiveRef",
    "$recursiveAnchor",
    "dependentRequired",
    "dependentSchemas",
    "maxContains",
    "minContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "deprecated",
];

/// 2020-12 adds these to 2019-09 (and drops `$recursiveRef`,
/// `$recursiveAnchor` and `additionalItems`).
const DRAFT202012: &[&str] = &["prefixItems", "$dynamicRef", "$dynamicAnchor"];

const ALL: [Draft; 5] = [
    Draft::Draft4,
    Draft::Draft6,
    Draft::Draft7,
    Draft::Draft201909,
    Draft::Draft202012,
];

impl Draft {
    /// The draft a schema's `$schema` names; none: 2020-12.
    ///
    /// # Errors
    /// `$schema` is not a string, or names no draft the relay knows.
    pub fn of(schema: &Value) -> Result<Draft, Problem> {
        let Some(named) = schema.get("$schema") else {
            return Ok(Draft::Draft202012);
        };
        let problem = || Problem {
            place: "/$schema".to_owned(),
            what: "names no JSON Schema draft the relay knows: use \
                   http://json-schema.org/draft-04/schema#, draft-06, draft-07, \
                   https://json-schema.org/draft/2019-09/schema or \
                   https://json-schema.org/draft/2020-12/schema"
                .to_owned(),
        };
        let uri = named.as_str().ok_or_else(problem)?;
        let uri = uri.strip_suffix('#').unwrap_or(uri);
        let uri = uri
            .strip_prefix("https://")
            .or_else(|| uri.strip_prefix("http://"))
            .ok_or_else(problem)?;
        match uri {
            "json-schema.org/draft-04/schema" => Ok(Draft::Draft4),
            "json-schema.org/draft-06/schema" => Ok(Draft::Draft6),
            "json-schema.org/draft-07/schema" => Ok(Draft::Draft7),
            "json-schema.org/draft/2019-09/schema" => Ok(Draft::Draft201909),
            "json-schema.org/draft/2020-12/schema" => Ok(Draft::Draft202012),
            _ => Err(problem()),
        }
    }

    /// As error texts name it.
    pub fn name(self) -> &'static str {
        match self {
            Draft::Draft4 => "draft-04",
            Draft::Draft6 => "draft-06",
            Draft::Draft7 => "draft-07",
            Draft::Draft201909 => "draft 2019-09",
            Draft::Draft202012 => "draft 2020-12",
        }
    }

    /// The jsonschema crate's name for it.
    pub fn to_jsonschema(self) -> jsonschema::Draft {
        match self {
            Draft::Draft4 => jsonschema::Draft::Draft4,
            Draft::Draft6 => jsonschema::Draft::Draft6,
            Draft::Draft7 => jsonschema::Draft::Draft7,
            Draft::Draft201909 => jsonschema::Draft::Draft201909,
            Draft::Draft202012 => jsonschema::Draft::Draft202012,
        }
    }

    /// Whether `keyword` is one of this draft's (or always allowed).
    pub fn knows(self, keyword: &str) -> bool {
        if ALWAYS.contains(&keyword) {
            return true;
        }
        let in_4 = DRAFT4.contains(&keyword);
        let in_6 = DRAFT6.contains(&keyword);
        let in_7 = DRAFT7.contains(&keyword);
        let in_2019 = DRAFT201909.contains(&keyword);
        let in_2020 = DRAFT202012.contains(&keyword);
        match self {
            Draft::Draft4 => in_4,
            Draft::Draft6 => (in_4 && keyword != "id") || in_6,
            Draft::Draft7 => (in_4 && keyword != "id") || in_6 || in_7,
            Draft::Draft201909 => {
                (in_4 && !matches!(keyword, "id" | "dependencies")) || in_6 || in_7 || in_2019
            }
            Draft::Draft202012 => {
                (in_4 && !matches!(keyword, "id" | "dependencies" | "additionalItems"))
                    || in_6
                    || in_7
                    || (in_2019 && !matches!(keyword, "$recursiveRef" | "$recursiveAnchor"))
                    || in_2020
            }
        }
    }

    /// Whether integers are only numbers written without a fraction or an
    /// exponent (draft 4), rather than any number whose value is whole.
    pub fn integers_are_literal(self) -> bool {
        self == Draft::Draft4
    }
}

/// Checks every keyword and type name of `schema` against its draft.
///
/// # Errors
/// The first [`Problem`], in document order.
pub fn check(schema: &Value) -> Result<Draft, Problem> {
    let draft = Draft::of(schema)?;
    walk(schema, &mut String::new(), draft)?;
    Ok(draft)
}

/// How a keyword's value holds subschemas.
enum Holds {
    Nothing,
    One,
    List,
    Map,
}

fn holds(keyword: &str, value: &Value) -> Holds {
    match keyword {
        "items" if value.is_array() => Holds::List,
        "additionalItems"
        | "additionalProperties"
        | "contains"
        | "propertyNames"
        | "not"
        | "if"
        | "then"
        | "else"
        | "unevaluatedItems"
        | "unevaluatedProperties"
        | "contentSchema"
        | "items" => Holds::One,
        "allOf" | "anyOf" | "oneOf" | "prefixItems" => Holds::List,
        "properties" | "patternProperties" | "definitions" | "$defs" | "dependentSchemas"
        | "dependencies" => Holds::Map,
        _ => Holds::Nothing,
    }
}

/// One subschema at `place` (a JSON pointer, grown and restored).
fn walk(schema: &Value, place: &mut String, draft: Draft) -> Result<(), Problem> {
    // Booleans and values that are no schema at all: the meta-schema's.
    let Value::Object(members) = schema else {
        return Ok(());
    };
    for (keyword, value) in members {
        let len = place.len();
        place.push('/');
        push_escaped(place, keyword);
        if keyword.starts_with("x-") {
            place.truncate(len);
            continue;
        }
        if !draft.knows(keyword) {
            return Err(Problem {
                place: place.clone(),
                what: unknown_keyword(keyword, draft),
            });
        }
        if keyword == "type" {
            check_types(value, place)?;
        }
        // Draft 4's meta-schema wants each value once, by value; the
        // jsonschema crate's check lets a repeated one through.
        if keyword == "enum"
            && draft == Draft::Draft4
            && let Some(values) = value.as_array()
            && values
                .iter()
                .enumerate()
                .any(|(i, a)| values[..i].iter().any(|b| super::exact::equal(a, b)))
        {
            return Err(Problem {
                place: place.clone(),
                what: "lists a value twice, which draft-04 does not allow: list each once"
                    .to_owned(),
            });
        }
        match holds(keyword, value) {
            Holds::Nothing => {}
            Holds::One => walk(value, place, draft)?,
            Holds::List => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    let len = place.len();
                    place.push('/');
                    place.push_str(&i.to_string());
                    walk(sub, place, draft)?;
                    place.truncate(len);
                }
            }
            Holds::Map => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    // `dependencies` also maps names to lists of names.
                    if sub.is_array() {
                        continue;
                    }
                    let len = place.len();
                    place.push('/');
                    push_escaped(place, name);
                    walk(sub, place, draft)?;
                    place.truncate(len);
                }
            }
        }
        place.truncate(len);
    }
    Ok(())
}

fn check_types(value: &Value, place: &str) -> Result<(), Problem> {
    let names: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    for name in names {
        // Not a string at all: the meta-schema says so.
        let Some(name) = name.as_str() else {
            continue;
        };
        if !TYPES.contains(&name) {
            let hint = closest(name, TYPES.iter().copied())
                .map(|t| format!(" (did you mean \"{t}\"?)"))
                .unwrap_or_default();
            return Err(Problem {
                place: place.to_owned(),
                what: format!(
                    "unknown type \"{name}\"{hint}: the types are {}",
                    TYPES.join(", ")
                ),
            });
        }
    }
    Ok(())
}

fn unknown_keyword(keyword: &str, draft: Draft) -> String {
    if let Some(other) = ALL.iter().rev().find(|d| d.knows(keyword)) {
        return format!(
            "\"{keyword}\" is a keyword of {}, not of {} (the schema's draft, by its \
             $schema): use the keywords of {}, or set $schema to a draft that has it",
            other.name(),
            draft.name(),
            draft.name()
        );
    }
    let known = ALWAYS
        .iter()
        .chain(DRAFT4)
        .chain(DRAFT6)
        .chain(DRAFT7)
        .chain(DRAFT201909)
        .chain(DRAFT202012)
        .copied()
        .filter(|k| draft.knows(k));
    let hint = closest(keyword, known)
        .map(|k| format!(" (did you mean \"{k}\"?)"))
        .unwrap_or_default();
    format!(
        "unknown keyword \"{keyword}\"{hint}: {} has no such keyword, so it would check \
         nothing; correct it, or name an extension the relay should ignore \"x-{keyword}\"",
        draft.name()
    )
}

/// The candidate nearest to `word` by edit distance, when near enough to
/// be what was meant.
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| {
            (
                crate::suggest::edit_distance(&word.to_lowercase(), &c.to_lowercase()),
                c,
            )
        })
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Appends `token` to a JSON pointer (RFC 6901 escapes).
fn push_escaped(place: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => place.push_str("~0"),
            '/' => place.push_str("~1"),
            c => place.push(c),
        }
    }
}
