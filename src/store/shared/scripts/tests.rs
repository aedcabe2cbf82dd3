//! Unit tests of the scripts' composition.

use super::*;

/// A key renamed or dropped in `crate::redis::keys` cannot leave a script reading nil: every key
/// field a script names is one the layout defines.
#[test]
fn scripts_read_only_keys_the_layout_defines() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/shared/lua");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        for (table, names) in [('T', TubeKey::NAMES), ('G', NsKey::NAMES)] {
            for name in fields_read(&source, table) {
                assert!(
                    names.contains(&name.as_str()) || (table == 'G' && name == TAG),
                    "{}: {table}.{name} is not a key of the layout",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "only {checked} key reads found");
}

/// The prelude's LARGE_BODY is the store's: a body the scripts answer by its length
/// is one the store reads apart.
#[test]
fn lua_keeps_the_stores_large_body_size() {
    let line = format!("local LARGE_BODY = {}\n", crate::store::LARGE_BODY);
    assert!(include_str!("../lua/prelude.lua").contains(&line));
}

/// A call passes the namespace keys its script reads, and the script counts that
/// many: the reserve reads the generation, the due index, the id index (to drop a
/// damaged job) and the bury counter (`attach` knows every state); a put also the
/// counters and the tube list.
#[test]
fn a_call_passes_the_namespace_keys_its_script_reads() {
    let scripts = Scripts::new();
    let reserve = &scripts.reserve;
    assert_eq!(
        reserve.ns,
        [NsKey::Seq, NsKey::Index, NsKey::Due, NsKey::Generation]
    );
    let put = &scripts.put;
    assert!(put.ns.contains(&NsKey::Tubepos) && put.ns.contains(&NsKey::Stats));
    assert!(scripts.bury.ns.contains(&NsKey::Seq));
    assert!(scripts.init.ns.contains(&NsKey::Generation));
    let prelude = format!(
        "{}\n{}",
        lua_key_layout(),
        include_str!("../lua/prelude.lua")
    );
    for (body, n) in [
        (include_str!("../lua/reserve.lua"), 4),
        (include_str!("../lua/put.lua"), put.ns.len()),
    ] {
        let (text, _) = compose(&prelude, body, false, true);
        assert!(text.contains(&format!("local N_NS_KEYS = {n}\n")), "{text}");
        assert_eq!(text.matches("local N_NS_KEYS").count(), 1);
        assert_eq!(text.matches("local function ns_group").count(), 1);
    }
}

/// The scripts fenced by the owner token are composed without the generation check
/// before their body, and each checks it in its body; every other checks first.
#[test]
fn only_owner_fenced_scripts_defer_the_generation_check() {
    for (name, text, _) in Scripts::new().every() {
        let deferred = text.contains("local CHECK_FIRST = false\n");
        assert_eq!(deferred, !checks_first(name), "{name}");
        assert_eq!(text.matches("local CHECK_FIRST =").count(), 1, "{name}");
        if deferred {
            // The prelude's check, and the body's own.
            assert!(text.contains("held_by(j, ARGV[4])"), "{name}");
            assert_eq!(text.matches("not same_generation()").count(), 2, "{name}");
        }
    }
}

/// Only a script that names keys it is not given (the window sweep, and every
/// delete, through `end_windows`) has the namespace's tag in `G` and the layout's
/// `tube_key_of`; the others do not pay for them.
#[test]
fn only_scripts_naming_keys_they_are_not_given_read_the_tag() {
    let prelude = format!(
        "{}\n{}",
        lua_key_layout(),
        include_str!("../lua/prelude.lua")
    );
    let tag = "tag = string.match(KEYS[b], '^%b{}')";
    for body in [
        include_str!("../lua/windows.lua"),
        include_str!("../lua/delete.lua"),
    ] {
        let (text, ns) = compose(&prelude, body, false, true);
        assert!(text.contains(tag) && text.contains("local function tube_key_of"));
        assert!(ns.contains(&NsKey::Keywin), "{ns:?}");
    }
    let (text, _) = compose(&prelude, include_str!("../lua/reserve.lua"), false, true);
    assert!(
        !text.contains(tag) && !text.contains("tube_key_of"),
        "{text}"
    );
}

/// A tick's job is made by the very Lua that makes a put's (`put_new` in the
/// prelude), so a scheduled job cannot drift from a put's counters, tube list and
/// wake-ups; a skip makes none.
#[test]
fn puts_and_ticks_share_one_put() {
    let prelude = format!(
        "{}\n{}",
        lua_key_layout(),
        include_str!("../lua/prelude.lua")
    );
    for body in [
        include_str!("../lua/put.lua"),
        include_str!("../lua/put_key.lua"),
        include_str!("../lua/fire.lua"),
    ] {
        assert!(body.contains("put_new(T, G, tube, origin"), "{body}");
        assert!(!body.contains("HINCRBY"), "a copy of the put in {body}");
        let (text, _) = compose(&prelude, body, false, true);
        assert_eq!(text.matches("local function put_new(").count(), 1);
    }
    let (skip, _) = compose(&prelude, include_str!("../lua/skip.lua"), false, true);
    assert!(!skip.contains("put_new"), "{skip}");
    assert!(ACKNOWLEDGED.contains(&"fire") && ACKNOWLEDGED.contains(&"skip"));
}

/// Every script compiles: the shared mode's (as composed: layout, shaken prelude,
/// body), leader mode's batch script, and the lock-out and upgrade scripts are
/// loaded into a real redis-server (SCRIPT LOAD compiles them), so a syntax error,
/// or a prelude reformatted so that shake cuts it wrongly, fails here rather than
/// at a client's first command. (The lease's scripts: `cluster/lease.rs`.)
#[test]
fn every_script_loads_into_redis() {
    let scripts = Scripts::new();
    let mut all: Vec<(&str, String)> = Vec::new();
    for (name, text, script) in scripts.every() {
        assert_eq!(
            redis::Script::new(&text).get_hash(),
            script.get_hash(),
            "{name}"
        );
        all.push((name, text));
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/shared/lua");
    let files = std::fs::read_dir(dir).unwrap().count();
    assert_eq!(
        all.len(),
        files - 1,
        "every lua/ file but the prelude is a script"
    );
    for (name, text) in [
        ("leader batch", crate::redis::fenced_script::SCRIPT),
        ("lock out", crate::redis::lockout::LOCK_OUT),
        ("lift a lock-out", crate::redis::lockout::LIFT),
        ("schema-1 rename", crate::redis::schema::RENAME),
    ] {
        all.push((name, text.to_string()));
    }
    let all: Vec<(&str, &str)> = all.iter().map(|(n, t)| (*n, t.as_str())).collect();
    crate::redis::testing::assert_scripts_load("the Lua scripts' load test", &all);
}
