//! Event routing between sinks: `[[routes]]` send events to a named sink by
//! `aggregatetype` and `type` globs; the first route that matches wins, and
//! an event no route matches goes to Kafka. Each sink (and each route, over
//! its sink's) also says what a dead letter does to its aggregate
//! ([`AfterDeadLetter`]): park the aggregate's later events behind it, or
//! let them go on.
//!
//! Pure: the routes are compiled once (by the config), matching
//! allocates nothing (`tests/allocations.rs` counts).
//!
//! Globs: `*` matches any run of characters (also none), `?` exactly one,
//! everything else itself, case-sensitively. There is no escape: outbox
//! aggregate types and event types are names, not patterns.

/// Where an event goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Kafka,
    /// The HTTP sink at this index of [`Routes::sinks`].
    Http(usize),
}

/// What a dead letter does to the later events of its aggregate
/// (`after_dead_letter` of `[kafka]`, of a `[sinks.NAME]`, of a
/// `[[routes]]` entry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterDeadLetter {
    /// The aggregate is parked: its later events are held, in commit order,
    /// until the dead letter is retried or discarded (per-aggregate order
    /// kept through a failure).
    #[default]
    Park,
    /// The aggregate's later events go on at once, ahead of the dead letter.
    Skip,
}

impl AfterDeadLetter {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AfterDeadLetter::Park => "park",
            AfterDeadLetter::Skip => "skip",
        }
    }
}

/// A compiled `[[routes]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    aggregate_type: Option<String>,
    event_type: Option<String>,
    sink: usize,
    /// The route's own `after_dead_letter`, over its sink's.
    after_dead_letter: Option<AfterDeadLetter>,
}

/// The routes of a config, in order, and the sink names they use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    routes: Vec<Route>,
    /// Names of the HTTP sinks, indexed by [`Target::Http`].
    sinks: Vec<String>,
    /// `after_dead_letter` of each HTTP sink, indexed like `sinks`.
    sink_after: Vec<AfterDeadLetter>,
    /// `kafka.after_dead_letter`: of events no route takes.
    kafka_after: AfterDeadLetter,
}

impl Routes {
    /// Routes from `(aggregatetype glob, type glob, sink index)` triples
    /// over the sink names `sinks`.
    pub fn from_parts(
        routes: Vec<(Option<String>, Option<String>, usize)>,
        sinks: Vec<String>,
    ) -> Self {
        let sink_after = vec![AfterDeadLetter::default(); sinks.len()];
        Routes {
            routes: routes
                .into_iter()
                .filter(|r| r.2 < sinks.len())
                .map(|(aggregate_type, event_type, sink)| Route {
                    aggregate_type,
                    event_type,
                    sink,
                    after_dead_letter: None,
                })
                .collect(),
            sinks,
            sink_after,
            kafka_after: AfterDeadLetter::default(),
        }
    }

    /// What a dead letter does: `kafka` for events no route takes, `sinks`
    /// per HTTP sink (indexed like the sink names), `routes` per route (in
    /// order; `None`: its sink's).
    #[must_use]
    pub fn with_after_dead_letter(
        mut self,
        kafka: AfterDeadLetter,
        sinks: &[AfterDeadLetter],
        routes: &[Option<AfterDeadLetter>],
    ) -> Self {
        self.kafka_after = kafka;
        for (slot, after) in self.sink_after.iter_mut().zip(sinks) {
            *slot = *after;
        }
        for (route, after) in self.routes.iter_mut().zip(routes) {
            route.after_dead_letter = *after;
        }
        self
    }

    fn route_of(&self, aggregate_type: &str, event_type: &str) -> Option<&Route> {
        self.routes.iter().find(|r| {
            r.aggregate_type
                .as_deref()
                .is_none_or(|g| glob_match(g, aggregate_type))
                && r.event_type
                    .as_deref()
                    .is_none_or(|g| glob_match(g, event_type))
        })
    }

    /// The sink of an event, by its aggregate type and type.
    pub fn target(&self, aggregate_type: &str, event_type: &str) -> Target {
        self.route_of(aggregate_type, event_type)
            .map_or(Target::Kafka, |r| Target::Http(r.sink))
    }

    /// What a dead letter of an event of this aggregate type and type does
    /// to its aggregate: its route's setting, else its sink's, else Kafka's.
    pub fn after_dead_letter(&self, aggregate_type: &str, event_type: &str) -> AfterDeadLetter {
        match self.route_of(aggregate_type, event_type) {
            Some(route) => route
                .after_dead_letter
                .unwrap_or_else(|| self.sink_after.get(route.sink).copied().unwrap_or_default()),
            None => self.kafka_after,
        }
    }

    /// Whether any sink or route parks an aggregate after a dead letter
    /// (then the parking table is needed).
    pub fn any_park(&self) -> bool {
        self.kafka_after == AfterDeadLetter::Park
            || self.sink_after.contains(&AfterDeadLetter::Park)
            || self
                .routes
                .iter()
                .any(|r| r.after_dead_letter == Some(AfterDeadLetter::Park))
    }

    /// `after_dead_letter` of the HTTP sink at this index.
    pub fn sink_after_dead_letter(&self, sink: usize) -> AfterDeadLetter {
        self.sink_after.get(sink).copied().unwrap_or_default()
    }

    /// The sink names, indexed by [`Target::Http`].
    pub fn sinks(&self) -> &[String] {
        &self.sinks
    }

    /// Whether any event can go to an HTTP sink.
    pub fn any_http(&self) -> bool {
        !self.routes.is_empty()
    }
}

/// Whether `text` matches `glob` (`*` any run, `?` one character).
///
/// Over the bytes of both, allocating nothing: the classic greedy match
/// with one backtrack point (the last `*`), which is complete for globs
/// without character classes; linear in practice. `?` and a `*` that
/// swallows one more take a whole character, so positions in the text are
/// on character boundaries whenever the glob's are; a literal character
/// matches when its bytes do (both are UTF-8).
pub fn glob_match(glob: &str, text: &str) -> bool {
    let (pattern, bytes) = (glob.as_bytes(), text.as_bytes());
    let (mut g, mut t) = (0, 0);
    // Where the last `*` was, and the text position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while t < bytes.len() {
        match pattern.get(g) {
            Some(b'?') => {
                g += 1;
                t = next_char(text, t);
            }
            Some(b'*') => {
                star = Some((g, t));
                g += 1;
            }
            Some(&c) if c == bytes[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character.
                Some((sg, st)) => {
                    let st = next_char(text, st);
                    star = Some((sg, st));
                    g = sg + 1;
                    t = st;
                }
                None => return false,
            },
        }
    }
    pattern[g..].iter().all(|&c| c == b'*')
}

/// The position after the character that starts at `at` in `text`.
fn next_char(text: &str, at: usize) -> usize {
    let mut next = at + 1;
    while !text.is_char_boundary(next) {
        next += 1;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_route_s_own_setting_wins_over_its_sink_s_and_kafka_s_covers_the_rest() {
        let routes = Routes::from_parts(
            vec![
                (Some("order".into()), Some("Paid".into()), 0),
                (Some("order".into()), None, 0),
                (Some("invoice".into()), None, 1),
            ],
            vec!["billing".into(), "ledger".into()],
        )
        .with_after_dead_letter(
            AfterDeadLetter::Skip,
            &[AfterDeadLetter::Park, AfterDeadLetter::Skip],
            &[
                Some(AfterDeadLetter::Skip),
                None,
                Some(AfterDeadLetter::Park),
            ],
        );
        assert_eq!(
            routes.after_dead_letter("order", "Paid"),
            AfterDeadLetter::Skip
        );
        assert_eq!(
            routes.after_dead_letter("order", "Placed"),
            AfterDeadLetter::Park
        );
        assert_eq!(
            routes.after_dead_letter("invoice", "Sent"),
            AfterDeadLetter::Park
        );
        assert_eq!(
            routes.after_dead_letter("user", "Created"),
            AfterDeadLetter::Skip
        );
        assert_eq!(routes.sink_after_dead_letter(1), AfterDeadLetter::Skip);
        let defaults = Routes::default();
        assert_eq!(
            defaults.after_dead_letter("user", "Created"),
            AfterDeadLetter::Park
        );
    }

    /// An independent matcher: plain recursion over the definition.
    fn reference(glob: &[char], text: &[char]) -> bool {
        match glob.split_first() {
            None => text.is_empty(),
            Some(('*', rest)) => (0..=text.len()).any(|i| reference(rest, &text[i..])),
            Some(('?', rest)) => !text.is_empty() && reference(rest, &text[1..]),
            Some((c, rest)) => text.first() == Some(c) && reference(rest, &text[1..]),
        }
    }

    #[test]
    fn examples() {
        assert!(glob_match("payment*", "payment"));
        assert!(glob_match("payment*", "payments.v2"));
        assert!(!glob_match("payment*", "Payment"));
        assert!(!glob_match("payment*", "order.payment"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*.created", "order.created"));
        assert!(!glob_match("*.created", "order.created.v2"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("é*", "élan"));
        assert!(glob_match("?lan", "élan"));
        assert!(glob_match("*?n", "élan"));
        assert!(
            !glob_match("??lan", "élan"),
            "é is one character, not two bytes"
        );
        assert!(glob_match("€?", "€😀"));
        assert!(!glob_match("é", "è"), "same first byte");
    }

    proptest! {
        #[test]
        fn agrees_with_the_definition(
            glob in "[ab*?]{0,8}",
            text in "[abc]{0,10}",
        ) {
            let g: Vec<char> = glob.chars().collect();
            let t: Vec<char> = text.chars().collect();
            prop_assert_eq!(glob_match(&glob, &text), reference(&g, &t));
        }

        /// Characters of one to four bytes, some sharing their first
        /// bytes (é and è, € and ₤): `?` and `*` take whole characters.
        #[test]
        fn agrees_with_the_definition_on_characters_of_any_width(
            glob in "[aéè€₤😀*?]{0,8}",
            text in "[aéè€₤😀b]{0,10}",
        ) {
            let g: Vec<char> = glob.chars().collect();
            let t: Vec<char> = text.chars().collect();
            prop_assert_eq!(glob_match(&glob, &text), reference(&g, &t));
        }
    }

    fn config(toml: &str) -> crate::config::Config {
        crate::config::load_for_test(toml, &[]).expect("valid config")
    }

    #[test]
    fn first_match_wins_and_no_match_goes_to_kafka() {
        let routes = (config(
            r#"
            [[routes]]
            aggregatetype = "payment*"
            type = "refund.*"
            sink = "refunds"
            [[routes]]
            aggregatetype = "payment*"
            sink = "billing"
            [[routes]]
            type = "audit"
            sink = "refunds"
            [sinks.billing]
            url = "http://127.0.0.1:1/hooks"
            [sinks.refunds]
            url = "http://127.0.0.1:2/hooks"
            "#,
        ))
        .routes();
        let name = |t: Target| match t {
            Target::Kafka => "kafka".to_owned(),
            Target::Http(i) => routes.sinks()[i].clone(),
        };
        assert_eq!(name(routes.target("payment", "refund.issued")), "refunds");
        assert_eq!(name(routes.target("payments", "captured")), "billing");
        assert_eq!(name(routes.target("order", "audit")), "refunds");
        assert_eq!(name(routes.target("order", "created")), "kafka");
        assert!(routes.any_http());
        assert!(!Routes::default().any_http());
        assert_eq!(Routes::default().target("payment", "x"), Target::Kafka);
    }
}
