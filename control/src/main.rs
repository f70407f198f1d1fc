//! `flowlane`: parses the command line, sets up logging (`FLOWLANE_LOG`),
//! runs the command (`flowlane_control::run`) and turns a failure into one
//! line on stderr and exit status 1 (clap exits 2 for bad usage; a flag's
//! bad value is one line too, and so is bad usage a command finds itself,
//! a `clap::Error` it returns, with exit status 2).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match flowlane_control::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            // The flag, the value and what is wrong, on one line like every
            // other user error (without clap's "try --help" footer).
            eprintln!(
                "flowlane: {}",
                flowlane_dataplane::service_args::value_error_line(&e)
            );
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOWLANE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match flowlane_control::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // Bad usage a command found itself (flags that do not go
        // together): one line and exit 2, as clap's own.
        Err(e) if e.downcast_ref::<clap::Error>().is_some() => {
            let text = e.to_string();
            eprintln!("flowlane: {}", text.lines().next().unwrap_or_default());
            ExitCode::from(2)
        }
        // The data path's errors name its configuration's fields: said
        // here with the flags that set them.
        Err(e) => {
            eprintln!(
                "flowlane: error: {}",
                flowlane_dataplane::service_args::cli_terms(&format!("{e:#}"))
            );
            ExitCode::FAILURE
        }
    }
}
