//! The slot as the server sees it, sampled in the background: its lag in
//! bytes (`pg_current_wal_lsn() - confirmed_flush_lsn`, the WAL it keeps
//! from being recycled) and its `safe_wal_size` (how much more WAL may be
//! written before `max_slot_wal_keep_size` invalidates it).
//!
//! Role: one task for the life of the relay, on an ordinary SQL session of
//! its own (the stream's conninfo, TLS and authentication; no REPLICATION
//! needed), one query every [`SAMPLE_INTERVAL`]. It never touches the
//! stream: the hot path does not wait for it, and it goes on while the relay
//! reconnects, which is when the lag matters most.
//!
//! A failed sample (server restarting, network) is counted and logged once
//! until a sample works again; the gauges keep their last value meanwhile,
//! and the next sample reconnects.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_postgres::Statement;

use crate::metrics as m;

use crate::pg::{PgClient, PgError};

use crate::replication::ReplicationSettings;

/// How often the slot is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// `application_name` of the sampling session unless the conninfo sets
/// one, so it is told apart from the stream in `pg_stat_activity`.
const APPLICATION_NAME: &str = "outbox-relay-monitor";

/// The last sampled lag, shared with the progress log; negative until the
/// first sample.
#[derive(Debug, Clone)]
pub struct SlotLag(Arc<AtomicI64>);

impl Default for SlotLag {
    fn default() -> Self {
        SlotLag(Arc::new(AtomicI64::new(-1)))
    }
}

impl SlotLag {
    /// Bytes of WAL behind the server's current position, if sampled yet.
    pub fn bytes(&self) -> Option<u64> {
        u64::try_from(self.0.load(Ordering::Relaxed)).ok()
    }

    fn set(&self, bytes: i64) {
        self.0.store(bytes.max(0), Ordering::Relaxed);
    }
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSample {
    pub lag_bytes: Option<i64>,
    /// `None` when `max_slot_wal_keep_size` is unlimited.
    pub safe_wal_size: Option<i64>,
}

/// The sampling query, the slot's name its parameter; no row when the slot
/// does not exist (the stream reports that, with the fix). On a standby the
/// replay position stands in for the current one (logical slots on standbys
/// exist since PostgreSQL 16).
pub const SAMPLE_SQL: &str = "SELECT pg_catalog.pg_wal_lsn_diff(\
       CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() \
       ELSE pg_catalog.pg_current_wal_lsn() END, confirmed_flush_lsn)::bigint, safe_wal_size \
     FROM pg_catalog.pg_replication_slots WHERE slot_name = $1";

/// The sampling session: its query prepared once.
struct Sampler {
    client: PgClient,
    sample: Statement,
}

/// Samples the slot every [`SAMPLE_INTERVAL`], forever (the relay aborts
/// the task when it stops).
pub async fn run(mut settings: ReplicationSettings, lag: SlotLag) {
    settings.connection.application_name = APPLICATION_NAME.to_owned();
    let mut connection: Option<Sampler> = None;
    let mut failing = false;
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match sample(&settings, &mut connection).await {
            Ok(sample) => {
                if failing {
                    tracing::info!(slot = %settings.slot, "sampling the slot's lag works again");
                    failing = false;
                }
                if let Some(sample) = sample {
                    publish(&sample, &lag);
                }
            }
            Err(e) => {
                connection = None;
                metrics::counter!(m::SLOT_SAMPLE_FAILURES).increment(1);
                if !failing {
                    tracing::warn!(
                        slot = %settings.slot,
                        error = %e,
                        "cannot sample the slot's lag; outbox_relay_slot_lag_bytes keeps its last \
                         value until a sample works"
                    );
                    failing = true;
                }
            }
        }
    }
}

/// One sample on the kept connection, opened on first use; a connection
/// that failed is dropped by the caller. Bounded by the connect timeout.
async fn sample(
    settings: &ReplicationSettings,
    connection: &mut Option<Sampler>,
) -> Result<Option<SlotSample>, PgError> {
    let action = "sampling the slot's lag";
    let attempt = async {
        let sampler = match connection {
            Some(sampler) => sampler,
            None => {
                let client = PgClient::connect(&settings.connection).await?;
                let sample = client
                    .prepare(SAMPLE_SQL)
                    .await
                    .map_err(|e| client.error(action, e))?;
                connection.insert(Sampler { client, sample })
            }
        };
        let client = &sampler.client;
        let row = client
            .query_opt(&sampler.sample, &[&settings.slot])
            .await
            .map_err(|e| client.error(action, e))?;
        row.map(|row| {
            Ok(SlotSample {
                lag_bytes: row.try_get(0)?,
                safe_wal_size: row.try_get(1)?,
            })
        })
        .transpose()
        .map_err(|e| client.error(action, e))
    };
    match tokio::time::timeout(settings.connection.connect_timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(PgError::Io {
            target: "the slot's lag sample".to_owned(),
            action: "sampling the slot's lag",
            source: std::io::ErrorKind::TimedOut.into(),
        }),
    }
}

fn publish(sample: &SlotSample, lag: &SlotLag) {
    if let Some(bytes) = sample.lag_bytes {
        lag.set(bytes);
        metrics::gauge!(m::SLOT_LAG).set(bytes.max(0) as f64);
    }
    if let Some(safe) = sample.safe_wal_size {
        metrics::gauge!(m::SLOT_SAFE_WAL_SIZE).set(safe as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_lag_is_unknown_until_sampled_and_never_negative() {
        let lag = SlotLag::default();
        assert_eq!(lag.bytes(), None);
        publish(
            &SlotSample {
                lag_bytes: Some(-16),
                safe_wal_size: None,
            },
            &lag,
        );
        assert_eq!(lag.bytes(), Some(0));
        publish(
            &SlotSample {
                lag_bytes: Some(1 << 20),
                safe_wal_size: None,
            },
            &lag,
        );
        assert_eq!(lag.bytes(), Some(1 << 20));
    }
}
