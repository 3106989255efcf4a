//! The session's pace, decided here where the model test sees it: when a
//! graceful stop may end the stream, how many already-buffered items one
//! wake-up takes, when the idle heartbeat is due, what a quiet stream
//! means (exactly-once: an early commit, `commit.rs`; at-least-once: a
//! nudge to the producer), and how long a busy stream is left unread so
//! that one read takes several transactions. The shell (`session.rs`) only
//! waits on what these say and carries them out.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::SessionMachine;
use crate::relay::Stopped;

/// At most this many messages already read off the socket, or delivery
/// reports already queued, are handled per wake-up in at-least-once mode;
/// then the other branches (stop requests, timers) get their turn.
pub const BUFFERED_ITEMS_PER_WAKE: usize = 64;

/// At-least-once: WAL that arrives after the stream was quiet this long
/// is an event after a pause: once it is read, with nothing older waiting
/// for the broker, the producer is nudged into sending it now rather than
/// after its `linger.ms` (nothing more was coming to batch it with). Under
/// load pauses this long are rare, and the linger batches as it always
/// did. (A nudge at every quiet moment measured as `linger.ms = 0`: many
/// small requests, a longer tail at 5,000 events/s, a costlier drain; a
/// nudge only after 1 ms of quiet took little off the median at 1,000/s,
/// whose next event is usually that close. 500 µs before an event nudged
/// often enough at 5,000/s to lengthen its tail; 1 ms less so, with the same
/// median at 1,000/s: benches/cpu-notes.md, sixteenth round.)
pub const NUDGE_AFTER_PAUSE: Duration = Duration::from_millis(1);

/// At-least-once, while WAL arrives faster than [`BUSY_MESSAGES`] per
/// [`RATE_PERIOD`] (and slower than a drain, [`DRAIN_MESSAGES`]), a stream
/// that was read to its end is read again at most once per window, and
/// what the read brought is sent at once (a nudge per read: the window
/// batches instead of `linger.ms`). Each read then takes several
/// transactions, so the session, the producer's broker thread and the
/// delivery reports each wake once per window instead of about once per
/// event. The window is sized by the arrival rate ([`read_window`]): long
/// enough for about [`READ_BATCH_MESSAGES`] messages, at least
/// [`READ_WINDOW_MIN`] and at most [`READ_WINDOW_MAX`].
///
/// A fixed 1 ms window took relay CPU per event at a steady 5,000 events/s
/// from 44.8 to 28.8 µs and its threads' context switches from 2.3 to 1.0
/// per event, for about 1.6 ms more median latency (the window, rounded up
/// to the runtime's 1 ms timer) and no worse a p99 (benches/cpu-notes.md,
/// twenty-sixth round); sizing it by the rate: thirty-first round.
pub const READ_WINDOW_MIN: Duration = Duration::from_millis(1);

/// The longest read window: what a busy stream's events may wait on top
/// of the broker's round trip. At 5,000 events/s the p50 target is 5 ms
/// and the p99 10 ms, and the broker alone takes some 3 and 6.
pub const READ_WINDOW_MAX: Duration = Duration::from_millis(2);

/// The messages a busy stream's read window aims to hold: about ten
/// single-row transactions (a Begin, an Insert and a Commit each). With
/// [`READ_WINDOW_MAX`] this gives 2 ms windows up to 5,000 such
/// transactions a second, which took 6–12 % off the relay's CPU per event
/// there and a fifth off the broker's against a fixed 1 ms, for 0.3–0.4 ms
/// more p99 (benches/cpu-notes.md, thirty-first round), and the 1 ms
/// window from 10,000 a second, where a read holds ten anyway.
pub const READ_BATCH_MESSAGES: u64 = 30;

/// The read window of a busy stream whose last whole [`RATE_PERIOD`] held
/// `period_messages`: the time [`READ_BATCH_MESSAGES`] take to arrive at
/// that rate, within [`READ_WINDOW_MIN`]..=[`READ_WINDOW_MAX`]. About 2 ms
/// from 2,500 to 5,000 single-row transactions a second, 1 ms from
/// 10,000.
pub fn read_window(period_messages: u64) -> Duration {
    let fill = RATE_PERIOD.as_nanos() * u128::from(READ_BATCH_MESSAGES)
        / u128::from(period_messages.max(1));
    Duration::from_nanos(u64::try_from(fill).unwrap_or(u64::MAX))
        .clamp(READ_WINDOW_MIN, READ_WINDOW_MAX)
}

/// The period over which the arrival rate is counted, and the messages in
/// one from which the stream is busy (read once per [`read_window`]): 75
/// in 10 ms, 7,500 messages a second, about 2,500 single-row transactions
/// (a Begin, an Insert and a Commit each). At 1,000 events/s a period
/// holds about 30, and reaching 75 is a one-in-millions burst: events are
/// read the moment they arrive, as before, since at that rate a window
/// would rarely hold two.
pub const RATE_PERIOD: Duration = Duration::from_millis(10);
pub const BUSY_MESSAGES: u64 = 75;

/// From this many messages in a period (75,000 a second, some 25,000
/// single-row transactions) the stream is a backlog being drained, not a
/// busy one: each read already takes many transactions and the linger
/// fills the batches, while a window and a send per read would only make
/// the batches smaller (a W3 drain ran about 12 % slower with them:
/// benches/cpu-notes.md, twenty-sixth round).
pub const DRAIN_MESSAGES: u64 = 750;

/// At-least-once: how long after the last record went to the producer its
/// delivery report may wait on librdkafka's queue for the session's next
/// turn instead of waking it ([`SessionMachine::reports_wait_until`]). At a
/// steady rate the next event's WAL wakes the session within this, and
/// that one wake-up serves the last event's report too: at 1,000 events/s
/// about one wake-up per event fewer. It delays only what the session
/// learns from the report (the slot's confirmation, a dead letter's
/// parking), never a record's way to the broker; a session that sees no
/// more WAL is woken at its end.
pub const REPORTS_WAIT: Duration = Duration::from_millis(20);

/// The shell's clocks at one moment, told to the machine (which reads
/// none): the monotonic one for every wait and bound it measures, the wall
/// one for the commit time of a transaction whose own PostgreSQL does not
/// give (out of range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub at: Instant,
    pub wall: DateTime<Utc>,
}

/// The pace state the machine keeps beside its delivery state.
#[derive(Debug)]
pub(super) struct Pace {
    /// A graceful stop was asked for; the stream ends by this deadline.
    stop: Option<Instant>,
    /// Outbox rows and messages seen at the last heartbeat tick, and when
    /// that count last moved (at first: when the session started).
    rows_at_tick: u64,
    last_row: Instant,
    /// The time the shell last told ([`SessionMachine::set_time`]): what
    /// the machine stamps a Kafka transaction's opening with.
    now: Instant,
    /// The wall time last told, with `now`.
    wall: DateTime<Utc>,
    /// At-least-once: records that went to the producer since its last
    /// nudge.
    pub(super) unnudged: u64,
    /// Since when the session found nothing more to read (`None`: WAL
    /// arrived since).
    quiet_since: Option<Instant>,
    /// At-least-once: WAL arrived after a pause since the last nudge.
    after_pause: bool,
    /// The arrival rate: messages counted since `period_start`, and whether
    /// the last whole period reached [`BUSY_MESSAGES`], and if so the
    /// read window its rate asks for ([`read_window`]).
    period_start: Instant,
    period_messages: u64,
    busy: Option<Duration>,
    /// When the last read after a quiet moment began (its first message).
    last_read: Option<Instant>,
    /// When a record last went to the producer.
    pub(super) last_sent: Option<Instant>,
}

impl Pace {
    /// Since when the stream has been quiet (`None`: WAL arrived since).
    pub(super) fn quiet_since(&self) -> Option<Instant> {
        self.quiet_since
    }

    pub(super) fn new(started: Now) -> Self {
        Pace {
            stop: None,
            rows_at_tick: 0,
            last_row: started.at,
            now: started.at,
            wall: started.wall,
            unnudged: 0,
            quiet_since: None,
            after_pause: false,
            period_start: started.at,
            period_messages: 0,
            busy: None,
            last_read: None,
            last_sent: None,
        }
    }
}

impl SessionMachine<'_> {
    /// The session read everything the server had sent: the stream is
    /// quiet from `now` until the next WAL message. Exactly-once: the open
    /// transaction may commit soon (`commit.rs`); at-least-once: see
    /// [`SessionMachine::nudge_due`].
    pub fn stream_quiet(&mut self, now: Instant) {
        self.pace.quiet_since.get_or_insert(now);
    }

    /// A WAL message arrived (at the time last set): the stream is not
    /// quiet; after [`NUDGE_AFTER_PAUSE`] of quiet, it is an event after a
    /// pause.
    pub(super) fn stream_busy(&mut self) {
        let now = self.pace.now;
        if let Some(since) = self.pace.quiet_since.take() {
            self.pace.last_read = Some(now);
            if now.saturating_duration_since(since) >= NUDGE_AFTER_PAUSE {
                self.pace.after_pause = true;
            }
        }
        let pace = &mut self.pace;
        let elapsed = now.saturating_duration_since(pace.period_start);
        if elapsed >= RATE_PERIOD {
            // Busy when the period just ended was whole (no quiet period
            // between it and now) and held enough messages.
            let busy = elapsed < 2 * RATE_PERIOD
                && (BUSY_MESSAGES..DRAIN_MESSAGES).contains(&pace.period_messages);
            pace.busy = busy.then(|| read_window(pace.period_messages));
            pace.period_start = now;
            pace.period_messages = 0;
        }
        pace.period_messages += 1;
    }

    /// At-least-once, when the stream was read to its end: until when to
    /// leave it unread, so that what arrives meanwhile is taken in one read
    /// (a [`read_window`] after the last read began, while the stream is
    /// busy). `None`: read as soon as something arrives (a slow stream, a
    /// drain that never reads to the end, exactly-once, a stop under way).
    pub fn read_hold(&self) -> Option<Instant> {
        if self.commits.is_some() || self.pace.stop.is_some() {
            return None;
        }
        let window = self.pace.busy?;
        self.pace.quiet_since?;
        let until = self.pace.last_read? + window;
        (until > self.pace.now).then_some(until)
    }

    /// At-least-once, asked when the stream is quiet: whether to nudge the
    /// producer into sending what it holds now instead of after its
    /// `linger.ms`. Yes when records went to the producer since the last
    /// nudge and either the stream is busy (each read, one window's worth,
    /// is a batch: [`read_window`]) or WAL arrived after a pause and none
    /// older still waits for the broker (then nothing is queueing). When
    /// older ones wait on a stream not busy, events arrive faster than the
    /// broker answers, and the linger batches them. Counts the nudge as done.
    pub fn nudge_due(&mut self) -> bool {
        let due = self.commits.is_none()
            && self.pace.quiet_since.is_some()
            && self.pace.unnudged > 0
            && (self.pace.busy.is_some()
                || (self.pace.after_pause && self.pending_events() <= self.pace.unnudged));
        if due {
            self.pace.unnudged = 0;
            self.pace.after_pause = false;
        }
        due
    }

    /// At-least-once: until when the delivery report of the one event
    /// waiting for the broker may wait on the producer's queue for the
    /// session's next turn rather than wake it (the session serves the
    /// queue at the start of every turn, before it reads the stream, and
    /// sleeps no longer than this; a record handed over lets go of the
    /// hold): [`REPORTS_WAIT`] after the last record went to the producer.
    /// One event only: a failed record makes the producer purge every
    /// record behind it (per-aggregate order), which must happen before
    /// librdkafka's epoch bump sends them on; with nothing behind it,
    /// nothing races. `None`,
    /// every report wakes the session as it lands: exactly-once (a commit
    /// waits for its reports), a stop under way (its drain does), reading
    /// held back (a full window, the producer's queue refused a record, an
    /// aggregate being isolated: only reports free them), no event or more
    /// than one in flight, or the wait over.
    pub fn reports_wait_until(&self) -> Option<Instant> {
        if self.commits.is_some()
            || self.pace.stop.is_some()
            || !self.can_read()
            || self.pending_events() != 1
        {
            return None;
        }
        let until = self.pace.last_sent? + REPORTS_WAIT;
        (until > self.pace.now).then_some(until)
    }

    /// The shell's clock, told before each turn: the machine reads no
    /// clock itself, so a model run replays the same for the same seed.
    pub fn set_time(&mut self, now: Now) {
        self.pace.now = now.at;
        self.pace.wall = now.wall;
    }

    /// The time last told.
    pub(super) fn now(&self) -> Instant {
        self.pace.now
    }

    /// The wall time last told.
    pub(super) fn wall_now(&self) -> DateTime<Utc> {
        self.pace.wall
    }

    /// A graceful stop was asked for at `now`, to end by `deadline`.
    /// Returns the deadline when the stream may end at once; `None` when a
    /// transaction is being delivered: its events become confirmable only
    /// with its Commit, so the stream reads on to it
    /// ([`SessionMachine::stop_reached`] says when), and no further.
    pub fn stop_requested(&mut self, deadline: Instant) -> Option<Instant> {
        self.pace.stop = Some(deadline);
        self.stop_reached()
    }

    /// With a stop asked for: its deadline, once no transaction is half
    /// received any more (the stream may end).
    pub fn stop_reached(&self) -> Option<Instant> {
        self.pace.stop.filter(|_| !self.delivering())
    }

    /// The deadline of a stop asked for, if any: past it the stream ends
    /// even mid-transaction (its events are sent again at the next start).
    pub fn stop_deadline(&self) -> Option<Instant> {
        self.pace.stop
    }

    /// A graceful stop's verdict, once its drain ended (nothing left to
    /// wait for, or the deadline passed): undrained while events still wait
    /// for the broker or a transaction is half received, whose events are
    /// then sent again at the next start. Asked before exactly-once aborts
    /// what it holds of an open transaction: that is not drained either.
    pub fn stop_verdict(&self) -> Stopped {
        if self.awaiting_broker() || self.delivering() {
            Stopped::Undrained {
                pending: self.pending_events(),
            }
        } else {
            Stopped::Drained
        }
    }

    /// How many messages already read off the socket one wake-up takes
    /// (the first included). Exactly-once checks its transaction bounds
    /// after each message, and a stop reads on to a Commit and no further:
    /// one at a time there.
    pub fn messages_per_wake(&self) -> usize {
        if self.commits.is_some() || self.pace.stop.is_some() {
            1
        } else {
            BUFFERED_ITEMS_PER_WAKE
        }
    }

    /// How many queued delivery reports one wake-up takes (the first
    /// included): exactly-once keeps to one thing per turn, so a commit due
    /// is never delayed behind a burst of reports.
    pub fn reports_per_wake(&self) -> usize {
        if self.commits.is_some() {
            1
        } else {
            BUFFERED_ITEMS_PER_WAKE
        }
    }

    /// The heartbeat timer ticked at `now`: true when no outbox row or
    /// message arrived for a whole `interval` and no heartbeat is still
    /// being written (`running`), so one is due.
    pub fn heartbeat_due(&mut self, now: Instant, interval: Duration, running: bool) -> bool {
        if self.rows_seen != self.pace.rows_at_tick {
            self.pace.rows_at_tick = self.rows_seen;
            self.pace.last_row = now;
        }
        !running && now.saturating_duration_since(self.pace.last_row) >= interval
    }
}
