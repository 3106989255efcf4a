//! The release of a parked queue with `kafka.delivery = "exactly-once"`:
//! each batch's Kafka records go out in one Kafka transaction that also
//! carries the release's progress, so a read_committed consumer sees each
//! released record once even when the release dies mid-way.
//!
//! The progress is a record on the relay's checkpoint topic
//! (`kafka.checkpoint_topic`, compacted, one partition) under the key
//! [`progress_key`] (the parking table and the head's row, never the
//! relay's own key): the place (commit LSN and position, the queue's
//! order) of the last parking-table row whose record the transaction
//! carries, written `<commit lsn>|<position>`. The batch's rows are deleted from the parking
//! table only after the Kafka transaction committed. A release killed
//! before the Kafka commit leaves a transaction that the next release's
//! `init_transactions` (same transactional id) aborts: nothing of it is
//! visible, and the rows are sent again. A release killed after the Kafka
//! commit and before PostgreSQL's leaves rows whose records are in Kafka
//! already: the next release reads the progress first and deletes the rows
//! up to it without sending them (a webhook row among them is inserted into
//! the delivery table again, which ignores an event it has).
//!
//! A transaction left open by a killed release stays open until the next
//! release of that head or the broker's transaction timeout; a relay that
//! starts meanwhile waits for it before its checkpoint read completes.
//!
//! The transactional id is the relay's (`kafka.transactional_id`, or
//! `outbox-relay.<slot>`) with `.release.<head row>` appended: one per
//! head, so releases of different heads never fence each other, and two
//! commands releasing one head fence the first one's open transaction
//! (whose batch is then sent by the second, once). The principal needs
//! WRITE and DESCRIBE on those transactional ids (a prefixed ACL on
//! `<transactional id>.release.`) and WRITE on the checkpoint topic.

use std::time::Duration;

use bytes::Bytes;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use super::kafka::Republished;
use crate::config::Config;
use crate::parking::{ParkedTable, Place};
use crate::relay::exactly_once::checkpoint_reader::{CheckpointRead, read_checkpoint};

/// How long `init_transactions`, the checkpoint read and a commit may take.
const WITHIN: Duration = Duration::from_secs(60);

/// The checkpoint topic key of the release progress of head row `row`.
pub fn progress_key(table: &ParkedTable, row: i64) -> String {
    format!("outbox-relay-release:{}.{}#{row}", table.schema, table.name)
}

/// A transactional producer for one head's release.
pub struct Sender {
    producer: FutureProducer,
    topic: String,
    key: String,
}

impl Sender {
    /// Builds the producer, settles a transaction a killed release left
    /// open (`init_transactions`), and reads the progress: the place of the
    /// last row whose record is committed in Kafka (`None` when none is).
    ///
    /// # Errors
    /// What went wrong, as text.
    pub async fn open(
        config: &Config,
        table: &ParkedTable,
        row: i64,
    ) -> Result<(Sender, Option<Place>), String> {
        let kafka = &config.kafka;
        let transactional_id = format!(
            "{}.release.{row}",
            kafka.transactional_id_for(&config.postgres.slot)
        );
        let producer: FutureProducer = super::kafka::republishing(kafka)
            .set("transactional.id", &transactional_id)
            .create()
            .map_err(|e| format!("cannot create a transactional Kafka producer: {e}"))?;
        let init = producer.clone();
        tokio::task::spawn_blocking(move || init.init_transactions(WITHIN))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| {
                format!(
                    "cannot start transactions as {transactional_id:?} (the principal needs \
                     WRITE and DESCRIBE on it): {e}"
                )
            })?;
        let key = progress_key(table, row);
        let settings = config.sink_settings();
        let progress = match read_checkpoint(&settings, &kafka.checkpoint_topic, &key, WITHIN).await
        {
            Err(e) => return Err(e.to_string()),
            Ok(CheckpointRead::NoTopic) => {
                return Err(format!(
                    "the checkpoint topic {:?} does not exist: `outbox-relay init` creates it",
                    kafka.checkpoint_topic
                ));
            }
            Ok(CheckpointRead::Nothing | CheckpointRead::Last(None)) => None,
            Ok(CheckpointRead::Last(Some(value))) => Some(
                std::str::from_utf8(&value)
                    .ok()
                    .and_then(parse_place)
                    .ok_or_else(|| {
                        format!("the release progress under {key:?} does not read as a place")
                    })?,
            ),
        };
        Ok((
            Sender {
                producer,
                topic: kafka.checkpoint_topic.clone(),
                key,
            },
            progress,
        ))
    }

    /// Sends `records` and the progress `through` (the place of the last
    /// row they carry) in one transaction, committed before this returns.
    ///
    /// # Errors
    /// A record refused, or the commit failed: the transaction is aborted.
    pub async fn send(&self, records: &[Republished], through: Place) -> Result<(), String> {
        self.producer
            .begin_transaction()
            .map_err(|e| format!("cannot begin a Kafka transaction: {e}"))?;
        let sent = self.send_all(records, through).await;
        let producer = self.producer.clone();
        let ended = match sent {
            Ok(()) => tokio::task::spawn_blocking(move || producer.commit_transaction(WITHIN))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("the Kafka transaction did not commit: {e}")),
            Err(e) => Err(e),
        };
        if ended.is_err() {
            let producer = self.producer.clone();
            let _ = tokio::task::spawn_blocking(move || producer.abort_transaction(WITHIN)).await;
        }
        ended
    }

    async fn send_all(&self, records: &[Republished], through: Place) -> Result<(), String> {
        let mut pending = Vec::with_capacity(records.len() + 1);
        // The first record of each topic alone, acknowledged before the
        // rest (see `kafka::publish`: records produced before the producer
        // knows a topic's partitions can land behind later ones).
        let mut known: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for record in records {
            let first = known.insert(record.topic.as_str());
            let delivery = self
                .producer
                .send_result(super::kafka::future_record(record))
                .map_err(|(e, _)| format!("topic {:?}: {e}", record.topic))?;
            if first {
                match delivery.await {
                    Ok(Ok(_)) => {}
                    Ok(Err((e, _))) => return Err(e.to_string()),
                    Err(_) => {
                        return Err("the producer went away before the broker answered".into());
                    }
                }
            } else {
                pending.push(delivery);
            }
        }
        let progress = Bytes::from(format!("{}|{}", through.commit_lsn, through.position));
        let marker: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic)
            .key(self.key.as_bytes())
            .payload(progress.as_ref());
        pending.push(
            self.producer
                .send_result(marker)
                .map_err(|(e, _)| format!("checkpoint topic {:?}: {e}", self.topic))?,
        );
        for delivery in pending {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => return Err(e.to_string()),
                Err(_) => return Err("the producer went away before the broker answered".into()),
            }
        }
        Ok(())
    }
}

/// A progress value, `<commit lsn>|<position>`.
fn parse_place(text: &str) -> Option<Place> {
    let (lsn, position) = text.split_once('|')?;
    Some(Place {
        commit_lsn: lsn.parse().ok()?,
        position: position.parse().ok()?,
    })
}
