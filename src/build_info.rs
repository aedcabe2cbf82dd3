//! What this build is: its version, the commit it was built from and the toolchain
//! (recorded by `build.rs`), as `redstalk -v` prints it.
//!
//! `-v` prints one line as beanstalkd's does (`beanstalkd 1.12`: the program and its
//! version); each `-V` before or after it adds to that line rather than printing more
//! lines, so scripts that read the first line (bench/compare's tables) keep working.

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the build came from (`unknown` when built without git and without
/// `REDSTALK_COMMIT`).
pub const COMMIT: &str = env!("REDSTALK_COMMIT");

/// The beanstalkd release whose protocol redstalk speaks by default.
const PROTOCOL: &str = "1.13";

/// The version line for `-v` with `verbosity` `-V`s: 0 `redstalk 0.1.0`; 1 adds the
/// short commit and the protocol; 2 the whole commit, the compiler, target and
/// optimisation level.
pub fn version_line(verbosity: u8) -> String {
    let name = format!("redstalk {VERSION}");
    match verbosity {
        0 => name,
        1 => format!(
            "{name} (commit {}, beanstalkd protocol {PROTOCOL})",
            short(COMMIT)
        ),
        _ => format!(
            "{name} (commit {COMMIT}, beanstalkd protocol {PROTOCOL}; built by {} for {}, \
             opt-level {})",
            env!("REDSTALK_RUSTC"),
            env!("REDSTALK_TARGET"),
            env!("REDSTALK_OPT_LEVEL"),
        ),
    }
}

/// The first 12 characters of a commit id (all of anything shorter, such as `unknown`).
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_adds_to_one_line() {
        let plain = version_line(0);
        assert_eq!(plain, format!("redstalk {VERSION}"), "as beanstalkd's -v");
        let one = version_line(1);
        let two = version_line(2);
        for line in [&one, &two] {
            assert!(line.starts_with(&plain), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        assert!(one.contains(&format!("commit {}", short(COMMIT))), "{one}");
        assert!(two.contains(&format!("commit {COMMIT}")), "{two}");
        assert!(two.contains("rustc "), "{two}");
        println!("{plain}\n{one}\n{two}");
    }

    /// A test run from a git checkout knows its commit (the package test checks the
    /// installed binary against `git rev-parse HEAD`).
    #[test]
    fn the_commit_is_recorded_from_git() {
        let head = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output();
        match head {
            Ok(out) if out.status.success() && std::env::var("REDSTALK_COMMIT").is_err() => {
                let head = String::from_utf8_lossy(&out.stdout).trim().to_string();
                assert_eq!(COMMIT, head, "build.rs recorded another commit");
            }
            _ => println!("not a git checkout: commit {COMMIT}"),
        }
    }
}
