//! The README's flag tables read back against a command's clap definition: every
//! visible flag documented, none documented that does not exist.
//!
//! Which tables count, by their first header cell, within one section of the README
//! (its heading down to the next heading of the same or a higher level):
//! - `flag` or `option`: the flags are the backticked words starting with `-` in the
//!   first column (`` `-l ADDR` ``, `` `--http ADDR` (also `--metrics`) ``), flags of the
//!   command itself (global ones included); a column headed `env` or `environment`
//!   must name each such flag's environment variable;
//! - `command`: the first backticked word of the first column names a subcommand, and
//!   the flags in its `options` column are that subcommand's own.
//!
//! Every other table (and every other column) is prose: a flag mentioned there is not
//! counted as documented. Hidden arguments and subcommands, clap's own `help`
//! subcommand and the `-h`/`--help` it gives each subcommand are not asked for.

use std::collections::{BTreeMap, BTreeSet};

use clap::{ArgAction, Command};

/// What the README says: flags of the command, and of each subcommand by name.
#[derive(Debug, Default)]
struct Documented {
    /// Flag -> the variables its row's environment column names (None: its table has
    /// no such column).
    top: BTreeMap<String, Option<BTreeSet<String>>>,
    subcommands: BTreeMap<String, BTreeSet<String>>,
}

/// Each way the README and `cmd` disagree, one sentence each; empty when they agree.
/// `heading` is the text of the README section holding `cmd`'s tables.
pub fn mismatches(cmd: &Command, readme: &str, heading: &str) -> Vec<String> {
    let name = cmd.get_name().to_string();
    let Some(section) = section(readme, heading) else {
        return vec![format!("README has no section headed {heading:?}")];
    };
    let documented = read_tables(&section);
    let mut cmd = cmd.clone();
    cmd.build();
    let mut problems = Vec::new();

    let top: Vec<_> = cmd.get_arguments().filter(|a| !a.is_hide_set()).collect();
    for arg in &top {
        for flag in names(arg) {
            match documented.top.get(&flag) {
                None => problems.push(format!(
                    "{name} {flag} is not in the README's tables under {heading:?}"
                )),
                Some(Some(env_cell)) => {
                    if let Some(env) = arg.get_env().and_then(|e| e.to_str())
                        && !env_cell.contains(env)
                    {
                        problems.push(format!(
                            "{name} {flag}: its row does not name its variable {env}"
                        ));
                    }
                }
                Some(None) => {
                    if let Some(env) = arg.get_env().and_then(|e| e.to_str()) {
                        problems.push(format!(
                            "{name} {flag} reads {env}, but its table has no env column"
                        ));
                    }
                }
            }
        }
    }
    let known: BTreeSet<String> = top.iter().flat_map(|a| all_names(a)).collect();
    for flag in documented.top.keys().filter(|f| !known.contains(*f)) {
        problems.push(format!(
            "README documents {name} {flag}, which does not exist"
        ));
    }

    let subcommands: Vec<_> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    for sub in &subcommands {
        let sub_name = sub.get_name().to_string();
        let Some(flags) = documented.subcommands.get(&sub_name) else {
            problems.push(format!(
                "{name} {sub_name} has no row in the README's command table"
            ));
            continue;
        };
        let own: Vec<_> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_global_set() && !is_help(a))
            .collect();
        for flag in own.iter().flat_map(|a| names(a)) {
            if !flags.contains(&flag) {
                problems.push(format!(
                    "{name} {sub_name} {flag} is not in its row's options"
                ));
            }
        }
        let known: BTreeSet<String> = own.iter().flat_map(|a| all_names(a)).collect();
        for flag in flags.iter().filter(|f| !known.contains(*f)) {
            problems.push(format!(
                "README documents {name} {sub_name} {flag}, which does not exist"
            ));
        }
    }
    for sub in documented.subcommands.keys() {
        if !subcommands.iter().any(|s| s.get_name() == sub) {
            problems.push(format!(
                "README documents {name} {sub}, which is not a command"
            ));
        }
    }
    problems
}

/// The names a flag must be documented by: its short and its long.
fn names(arg: &clap::Arg) -> Vec<String> {
    let short = arg.get_short().map(|c| format!("-{c}"));
    let long = arg.get_long().map(|l| format!("--{l}"));
    short.into_iter().chain(long).collect()
}

/// Every name a flag answers to (aliases too): what the README may mention.
fn all_names(arg: &clap::Arg) -> Vec<String> {
    let mut all = names(arg);
    let shorts = arg.get_all_short_aliases().unwrap_or_default();
    all.extend(shorts.into_iter().map(|c| format!("-{c}")));
    let longs = arg.get_all_aliases().unwrap_or_default();
    all.extend(longs.into_iter().map(|l| format!("--{l}")));
    all
}

/// The `-h`/`--help` clap gives every subcommand.
fn is_help(arg: &clap::Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong
    )
}

/// The lines of the section headed `heading`, without the heading: down to the next
/// heading of the same or a higher level, outside fenced code (where `#` starts a
/// shell comment).
fn section<'a>(readme: &'a str, heading: &str) -> Option<Vec<&'a str>> {
    let mut in_code = false;
    let headings = readme.lines().map(move |line| {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        let is_heading = !in_code && level > 0 && line[level..].starts_with(' ');
        (line, is_heading.then_some(level))
    });
    let mut lines = headings.skip_while(|(line, level)| {
        level.is_none() || line.trim_start_matches('#').trim() != heading
    });
    let depth = lines.next()?.1?;
    Some(
        lines
            .take_while(|(_, level)| level.is_none_or(|l| l > depth))
            .map(|(line, _)| line)
            .collect(),
    )
}

/// The flag and command tables of a section.
fn read_tables(lines: &[&str]) -> Documented {
    let mut documented = Documented::default();
    let mut rows = lines.iter().map(|l| l.trim());
    while let Some(line) = rows.next() {
        if !line.starts_with('|') {
            continue;
        }
        let header: Vec<String> = cells(line).iter().map(|c| c.to_lowercase()).collect();
        let column = |names: &[&str]| header.iter().position(|h| names.contains(&h.as_str()));
        let kind = header.first().cloned().unwrap_or_default();
        let env = column(&["env", "environment"]);
        let options = column(&["options"]);
        let body: Vec<Vec<String>> = rows
            .by_ref()
            .take_while(|l| l.starts_with('|'))
            .skip(1) // the |---|---| line
            .map(cells)
            .collect();
        for row in body {
            let first = row.first().map(String::as_str).unwrap_or_default();
            match kind.as_str() {
                "flag" | "option" => {
                    let env_cell = env.map(|i| {
                        let cell = row.get(i).map(String::as_str).unwrap_or_default();
                        code_spans(cell).into_iter().map(str::to_string).collect()
                    });
                    for flag in flags_in(first) {
                        documented.top.insert(flag, env_cell.clone());
                    }
                }
                "command" => {
                    let Some(name) = code_spans(first)
                        .first()
                        .and_then(|s| s.split_whitespace().next().map(str::to_string))
                    else {
                        continue;
                    };
                    let cell = options.and_then(|i| row.get(i)).map(String::as_str);
                    let flags = cell.map(flags_in).unwrap_or_default();
                    documented
                        .subcommands
                        .entry(name)
                        .or_default()
                        .extend(flags);
                }
                _ => {}
            }
        }
    }
    documented
}

/// A table row's cells, split on `|` outside code spans.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut in_code = false;
    for c in inner.chars() {
        match c {
            '`' => in_code = !in_code,
            '|' if !in_code => {
                out.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(cell) = out.last_mut() {
            cell.push(c);
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The contents of a cell's backticked spans.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The flags a cell names: words of its code spans that start with `-` and a letter
/// (`--name=VALUE` counts as `--name`).
fn flags_in(cell: &str) -> Vec<String> {
    code_spans(cell)
        .into_iter()
        .flat_map(|span| span.split([' ', ',']))
        .filter_map(|word| {
            let flag = word.split('=').next().unwrap_or_default();
            let body = flag.trim_start_matches('-');
            let dashes = flag.len() - body.len();
            let starts_with_letter = body.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
            ((dashes == 1 || dashes == 2) && starts_with_letter).then(|| flag.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn tool() -> Command {
        Command::new("tool")
            .arg(Arg::new("port").short('p').num_args(1))
            .arg(
                Arg::new("redis")
                    .long("redis")
                    .env("TOOL_REDIS")
                    .alias("store")
                    .num_args(1),
            )
            .arg(Arg::new("knob").long("knob").hide(true).num_args(1))
            .subcommand(
                Command::new("put")
                    .arg(Arg::new("pri").long("pri").num_args(1))
                    .arg(Arg::new("body")),
            )
    }

    const GOOD: &str = "# tool\n\n## Flags\n\nSome prose with `--nothing`.\n\n\
        | flag | meaning |\n|---|---|\n| `-p PORT` | port |\n| `-h`, `--help` | help |\n\n\
        ### More\n\n| option | env | meaning |\n|---|---|---|\n\
        | `--redis URL` (also `--store`) | `TOOL_REDIS` | where; not `-p` |\n\n\
        | command | options | what |\n|---|---|---|\n| `put BODY` | `--pri N` | put |\n\n\
        | path | answer |\n|---|---|\n| `--bogus` | prose table |\n\n\
        ## Later\n\n| flag | meaning |\n|---|---|\n| `--later` | another section |\n";

    #[test]
    fn a_readme_that_documents_every_flag_agrees() {
        assert_eq!(mismatches(&tool(), GOOD, "Flags"), Vec::<String>::new());
    }

    #[test]
    fn each_disagreement_is_named() {
        let missing = GOOD.replace("| `-p PORT` | port |\n", "");
        let problems = mismatches(&tool(), &missing, "Flags");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("-p "), "{problems:?}");

        let extra = GOOD.replace("`-p PORT`", "`-p PORT`, `--port`");
        let problems = mismatches(&tool(), &extra, "Flags");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("--port, which does not exist"),
            "{problems:?}"
        );

        let wrong_env = GOOD.replace("`TOOL_REDIS`", "`TOOL_REDIS_URL`");
        let problems = mismatches(&tool(), &wrong_env, "Flags");
        assert!(problems[0].contains("TOOL_REDIS"), "{problems:?}");

        let sub = GOOD.replace("`--pri N`", "`--priority N`");
        let problems = mismatches(&tool(), &sub, "Flags");
        assert_eq!(problems.len(), 2, "{problems:?}");

        let no_row = GOOD.replace("| `put BODY` | `--pri N` | put |\n", "");
        let problems = mismatches(&tool(), &no_row, "Flags");
        assert!(problems[0].contains("put has no row"), "{problems:?}");

        let problems = mismatches(&tool(), GOOD, "Nowhere");
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    #[test]
    fn cells_keep_pipes_inside_code() {
        assert_eq!(cells("| `a|b` | c |"), vec!["`a|b`", "c"]);
        assert_eq!(
            flags_in("`-l ADDR`, `--x=1` and `-VV` `-5` `---z` `ok`"),
            vec!["-l", "--x", "-VV"]
        );
    }

    /// The README's own tables, against redstalk's flags.
    #[test]
    fn the_readme_documents_every_redstalk_flag() {
        use clap::CommandFactory;
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let problems = mismatches(&crate::cli::Cli::command(), &readme, "Flags");
        assert!(
            problems.is_empty(),
            "README.md and redstalk's flags disagree:\n{}",
            problems.join("\n")
        );
    }
}
