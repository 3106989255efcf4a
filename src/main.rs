//! `outbox-relay`: the binary. Parses the command line, loads and validates
//! the config, sets up logging and metrics, runs the relay until SIGTERM or
//! SIGINT, and maps the outcome to an exit code. The operator commands
//! (`init`, `check`, `status`, `dead`) load the same config and call
//! `outbox_relay::admin`. Everything else lives in the library.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use figment::providers::Serialized;
use outbox_relay::admin::{self, AdminTarget, init::InitOptions};
use outbox_relay::config::{Config, LogFormat};
use outbox_relay::error::Cause;
use outbox_relay::events;
use outbox_relay::metrics::{self, Health};
use outbox_relay::relay::{self, RelayError, Side, Stopped, Upkeep};
use tokio::sync::watch;

// jemalloc for the whole process, librdkafka's C code included (the
// crate's `unprefixed_malloc_on_supported_platforms` feature): the relay
// builds every record on its async worker and librdkafka frees it on its
// own threads, the pattern glibc's per-thread caches serve worst. It takes
// a fifth to a third off the relay's CPU per event and 15 MiB off its peak
// RSS in a large transaction (benches/cpu-notes.md, "Sixth round").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read once when it starts (`MALLOC_CONF` in the
/// environment overrides them, docs/operations.md): one arena, as the
/// relay has one busy thread and librdkafka a few, instead of four per CPU
/// that each keep their own free pages; unused pages handed back after a
/// second instead of ten. Peak RSS stays below glibc's.
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "malloc_conf")]
pub static malloc_conf: &[u8; 47] = b"narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

// Exit codes, documented in README.md, docs/operations.md and `--help`
// (EXIT_CODES_HELP). A clean stop exits 0.

/// `run`: a fatal error that is neither PostgreSQL's nor Kafka's (the metrics
/// address cannot be bound, the async runtime cannot start). The operator
/// commands exit 1 on any failure.
const EXIT_FATAL: u8 = 1;
/// A configuration the relay refuses (like clap's usage errors).
const EXIT_CONFIG: u8 = 2;
/// `run`: PostgreSQL refuses in a way retrying cannot cure (slot missing or
/// invalidated, publication or table missing, authentication refused, a
/// stream that cannot be decoded).
const EXIT_SOURCE: u8 = 3;
/// `run`: Kafka refuses in a way retrying cannot cure (credentials or ACLs
/// refused, a topic that does not exist and is not created, a missing
/// dead-letter topic; in exactly-once mode a fence by another relay with the same
/// transactional id, which restarting would only repeat, or a bad checkpoint topic).
const EXIT_SINK: u8 = 4;
/// `run`: stopped (SIGTERM/SIGINT) before every event in flight was
/// acknowledged, at `kafka.shutdown_drain_secs`: nothing is lost (the slot
/// was not confirmed past them), but the next start sends them again. Not
/// 0, which promises a restart sends nothing twice.
const EXIT_UNDRAINED: u8 = 5;

/// The exit codes as `--help` shows them (tests/ops.rs checks the lines).
const EXIT_CODES_HELP: &str = "\
Exit codes of `run`:
  0  clean stop: SIGTERM/SIGINT, in-flight events drained and confirmed
  1  another fatal error (relay.metrics_addr cannot be bound, ...)
  2  configuration refused (unknown key, value out of bounds, a kafka.properties
     entry the relay sets itself or librdkafka does not take); also usage errors
  3  PostgreSQL needs a person: slot missing or invalidated, publication or
     table missing, authentication refused, undecodable stream
  4  Kafka needs a person: credentials or ACLs refused, a topic missing and
     not created (dead-letter topic, or kafka.on_unroutable = \"stop\");
     exactly-once: fenced by another relay with the same
     kafka.transactional_id, transactional id not authorized, brokers
     without transactions, the checkpoint topic missing, not compacted,
     of more than one partition or not readable; a contract's registry
     subject or version missing, or its schema unusable
  5  stop (SIGTERM/SIGINT) before every event was acknowledged: the drain
     deadline (kafka.shutdown_drain_secs) passed; nothing lost, they are
     sent again at the next start
Transient failures on either side are retried and never end the process.
init, check, status and dead exit 1 on failure; status exits 6 on a warning
(nobody reads the slot while it holds WAL, or its WAL is about to be removed).";

/// The exit code of a fatal relay error: which side must be fixed.
fn exit_code(error: &RelayError) -> u8 {
    match error.side() {
        Side::Source => EXIT_SOURCE,
        Side::Sink => EXIT_SINK,
    }
}

#[derive(Parser)]
#[command(
    name = "outbox-relay",
    version,
    about = "Relays a PostgreSQL transactional outbox to Kafka as CloudEvents, confirming only what the broker acknowledged",
    after_help = EXIT_CODES_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Stream the outbox to Kafka until SIGTERM/SIGINT.
    #[command(after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Load and validate the config, print the effective configuration as TOML
    /// (defaults filled in, secrets as ***), and exit.
    CheckConfig(RunArgs),
    /// Create the publication and the replication slot (with --create-table the outbox table,
    /// with exactly-once delivery the checkpoint topic) if missing. Safe to run again.
    Init(InitArgs),
    /// Check everything `run` needs, PostgreSQL and Kafka, each item ok / warn
    /// / fail with its fix. Exit status 0 only when nothing fails.
    Check(CheckArgs),
    /// Show how far behind the slot is: lag, WAL status, who reads it,
    /// pending outbox rows.
    Status(StatusArgs),
    /// Dead letters of the Kafka dead-letter topic and of the HTTP delivery
    /// table: list them, send them again, or drop them.
    Dead(DeadArgs),
    /// Event contracts offline: check payload files against the schema the
    /// relay checks an event type against (for a service's CI).
    Schema(SchemaArgs),
}

#[derive(Args)]
struct SchemaArgs {
    #[command(subcommand)]
    action: SchemaAction,
}

#[derive(Subcommand)]
enum SchemaAction {
    /// Check JSON payload files against the contract of an event type, as
    /// the relay does before it sends. Exit 0 when every one satisfies it,
    /// 1 when one does not (or no contract covers the type), 2 when the
    /// config or schema cannot be used.
    Check(SchemaCheckArgs),
}

#[derive(Args)]
struct SchemaCheckArgs {
    /// The relay's TOML config file, whose [[contracts]] are used.
    #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
    config: Option<PathBuf>,
    /// The event type (the outbox `type` column).
    #[arg(long = "type", value_name = "TYPE", required_unless_present = "schema")]
    event_type: Option<String>,
    /// The aggregate type (the `aggregatetype` column), when the contracts
    /// name one.
    #[arg(long, value_name = "AGGREGATETYPE", default_value = "")]
    aggregatetype: String,
    /// A JSON Schema file to check against, instead of a config's contracts.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "event_type"])]
    schema: Option<PathBuf>,
    /// Payload files (JSON); `-` reads standard input.
    #[arg(value_name = "PAYLOAD", required = true)]
    payloads: Vec<PathBuf>,
}

#[derive(Args)]
struct DeadArgs {
    #[command(subcommand)]
    action: DeadAction,
}

#[derive(Subcommand)]
enum DeadAction {
    /// One table of every dead letter: id, route or topic, reason,
    /// attempts, age.
    List(DeadListArgs),
    /// Send dead letters again: Kafka ones are republished to their
    /// original topic (same key, headers, event id), DEAD rows become
    /// PENDING with no attempts. Each is done once.
    Retry(DeadRetryArgs),
    /// Drop dead letters: Kafka ones are recorded as discarded and hidden
    /// from `list`, DEAD rows are deleted.
    Discard(DeadDiscardArgs),
}

#[derive(Args)]
struct DeadCommon {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    admin: AdminArgs,
    /// Seconds reading the dead-letter topic may take.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
}

#[derive(Args)]
struct DeadListArgs {
    #[command(flatten)]
    common: DeadCommon,
    /// Only the dead letters of this route (HTTP) or topic (Kafka).
    #[arg(long, value_name = "R")]
    route: Option<String>,
    /// Also those already retried or discarded, with their state.
    #[arg(long)]
    all: bool,
    /// Print one JSON document (its shape is in docs/dead-letters.md).
    #[arg(long)]
    json: bool,
    /// Also the Kafka dead letters that do not say which outbox they came
    /// from (no source_table header).
    #[arg(long)]
    unattributed: bool,
}

#[derive(Args)]
struct DeadRetryArgs {
    #[command(flatten)]
    common: DeadCommon,
    /// Ids as `dead list` shows them.
    #[arg(
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    ids: Vec<String>,
    /// Every dead letter of this relay not retried or discarded yet.
    #[arg(long)]
    all: bool,
    /// With --all: only those of this route (HTTP) or topic (Kafka); not
    /// with ids.
    // clap drops a `requires` that conflicts with a present argument, so
    // `conflicts_with` refuses ids beside --route.
    #[arg(long, value_name = "R", requires = "all", conflicts_with = "ids")]
    route: Option<String>,
    /// With --all: also the Kafka dead letters that do not say which outbox
    /// they came from (no source_table header).
    #[arg(long, requires = "all")]
    unattributed: bool,
}

#[derive(Args)]
struct DeadDiscardArgs {
    #[command(flatten)]
    common: DeadCommon,
    /// Ids as `dead list` shows them.
    #[arg(value_name = "ID", required = true)]
    ids: Vec<String>,
}

#[derive(Args)]
struct AdminArgs {
    /// Run the SQL as this role instead of postgres.url's (a table owner or
    /// superuser for init). The checks stay about postgres.url's role.
    #[arg(long, env = "OUTBOX_RELAY_ADMIN_URL", value_name = "URL")]
    admin_url: Option<String>,
}

#[derive(Args)]
struct InitArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    admin: AdminArgs,
    /// Create the outbox table (Debezium-compatible, column names from
    /// [postgres.columns]) when it does not exist.
    #[arg(long)]
    create_table: bool,
    /// Print the SQL init would run, and run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Grant ROLE (default: the user of postgres.url) USAGE on the table's
    /// schema and SELECT on the table; print the ALTER ROLE for LOGIN
    /// REPLICATION if it lacks them.
    #[arg(long, value_name = "ROLE", num_args = 0..=1, default_missing_value = "")]
    grant: Option<String>,
    /// Create the slot even though the publication exists: a publication
    /// without its slot means a slot was lost, and a new one skips what was
    /// committed since.
    #[arg(long)]
    allow_new_slot: bool,
    /// Where the publication must be set up for a slot that holds WAL not
    /// yet confirmed (init refuses otherwise): drop that slot and create a
    /// new one after the publication. Outbox rows committed before now are
    /// not relayed by the new slot.
    #[arg(long)]
    recreate_slot: bool,
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    admin: AdminArgs,
    /// Print the items as a JSON array.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the Kafka brokers.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    kafka_timeout: u64,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    admin: AdminArgs,
    /// Print JSON (one object per line with --watch).
    #[arg(long)]
    json: bool,
    /// Refresh every SECS seconds (default 5) until Ctrl-C.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "5", value_parser = clap::value_parser!(u64).range(1..=3600))]
    watch: Option<u64>,
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
    let args = match &cli.command {
        Command::Schema(schema) => match &schema.action {
            SchemaAction::Check(check) => {
                outbox_relay::config::set_config_path(check.config.as_deref());
                return schema_check_command(check);
            }
        },
        Command::Run(args) | Command::CheckConfig(args) => args,
        Command::Init(init) => &init.run,
        Command::Check(check) => &check.run,
        Command::Status(status) => &status.run,
        Command::Dead(dead) => match &dead.action {
            DeadAction::List(a) => &a.common.run,
            DeadAction::Retry(a) => &a.common.run,
            DeadAction::Discard(a) => &a.common.run,
        },
    };
    // Before anything can fail: the hints of every message name the
    // commands with this config (`outbox-relay init --config <path>`).
    outbox_relay::config::set_config_path(args.config.as_deref());
    let config = match args.load() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("outbox-relay: invalid configuration: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if let Command::CheckConfig(_) = cli.command {
        print!("{}", config.effective_toml());
        for warning in outbox_relay::config::warnings(&config) {
            eprintln!("outbox-relay: warning: {warning}");
        }
        return ExitCode::SUCCESS;
    }
    if matches!(cli.command, Command::Run(_)) {
        init_tracing(config.relay.log_format);
        for warning in outbox_relay::config::warnings(&config) {
            events::ConfigWarning { warning: &warning }.emit();
        }
    }
    // `run`: the stream on a runtime of one worker, and its upkeep (the
    // relay lock, the metrics endpoint, the retries beside the stream) on
    // a runtime of its own (relay/upkeep.rs says why).
    let relays = matches!(cli.command, Command::Run(_));
    let runtime = match build_runtime(relays.then_some("outbox-stream")) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("outbox-relay: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FATAL);
        }
    };
    match cli.command {
        // The relay runs as a task on a worker thread, not on this thread
        // under `block_on`: a worker polls the socket readiness itself and
        // runs the woken session at once, where a future on this thread is
        // woken through a futex by a worker for every readable socket (a
        // thread hand-off per replication read).
        Command::Run(_) => {
            let upkeep_runtime = match build_runtime(Some("outbox-upkeep")) {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("outbox-relay: cannot start the upkeep's async runtime: {e}");
                    return ExitCode::from(EXIT_FATAL);
                }
            };
            let upkeep = Upkeep::on(upkeep_runtime.handle().clone());
            let outcome = runtime.block_on(async {
                match tokio::spawn(run(config, upkeep)).await {
                    Ok(result) => result,
                    // A panic stays a panic, as it was on this thread.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => Err(RunError::Setup(anyhow::anyhow!(
                        "the relay task was cancelled: {e}"
                    ))),
                }
            });
            // A stop during start-up leaves a blocking call (the broker probe) behind.
            runtime.shutdown_timeout(Duration::from_millis(500));
            // Only after the stream's: the stream may wait on upkeep work to its end.
            upkeep_runtime.shutdown_timeout(Duration::from_millis(500));
            match outcome {
                Ok(Stopped::Drained) => ExitCode::SUCCESS,
                Ok(Stopped::Undrained { .. }) => ExitCode::from(EXIT_UNDRAINED),
                Err(e) => {
                    let (code, cause, e) = match e {
                        RunError::Relay(e) => (exit_code(&e), e.cause(), anyhow::Error::new(e)),
                        RunError::Setup(e) => (EXIT_FATAL, Cause::SetupFailed, e),
                    };
                    let text = error_text(&e);
                    events::FatalError {
                        cause,
                        exit_code: code,
                        error: &text,
                    }
                    .emit();
                    eprintln!("outbox-relay: {text}");
                    ExitCode::from(code)
                }
            }
        }
        Command::Init(init) => runtime.block_on(init_command(&config, init)),
        Command::Check(check) => runtime.block_on(check_command(&config, check)),
        Command::Status(status) => runtime.block_on(status_command(&config, status)),
        Command::Dead(dead) => runtime.block_on(dead_command(&config, dead.action)),
        Command::CheckConfig(_) | Command::Schema(_) => ExitCode::SUCCESS,
    }
}

/// A multi-thread runtime: of one worker thread named `single`, or of one
/// worker per CPU (tokio's default) for the commands other than `run`.
fn build_runtime(single: Option<&str>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(name) = single {
        builder.worker_threads(1).thread_name(name);
    }
    builder.enable_all().build()
}

fn schema_check_command(args: &SchemaCheckArgs) -> ExitCode {
    use outbox_relay::admin::schema;
    use outbox_relay::contracts::Schema;
    let contracts;
    let loaded;
    let checked_against = match &args.schema {
        Some(path) => match Schema::load(path, &path.display().to_string(), None) {
            Ok(s) => {
                loaded = s;
                &loaded
            }
            Err(e) => {
                eprintln!("outbox-relay schema check: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        None => {
            let config = Config::figment(args.config.as_deref(), std::env::vars())
                .and_then(|figment| Config::from_figment(&figment))
                .and_then(|config| config.contracts());
            let planned = match config {
                Ok(contracts) => contracts,
                Err(e) => {
                    eprintln!("outbox-relay schema check: invalid configuration: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            // Registry contracts: the schemas the relay would fetch now.
            let resolved = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| rt.block_on(planned.resolve()).map_err(|e| e.to_string()));
            contracts = match resolved {
                Ok(contracts) => contracts,
                Err(e) => {
                    eprintln!(
                        "outbox-relay schema check: cannot fetch the contracts' schemas: {e}"
                    );
                    return ExitCode::from(EXIT_FATAL);
                }
            };
            let event_type = args.event_type.as_deref().unwrap_or_default();
            match schema::contract_for(&contracts, &args.aggregatetype, event_type) {
                Ok(s) => s,
                Err(why) => {
                    eprintln!("outbox-relay schema check: {why}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let payloads = args
        .payloads
        .iter()
        .map(|path| {
            let name = path.display().to_string();
            let bytes = if name == "-" {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf)
            } else {
                std::fs::read(path)
            };
            let bytes = bytes.map_err(|e| format!("cannot read {name}: {e}"));
            (name, bytes)
        })
        .collect();
    let report = schema::check(checked_against, payloads);
    print!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn init_command(config: &Config, args: InitArgs) -> ExitCode {
    let target = AdminTarget::from_config(config, args.admin.admin_url);
    let grant = match args.grant {
        Some(role) if role.is_empty() => match target.relay_role() {
            Ok(role) => Some(role),
            Err(e) => {
                eprintln!("outbox-relay init: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        other => other,
    };
    let options = InitOptions {
        create_table: args.create_table,
        grant,
        allow_new_slot: args.allow_new_slot,
        recreate_slot: args.recreate_slot,
    };
    let mut stdout = std::io::stdout();
    match admin::init::run(&target, config, &options, args.dry_run, &mut stdout).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = stdout.flush();
            eprintln!("outbox-relay init: {e}");
            ExitCode::from(EXIT_FATAL)
        }
    }
}

async fn check_command(config: &Config, args: CheckArgs) -> ExitCode {
    let target = AdminTarget::from_config(config, args.admin.admin_url);
    let report = admin::check::run(&target, config, Duration::from_secs(args.kafka_timeout)).await;
    if args.json {
        println!("{}", report.render_json());
    } else {
        print!("{}", report.render_text());
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FATAL)
    }
}

async fn status_command(config: &Config, args: StatusArgs) -> ExitCode {
    let target = AdminTarget::from_config(config, args.admin.admin_url);
    let stop = async { tokio::signal::ctrl_c().await.unwrap_or_default() };
    let mut stdout = std::io::stdout();
    let watch = args.watch.map(Duration::from_secs);
    match admin::status::run(&target, config, args.json, watch, stop, &mut stdout).await {
        Ok(admin::status::Verdict::Ok) => ExitCode::SUCCESS,
        Ok(admin::status::Verdict::Warn) => ExitCode::from(admin::status::EXIT_WARN),
        Ok(admin::status::Verdict::Fail) => ExitCode::from(EXIT_FATAL),
        Err(e) => {
            eprintln!("outbox-relay status: {e}");
            ExitCode::from(EXIT_FATAL)
        }
    }
}

async fn dead_command(config: &Config, action: DeadAction) -> ExitCode {
    use admin::dead::{self, DeadOptions, Request};
    let (common, unattributed, request) = match action {
        DeadAction::List(a) => (
            a.common,
            a.unattributed,
            Request::List {
                all: a.all,
                route: a.route,
                json: a.json,
            },
        ),
        DeadAction::Retry(a) => (
            a.common,
            a.unattributed,
            Request::Retry {
                ids: if a.all { Vec::new() } else { a.ids },
                route: a.route,
            },
        ),
        DeadAction::Discard(a) => (a.common, false, Request::Discard { ids: a.ids }),
    };
    let target = AdminTarget::from_config(config, common.admin.admin_url);
    let options = DeadOptions {
        timeout: Duration::from_secs(common.timeout),
        delivery_table: Some(config.postgres.delivery_table.clone()),
        unattributed,
    };
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    if dead::run(&target, config, &options, request, &mut stdout, &mut stderr).await {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FATAL)
    }
}

/// `error` and its causes, each said once. Many of the relay's errors put
/// their cause's text into their own message (`relay lock for slot "s":
/// <why>`) and keep the cause as their source as well, so anyhow's
/// alternate form (`{:#}`, every cause after a colon) would say `<why>`
/// twice; a cause whose text the message already holds is left out.
fn error_text(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Why `run` stopped for good.
enum RunError {
    /// The relay met a fatal error on one side.
    Relay(RelayError),
    /// The process could not set itself up (metrics listener).
    Setup(anyhow::Error),
}

async fn run(config: Config, upkeep: Upkeep) -> Result<Stopped, RunError> {
    let health = Health::default();
    if let Some(addr) = &config.relay.metrics_addr {
        let handle =
            metrics::install_recorder().map_err(|e| RunError::Setup(anyhow::Error::msg(e)))?;
        // A host name is resolved here: the first of its addresses that
        // binds. Bound and served on the upkeep's runtime, whose I/O
        // driver then serves it.
        let (host, port) = (addr.host().to_owned(), addr.port());
        let listener = upkeep
            .run(async move { tokio::net::TcpListener::bind((host.as_str(), port)).await })
            .await
            .with_context(|| format!("cannot listen on relay.metrics_addr {addr}"))
            .map_err(RunError::Setup)?;
        let served = health.clone();
        upkeep.enter(|| tokio::spawn(metrics::serve(listener, handle, served)));
        events::ServingMetrics { addr }.emit();
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        events::StopRequested.emit();
        let _ = stop_tx.send(true);
    });
    let settings = config
        .relay_settings()
        .map_err(|e| RunError::Setup(e.into()))?;
    // Then every key as the relay will use it (file, environment and flags
    // merged, defaults filled in), secrets as ***: the first thing to read
    // when the relay does not do what its config file seems to say.
    events::Starting {
        version: env!("CARGO_PKG_VERSION"),
    }
    .emit();
    config.log_effective();
    // A stop during start-up ends it at once, unless a webhook retry worker may hold a request.
    let early = health.stopped_before_streaming(stop_rx.clone(), Duration::from_millis(250));
    let running = relay::run_observed(
        settings,
        config.observability(),
        &upkeep,
        stop_rx,
        health.clone(),
    );
    tokio::select! {
        biased;
        outcome = running => outcome.map_err(RunError::Relay),
        () = early, if config.sinks.is_empty() => {
            events::StoppedBeforeStreaming.emit();
            Ok(Stopped::Drained)
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind as Kind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(Kind::terminate()), signal(Kind::interrupt())) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

fn init_tracing(format: LogFormat) {
    // apache-avro logs through `log` with schema text or payload values in
    // its messages; the relay says what it needs itself, and logs never
    // carry payloads, whatever RUST_LOG asks.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        .add_directive(
            "apache_avro=off"
                .parse()
                .expect("a static filter directive parses"),
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("refused: check the password")]
    struct Refusal;

    /// Puts its source's text into its own message, as the relay's errors do.
    #[derive(Debug, thiserror::Error)]
    #[error("relay lock for slot \"s\": {source}")]
    struct Embeds {
        source: Refusal,
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let error = anyhow::Error::new(Embeds { source: Refusal });
        assert_eq!(
            error_text(&error),
            "relay lock for slot \"s\": refused: check the password"
        );
    }

    #[test]
    fn a_cause_the_message_does_not_hold_follows_it() {
        let error = anyhow::Error::new(Refusal).context("cannot listen on relay.metrics_addr");
        assert_eq!(
            error_text(&error),
            "cannot listen on relay.metrics_addr: refused: check the password"
        );
    }
}
