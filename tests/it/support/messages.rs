//! A writer for the table-less outbox: installs `sql/outbox_emit.sql` and
//! commits transactions whose events are outbox messages, table rows, or a
//! mix of both, like a service would.

use std::collections::HashMap;

use tokio_postgres::Client;

use super::{Committed, TestOutbox};

/// The function exactly as shipped.
pub const OUTBOX_EMIT_SQL: &str = include_str!("../../../sql/outbox_emit.sql");

/// Installs `outbox_emit` (idempotent). Tests in one binary run at once, and
/// two concurrent `CREATE OR REPLACE FUNCTION` of one function can fail:
/// an advisory lock takes turns.
pub async fn install_outbox_emit(admin: &Client) {
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(731001); {OUTBOX_EMIT_SQL}; COMMIT;"
        ))
        .await
        .expect("install sql/outbox_emit.sql");
}

/// How each event of a transaction is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// `SELECT outbox_emit(...)`.
    Messages,
    /// Rows and messages mixed: within a transaction and across them.
    Both,
}

impl TestOutbox {
    /// This test's message prefix. Logical messages are not published per
    /// table: every slot of the database sees every message, so each test
    /// (like each relay sharing a database) has a prefix of its own.
    pub fn message_prefix(&self) -> String {
        format!("outbox:{}", self.table)
    }

    /// Commits `txns` transactions of `per_txn` events each, plus a business
    /// row per event, events written as `write` says. Aggregates round robin
    /// over `aggregates`, each with a rising `seq` in its payload. Returns
    /// the committed events in commit order, and how many were messages.
    pub async fn emit_events(
        &self,
        writer: &mut Client,
        (txns, per_txn, aggregates): (usize, usize, usize),
        write: Write,
        seqs: &mut HashMap<String, i64>,
    ) -> (Vec<Committed>, usize) {
        // Messages only: the outbox table may not even exist.
        let insert = match write {
            Write::Messages => None,
            Write::Both => Some(
                writer
                    .prepare(&format!(
                        "INSERT INTO public.{} (id, aggregatetype, aggregateid, type, payload, seq)
                         VALUES ($1::text::uuid, 'order', $2, 'OrderPlaced', $3::text::jsonb, $4)",
                        self.table
                    ))
                    .await
                    .unwrap(),
            ),
        };
        let emit = writer
            .prepare(
                "SELECT outbox_emit('order', $1, 'OrderPlaced', $2::text::jsonb, NULL, NULL, $3)::text",
            )
            .await
            .unwrap();
        let business = writer
            .prepare(&format!(
                "INSERT INTO public.{}_orders (aggregateid, seq) VALUES ($1, $2)",
                self.table
            ))
            .await
            .unwrap();
        let prefix = self.message_prefix();
        let mut out = Vec::with_capacity(txns * per_txn);
        let mut messages = 0;
        let mut n = seqs.values().map(|v| *v as usize).sum::<usize>();
        for t in 0..txns {
            let tx = writer.transaction().await.unwrap();
            for i in 0..per_txn {
                let aggregate = format!("agg-{}", n % aggregates);
                n += 1;
                let seq = seqs.entry(aggregate.clone()).or_insert(0);
                *seq += 1;
                let payload = format!(r#"{{"aggregate":"{aggregate}","seq":{seq},"total":42.5}}"#);
                tx.execute(&business, &[&aggregate, &*seq]).await.unwrap();
                // Both: whole transactions of either kind, and mixed ones,
                // so that one key's events alternate between the two.
                let as_message = match write {
                    Write::Messages => true,
                    Write::Both => match t % 3 {
                        0 => true,
                        1 => false,
                        _ => i % 2 == 0,
                    },
                };
                let id = if let (false, Some(insert)) = (as_message, &insert) {
                    let id = uuid::Uuid::new_v4().to_string();
                    tx.execute(insert, &[&id, &aggregate, &payload, &*seq])
                        .await
                        .unwrap();
                    id
                } else {
                    messages += 1;
                    tx.query_one(&emit, &[&aggregate, &payload, &prefix])
                        .await
                        .unwrap()
                        .get(0)
                };
                out.push(Committed {
                    id,
                    aggregate,
                    seq: *seq,
                });
            }
            tx.commit().await.unwrap();
        }
        (out, messages)
    }
}
