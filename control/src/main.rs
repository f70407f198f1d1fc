//! `flowlane`: parses the command line, sets up logging (`FLOWLANE_LOG`),
//! runs the command (`flowlane_control::run`) and turns a failure into one
//! line on stderr and exit status 1 (clap exits 2 for bad usage).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = flowlane_control::Cli::parse();
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
        Err(e) => {
            eprintln!("flowlane: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
