//! redstalkctl, the operator's command-line tool (docs/CLI.md): parses the command
//! line, picks the path (beanstalk protocol or admin HTTP API) and maps the outcome to
//! the documented exit code.
//!
//! Invariants: a command that the beanstalk protocol can do uses the protocol (so it
//! works against beanstalkd too) unless `--api` is given, then the API; a command that
//! needs the API fails with exit 3 without `--api`; the exit code comes only from
//! [`CtlError::exit_code`] (or is 0 / 1 for a partial bulk change), and clap's own
//! usage errors exit 2 like ours.

mod api;
mod beanstalk;
mod change;
mod dict;
mod error;
mod inspect;
mod keys;
mod policy;
mod render;
mod retained;
mod schedule;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use redstalk::manual::{self, Section};

use crate::api::Api;
use crate::beanstalk::Beanstalk;
use crate::change::JobChange;
use crate::error::{CtlError, EXIT_OK, Result};

#[derive(Parser)]
#[command(
    name = "redstalkctl",
    version,
    about = "Inspect and change the jobs of redstalk (and beanstalkd)",
    after_help = "Exit codes: 0 ok, 1 partial, 2 usage, 3 unsupported, 4 refused, 5 not found, \
                  6 conflict, 7 unavailable, 8 cannot connect (docs/CLI.md)."
)]
struct Cli {
    /// The beanstalk port (HOST:PORT) of redstalk or beanstalkd.
    #[arg(
        long,
        global = true,
        env = "REDSTALKCTL_SERVER",
        default_value = "127.0.0.1:11300"
    )]
    server: String,
    /// The admin HTTP API (http://HOST:PORT, redstalk's --http address); every command
    /// then goes through it.
    #[arg(long, global = true, env = "REDSTALKCTL_API")]
    api: Option<String>,
    /// The admin token (also REDSTALK_ADMIN_TOKEN); sent only as a bearer header.
    #[arg(long, global = true, env = "REDSTALKCTL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Seconds to wait for a connection or a reply.
    #[arg(long, global = true, default_value_t = 10)]
    timeout: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The server's figures (`stats`).
    Stats,
    /// Every tube with its job counts.
    Tubes,
    /// The jobs of a tube in one state, in the order the server takes them (API).
    Jobs(inspect::JobsArgs),
    /// One job's figures and body.
    Job(inspect::JobArgs),
    /// Put a job (BODY, or `-` to read it from stdin).
    Put(change::PutArgs),
    /// Delete a job.
    Delete { id: u64 },
    /// Find a tube's job by its key, or delete it with --delete (redstalk's keys).
    Key(keys::KeyArgs),
    /// Kick up to N buried (else delayed) jobs of a tube, or one job with --job.
    Kick(change::KickArgs),
    /// Bury a ready or delayed job (API).
    Bury { id: u64 },
    /// Move a job to another tube, or many with --from/--to (API).
    Move(change::MoveArgs),
    /// Set a job's priority (API).
    Pri { id: u64, pri: u32 },
    /// Set a ready or delayed job's delay in seconds; 0 makes it ready (API).
    Delay { id: u64, secs: u32 },
    /// Delete every job of a tube, or those in the states given with --state
    /// (redstalk's flush-tube; the server deletes in steps that let clients run).
    Flush(change::FlushArgs),
    /// Pause a tube for SECS seconds (0 ends a pause).
    Pause { tube: String, secs: u32 },
    /// The tube policies: dead letters and release backoff (API).
    #[command(subcommand)]
    Policy(policy::PolicyCmd),
    /// The schedules: jobs put at each tick of a cron expression or an interval (API).
    #[command(subcommand)]
    Schedule(schedule::ScheduleCmd),
    /// Deleted jobs' records, while the server retains them (`--retain`; API).
    #[command(subcommand)]
    Retained(retained::RetainedCmd),
    /// Find jobs whose body contains SUBSTR (API).
    Search(inspect::SearchArgs),
    /// Print changes of the tubes' counts as they happen.
    Tail(watch::WatchArgs),
    /// A live table of the tubes, redrawn every interval.
    Top(watch::WatchArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish or
    /// powershell), e.g. `source <(redstalkctl completions bash)`.
    Completions { shell: clap_complete::Shell },
    /// Write the man pages and the completions under DIR (the Debian package's build
    /// runs it: src/manual/).
    #[command(hide = true)]
    WriteManual { dir: std::path::PathBuf },
}

/// What `man redstalkctl` says after the options and commands.
const MAN_SECTIONS: &[Section] = &[
    Section {
        title: "EXIT STATUS",
        paragraphs: &[
            "0\tok: the command did everything it was asked.",
            "1\tpartial: a bulk change changed fewer jobs than it matched.",
            "2\tusage: a bad command line or value.",
            "3\tunsupported: the command needs --api, or the server does not take it.",
            "4\trefused: no or a wrong token, --admin-read-only, cross-origin.",
            "5\tnot found: no such job or tube.",
            "6\tconflict: the job's state does not allow the change.",
            "7\tunavailable: the server answered but cannot serve now.",
            "8\tcannot connect: the beanstalk port or the API cannot be reached.",
        ],
    },
    Section {
        title: "SEE ALSO",
        paragraphs: &[
            "redstalk(1), beanstalkd(1); /usr/share/doc/redstalk/CLI.md has every \
             command with examples.",
        ],
    },
];

/// What every command gets: where the server is and how to print.
pub struct Ctx {
    server: String,
    api: Option<Api>,
    pub json: bool,
    timeout: Duration,
}

impl Ctx {
    /// A beanstalk protocol connection to `--server`.
    pub fn proto(&self) -> Result<Beanstalk> {
        Beanstalk::connect(&self.server, self.timeout)
    }

    /// The API client when `--api` was given.
    pub fn api(&self) -> Option<&Api> {
        self.api.as_ref()
    }

    /// The API client, or the unsupported error naming `what`.
    pub fn need_api(&self, what: &str) -> Result<&Api> {
        self.api.as_ref().ok_or_else(|| CtlError::needs_api(what))
    }
}

fn run(cli: Cli) -> Result<u8> {
    let timeout = Duration::from_secs(cli.timeout.max(1));
    let token = cli
        .token
        .or_else(|| std::env::var("REDSTALK_ADMIN_TOKEN").ok())
        .filter(|t| !t.is_empty());
    let ctx = Ctx {
        server: cli.server,
        api: cli.api.map(|a| Api::new(&a, token, timeout)),
        json: cli.json,
        timeout,
    };
    match cli.cmd {
        Cmd::Stats => inspect::stats(&ctx),
        Cmd::Tubes => inspect::tubes(&ctx),
        Cmd::Jobs(a) => inspect::jobs(&ctx, &a),
        Cmd::Job(a) => inspect::job(&ctx, &a),
        Cmd::Search(a) => inspect::search(&ctx, &a),
        Cmd::Put(a) => change::put(&ctx, &a),
        Cmd::Delete { id } => change::delete(&ctx, id),
        Cmd::Key(a) => keys::key(&ctx, &a),
        Cmd::Kick(a) => change::kick(&ctx, &a),
        Cmd::Bury { id } => change::job_action(&ctx, id, JobChange::Bury),
        Cmd::Move(a) => change::move_jobs(&ctx, &a),
        Cmd::Pri { id, pri } => change::job_action(&ctx, id, JobChange::Pri(pri)),
        Cmd::Delay { id, secs } => change::job_action(&ctx, id, JobChange::Delay(secs)),
        Cmd::Pause { tube, secs } => change::pause(&ctx, &tube, secs),
        Cmd::Flush(a) => change::flush(&ctx, &a),
        Cmd::Policy(p) => policy::policy(&ctx, &p),
        Cmd::Schedule(s) => schedule::schedule(&ctx, &s),
        Cmd::Retained(r) => retained::retained(&ctx, &r),
        Cmd::Tail(a) => watch::tail(&ctx, &a),
        Cmd::Top(a) => watch::top(&ctx, &a),
        Cmd::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            manual::write_completions(&Cli::command(), shell, &mut out)
                .map_err(|e| CtlError::Usage(format!("completions: {e}")))?;
            Ok(EXIT_OK)
        }
        Cmd::WriteManual { dir } => {
            manual::write_manual(Cli::command(), MAN_SECTIONS, &dir)
                .map_err(|e| CtlError::Usage(format!("write-manual {}: {e}", dir.display())))?;
            Ok(EXIT_OK)
        }
    }
}

/// Die quietly of SIGPIPE, as command-line tools do, when the reader of stdout goes
/// away (`redstalkctl tubes | head`): Rust ignores the signal, so every later print
/// would panic instead.
fn default_sigpipe() {
    // SAFETY: called first in main, before any thread exists; SIG_DFL is a valid
    // disposition and `signal` has no other effect.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("redstalkctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README.md's tables of redstalkctl's options and commands, against its flags.
    #[test]
    fn the_readme_documents_every_flag() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let problems = manual::readme::mismatches(&Cli::command(), &readme, "Command-line tool");
        assert!(
            problems.is_empty(),
            "README.md and redstalkctl's flags disagree:\n{}",
            problems.join("\n")
        );
    }
}
