//! `flowlane-ttcp`: see the library documentation and `--help`.
#![forbid(unsafe_code)]

use clap::Parser;
use flowlane_ttcp::cli::{Cli, Sub};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            // The flag, the value and what is wrong, on one line like every
            // other error (as `flowlane`'s: without clap's "try --help").
            let text = e.render().to_string();
            eprintln!("flowlane-ttcp: {}", text.lines().next().unwrap_or_default());
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
