//! `flowlane-ttcp`: see the library documentation and `--help`.
#![forbid(unsafe_code)]

use clap::Parser;
use flowlane_ttcp::cli::{Cli, Sub};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            // One line like every other error, as `flowlane`'s.
            eprintln!(
                "flowlane-ttcp: {}",
                flowlane_dataplane::service_args::value_error_line(&e)
            );
            std::process::exit(2);
        }
        Err(e) => e.exit(),
    };
    let r = match &cli.cmd {
        Some(Sub::Matrix(m)) => flowlane_ttcp::matrix::run(m),
        None => flowlane_ttcp::run::run(&cli.run).map(|_| ()),
    };
    if let Err(e) = r {
        let line = format!("{e:#}").replace('\n', " ");
        eprintln!("flowlane-ttcp: error: {line}");
        std::process::exit(1);
    }
}
