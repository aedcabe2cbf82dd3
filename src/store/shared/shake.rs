//! Each script's prelude cut to what its body uses: the top-level definitions of the
//! key layout and `lua/prelude.lua` that the body reaches (directly or through other
//! definitions), and every top-level statement that is not a definition.
//!
//! Why: a script's whole text runs on every EVALSHA, so each `local function` of the
//! prelude is a closure made (and collected) per call whether the body calls it or not
//! (5–15 µs of Redis' time a call: bench/results/2026-12-06-prelude-cost.md). As a
//! Redis Function (scripts/library.rs) the helpers are made once, at load, and
//! [`split_call_state`] says which of the kept text runs at each call.
//!
//! The formatting rules this relies on are written at the top of `lua/prelude.lua`.
//!
//! Invariants: a definition is dropped only when no kept text names it (names are read
//! as Lua identifiers, whole-line comments ignored), so dropping is never wrong, only
//! sometimes not done (a name in a string or a trailing comment keeps its definition).
//! Statements that are not `local` definitions (the generation check) are always kept,
//! and so is everything they name; the kept text is in the prelude's order, so every
//! definition still precedes its use.

/// One top-level piece of the prelude: its text (with the comments before it) and the
/// names it defines (none: a statement that always runs).
struct Chunk<'a> {
    text: Vec<&'a str>,
    defines: Vec<String>,
    /// Its first line of code.
    start: &'a str,
}

/// The names a top-level piece of code defines: `local function f` -> f,
/// `local a,\n b = ...` -> a, b; none when it is a statement.
fn defined_names(code: &str) -> Vec<String> {
    let Some(rest) = code.strip_prefix("local ") else {
        return Vec::new();
    };
    if let Some(f) = rest.strip_prefix("function ") {
        return identifiers(f).take(1).map(String::from).collect();
    }
    let lhs = rest.split('=').next().unwrap_or_default();
    lhs.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

/// Whether `line` starts a new top-level piece: code at column 0 that does not close
/// or continue the one before.
fn starts_chunk(line: &str) -> bool {
    let continues = matches!(line.chars().next(), None | Some(' ' | '\t' | ')' | '}'))
        || line.starts_with("--")
        || line == "end"
        || line.starts_with("end ")
        || line.starts_with("else");
    !continues
}

fn chunks(prelude: &str) -> Vec<Chunk<'_>> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut pending: Vec<&str> = Vec::new();
    for line in prelude.lines() {
        if starts_chunk(line) {
            let mut text = std::mem::take(&mut pending);
            text.push(line);
            out.push(Chunk {
                text,
                defines: Vec::new(),
                start: line,
            });
        } else if line.starts_with("--") || line.trim().is_empty() || out.is_empty() {
            pending.push(line);
        } else if let Some(last) = out.last_mut() {
            last.text.append(&mut pending);
            last.text.push(line);
        }
    }
    if let Some(last) = out.last_mut() {
        last.text.append(&mut pending);
    }
    for c in &mut out {
        // The code from the first line on: a definition's names may run over lines.
        let from = c
            .text
            .iter()
            .position(|l| *l == c.start)
            .unwrap_or_default();
        c.defines = defined_names(&c.text[from..].join("\n"));
    }
    out
}

/// The Lua identifiers of `code`, whole-line comments left out (a trailing comment is
/// read as code: a `--` inside a string must not hide a name).
fn identifiers(code: &str) -> impl Iterator<Item = &str> {
    code.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The fields of `table` that `source` reads (`T.<name>`, `G.<name>`), comments
/// included (reading too many is safe: a key passed for nothing).
pub fn fields_read(source: &str, table: char) -> Vec<String> {
    let bytes = source.as_bytes();
    let mut found = Vec::new();
    for (i, _) in source.match_indices(&format!("{table}.")) {
        let glued = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let name: String = source[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !glued && !name.is_empty() {
            found.push(name);
        }
    }
    found
}

/// The prelude's pieces that `body` needs, in order; a piece of `overrides` takes the
/// place of the prelude's piece that defines the same names.
pub fn prelude_for(prelude: &str, overrides: &str, body: &str) -> String {
    let over = chunks(overrides);
    let mut chunks: Vec<Chunk> = Vec::new();
    for c in self::chunks(prelude) {
        match over
            .iter()
            .position(|o| o.defines.iter().any(|n| c.defines.contains(n)))
        {
            Some(i) => chunks.push(Chunk {
                text: over[i].text.clone(),
                defines: over[i].defines.clone(),
                start: over[i].start,
            }),
            None => chunks.push(c),
        }
    }
    let mut keep: Vec<bool> = chunks.iter().map(|c| c.defines.is_empty()).collect();
    let mut used: std::collections::HashSet<&str> = identifiers(body).collect();
    for (c, _) in chunks.iter().zip(&keep).filter(|(_, k)| **k) {
        used.extend(c.text.iter().flat_map(|l| identifiers(l)));
    }
    // Later pieces only name earlier ones, so one pass from the end settles each.
    for i in (0..chunks.len()).rev() {
        if !keep[i] && chunks[i].defines.iter().any(|n| used.contains(n.as_str())) {
            keep[i] = true;
            used.extend(chunks[i].text.iter().flat_map(|l| identifiers(l)));
        }
    }
    let mut out = String::new();
    for (c, _) in chunks.iter().zip(&keep).filter(|(_, k)| **k) {
        for line in &c.text {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `kept` (a script's prelude as [`prelude_for`] cut it) split for a Redis Function
/// library: the part run once, at `FUNCTION LOAD`, and the part run at each call. A
/// definition of `state` (the call's state) is declared at load and assigned at each
/// call (its `local ` dropped), and a statement (the generation check) runs at each
/// call; every other definition (constants, helpers) is made once, at load.
pub fn split_call_state(kept: &str, state: &[&str]) -> (String, String) {
    let (mut load, mut call) = (String::new(), String::new());
    for c in chunks(kept) {
        let is_state =
            !c.defines.is_empty() && c.defines.iter().all(|n| state.contains(&n.as_str()));
        if !c.defines.is_empty() && !is_state {
            push_lines(&mut load, &c.text);
            continue;
        }
        let from = c
            .text
            .iter()
            .position(|l| *l == c.start)
            .unwrap_or_default();
        push_lines(&mut load, &c.text[..from]);
        if is_state {
            load.push_str(&format!("local {}\n", c.defines.join(", ")));
            let first = c.start.strip_prefix("local ").unwrap_or(c.start);
            push_lines(&mut call, &[first]);
            push_lines(&mut call, &c.text[from + 1..]);
        } else {
            push_lines(&mut call, &c.text[from..]);
        }
    }
    (load, call)
}

fn push_lines(out: &mut String, lines: &[&str]) {
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
}

/// The top-level names `prelude` defines (not functions) that the prelude's functions
/// or some body of `bodies` assign anew: `NAME = `, `NAME.f = ` or `NAME[...] = `
/// (not `local NAME =`, not `==`, not a definition's own text). Read line by line with
/// whole-line comments left out; an assignment hidden in a string is reported too
/// (reporting too much is safe: it is checked by hand).
#[cfg(test)]
pub fn assigned_anew(prelude: &str, bodies: &[&str]) -> Vec<String> {
    let pieces = chunks(prelude);
    let is_function = |c: &Chunk| c.start.starts_with("local function ");
    let names: Vec<&String> = pieces
        .iter()
        .filter(|c| !is_function(c))
        .flat_map(|c| &c.defines)
        .collect();
    // A definition's own lines (a list of names may run over lines) are not read.
    let code = pieces
        .iter()
        .filter(|c| c.defines.is_empty() || is_function(c))
        .flat_map(|c| c.text.iter().copied())
        .chain(bodies.iter().flat_map(|b| b.lines()));
    let mut found: Vec<String> = Vec::new();
    for line in code.filter(|l| !l.trim_start().starts_with("--")) {
        let code = line.trim_start();
        if code.starts_with("local ") && !code.starts_with("local function") {
            // A new local (it may shadow a name of the prelude), not an assignment;
            // `local a = NAME` reads only.
            continue;
        }
        for &name in &names {
            if !found.contains(name) && assigns(code, name) {
                found.push(name.clone());
            }
        }
    }
    found
}

/// Whether `code` assigns to `name`, or to a field of it.
#[cfg(test)]
fn assigns(code: &str, name: &str) -> bool {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    code.match_indices(name).any(|(i, _)| {
        let end = i + name.len();
        // Not part of a longer name, a field (`x.NAME`) or an index (`t[NAME]`).
        if (i > 0 && (ident(bytes[i - 1]) || matches!(bytes[i - 1], b'.' | b'[')))
            || bytes.get(end).is_some_and(|b| ident(*b))
        {
            return false;
        }
        let mut rest = &code[end..];
        // Past `.field` and `[index]` chains to the operator.
        loop {
            rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix('.') {
                rest = r.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
            } else if rest.starts_with('[') {
                match rest.find(']') {
                    Some(j) => rest = &rest[j + 1..],
                    None => return false,
                }
            } else {
                break;
            }
        }
        rest.starts_with('=') && !rest.starts_with("==")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRELUDE: &str = "\
-- the layout
local N = 3
local function tube_group(b)
  return { ready = KEYS[b] }
end
local G = tube_group(1)
-- checked on every call
if G.ready then
  return 1
end
local function unused(x)
  return x
end
local function helper(T)
  return used_below(T) + N
end
local A, B = 1,
  2
";

    #[test]
    fn keeps_what_the_body_and_statements_name() {
        let kept = prelude_for(PRELUDE, "", "return helper(KEYS) + B");
        assert!(kept.contains("local N = 3"));
        assert!(kept.contains("local function tube_group"));
        assert!(kept.contains("local G = tube_group(1)"));
        assert!(kept.contains("if G.ready then\n  return 1\nend"));
        assert!(kept.contains("local function helper(T)"));
        assert!(kept.contains("local A, B = 1,\n  2"));
        assert!(!kept.contains("unused"), "{kept}");
    }

    #[test]
    fn dashes_in_a_string_hide_no_name() {
        let kept = prelude_for(PRELUDE, "", "return x('a--b') + helper(1)");
        assert!(kept.contains("local function helper"), "{kept}");
    }

    #[test]
    fn a_name_in_a_comment_keeps_nothing() {
        let kept = prelude_for(PRELUDE, "", "-- helper\nreturn 0");
        assert!(!kept.contains("helper"), "{kept}");
        assert!(!kept.contains("local N"), "{kept}");
    }

    /// The real scripts: every prelude name a script's kept text or body uses is
    /// defined in what is kept, and each script sheds part of the prelude.
    #[test]
    fn every_script_keeps_every_name_it_uses() {
        let prelude = format!(
            "{}\n{}",
            crate::redis::keys::lua_key_layout(),
            include_str!("lua/prelude.lua")
        );
        let all: Vec<String> = chunks(&prelude)
            .into_iter()
            .flat_map(|c| c.defines)
            .collect();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/shared/lua");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with("prelude.lua") {
                continue;
            }
            let body = std::fs::read_to_string(&path).unwrap();
            let kept = prelude_for(&prelude, "", &body);
            let defined: Vec<String> = chunks(&kept).into_iter().flat_map(|c| c.defines).collect();
            let text = format!("{kept}\n{body}");
            for name in identifiers(&text).filter(|n| all.iter().any(|a| a == n)) {
                assert!(
                    defined.iter().any(|d| d == name),
                    "{}: uses {name}, not kept",
                    path.display()
                );
            }
            assert!(kept.len() < prelude.len(), "{}", path.display());
            checked += 1;
        }
        assert!(checked > 20, "only {checked} scripts");
    }

    #[test]
    fn call_state_is_declared_at_load_and_set_at_each_call() {
        let kept = prelude_for(PRELUDE, "", "return helper(KEYS) + B + G.ready");
        let (load, call) = split_call_state(&kept, &["G"]);
        assert!(load.contains("local N = 3"), "{load}");
        assert!(load.contains("local function helper(T)"), "{load}");
        assert!(load.contains("local G\n"), "{load}");
        assert!(!load.contains("tube_group(1)"), "{load}");
        assert!(!load.contains("if G.ready"), "{load}");
        assert_eq!(
            call,
            "G = tube_group(1)\nif G.ready then\n  return 1\nend\n"
        );
    }

    #[test]
    fn assignments_anew_are_found() {
        let prelude = "local A = 1\nlocal T = {}\nlocal B,\n  C = 1, 2\nlocal function f()\n  return A\nend\n";
        assert!(assigned_anew(prelude, &[]).is_empty());
        let found = |body: &str| assigned_anew(prelude, &[body]);
        assert_eq!(
            assigned_anew(&format!("{prelude}local function g()\n  C = 3\nend\n"), &[]),
            ["C"]
        );
        assert_eq!(found("A = 2"), ["A"]);
        assert_eq!(found("  if x then T[k] = 1 end"), ["T"]);
        assert_eq!(found("T.n = 1"), ["T"]);
        assert!(found("if A == 1 then return T.n end").is_empty());
        assert!(found("local A = 2\nlocal B = A").is_empty());
        assert!(found("-- A = 2\nx.A = 1\nAB = 1\nt[A] = 1").is_empty());
    }

    #[test]
    fn an_override_takes_the_place_of_the_piece_it_redefines() {
        let kept = prelude_for(PRELUDE, "local N = 9\n", "return helper(KEYS)");
        assert!(kept.contains("local N = 9"), "{kept}");
        assert!(!kept.contains("local N = 3"), "{kept}");
        assert!(kept.find("local N = 9") < kept.find("local function helper"));
    }
}
