//! The integration tests, one test binary (`cargo test --test it`): the
//! relay against the real PostgreSQL and Kafka of `scripts/services`, plus
//! librdkafka's mock cluster and the fuzz corpus.

mod support;
mod dead_letters;
mod shutdown;
mod auth_tls;
mod service_faults;
mod schema_change;
mod broker_faults;
mod replication;
mod smoke;
mod fuzz_corpus;
mod soak;
