//! The flags' tests: beanstalkd's forms, the settings they make, what is refused.

use std::time::Duration;

use super::*;
use crate::persist::binlog::{DEFAULT_FILE_SIZE, Fsync};
use crate::protocol::codec::MAX_JOB_SIZE_LIMIT;
use crate::server::ListenAddr;

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("redstalk").chain(args.iter().copied())).unwrap()
}

#[test]
fn bundled_and_attached_forms() {
    let c = parse(&["-VV", "-p1234", "-l127.0.0.1", "-z", "10"]);
    assert_eq!(c.verbose, 2);
    let s = c.validate().unwrap();
    assert_eq!(s.listen, ListenAddr::Tcp("127.0.0.1:1234".parse().unwrap()));
    assert_eq!(s.max_job_size, 10);
    let c = parse(&["-Vp", "99"]);
    assert_eq!((c.verbose, c.port), (1, Some(99)));
}

#[test]
fn the_api_is_advertised_where_the_http_listener_is_reached() {
    let http = |args: &[&str]| {
        let mut all = vec!["--redis", "redis://127.0.0.1:1/0"];
        all.extend_from_slice(args);
        parse(&all)
            .validate()
            .unwrap()
            .redis
            .unwrap()
            .http_advertise
    };
    assert_eq!(http(&[]), "");
    assert_eq!(http(&["--metrics", "127.0.0.1:9100"]), "127.0.0.1:9100");
    assert_eq!(
        http(&["--metrics", "0.0.0.0:9100", "--advertise", "10.0.0.5:11300"]),
        "10.0.0.5:9100"
    );
    assert_eq!(
        http(&[
            "--http",
            "0.0.0.0:9100",
            "--http-advertise",
            "api.example:80"
        ]),
        "api.example:80"
    );
}

#[test]
fn unix_socket_and_clamp() {
    let s = parse(&["-l", "unix:/tmp/x.sock", "-z", "9999999999"])
        .validate()
        .unwrap();
    assert_eq!(s.listen, ListenAddr::Unix("/tmp/x.sock".into()));
    assert_eq!(s.max_job_size, MAX_JOB_SIZE_LIMIT);
    assert_eq!(s.warnings.len(), 1);
}

/// Each value checked against beanstalkd 1.12 (`beanstalkd -z VALUE`, then the
/// `max-job-size` of `stats`, or exit 5).
#[test]
fn z_is_read_as_the_reference_reads_it() {
    let max = |args: &[&str]| parse(args).validate().unwrap().max_job_size;
    for (z, want) in [
        ("-5", MAX_JOB_SIZE_LIMIT),
        (" -3", MAX_JOB_SIZE_LIMIT),
        ("18446744073709551616", MAX_JOB_SIZE_LIMIT),
        ("-18446744073709551616", MAX_JOB_SIZE_LIMIT),
        ("4294967297", MAX_JOB_SIZE_LIMIT),
        ("-18446744073709551615", 1),
        ("-0", 0),
        ("+7", 7),
        (" 9", 9),
        ("\t7", 7),
        ("00012", 12),
    ] {
        assert_eq!(max(&["-z", z]), want, "-z {z:?}");
    }
    assert_eq!(max(&["-z-5"]), MAX_JOB_SIZE_LIMIT);
    let clamped = parse(&["-z", "-5"]).validate().unwrap();
    assert_eq!(clamped.warnings.len(), 1, "{:?}", clamped.warnings);
    for z in ["5x", "5 ", "", "-", "+", "+-5", "0x10"] {
        let args = ["redstalk", "-z", z];
        assert!(Cli::try_parse_from(args).is_err(), "-z {z:?} accepted");
    }
}

#[test]
fn a_prefix_that_cannot_be_a_hash_tag_is_a_usage_error() {
    let validate = |prefix: &str| {
        parse(&["--redis", "redis://127.0.0.1:1/0", "--redis-prefix", prefix]).validate()
    };
    for bad in ["", "{orders}", "a}b"] {
        let err = validate(bad).expect_err(bad);
        assert!(matches!(err, CliError::Prefix(_)), "{bad}: {err}");
        println!("--redis-prefix {bad:?}: {err}");
    }
    assert!(validate("orders:eu").is_ok());
    // Without --redis the prefix names nothing.
    assert!(parse(&["--redis-prefix", ""]).validate().is_ok());
}

#[test]
fn leader_mode_starts_on_a_unix_socket_without_advertise() {
    let s = parse(&["-l", "unix:/tmp/x.sock", "--redis", "redis://127.0.0.1:1/0"])
        .validate()
        .unwrap();
    assert_eq!(s.redis.unwrap().advertise, "");
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(s.warnings[0].contains("--advertise"));
}

#[test]
fn help_says_how_often_the_lease_is_renewed() {
    use clap::CommandFactory;
    let help = Cli::command().render_help().to_string();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    // keep_lease renews every quarter of the lease.
    assert!(help.contains("every quarter of it"), "{help}");
    assert!(!help.contains("third"), "{help}");
}

#[test]
fn the_http_address_is_host_and_port_under_either_name() {
    let s = parse(&["--http", "127.0.0.1:9100"]).validate().unwrap();
    assert_eq!(s.http, Some("127.0.0.1:9100".parse().unwrap()));
    let s = parse(&["--metrics", "127.0.0.1:9101"]).validate().unwrap();
    assert_eq!(s.http, Some("127.0.0.1:9101".parse().unwrap()), "the alias");
    // REDSTALK_METRICS, as clap reads it, when --http is not given.
    let s = parse(&["--metrics-env", "127.0.0.1:9102"])
        .validate()
        .unwrap();
    assert_eq!(s.http, Some("127.0.0.1:9102".parse().unwrap()));
    let s = parse(&[
        "--metrics-env",
        "127.0.0.1:9102",
        "--http",
        "127.0.0.1:9103",
    ])
    .validate()
    .unwrap();
    assert_eq!(
        s.http,
        Some("127.0.0.1:9103".parse().unwrap()),
        "--http first"
    );
    assert!(parse(&[]).validate().unwrap().http.is_none());
    let err = parse(&["--http", "9100"]).validate().unwrap_err();
    assert!(err.to_string().contains("--http") && err.to_string().contains("HOST:PORT"));
}

#[test]
fn redis_refuses_jobs_larger_than_it_can_carry() {
    let redis = ["--redis", "redis://127.0.0.1:1/0", "--redis-mode", "shared"];
    let at = REDIS_MAX_JOB_SIZE.to_string();
    let above = (REDIS_MAX_JOB_SIZE + 1).to_string();
    assert!(
        parse(&[&redis[..], &["-z", &at]].concat())
            .validate()
            .is_ok()
    );
    let err = parse(&[&redis[..], &["-z", &above]].concat())
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains(&at), "{err}");
    assert!(
        parse(&["-z", &above]).validate().is_ok(),
        "memory: no limit"
    );
}

#[test]
fn listeners_need_their_files_and_replace_the_default_only_when_alone() {
    let s = parse(&[]).validate().unwrap();
    assert!(s.default_listener && s.listeners.is_empty() && s.tls.is_none());
    let tls = ["--listen", "127.0.0.1:11301,tls,auth=token"];
    let err = parse(&tls).validate().unwrap_err();
    assert!(err.to_string().contains("--tls-cert"), "{err}");
    let files = ["--tls-cert", "c.pem", "--tls-key", "k.pem"];
    let s = parse(&[&tls[..], &files[..]].concat()).validate().unwrap();
    assert!(!s.default_listener, "--listen alone replaces -l/-p");
    assert!(s.tls.is_some_and(|t| t.client_ca.is_none()));
    let s = parse(&[&tls[..], &files[..], &["-p", "11300"]].concat())
        .validate()
        .unwrap();
    assert!(s.default_listener, "-p keeps it beside --listen");
    let cert = ["--listen", "127.0.0.1:11302,auth=cert"];
    let err = parse(&[&cert[..], &files[..]].concat())
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains("--tls-client-ca"), "{err}");
    // Leader mode advertises the listener instances relay to.
    let s = parse(&[
        "--listen",
        "10.0.0.5:11310,auth=relay",
        "--redis",
        "redis://127.0.0.1:1/0",
    ])
    .validate()
    .unwrap();
    assert_eq!(s.redis.unwrap().advertise, "10.0.0.5:11310");
}

#[test]
fn binlog_flags_keep_beanstalkds_meaning() {
    let b = |args: &[&str]| parse(args).validate().unwrap().binlog.unwrap();
    let c = b(&["-b", "/var/lib/beanstalkd"]);
    assert_eq!(c.dir, PathBuf::from("/var/lib/beanstalkd"));
    assert_eq!(c.fsync, Fsync::Every(Duration::from_millis(50)));
    assert_eq!(c.file_size, DEFAULT_FILE_SIZE);
    assert_eq!(b(&["-b", "d", "-f", "0"]).fsync, Fsync::Always);
    assert_eq!(
        b(&["-b", "d", "-f", "200"]).fsync,
        Fsync::Every(Duration::from_millis(200))
    );
    assert_eq!(b(&["-bd", "-F"]).fsync, Fsync::Never);
    assert_eq!(b(&["-b", "d", "-s", "1000"]).file_size, 1000);
    let without = parse(&["-F"]).validate().unwrap();
    assert!(without.binlog.is_none());
    assert_eq!(without.warnings.len(), 1);
    let err = parse(&["-b", "d", "--redis", "redis://127.0.0.1:1/0"])
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains("--redis"), "{err}");
}

#[test]
fn retention_is_off_unless_asked_and_reads_units() {
    let off = parse(&[]).validate().unwrap().retention;
    assert!(!off.is_on());
    let on = parse(&["--retain", "24h", "--retain-bytes", "8M", "--retain-bodies"])
        .validate()
        .unwrap()
        .retention;
    assert_eq!(on.keep_ms, 86_400_000);
    assert_eq!(on.max_bytes, 8 << 20);
    assert_eq!(on.max_jobs, 100_000);
    assert!(on.bodies && on.is_on());
    assert_eq!(parse(&["--retain", "90"]).retain, 90_000);
    assert_eq!(parse(&["--retain", "7d"]).retain, 7 * 86_400_000);
    for bad in ["x", "5w", "-1s", "99999999999999999999d"] {
        assert!(
            Cli::try_parse_from(["redstalk", "--retain", bad]).is_err(),
            "{bad}"
        );
    }
    assert!(Cli::try_parse_from(["redstalk", "--retain-bytes", "1T"]).is_err());
}
