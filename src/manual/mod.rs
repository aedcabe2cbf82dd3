//! Manuals written from the command-line definitions themselves: a man page per
//! command and subcommand (clap_mangen) and bash, zsh and fish completions
//! (clap_complete), from the same `clap::Command` that parses the flags, so that they
//! cannot drift from it; and ([`readme`]) the README's flag tables read back against it.
//!
//! Invariants: nothing here knows a flag by name; hidden arguments and subcommands
//! (test knobs, the manual writer itself) stay out of pages, completions and the README
//! check alike. Each binary calls [`write_manual`] for itself (`--write-manual DIR`),
//! and the Debian package installs what it writes (deploy/debian/build).

pub mod readme;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

/// A section a binary adds to its man page after the options (EXIT STATUS, FILES, SEE
/// ALSO...). A paragraph with a tab is a tagged one: the tag (bold) before the tab.
pub struct Section {
    pub title: &'static str,
    pub paragraphs: &'static [&'static str],
}

/// The shells whose completions the package installs, and where under /usr/share
/// each looks for them (bash-completion and fish by the command's name, zsh by `_name`).
const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bash-completion/completions"),
    (Shell::Zsh, "zsh/vendor-completions"),
    (Shell::Fish, "fish/vendor_completions.d"),
];

/// Write `cmd`'s man pages (its own, with `sections`, and one per visible subcommand)
/// under `dir/man/man1/`, and its completions under `dir/` as /usr/share lays them out.
/// Returns the files written.
pub fn write_manual(cmd: Command, sections: &[Section], dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut built = cmd.clone().disable_help_subcommand(true);
    built.build();
    let mut written = Vec::new();
    let man_dir = dir.join("man/man1");
    std::fs::create_dir_all(&man_dir)?;
    write_pages(&built, None, sections, &man_dir, &mut written)?;
    for (shell, sub) in SHELLS {
        let path = dir.join(sub).join(completion_file(shell, cmd.get_name()));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut out = Vec::new();
        write_completions(&cmd, shell, &mut out)?;
        std::fs::write(&path, out)?;
        written.push(path);
    }
    Ok(written)
}

/// The completion script of `cmd` for `shell` (`redstalkctl completions SHELL`); `cmd`
/// as its `CommandFactory` gives it, not yet built (a built one carries the arguments
/// clap adds, which the copy below would then hold twice).
pub fn write_completions(cmd: &Command, shell: Shell, out: &mut dyn Write) -> io::Result<()> {
    let mut visible = visible_only(cmd);
    let name = cmd.get_name().to_string();
    // clap_complete panics when its writer fails: it writes into memory, and the one
    // write that can fail, ours, returns the error.
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut visible, name, &mut buf);
    out.write_all(&buf)
}

/// The file name `shell` loads `name`'s completions from, in its vendor directory.
fn completion_file(shell: Shell, name: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{name}"),
        Shell::Fish => format!("{name}.fish"),
        _ => name.to_string(),
    }
}

/// A copy of `cmd` without its hidden arguments and subcommands: clap_complete offers
/// every argument it is given, hidden or not (clap_mangen leaves them out itself).
fn visible_only(cmd: &Command) -> Command {
    let mut copy = Command::new(cmd.get_name().to_string())
        .disable_help_flag(cmd.is_disable_help_flag_set())
        .disable_version_flag(cmd.is_disable_version_flag_set())
        .disable_help_subcommand(true)
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(visible_only),
        );
    if let Some(about) = cmd.get_about() {
        copy = copy.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        copy = copy.version(version.to_string());
    }
    copy
}

/// `cmd`'s page and its subcommands' pages; `parent` names the page a subcommand's
/// SEE ALSO points back to.
fn write_pages(
    cmd: &Command,
    parent: Option<&str>,
    sections: &[Section],
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, Some(&name), &[], dir, written)?;
    }
    let mut page_cmd = cmd.clone();
    if page_cmd.get_version().is_none() {
        page_cmd = page_cmd.version(crate::build_info::VERSION);
    }
    // clap's own usage line ("redstalk [OPTIONS]") as the synopsis: clap_mangen's
    // lists every option, without their values.
    let usage = page_cmd.render_usage().to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_string();
    let man = Man::new(page_cmd.override_usage(usage));
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut page)?;
    }
    let mut extra = Roff::new();
    for section in sections {
        extra.control("SH", [section.title]);
        for paragraph in section.paragraphs {
            match paragraph.split_once('\t') {
                Some((tag, text)) => {
                    extra
                        .control("TP", [])
                        .text([bold(tag)])
                        .text([roman(text)]);
                }
                None => {
                    extra.control("PP", []).text([roman(*paragraph)]);
                }
            }
        }
    }
    if let Some(parent) = parent {
        extra
            .control("SH", ["SEE ALSO"])
            .text([bold(parent), roman("(1)")]);
    }
    extra.to_writer(&mut page)?;
    man.render_version_section(&mut page)?;
    let path = dir.join(man.get_filename());
    std::fs::write(&path, page)?;
    written.push(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn tool() -> Command {
        Command::new("tool")
            .version("1.0")
            .arg(Arg::new("port").long("port").num_args(1))
            .arg(
                Arg::new("knob")
                    .long("knob")
                    .hide(true)
                    .action(ArgAction::SetTrue),
            )
            .subcommand(Command::new("put").about("Put a job"))
            .subcommand(Command::new("secret").hide(true))
    }

    #[test]
    fn hidden_arguments_and_subcommands_stay_out_of_pages_and_completions() {
        let dir = std::env::temp_dir().join(format!("redstalk-manual-{}", std::process::id()));
        let sections = [Section {
            title: "EXIT STATUS",
            paragraphs: &["0\tdone."],
        }];
        let written = write_manual(tool(), &sections, &dir).unwrap();
        let names: Vec<_> = written
            .iter()
            .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "man/man1/tool-put.1",
                "man/man1/tool.1",
                "bash-completion/completions/tool",
                "zsh/vendor-completions/_tool",
                "fish/vendor_completions.d/tool.fish",
            ]
        );
        let page = std::fs::read_to_string(dir.join("man/man1/tool.1")).unwrap();
        assert!(
            page.contains("port") && page.contains("EXIT STATUS"),
            "{page}"
        );
        let sub = std::fs::read_to_string(dir.join("man/man1/tool-put.1")).unwrap();
        assert!(sub.contains("SEE ALSO") && sub.contains("tool"), "{sub}");
        for path in &written {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(
                !text.contains("knob") && !text.contains("secret"),
                "{}",
                path.display()
            );
        }
        let bash = std::fs::read_to_string(dir.join("bash-completion/completions/tool")).unwrap();
        assert!(bash.contains("--port") && bash.contains("put"), "{bash}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn redstalks_completions_offer_its_flags_and_not_its_test_knobs() {
        use clap::CommandFactory;
        let mut out = Vec::new();
        write_completions(&crate::cli::Cli::command(), Shell::Bash, &mut out).unwrap();
        let bash = String::from_utf8(out).unwrap();
        for flag in ["--redis-mode", "-b", "--http"] {
            assert!(bash.contains(flag), "{flag}");
        }
        for hidden in ["--write-manual", "--metrics-env", "--admin-login-window-ms"] {
            assert!(!bash.contains(hidden), "{hidden}");
        }
    }
}
