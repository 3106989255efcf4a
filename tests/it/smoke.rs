//! Smoke tests: the services that `scripts/services up` starts are real.
//!
//! Kafka: an idempotent producer writes a record with headers and a consumer
//! reads it back. PostgreSQL: `wal_level` is logical and a pgoutput slot sees
//! an inserted row. Names are random per run so runs never collide.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_postgres::NoTls;

use crate::support::{env, random_name, services};

#[tokio::test]
async fn kafka_idempotent_producer_round_trip_with_headers() {
    let _services = services::shared().await;
    let brokers = env("KAFKA_BROKERS");
    let topic = random_name("smoke");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let headers = OwnedHeaders::new().insert(Header {
        key: "ce_id",
        value: Some("smoke-1"),
    });
    let delivery = producer
        .send(
            FutureRecord::to(&topic)
                .key("order-1")
                .payload(r#"{"total":42}"#)
                .headers(headers),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(e, _)| e)
        .expect("delivery acknowledged");
    assert_eq!(
        (delivery.partition, delivery.offset),
        (0, 0),
        "first record of a new topic"
    );

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", random_name("smoke_group"))
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    let msg = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("a record within 60 s")
        .expect("consume");
    assert_eq!(msg.key(), Some(&b"order-1"[..]));
    assert_eq!(msg.payload(), Some(&br#"{"total":42}"#[..]));
    let header = msg.headers().expect("headers").get(0);
    assert_eq!(header.key, "ce_id");
    assert_eq!(header.value, Some(&b"smoke-1"[..]));
}

#[tokio::test]
async fn postgres_pgoutput_slot_sees_an_insert() {
    let _services = services::shared().await;
    let (client, conn) = tokio_postgres::connect(&env("PG_URL"), NoTls)
        .await
        .expect("connect to PG_URL");
    tokio::spawn(conn);
    let wal_level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(wal_level, "logical");

    let table = random_name("smoke_outbox");
    let publication = random_name("smoke_pub");
    let slot = random_name("smoke_slot");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, payload jsonb);
             CREATE PUBLICATION {publication} FOR TABLE {table} WITH (publish = 'insert');"
        ))
        .await
        .unwrap();
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    client
        .execute(
            &format!("INSERT INTO {table} VALUES (1, '{{\"smoke\":true}}')"),
            &[],
        )
        .await
        .unwrap();

    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
                 'proto_version', '1', 'publication_names', $2)",
            &[&slot, &publication],
        )
        .await
        .unwrap();
    let tags: Vec<u8> = rows.iter().map(|r| r.get::<_, Vec<u8>>(0)[0]).collect();
    // Begin, Relation, Insert, Commit: one transaction with our row.
    assert_eq!(tags, b"BRIC".to_vec());
    let insert: Vec<u8> = rows[2].get(0);
    let needle = br#"{"smoke": true}"#;
    assert!(
        insert.windows(needle.len()).any(|w| w == needle),
        "insert message carries the row's jsonb text"
    );

    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "DROP PUBLICATION {publication}; DROP TABLE {table};"
        ))
        .await
        .unwrap();
}
