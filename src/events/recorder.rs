//! An in-memory recorder of emitted events, for tests: what [`Recorder`]
//! holds is every log line with an `event` field emitted on the current
//! thread while its guard lives, with its level and fields as text. It is
//! a tracing subscriber of its own, set as the thread's default: no global
//! state, and nothing from tests running beside it.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One emitted event: its name, level and fields (`event` left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub name: String,
    pub level: Level,
    pub fields: Vec<(String, String)>,
}

impl Recorded {
    /// The value of field `name` as text (`message` is the line's text).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }
}

/// See the module docs. Cheap to clone: clones share the record.
#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Recorded>>>);

impl Recorder {
    /// Records the current thread's events until the guard is dropped.
    pub fn start() -> (Recorder, tracing::subscriber::DefaultGuard) {
        let recorder = Recorder::default();
        let subscriber = tracing_subscriber::registry().with(recorder.clone());
        (recorder, tracing::subscriber::set_default(subscriber))
    }

    /// Every event recorded so far, oldest first.
    pub fn events(&self) -> Vec<Recorded> {
        self.lock().clone()
    }

    /// The names of the events recorded so far, oldest first.
    pub fn names(&self) -> Vec<String> {
        self.lock().iter().map(|e| e.name.clone()).collect()
    }

    /// The events named `name`.
    pub fn named(&self, name: &str) -> Vec<Recorded> {
        self.lock()
            .iter()
            .filter(|e| e.name == name)
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Recorded>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct Fields {
    name: Option<String>,
    fields: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        if field.name() == "event" {
            self.name = Some(value);
        } else {
            self.fields.push((field.name().to_owned(), value));
        }
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(name) = fields.name {
            self.lock().push(Recorded {
                name,
                level: *event.metadata().level(),
                fields: fields.fields,
            });
        }
    }
}
