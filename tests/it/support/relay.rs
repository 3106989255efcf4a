//! The relay under test, one type for both ways of running it:
//!
//! * [`Relay::in_process`]: `relay::run` on the test's runtime, with
//!   settings from [`super::TestOutbox::settings`]. Its result comes back as
//!   a value ([`Relay::stop`], [`Relay::join`]); its log lines go to the
//!   test's tracing subscriber ([`LogCapture`]).
//! * [`Relay::process`]: the `outbox-relay` binary with a config file, for
//!   signals and crashes ([`Relay::terminate`], [`Relay::kill9`]); its
//!   output goes to a log file beside the config ([`Relay::log_text`]).
//!
//! A method that only makes sense for one kind panics, saying so, when
//! called on the other. A relay process still running when its `Relay` is
//! dropped is killed, so a failing test leaves none behind.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::metrics::Health;
use outbox_relay::relay::{self, RelayError, RelaySettings, Stopped};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::random_name;

/// Exit codes of `outbox-relay run`, as README.md, docs/operations.md and
/// `--help` document them.
pub const EXIT_CLEAN: i32 = 0;
/// A configuration the relay refuses before connecting.
pub const EXIT_CONFIG: i32 = 2;
/// PostgreSQL needs a person: slot missing or invalidated, authentication
/// or TLS refused, publication or table missing.
pub const EXIT_SOURCE: i32 = 3;
/// Kafka needs a person: credentials or ACLs refused, a topic missing and
/// not created.
pub const EXIT_SINK: i32 = 4;
/// Stopped before every event in flight was acknowledged (the drain
/// deadline passed): they are sent again at the next start.
pub const EXIT_UNDRAINED: i32 = 5;

pub struct Relay {
    run: Run,
}

enum Run {
    InProcess {
        stop: watch::Sender<bool>,
        task: Option<JoinHandle<Result<Stopped, RelayError>>>,
    },
    Process {
        child: Child,
        log: PathBuf,
    },
}

impl Relay {
    /// The relay running in-process.
    pub fn in_process(settings: RelaySettings) -> Self {
        Self::in_process_with_health(settings, Health::default())
    }

    /// In-process, with a /health state the test reads.
    pub fn in_process_with_health(settings: RelaySettings, health: Health) -> Self {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(relay::run(settings, rx, health));
        Relay {
            run: Run::InProcess {
                stop,
                task: Some(task),
            },
        }
    }

    /// The relay binary run as a child process with `config`, at `RUST_LOG=info`.
    pub fn process(config: &Path) -> Self {
        Self::process_with_env(config, &[])
    }

    /// The relay binary with `RUST_LOG` set to `log_filter`.
    pub fn process_with_log(config: &Path, log_filter: &str) -> Self {
        Self::process_with_env(config, &[("RUST_LOG", log_filter)])
    }

    /// The relay binary with `RUST_LOG=info` and the variables `vars`
    /// (which may set `RUST_LOG` too) in its environment.
    pub fn process_with_env(config: &Path, vars: &[(&str, &str)]) -> Self {
        let log = config.with_extension(format!("{}.log", random_name("run")));
        let file = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", relay_log_filter())
            .envs(vars.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start outbox-relay");
        Relay {
            run: Run::Process { child, log },
        }
    }

    /// Graceful stop of the in-process relay (as on SIGTERM); returns its
    /// result.
    pub async fn stop(mut self) -> Result<Stopped, RelayError> {
        let Run::InProcess { stop, task } = &mut self.run else {
            panic!("stop() is for a relay in-process; a relay process stops by terminate()")
        };
        let _ = stop.send(true);
        let task = task.take().expect("relay task");
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("relay stops within 60 s")
            .expect("relay task")
    }

    /// Waits for the in-process relay to end by itself (a fatal error).
    pub async fn join(mut self, within: Duration) -> Result<Stopped, RelayError> {
        let Run::InProcess { task, .. } = &mut self.run else {
            panic!("join() is for a relay in-process; wait for a relay process with wait()")
        };
        let task = task.take().expect("relay task");
        tokio::time::timeout(within, task)
            .await
            .expect("relay ends in time")
            .expect("relay task")
    }

    fn child(&mut self) -> &mut Child {
        match &mut self.run {
            Run::Process { child, .. } => child,
            Run::InProcess { .. } => panic!("a relay in-process has no child process"),
        }
    }

    /// The relay process's pid.
    pub fn pid(&self) -> u32 {
        match &self.run {
            Run::Process { child, .. } => child.id(),
            Run::InProcess { .. } => panic!("a relay in-process has no pid of its own"),
        }
    }

    /// `kill -9` of the relay process, and its exit reaped.
    pub fn kill9(mut self) {
        let child = self.child();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM to the relay process, then its exit status (bounded).
    pub async fn terminate(&mut self) -> ExitStatus {
        let pid = self.pid();
        // kill(2) through the `kill` command keeps this crate free of libc.
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        self.wait(Duration::from_secs(60)).await
    }

    /// Waits for the relay process to exit by itself (bounded).
    pub async fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child().try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay did not exit within {within:?}; log: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the relay process is still running.
    pub fn running(&mut self) -> bool {
        self.child().try_wait().unwrap().is_none()
    }

    /// The relay process's log file.
    pub fn log_path(&self) -> &Path {
        match &self.run {
            Run::Process { log, .. } => log,
            Run::InProcess { .. } => {
                panic!("a relay in-process logs to the test's subscriber: use LogCapture")
            }
        }
    }

    /// What the relay process wrote so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The relay process's log lines of the event named `name` (its
    /// `event` field: `outbox_relay::events`), oldest first.
    pub fn event_lines(&self, name: &str) -> Vec<String> {
        event_lines(&self.log_text(), name)
    }

    /// Which of the events `names` the relay process logged last, if any.
    pub fn last_event<'a>(&self, names: &[&'a str]) -> Option<&'a str> {
        let text = self.log_text();
        text.lines()
            .rev()
            .find_map(|line| names.iter().find(|name| is_event_line(line, name)))
            .copied()
    }

    /// Waits until the relay process logged the event named `name`, one
    /// of `outbox_relay::events::ALL`: matched by its `event` field, not
    /// by the line's wording.
    pub async fn wait_for_event(&self, name: &str, within: Duration) {
        known_event(name);
        let deadline = tokio::time::Instant::now() + within;
        while self.event_lines(name).is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "relay log has no event {name:?} within {within:?}; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The relay process's resident set size in bytes (`VmRSS`), while it runs.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// The relay process's peak resident set size in bytes (`VmHWM`), while
    /// it runs: the high-water mark, however briefly it was reached.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Run::Process { child, .. } = &mut self.run {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Panics unless `name` is the name of one of the relay's event types: a
/// wait for a misspelt name would only time out.
fn known_event(name: &str) {
    assert!(
        outbox_relay::events::named(name).is_some(),
        "{name:?} is not the name of an event type in outbox_relay::events::ALL"
    );
}

/// Whether `line`, of a text or a JSON log, is a line of the event named
/// `name`: `event=NAME` as a field of its own, or `"event":"NAME"`.
pub fn is_event_line(line: &str, name: &str) -> bool {
    let text = format!(" event={name}");
    line.contains(&format!("\"event\":\"{name}\""))
        || line.match_indices(&text).any(|(at, found)| {
            line[at + found.len()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace)
        })
}

/// The lines of `log` that are lines of the event named `name`.
pub fn event_lines(log: &str, name: &str) -> Vec<String> {
    known_event(name);
    log.lines()
        .filter(|line| is_event_line(line, name))
        .map(str::to_owned)
        .collect()
}

/// The `cause` of the relay's `fatal_error` line in `log` (a text or a
/// JSON log), if it logged one.
pub fn fatal_cause(log: &str) -> Option<String> {
    let line = event_lines(log, "fatal_error").pop()?;
    let value = |after: &str| {
        after
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect::<String>()
    };
    if let Some((_, after)) = line.split_once("\"cause\":\"") {
        return Some(value(after));
    }
    line.split(' ')
        .find_map(|field| field.strip_prefix("cause="))
        .map(value)
}

/// Asserts that the relay stopped with a `fatal_error` of the cause named
/// `cause` (one of `outbox_relay::error::Cause::ALL`): matched by the
/// stable name, not by the line's wording.
pub fn assert_fatal_cause(log: &str, cause: &str) {
    assert!(
        outbox_relay::error::Cause::ALL
            .iter()
            .any(|c| c.name() == cause),
        "{cause:?} is not the name of a cause in outbox_relay::error::Cause::ALL"
    );
    assert_eq!(
        fatal_cause(log).as_deref(),
        Some(cause),
        "the fatal_error line's cause; log:\n{log}"
    );
}

/// The log lines emitted on the current thread while the guard lives. With
/// a current-thread runtime that is everything the in-process relay logs
/// from its tasks (not librdkafka's own threads), and nothing from tests
/// running beside it.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// Starts capturing (level INFO and above) until the guard is dropped.
    pub fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let capture = LogCapture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        (capture, tracing::subscriber::set_default(subscriber))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }

    /// The captured lines of the event named `name`.
    pub fn event_lines(&self, name: &str) -> Vec<String> {
        event_lines(&self.text(), name)
    }

    /// The captured lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log filter of relay processes: `info`, or `OUTBOX_TEST_RELAY_LOG`
/// when set (e.g. `outbox_relay=debug` while chasing a rare failure: the
/// logs stay beside each test's config in the temporary directory).
fn relay_log_filter() -> String {
    std::env::var("OUTBOX_TEST_RELAY_LOG").unwrap_or_else(|_| "info".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line of the event is matched by its field, in a text and a JSON
    /// log, never by its wording nor by a longer name that starts alike.
    #[test]
    fn an_event_line_is_matched_by_its_field() {
        let text = "2026-12-06T11:00:00Z  WARN outbox_relay::events::retry: delivery failed; \
                    rebuilding the producer event=delivery_failed reason=\"message_timeout\"";
        assert!(is_event_line(text, "delivery_failed"));
        assert!(!is_event_line(text, "stream_broke"));
        let at_the_end =
            "INFO outbox_relay::events::stream: streaming from the slot event=streaming";
        assert!(is_event_line(at_the_end, "streaming"));
        let json = r#"{"level":"INFO","fields":{"message":"m","event":"streaming"}}"#;
        assert!(is_event_line(json, "streaming"));
        // The wording alone is no event line, and no name is a prefix of another's.
        assert!(!is_event_line(
            "streaming from the slot's confirmed position",
            "streaming"
        ));
        assert!(!is_event_line(
            "x event=slot_in_use_or_not y",
            "slot_in_use"
        ));
        let log = format!("{text}\n{at_the_end}\n{json}\n");
        assert_eq!(event_lines(&log, "streaming").len(), 2);
    }

    #[test]
    #[should_panic(expected = "is not the name of an event type")]
    fn a_misspelt_event_name_is_refused() {
        event_lines("", "streamin");
    }
}
