//! The `outbox-relay` binary run as an operator runs it (init, check,
//! status, dead), off the async workers, without the caller's
//! `OUTBOX_RELAY_ADMIN_URL` / `OUTBOX_RELAY_CONFIG`.

use std::process::{Command, Output};

/// Runs the binary with `args` (blocking, on a blocking thread).
pub async fn cli(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(&args)
            .env_remove("OUTBOX_RELAY_ADMIN_URL")
            .env_remove("OUTBOX_RELAY_CONFIG")
            .output()
            .expect("run outbox-relay")
    })
    .await
    .unwrap()
}

/// A run's exit status and both streams, for assertion messages.
pub fn shown(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
