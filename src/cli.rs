//! The command line (SPEC section 7). Every flag is optional and, when given, overrides the
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

use clap::Parser;

use crate::config::LogFormat;

/// A reverse proxy that makes unsafe HTTP requests safe to retry with `Idempotency-Key`.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "idempotency-proxy", version, about)]
pub struct Cli {
    /// Config file with routes and policies (TOML).
    #[arg(long, value_name = "PATH", env = "IDEMPOTENCY_PROXY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address to accept requests on [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR", env = "IDEMPOTENCY_PROXY_LISTEN")]
    pub listen: Option<String>,

    /// Upstream for requests no route matches (the route "default"), http://HOST:PORT[/path].
    #[arg(long, value_name = "URL", env = "IDEMPOTENCY_PROXY_UPSTREAM")]
    pub upstream: Option<String>,

    /// Where records live: memory, file:PATH, redis://HOST:PORT[/DB], rediss://…,
    /// redis+cluster://HOST:PORT[,…] [default: file:idempotency-proxy.db].
    #[arg(long, value_name = "STORE", env = "IDEMPOTENCY_PROXY_STORE")]
    pub store: Option<String>,

    /// Address of the admin listener (health, metrics, keys) [default: off].
    #[arg(long, value_name = "ADDR", env = "IDEMPOTENCY_PROXY_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,

    /// Log line format [default: text].
    #[arg(
        long,
        value_name = "FORMAT",
        value_enum,
        env = "IDEMPOTENCY_PROXY_LOG_FORMAT"
    )]
    pub log_format: Option<LogFormat>,

    /// Validate the configuration, print the effective config, and exit (0 if valid, else 2).
    #[arg(long)]
    pub check: bool,
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
