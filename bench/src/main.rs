//! `redstalk-bench`: a load generator for any beanstalk server (beanstalkd, redstalk on
//! either engine) that checks correctness while it measures.
//!
//! Modules: [`client`] (pipelined protocol client), [`scenario`] (what is run),
//! [`body`] (self-describing job bodies), [`stats`] (percentiles), [`check`]
//! (exactly-once ledger, server-empty check), [`memory`] (RSS), [`redis`] (Redis INFO:
//! memory, commands run), [`cpu`] (the servers' CPU time during the measured phase),
//! [`report`] (text and JSON). `bench/README.md` describes the scenarios and
//! `bench/compare`.

mod body;
mod check;
mod cli;
mod client;
mod cpu;
mod memory;
mod redis;
mod report;
mod scenario;
mod stats;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    if let Err(msg) = args.validate() {
        eprintln!("redstalk-bench: {msg}");
        return ExitCode::from(2);
    }
    if let Err(err) = client::configure(args.tls_ca.as_deref(), args.auth.clone()) {
        eprintln!("redstalk-bench: {err:#}");
        return ExitCode::from(2);
    }
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("redstalk-bench: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Run the scenario and print its report; true when every check passed.
fn run(args: cli::Args) -> Result<bool> {
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("starting the tokio runtime")?;
    let outcome = runtime.block_on(scenario::run(args.clone()))?;
    if args.json {
        println!("{}", report::json(&args, &outcome));
    } else {
        print!("{}", report::text(&args, &outcome));
    }
    if !outcome.failures.is_empty() && args.json {
        for f in &outcome.failures {
            eprintln!("redstalk-bench: FAILED: {f}");
        }
    }
    Ok(outcome.failures.is_empty())
}
