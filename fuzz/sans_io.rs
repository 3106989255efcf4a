//! The relay's sans-IO modules, compiled on their own for fuzzing (see
//! Cargo.toml for why). Module paths match the main crate's, so
//! `outbox_relay::pgoutput::decode` means the same code here and there.

#[path = "../src/assembler.rs"]
pub mod assembler;
#[path = "../src/lsn.rs"]
pub mod lsn;
#[path = "../src/pgoutput/mod.rs"]
pub mod pgoutput;
