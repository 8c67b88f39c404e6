//! The command line (docs/reference.md#command-line). Every flag is optional and, when given, overrides the
//! config file.
//!
//! Each flag can also be given as an environment variable (`IDEMPOTENCY_PROXY_LISTEN` for
//! `--listen`, and so on), which is how a container image sets its own defaults while leaving
//! the flags to whoever runs it; a flag beats its variable.
//!
//! Flags carry no defaults of their own: the defaults live in `config`, so that the merge there
//! sees exactly what the operator typed, and `--check` prints what is really in force. Values
//! are validated there too, so a bad `--upstream` gets the same message as a bad `upstream =`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::config::{self, LogFormat, Overrides};
use crate::operator::logging;
use crate::process;
use crate::proxy::StartError;
use idempotency_core::proxy::ErrorChain;

/// A reverse proxy that makes unsafe HTTP requests safe to retry with `Idempotency-Key`.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "idempotency-proxy", version, about)]
pub(crate) struct Cli {
    /// Config file with routes and policies (TOML).
    #[arg(long, value_name = "PATH", env = "IDEMPOTENCY_PROXY_CONFIG")]
    config: Option<PathBuf>,

    /// Address to accept requests on [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR", env = "IDEMPOTENCY_PROXY_LISTEN")]
    listen: Option<String>,

    /// Upstream for requests no route matches (the route "default"), http://HOST:PORT[/path].
    #[arg(long, value_name = "URL", env = "IDEMPOTENCY_PROXY_UPSTREAM")]
    upstream: Option<String>,

    /// Where records live: memory, file:PATH, redis://HOST:PORT[/DB], rediss://…,
    /// redis+cluster://HOST:PORT[,…] [default: file:idempotency-proxy.db].
    #[arg(long, value_name = "STORE", env = "IDEMPOTENCY_PROXY_STORE")]
    store: Option<String>,

    /// Address of the admin listener (health, metrics, keys) [default: off].
    #[arg(long, value_name = "ADDR", env = "IDEMPOTENCY_PROXY_ADMIN_LISTEN")]
    admin_listen: Option<String>,

    /// Log line format [default: text].
    #[arg(
        long,
        value_name = "FORMAT",
        value_enum,
        env = "IDEMPOTENCY_PROXY_LOG_FORMAT"
    )]
    log_format: Option<LogFormat>,

    /// Certificate chain (PEM) for HTTPS on the listener: PATH or file:PATH [default: plain HTTP].
    #[arg(long, value_name = "PATH", env = "IDEMPOTENCY_PROXY_TLS_CERT")]
    tls_cert: Option<String>,

    /// Private key (PEM: PKCS#8, RSA or EC) of the --tls-cert certificate: PATH or file:PATH.
    #[arg(long, value_name = "PATH", env = "IDEMPOTENCY_PROXY_TLS_KEY")]
    tls_key: Option<String>,

    /// Validate the configuration, print the effective config, and exit (0 if valid, else 2).
    #[arg(long)]
    check: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

/// What the binary can do besides proxying.
#[derive(Debug, Clone, clap::Subcommand)]
enum Command {
    /// Print the SQL that creates an outbox table: the table, its indexes, the trigger that
    /// keeps each aggregate in commit order, and optionally one that wakes the relay.
    OutboxSchema {
        /// The table, `table` or `schema.table`.
        #[arg(long, value_name = "NAME", default_value = "outbox")]
        table: String,
        /// Also a trigger that notifies this channel on every insert (the relay's
        /// notify_channel).
        #[arg(long, value_name = "CHANNEL")]
        notify_channel: Option<String>,
    },
}

impl Cli {
    /// What the flags override in the file.
    fn overrides(&self) -> Overrides {
        Overrides {
            config: self.config.clone(),
            listen: self.listen.clone(),
            upstream: self.upstream.clone(),
            store: self.store.clone(),
            admin_listen: self.admin_listen.clone(),
            log_format: self.log_format,
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
        }
    }
}

/// The `idempotency-proxy` command: read flags and config, then run until Ctrl-C or SIGTERM.
/// Exit status 2 for a bad flag or config, with one line saying why.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::OutboxSchema {
        table,
        notify_channel,
    }) = &cli.command
    {
        return outbox_schema(table, notify_channel.as_deref());
    }
    let settings = match config::load(&cli.overrides()) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("idempotency-proxy: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check {
        print!("{}", settings.to_toml());
        return ExitCode::SUCCESS;
    }
    let _logging = logging::init(settings.log_format);
    match process::run(settings, cli.overrides()) {
        Ok(()) => ExitCode::SUCCESS,
        // A table the relay or the store cannot use is a bad config, found at start.
        Err(e @ (StartError::OutboxTable(_) | StartError::StoreTable { .. })) => {
            eprintln!("idempotency-proxy: {}", ErrorChain(&e));
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("idempotency-proxy: {}", ErrorChain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `outbox-schema`: the DDL on stdout, or exit 2 for a table or channel name that cannot be
/// one.
fn outbox_schema(table: &str, notify_channel: Option<&str>) -> ExitCode {
    if let Some(Err(e)) = notify_channel.map(idempotency_outbox::channel_name) {
        eprintln!("idempotency-proxy: --notify-channel: {e}");
        return ExitCode::from(2);
    }
    match idempotency_outbox::TableName::new(table) {
        Ok(table) => {
            print!("{}", idempotency_outbox::schema_sql(&table, notify_channel));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idempotency-proxy: --table: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_parse_without_defaults() {
        let cli = Cli::try_parse_from(["idempotency-proxy"]).unwrap();
        assert!(cli.listen.is_none() && cli.upstream.is_none() && !cli.check);
        let cli = Cli::try_parse_from([
            "idempotency-proxy",
            "--log-format",
            "json",
            "--upstream",
            "http://127.0.0.1:9000",
            "--check",
        ])
        .unwrap();
        assert_eq!(cli.log_format, Some(LogFormat::Json));
        assert_eq!(cli.upstream.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(cli.check);
    }

    #[test]
    fn an_unknown_log_format_is_refused() {
        assert!(Cli::try_parse_from(["idempotency-proxy", "--log-format", "xml"]).is_err());
    }
}
