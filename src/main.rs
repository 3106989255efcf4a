//! `outbox-relay`: the binary. Parses the command line, loads and validates
//! the config, sets up logging and metrics, runs the relay until SIGTERM or
//! SIGINT, and maps the outcome to an exit code. Everything else lives in the
//! library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use figment::providers::Serialized;
use outbox_relay::config::{Config, LogFormat};
use outbox_relay::metrics::{self, Health};
use outbox_relay::relay::{self, RelaySettings};
use tokio::sync::watch;

/// Exit code for a configuration the relay refuses (like clap's usage errors).
const EXIT_CONFIG: u8 = 2;
/// Exit code for a fatal runtime error (slot missing, authentication refused...).
const EXIT_FATAL: u8 = 1;

#[derive(Parser)]
#[command(
    name = "outbox-relay",
    version,
    about = "Relays a PostgreSQL transactional outbox to Kafka as CloudEvents, confirming only what the broker acknowledged"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Stream the outbox to Kafka until SIGTERM/SIGINT.
    Run(RunArgs),
    /// Load and validate the config, print it with secrets redacted, and exit.
    CheckConfig(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// TOML config file; every key can also come from OUTBOX_RELAY__SECTION__KEY.
    #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides postgres.url.
    #[arg(long)]
    postgres_url: Option<String>,
    /// Overrides postgres.slot.
    #[arg(long)]
    slot: Option<String>,
    /// Overrides postgres.publication.
    #[arg(long)]
    publication: Option<String>,
    /// Overrides postgres.table.
    #[arg(long)]
    table: Option<String>,
    /// Overrides kafka.brokers.
    #[arg(long)]
    brokers: Option<String>,
    /// Overrides kafka.topic.
    #[arg(long)]
    topic: Option<String>,
}

impl RunArgs {
    fn load(&self) -> Result<Config, outbox_relay::config::ConfigError> {
        let mut figment = Config::figment(self.config.as_deref(), std::env::vars())?;
        let overrides = [
            ("postgres.url", &self.postgres_url),
            ("postgres.slot", &self.slot),
            ("postgres.publication", &self.publication),
            ("postgres.table", &self.table),
            ("kafka.brokers", &self.brokers),
            ("kafka.topic", &self.topic),
        ];
        for (key, value) in overrides {
            if let Some(value) = value {
                figment = figment.merge(Serialized::default(key, value));
            }
        }
        Config::from_figment(&figment)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (Command::Run(args) | Command::CheckConfig(args)) = &cli.command;
    let config = match args.load() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("outbox-relay: invalid configuration: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Command::CheckConfig(_) = cli.command {
        println!("{config:#?}");
        return ExitCode::SUCCESS;
    }
    init_tracing(config.relay.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("outbox-relay: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FATAL);
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("outbox-relay: {e:#}");
            ExitCode::from(EXIT_FATAL)
        }
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let health = Health::default();
    if let Some(addr) = config.relay.metrics_addr {
        let handle = metrics::install_recorder().map_err(anyhow::Error::msg)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on relay.metrics_addr {addr}"))?;
        tokio::spawn(metrics::serve(listener, handle, health.clone()));
        tracing::info!(%addr, "serving /metrics and /health");
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("stop requested: draining in-flight events");
        let _ = stop_tx.send(true);
    });
    let settings = RelaySettings::from_config(&config);
    tracing::info!(
        slot = %config.postgres.slot,
        publication = %config.postgres.publication,
        table = %config.postgres.table,
        brokers = %config.kafka.brokers,
        "outbox-relay starting"
    );
    relay::run(settings, stop_rx, health).await?;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: escape codes in a log file or
    // a log shipper's input are noise that breaks searching.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
