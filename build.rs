//! Build script: the commit and toolchain a build comes from, for `redstalk -Vv`
//! (`src/build_info.rs`). Nothing else.
//!
//! The commit is `REDSTALK_COMMIT` when set (a build without `.git`, such as the
//! container image's, is given it), else what git says HEAD is, else `unknown`. The
//! script reruns when HEAD moves in this checkout (its reflog and HEAD file; not the
//! shared refs, which other worktrees' commits touch), so a commit rebuilds the crate
//! once. Whether the tree has uncommitted changes is not recorded: the script does not
//! rerun on every edit, so it could not keep that true.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=REDSTALK_COMMIT");
    let commit = std::env::var("REDSTALK_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_string())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=REDSTALK_COMMIT={commit}");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let rustc_version = output(Command::new(rustc).arg("--version")).unwrap_or_default();
    println!("cargo:rustc-env=REDSTALK_RUSTC={rustc_version}");
    for (name, var) in [
        ("REDSTALK_TARGET", "TARGET"),
        ("REDSTALK_OPT_LEVEL", "OPT_LEVEL"),
    ] {
        let value = std::env::var(var).unwrap_or_default();
        println!("cargo:rustc-env={name}={value}");
    }
}

/// HEAD's commit, and the files whose change means HEAD moved.
fn git_head() -> Option<String> {
    let commit = output(Command::new("git").args(["rev-parse", "--verify", "HEAD"]))?;
    for file in ["HEAD", "logs/HEAD"] {
        let path = output(Command::new("git").args(["rev-parse", "--git-path", file]));
        // A path that does not exist would make cargo rerun the script every build.
        if let Some(path) = path.map(PathBuf::from).filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(commit)
}

/// A command's first line of output, when it succeeds.
fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok().filter(|o| o.status.success())?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}
