//! How the relay's messages name an `outbox-relay` command for the config
//! in use: `outbox-relay init --config /etc/outbox-relay/relay.toml`, the
//! path as the operator passed it, so a hint can be copied and run as is.
//!
//! Role: the hints live in errors and check items built in every layer
//! (the slot's, the checkpoint topic's, the delivery table's), and none of
//! those layers sees the config. The path is a fact of the process's
//! command line: `main` records it once with [`set_config_path`], before
//! anything could fail, and [`command`] reads it when a text is rendered.
//!
//! Invariants: recorded at most once (a second call changes nothing); until
//! it is recorded (the library used without the binary, unit tests) a hint
//! shows the placeholder `--config <this config>`; a config taken from the
//! environment alone (no file) names no `--config` at all, as the command
//! then runs with the same environment.

use std::path::Path;
use std::sync::OnceLock;

/// ` --config <path>` (or empty: no file), once `main` recorded it.
static CONFIG_ARGUMENT: OnceLock<String> = OnceLock::new();

/// What a hint shows before [`set_config_path`] was called.
const PLACEHOLDER: &str = " --config <this config>";

/// Records the config file of this process (`None`: the environment
/// alone). Called once by `main`; later calls are ignored.
pub fn set_config_path(path: Option<&Path>) {
    let argument = path.map_or_else(String::new, |path| {
        format!(" --config {}", shell_word(&path.display().to_string()))
    });
    let _ = CONFIG_ARGUMENT.set(argument);
}

/// `outbox-relay <subcommand>` with the config in use:
/// `command("init")` is `outbox-relay init --config relay.toml`.
pub fn command(subcommand: &str) -> String {
    let config = CONFIG_ARGUMENT.get().map_or(PLACEHOLDER, String::as_str);
    format!("outbox-relay {subcommand}{config}")
}

/// `text` as one shell word: as is when it holds nothing a shell would
/// split or expand, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@=%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_one_shell_word() {
        assert_eq!(shell_word("/etc/relay/relay.toml"), "/etc/relay/relay.toml");
        assert_eq!(shell_word("relay.toml"), "relay.toml");
        assert_eq!(
            shell_word("my configs/relay.toml"),
            "'my configs/relay.toml'"
        );
        assert_eq!(shell_word("it's.toml"), r"'it'\''s.toml'");
        assert_eq!(shell_word("$HOME/r.toml"), "'$HOME/r.toml'");
    }
}
