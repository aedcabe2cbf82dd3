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
/// many: the reserve reads the generation (with the small-bodies mark), the due index
/// and the bury counter (`attach` knows every state); a put also the counters, the tube list and the set of
/// bodies written ahead (a large put's body leaves it), which the reserve never reads.
#[test]
fn a_call_passes_the_namespace_keys_its_script_reads() {
    let scripts = Scripts::new();
    let reserve = &scripts.reserve;
    assert_eq!(
        reserve.ns,
        [NsKey::Seq, NsKey::Due, NsKey::Generation, NsKey::Small]
    );
    let put = &scripts.put;
    assert!(put.ns.contains(&NsKey::Tubepos) && put.ns.contains(&NsKey::Stats));
    assert!(put.ns.contains(&NsKey::Ahead));
    assert_eq!(
        scripts.ahead.ns,
        [NsKey::Generation, NsKey::Ahead, NsKey::Small]
    );
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
        let text = compose(&prelude, body, false, true).text();
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
            assert!(
                text.contains("held_by(j, ARGV[4])") || text.contains("held_by(j, a[4])"),
                "{name}"
            );
            assert_eq!(text.matches("not same_generation()").count(), 2, "{name}");
        }
    }
}

/// Only a script that names keys of a tube it is not given (the window sweep, and
/// every delete, through `end_windows`) has the layout's `tube_key_of`; a script that
/// names a job (each is a key of its own, never among a call's KEYS: a reserve cannot
/// know the job it takes) has the namespace's tag in `G` and the layout's
/// `job_key_of`; a script that names neither pays for neither.
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
        let composed = compose(&prelude, body, false, true);
        let text = composed.text();
        assert!(text.contains(tag) && text.contains("local function tube_key_of"));
        let ns = &composed.ns;
        assert!(ns.contains(&NsKey::Keywin), "{ns:?}");
    }
    let text = compose(&prelude, include_str!("../lua/reserve.lua"), false, true).text();
    assert!(
        text.contains(tag)
            && text.contains("local function job_key_of")
            && !text.contains("tube_key_of"),
        "{text}"
    );
    for body in [
        include_str!("../lua/tube_ref.lua"),
        include_str!("../lua/pause.lua"),
    ] {
        let text = compose(&prelude, body, false, true).text();
        assert!(
            !text.contains(tag) && !text.contains("job_key_of") && !text.contains("tube_key_of"),
            "{text}"
        );
    }
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
        include_str!("../lua/many.lua"),
    ] {
        // put.lua and many.lua make theirs in the prelude's `put_op`.
        assert!(
            body.contains("put_new(T, G, tube, origin") || body.contains("put_op("),
            "{body}"
        );
        // many.lua writes the total its puts counted (`PUTS_UNCOUNTED`) in one HINCRBY.
        let own = body.replace(
            "redis.call('HINCRBY', G.stats, 'total_jobs', PUTS_UNCOUNTED)",
            "",
        );
        assert!(!own.contains("HINCRBY"), "a copy of the put in {body}");
        let text = compose(&prelude, body, false, true).text();
        assert_eq!(text.matches("local function put_new(").count(), 1);
        // Its definition, and the one call.
        assert_eq!(text.matches("put_new(T, G, tube, origin").count(), 2);
    }
    let skip = compose(&prelude, include_str!("../lua/skip.lua"), false, true).text();
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
    let mut libraries: Vec<(&str, String)> = Vec::new();
    for (name, text, callee) in scripts.every() {
        assert_eq!(
            redis::Script::new(&text).get_hash(),
            callee.script().get_hash(),
            "{name}"
        );
        all.push((name, text));
        libraries.push((name, callee.library().1.to_string()));
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
        ("schema-2 conversion", crate::redis::schema::CONVERT),
    ] {
        all.push((name, text.to_string()));
    }
    let all: Vec<(&str, &str)> = all.iter().map(|(n, t)| (*n, t.as_str())).collect();
    crate::redis::testing::assert_scripts_load("the Lua scripts' load test", &all);
    let libraries: Vec<(&str, &str)> = libraries.iter().map(|(n, t)| (*n, t.as_str())).collect();
    crate::redis::testing::assert_libraries_load("the Lua libraries' load test", &libraries);
}

/// A library's name (and its function's) is its script's and the hash of its text:
/// two builds' libraries of one script live side by side, and one build's are
/// distinct.
#[test]
fn libraries_are_named_by_script_and_text() {
    let scripts = Scripts::new();
    let mut names: Vec<String> = Vec::new();
    for (name, _, callee) in scripts.every() {
        let (function, library) = callee.library();
        assert!(
            function.starts_with(&format!("redstalk_{name}_")),
            "{function}"
        );
        assert!(
            library.starts_with(&format!("#!lua name={function}\n")),
            "{name}"
        );
        assert!(
            library.contains(&format!("function_name = '{function}'")),
            "{name}"
        );
        names.push(function.to_string());
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), scripts.every().len());
    // Another text, another name.
    let of = |body| Composed {
        prelude: "local GEN = 1\n".to_string(),
        body,
        read_only: false,
        ns: Vec::new(),
    };
    let a = Callee::new("x", &of("return 1"));
    let b = Callee::new("x", &of("return 2"));
    assert_ne!(a.library().0, b.library().0);
}

/// Nothing a call leaves behind reaches the next when the scripts are Functions (whose
/// top-level locals live as long as the library): every top-level name of the layout
/// and the prelude that any script assigns anew is call state, which each call sets
/// at its entry (library.rs), and each call-state name is the prelude's.
#[test]
fn every_name_a_call_changes_is_call_state() {
    let prelude = format!(
        "{}\n{}",
        lua_key_layout(),
        include_str!("../lua/prelude.lua")
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/shared/lua");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.ends_with("prelude.lua") {
            sources.push(std::fs::read_to_string(&path).unwrap());
        }
    }
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let changed = super::super::shake::assigned_anew(&prelude, &sources);
    println!("assigned by calls: {changed:?}");
    for name in &changed {
        assert!(
            library::CALL_STATE.contains(&name.as_str()),
            "{name} is changed by a call"
        );
    }
    assert!(changed.len() >= 4, "only {changed:?} found");
    // The others (G, GEN) are made of the call's KEYS and ARGV: a library that made
    // them at load would not load (every_script_loads_into_redis).
    for name in library::CALL_STATE {
        assert!(prelude.contains(&format!("\nlocal {name} = ")), "{name}");
    }
}

/// `lua` run on `c` as [`Runner::call`] lays a call out: the namespace keys it reads,
/// each of `tubes`' keys, the generation `generation`, then `args`.
fn run_on<T: redis::FromRedisValue, R>(
    c: &mut redis::Connection,
    lua: &Lua<R>,
    keys: &Keys,
    tubes: &[&str],
    generation: &str,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut call = lua.callee.script().prepare_invoke();
    for &k in &lua.ns {
        call.key(keys.ns(k));
    }
    for tube in tubes {
        let group = keys.tube(tube);
        for &k in TubeKey::ALL {
            call.key(group.get(k));
        }
    }
    call.arg(generation);
    for a in args {
        call.arg(*a);
    }
    call.invoke(c)
}

/// A job is one hash (`{P}:j:<id>`: t, m, b) and nothing else names it: a put writes it
/// whole; a move rewrites its tube and leaves the body; a script given a tube the job
/// is not of (an id looked up before a move) leaves it alone; a delete removes the key.
/// A large body written ahead is completed by its put, which takes it out of the
/// `ahead` set; the timer's sweep removes a stale one whose job was never made, and
/// only takes a made job's out of the set.
#[test]
fn a_job_is_one_hash() {
    let Some(redis) = crate::redis::testing::PrivateRedis::start("the job hash test") else {
        return;
    };
    let mut c = redis.connection().expect("connect");
    let s = Scripts::new();
    let keys = Keys::new("p");
    let g = "gen-1";
    let origin = "me\n{p}:wake";
    redis::cmd("SET")
        .arg(keys.ns(NsKey::Generation))
        .arg(g)
        .exec(&mut c)
        .unwrap();
    let fields = |c: &mut redis::Connection, id: u64| -> Vec<(String, Vec<u8>)> {
        let mut f: Vec<(String, Vec<u8>)> =
            redis::cmd("HGETALL").arg(keys.job(id)).query(c).unwrap();
        f.sort();
        f
    };
    let exists = |c: &mut redis::Connection, key: &str| -> bool {
        redis::cmd("EXISTS").arg(key).query::<u64>(c).unwrap() == 1
    };

    // A put: one hash, its tube, meta and body.
    let put = |c: &mut redis::Connection, body: &str, ahead: Option<&str>| -> u64 {
        let mut args = vec!["default", origin, "5", "0", "60000", body, ""];
        args.extend(ahead);
        run_on(c, &s.put, &keys, &["default"], g, &args).unwrap()
    };
    let id = put(&mut c, "hello", None);
    let f = fields(&mut c, id);
    let names: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["b", "m", "t"]);
    assert_eq!((&f[0].1[..], &f[2].1[..]), (&b"hello"[..], &b"default"[..]));
    // An empty body is a body: the job is not damaged.
    let empty = put(&mut c, "", None);
    assert_eq!(fields(&mut c, empty)[0], ("b".to_string(), Vec::new()));
    let ready = keys.tube("default").get(TubeKey::Ready).to_string();
    assert!(exists(&mut c, &ready));

    // A move: the tube rewritten, the body where it was, the sets moved.
    let moved: redis::Value = run_on(
        &mut c,
        &s.edit,
        &keys,
        &["default", "other"],
        g,
        &[
            origin,
            "default",
            &id.to_string(),
            "move",
            "other",
            ",ready,delayed,buried,",
            "",
        ],
    )
    .unwrap();
    assert!(format!("{moved:?}").contains("done"), "{moved:?}");
    let f = fields(&mut c, id);
    assert_eq!((&f[0].1[..], &f[2].1[..]), (&b"hello"[..], &b"other"[..]));
    let member = format!("{id:020}");
    let in_other: Option<f64> = redis::cmd("ZSCORE")
        .arg(keys.tube("other").get(TubeKey::Ready))
        .arg(&member)
        .query(&mut c)
        .unwrap();
    assert_eq!(in_other, Some(5.0));

    // A delete made for the tube it left finds nothing there, and changes nothing.
    let delete = |c: &mut redis::Connection, tube: &str, id: u64| -> u64 {
        let args = [tube, origin, &id.to_string(), "", "10", ""];
        run_on(c, &s.delete, &keys, &[tube], g, &args).unwrap()
    };
    assert_eq!(delete(&mut c, "default", id), 0);
    assert_eq!(fields(&mut c, id).len(), 3);
    assert_eq!(delete(&mut c, "other", id), 1);
    assert!(!exists(&mut c, &keys.job(id)));
    assert!(!exists(&mut c, keys.tube("other").get(TubeKey::Ready)));

    // A large body written ahead (as large.rs writes it), then its put.
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
    let now_ms = secs * 1000;
    let ahead = keys.ns(NsKey::Ahead).to_string();
    let write_ahead = |c: &mut redis::Connection, id: u64, at_ms: u64| {
        redis::pipe()
            .atomic()
            .hset(keys.job(id), "b", "large")
            .zadd(&ahead, id, at_ms)
            .exec(c)
            .unwrap();
    };
    write_ahead(&mut c, 50, now_ms);
    assert_eq!(put(&mut c, "", Some("50")), 50);
    let f = fields(&mut c, 50);
    assert_eq!((&f[0].1[..], &f[2].1[..]), (&b"large"[..], &b"default"[..]));
    let left: Option<f64> = redis::cmd("ZSCORE")
        .arg(&ahead)
        .arg(50)
        .query(&mut c)
        .unwrap();
    assert_eq!(left, None, "the put takes its id out of the set");

    // The sweep: a stale body without a job goes, a made job only leaves the set, a
    // fresh body stays.
    write_ahead(&mut c, 60, now_ms - 120_000);
    redis::cmd("ZADD")
        .arg(&ahead)
        .arg(now_ms - 120_000)
        .arg(50)
        .exec(&mut c)
        .unwrap();
    write_ahead(&mut c, 70, now_ms);
    let swept: Vec<u64> = run_on(&mut c, &s.ahead, &keys, &[], g, &["60000", "100"]).unwrap();
    assert_eq!(swept, [2, 1]);
    assert!(!exists(&mut c, &keys.job(60)));
    assert_eq!(fields(&mut c, 50).len(), 3);
    assert_eq!(fields(&mut c, 70).len(), 1);
    let still: Vec<String> = redis::cmd("ZRANGE")
        .arg(&ahead)
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(still, ["70"]);
}

/// Every script whose calls are combined runs in `many.lua` by its name, through the
/// one function its own script calls (so the two cannot drift), and is acknowledged:
/// a `many` waits for replicas as each of its calls would.
#[test]
fn combined_scripts_run_in_many_as_alone() {
    let many = include_str!("../lua/many.lua");
    for (name, body) in [
        ("put", include_str!("../lua/put.lua")),
        ("reserve", include_str!("../lua/reserve.lua")),
        ("delete", include_str!("../lua/delete.lua")),
        ("delete_job", include_str!("../lua/delete_job.lua")),
    ] {
        assert!(combine::COMBINED.contains(&name), "{name}");
        assert!(ACKNOWLEDGED.contains(&name), "{name}");
        let call = format!("{name}_op(");
        assert!(body.contains(&format!("return {call}")), "{body}");
        assert!(many.contains(&format!("name == '{name}'")), "{name}");
        assert!(many.contains(&call), "{name}");
    }
    assert_eq!(combine::COMBINED.len(), 4);
}
