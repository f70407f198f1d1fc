//! `flowlane-ttcp`: see the library documentation and `--help`.
#![forbid(unsafe_code)]

use clap::Parser;
use flowlane_ttcp::cli::{Cli, Sub};

fn main() {
    let cli = Cli::parse();
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
