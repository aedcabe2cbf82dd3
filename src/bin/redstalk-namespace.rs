//! redstalk-namespace, the tool for a namespace's keys as a whole (docs/SCALING.md):
//! `slots` prints where prefixes land on a Redis Cluster, `copy` moves a namespace to
//! another Redis (a cluster, say) or another prefix ([`redstalk::redis::copy`]).
//!
//! Invariants: URLs are never printed with their credentials; the exit code is 0 done,
//! 1 the copy refused or failed (the message says why and what to do), 2 usage, 3 a
//! Redis could not be reached.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use redstalk::manual::{self, Section};
use redstalk::redis::copy::{CopyPlan, CopyReport, copy};
use redstalk::redis::keys::{check_prefix, slot_of};
use redstalk::redis::{Connector, RESPONSE_TIMEOUT, RedisConn, TlsFiles, redact};

#[derive(Parser)]
#[command(
    name = "redstalk-namespace",
    version,
    about = "Where redstalk namespaces live on Redis, and copying one elsewhere",
    after_help = "Exit codes: 0 done, 1 refused or failed, 2 usage, 3 cannot reach Redis."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The hash tag and Redis Cluster slot of each prefix (a namespace lives in one
    /// slot: choose prefixes whose slots sit on different primaries).
    Slots {
        #[arg(required = true)]
        prefixes: Vec<String>,
    },
    /// Copy a namespace (stop every instance of it first): ids, states, pauses and
    /// counters kept; the source gets a tombstone so no instance serves it again.
    Copy {
        /// The Redis holding the namespace (redis://, rediss://, redis+sentinel://,
        /// redis+cluster://).
        #[arg(long)]
        from: String,
        /// The Redis to copy it to.
        #[arg(long)]
        to: String,
        /// The namespace (--redis-prefix of its instances).
        #[arg(long)]
        prefix: String,
        /// The prefix at the target (default: the same).
        #[arg(long)]
        to_prefix: Option<String>,
        /// Leave the source serviceable instead of writing the tombstone.
        #[arg(long)]
        keep_source: bool,
        /// Overwrite the keys an interrupted copy left at the target.
        #[arg(long)]
        resume: bool,
        /// TLS files for rediss:// on both sides (as redstalk's --redis-tls-*).
        #[arg(long)]
        tls_ca: Option<std::path::PathBuf>,
        #[arg(long)]
        tls_cert: Option<std::path::PathBuf>,
        #[arg(long)]
        tls_key: Option<std::path::PathBuf>,
        /// The sentinels' own password, for redis+sentinel:// on either side.
        #[arg(long, env = "REDSTALK_REDIS_SENTINEL_PASSWORD")]
        sentinel_password: Option<String>,
    },
    /// Write the man pages and the shell completions under DIR (the Debian package's
    /// build runs it: src/manual/).
    #[command(hide = true)]
    WriteManual { dir: std::path::PathBuf },
}

/// What `man redstalk-namespace` says after the options and commands.
const MAN_SECTIONS: &[Section] = &[
    Section {
        title: "EXIT STATUS",
        paragraphs: &[
            "0\tdone.",
            "1\tthe copy was refused or failed (the message says why and what to do).",
            "2\ta bad command line or prefix.",
            "3\ta Redis could not be reached.",
        ],
    },
    Section {
        title: "SEE ALSO",
        paragraphs: &["redstalk(1); /usr/share/doc/redstalk/SCALING.md"],
    },
];

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Slots { prefixes } => slots(&prefixes),
        Cmd::WriteManual { dir } => {
            use clap::CommandFactory;
            match manual::write_manual(Cli::command(), MAN_SECTIONS, &dir) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("redstalk-namespace: write-manual {}: {e}", dir.display());
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Copy {
            from,
            to,
            prefix,
            to_prefix,
            keep_source,
            resume,
            tls_ca,
            tls_cert,
            tls_key,
            sentinel_password,
        } => {
            let tls = TlsFiles {
                ca: tls_ca,
                cert: tls_cert,
                key: tls_key,
            };
            let plan = CopyPlan {
                to_prefix: to_prefix.unwrap_or_else(|| prefix.clone()),
                from_prefix: prefix,
                keep_source,
                resume,
            };
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                eprintln!("redstalk-namespace: cannot start the async runtime");
                return ExitCode::from(1);
            };
            runtime.block_on(run_copy(
                &from,
                &to,
                &tls,
                sentinel_password.as_deref(),
                &plan,
            ))
        }
    }
}

fn slots(prefixes: &[String]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for p in prefixes {
        match check_prefix(p) {
            Ok(()) => println!("{p}\t{{{p}}}\tslot {}", slot_of(p.as_bytes())),
            Err(e) => {
                eprintln!("redstalk-namespace: prefix {p:?}: {e}");
                code = ExitCode::from(2);
            }
        }
    }
    code
}

/// A connection to the primary that holds `prefix` (on a cluster: its slot's).
async fn connect(
    url: &str,
    tls: &TlsFiles,
    sentinel_password: Option<&str>,
    prefix: &str,
    side: &str,
) -> Result<RedisConn, ExitCode> {
    let connector = Connector::new(url, tls, sentinel_password, prefix).map_err(|e| {
        eprintln!("redstalk-namespace: --{side}: {e}");
        ExitCode::from(2)
    })?;
    connector
        .managed("namespace copy", RESPONSE_TIMEOUT * 5)
        .await
        .map_err(|e| {
            eprintln!(
                "redstalk-namespace: cannot reach the {side} Redis ({}): {e}",
                redact(url)
            );
            ExitCode::from(3)
        })
}

async fn run_copy(
    from: &str,
    to: &str,
    tls: &TlsFiles,
    sentinel_password: Option<&str>,
    plan: &CopyPlan,
) -> ExitCode {
    for p in [&plan.from_prefix, &plan.to_prefix] {
        if let Err(e) = check_prefix(p) {
            eprintln!("redstalk-namespace: prefix {p:?}: {e}");
            return ExitCode::from(2);
        }
    }
    let mut source = match connect(from, tls, sentinel_password, &plan.from_prefix, "from").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut target = match connect(to, tls, sentinel_password, &plan.to_prefix, "to").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match copy(&mut source, &mut target, plan).await {
        Ok(report) => {
            print_report(from, to, plan, &report);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("redstalk-namespace: copy refused or failed: {e}");
            ExitCode::from(1)
        }
    }
}

fn print_report(from: &str, to: &str, plan: &CopyPlan, r: &CopyReport) {
    println!("tube\tready\tdelayed\treserved\tburied");
    let mut total = [0u64; 4];
    for t in &r.tubes {
        println!(
            "{}\t{}\t{}\t{}\t{}",
            t.tube, t.jobs[0], t.jobs[1], t.jobs[2], t.jobs[3]
        );
        for (sum, n) in total.iter_mut().zip(t.jobs) {
            *sum += n;
        }
    }
    println!(
        "copied namespace {:?} of {} to {:?} of {}: {} keys, {} entries, {} tubes, jobs \
         ready {} delayed {} reserved {} buried {} (the same on both sides), {} ms; {}",
        plan.from_prefix,
        redact(from),
        plan.to_prefix,
        redact(to),
        r.keys,
        r.entries,
        r.tubes.len(),
        total[0],
        total[1],
        total[2],
        total[3],
        r.ms,
        if plan.keep_source {
            "the source is unlocked and still serviceable"
        } else {
            "the source holds a tombstone: no instance serves it again"
        }
    );
}
