//! Who may talk to the queue (docs/SECURITY.md), against the real binary with real TLS
//! (certificates the test makes with openssl): token and certificate listeners, what
//! every hostile first line gets, every command's refusal under a role, reloads on
//! SIGHUP (a broken file keeps the old roles), and the bound on pending connections
//! under a flood of slow handshakes while authenticated clients work (figures printed).
//!
//! Each test starts its own redstalk: a plain listener (open, as beanstalkd's: the
//! tests' view of `stats`) beside the listeners under test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::certs::Certs;
use support::client::Client;
use support::tls::{Sock, client_config};
use support::{Log, ServerKind, ServerProc, free_port};

const ROLES: &str = r#"
[roles.producer]
put = ["emails", "reports.*"]

[roles.worker]
reserve = ["emails"]
read = ["emails"]

[roles.nothing]
api = "read"

[roles.orders]
put = ["orders"]
reserve = ["orders"]

[[token]]
name = "billing"
token = "tok-billing-0123456789"
role = "producer"

[[token]]
name = "idle"
token = "tok-nothing-0123456789"
role = "nothing"

[[token]]
name = "order-desk"
token = "tok-orders-0123456789"
role = "orders"

[[token]]
name = "mailer"
token = "tok-worker-0123456789"
role = "worker"

[[cert]]
name = "worker-1.example.com"
role = "worker"
"#;

const ADMIN: &str = "tok-admin-0123456789";

/// A redstalk with a token listener, a certificate listener and a token-or-cert one
/// beside its plain one, and the files they use.
struct Secured {
    server: ServerProc,
    log: Log,
    certs: Arc<Certs>,
    roles: std::path::PathBuf,
    token: SocketAddr,
    cert: SocketAddr,
    either: SocketAddr,
    /// The HTTP listener (`/metrics`).
    http: SocketAddr,
}

impl Secured {
    fn start(extra: &[&str]) -> Secured {
        let certs = Arc::new(Certs::make());
        certs.issue("worker", "worker-cn", "DNS:worker-1.example.com", "ca", 2);
        certs.issue("stranger", "stranger", "DNS:nobody.example.com", "ca", 2);
        certs.issue("expired", "worker-1.example.com", "", "ca", -1);
        certs.issue("foreign", "worker-1.example.com", "", "other-ca", 2);
        let roles = std::path::PathBuf::from(certs.path("roles.toml"));
        std::fs::write(&roles, ROLES).unwrap();
        let (token, cert, either, http) = (free_port(), free_port(), free_port(), free_port());
        let mut args: Vec<String> = vec![
            "--listen".into(),
            format!("127.0.0.1:{token},tls,auth=token"),
            "--listen".into(),
            format!("127.0.0.1:{cert},auth=cert"),
            "--listen".into(),
            format!("127.0.0.1:{either},auth=token-or-cert"),
            "--tls-cert".into(),
            certs.path("server.pem"),
            "--tls-key".into(),
            certs.path("server.key"),
            "--tls-client-ca".into(),
            certs.path("ca.pem"),
            "--roles".into(),
            roles.display().to_string(),
            "--admin-token".into(),
            ADMIN.into(),
            "--http".into(),
            format!("127.0.0.1:{http}"),
            "-V".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = ServerProc::start(ServerKind::Memory, &args)
            .unwrap()
            .unwrap();
        let log = server.capture_stderr();
        let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        Secured {
            server,
            log,
            certs,
            roles,
            token: at(token),
            cert: at(cert),
            either: at(either),
            http: at(http),
        }
    }

    fn config(&self, cert: Option<&str>) -> Arc<rustls::ClientConfig> {
        let files = cert.map(|c| {
            (
                self.certs.path(&format!("{c}.pem")),
                self.certs.path(&format!("{c}.key")),
            )
        });
        client_config(
            &self.certs.path("ca.pem"),
            files.as_ref().map(|(p, k)| (p.as_str(), k.as_str())),
        )
    }

    /// A TLS client of `addr` presenting `cert` (a name given to [`Certs::issue`]).
    fn tls(&self, addr: SocketAddr, cert: Option<&str>, name: &str) -> Client {
        let sock = Sock::tls(addr, &self.config(cert)).unwrap();
        Client::from_sock(sock, name).unwrap()
    }

    /// A client of the token listener, authenticated with `token`.
    fn authed(&self, token: &str, name: &str) -> Client {
        let mut c = self.tls(self.token, None, name);
        c.expect(&format!("auth {token}"), "AUTHENTICATED");
        c
    }

    /// The text of `/metrics`.
    fn metrics(&self) -> String {
        ureq::get(&format!("http://{}/metrics", self.http))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap()
    }

    /// A client of the plain listener (may do everything).
    fn plain(&self) -> Client {
        Client::connect(self.server.addr, "plain")
    }
}

/// `c` sent `bytes`: the server answers `want` and closes.
fn answered_then_closed(c: &mut Client, bytes: &[u8], want: &str) {
    c.send(bytes);
    let line = c.try_line(Duration::from_secs(10)).unwrap();
    assert_eq!(line, want, "{}", c.name);
    let end = c.try_line(Duration::from_secs(10));
    assert!(
        end.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{}: not closed after {want}: {end:?}",
        c.name
    );
}

#[test]
fn a_token_listener_lets_in_only_auth_with_a_known_token() {
    let s = Secured::start(&[]);
    // Anything but auth: UNAUTHORIZED and a close; nothing reaches the engine.
    for (name, first) in [
        ("a command", &b"stats\r\n"[..]),
        ("a put", b"put 0 0 60 5\r\nhello\r\n"),
        ("an unknown line", b"no-such-command\r\n"),
        ("an empty line", b"\r\n"),
        ("a wrong token", b"auth wr0ng-token-77aa\r\n"),
        ("an empty token", b"auth \r\n"),
        ("a token with a space", b"auth tok-billing 0123456789\r\n"),
    ] {
        let mut c = s.tls(s.token, None, name);
        answered_then_closed(&mut c, first, "UNAUTHORIZED");
    }
    // A 1 MiB auth line: refused at its 224th byte, the rest drained, the answer
    // delivered.
    let mut c = s.tls(s.token, None, "a 1 MiB auth line");
    let mut line = b"auth ".to_vec();
    line.resize(1 << 20, b'x');
    line.extend_from_slice(b"\r\n");
    answered_then_closed(&mut c, &line, "UNAUTHORIZED");
    // quit before auth: closed without a word.
    let mut c = s.tls(s.token, None, "quit");
    c.send(b"quit\r\n");
    let end = c.try_line(Duration::from_secs(10));
    assert!(end.is_err_and(|e| e.kind() == std::io::ErrorKind::UnexpectedEof));

    // The right token; commands pipelined behind auth are served.
    let mut c = s.tls(s.token, None, "billing");
    c.send(b"auth tok-billing-0123456789\r\nuse emails\r\nput 0 0 60 2\r\nhi\r\n");
    assert_eq!(c.reply().line, "AUTHENTICATED");
    assert_eq!(c.reply().line, "USING emails");
    assert_eq!(
        c.reply().line,
        "INSERTED 1",
        "no job id went to a refused put"
    );
    // auth twice: another known token takes its identity...
    c.expect("auth tok-worker-0123456789", "AUTHENTICATED");
    c.expect("watch emails", "WATCHING 2");
    c.expect("ignore default", "WATCHING 1");
    assert_eq!(c.reserve().0, 1);
    // ...and a wrong one closes, giving the reservation back.
    answered_then_closed(&mut c, b"auth nope-nope\r\n", "UNAUTHORIZED");

    // Unauthenticated connections were never connections of the engine.
    let mut p = s.plain();
    let stats = p.dict("stats");
    let get = |k: &str| stats.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(get("cmd-put"), "1", "the refused put was not counted");
    assert_eq!(get("cmd-stats"), "1", "only this stats");
    assert_eq!(
        get("total-connections"),
        "2",
        "billing, and this one: {stats:?}"
    );
    assert_eq!(get("current-jobs-ready"), "1", "given back at the close");
    // auth where none is configured: beanstalkd's answer.
    p.expect("auth tok-billing-0123456789", "UNKNOWN_COMMAND");
    let mut w = s.tls(s.cert, Some("worker"), "cert listener");
    w.expect("auth tok-billing-0123456789", "UNKNOWN_COMMAND");
    let log = s.log.text();
    for secret in ["tok-billing", "tok-worker", "wr0ng", "nope-nope", ADMIN] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
    assert!(log.contains("identity=billing role=producer"), "{log}");
    assert!(log.contains("reason=\"wrong_token\""), "{log}");
}

#[test]
fn a_wrong_guess_counts_against_the_address_and_the_right_token_waits_too() {
    let s = Secured::start(&["--admin-login-limit", "3"]);
    for i in 0..3 {
        let mut c = s.tls(s.token, None, &format!("guess {i}"));
        answered_then_closed(&mut c, b"auth guess-guess\r\n", "UNAUTHORIZED");
    }
    let mut c = s.tls(s.token, None, "the right one, limited");
    answered_then_closed(&mut c, b"auth tok-billing-0123456789\r\n", "UNAUTHORIZED");
    s.log
        .wait_for("reason=\"limited\"", Duration::from_secs(10));
}

#[test]
fn certificates_are_checked_and_name_the_identity() {
    let s = Secured::start(&[]);
    // A certificate the roles file names: its role.
    let mut w = s.tls(s.cert, Some("worker"), "worker");
    w.expect("use other", "FORBIDDEN");
    w.expect("watch emails", "WATCHING 2");
    w.expect("reserve-with-timeout 0", "FORBIDDEN");
    w.expect("ignore default", "WATCHING 1");
    w.expect("reserve-with-timeout 0", "TIMED_OUT");
    // The same on the token-or-cert listener, and without one, the token.
    let mut e = s.tls(s.either, Some("worker"), "either, certificate");
    e.expect("stats", "FORBIDDEN");
    let mut e = s.tls(s.either, None, "either, token");
    e.expect("auth tok-billing-0123456789", "AUTHENTICATED");
    e.expect("use emails", "USING emails");
    let mut e = s.tls(s.either, None, "either, nothing");
    answered_then_closed(&mut e, b"stats\r\n", "UNAUTHORIZED");
    // A certificate of this CA whose names the roles file does not know.
    let mut x = s.tls(s.cert, Some("stranger"), "stranger");
    let line = x.try_line(Duration::from_secs(10));
    assert_eq!(line.unwrap(), "UNAUTHORIZED");
    // Refused in the handshake: no certificate, an expired one, another CA's, and
    // plain text to a TLS listener.
    for (name, cert) in [
        ("none", None),
        ("expired", Some("expired")),
        ("foreign", Some("foreign")),
    ] {
        let failed = Sock::tls(s.cert, &s.config(cert)).and_then(|mut sock| {
            // TLS 1.3: the server's verdict on the client's certificate arrives after
            // the client's side of the handshake; the first read sees it.
            sock.write_all(b"stats\r\n")?;
            let mut buf = [0u8; 64];
            sock.set_read_timeout(Some(Duration::from_secs(10)))?;
            match sock.read(&mut buf)? {
                0 => Err(std::io::Error::other("closed")),
                n => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
            }
        });
        assert!(failed.is_err(), "{name}: got {failed:?}");
        println!("client certificate {name}: {}", failed.unwrap_err());
    }
    let mut raw = TcpStream::connect(s.cert).unwrap();
    raw.write_all(b"stats\r\n").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut got = Vec::new();
    let _ = raw.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("OK"),
        "plain text to TLS: {got:?}"
    );
    // TLS to the plain listener: beanstalkd's own answer to bytes that are no command;
    // the client's handshake fails, and the listener serves the next client.
    let hello = Sock::tls(s.server.addr, &s.config(None));
    assert!(
        hello.is_err(),
        "a TLS handshake with a plain listener succeeded"
    );
    s.plain().expect("list-tube-used", "USING default");
    // What /metrics says of all this.
    let text = s.metrics();
    let access: Vec<&str> = text
        .lines()
        .filter(|l| {
            [
                "redstalk_listener",
                "redstalk_pending",
                "redstalk_tls",
                "redstalk_auth",
                "redstalk_refusals",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    println!("{}", access.join("\n"));
    for want in [
        "redstalk_tls_handshake_failures_total{reason=\"expired_cert\"} 1",
        "redstalk_tls_handshake_failures_total{reason=\"unknown_ca\"} 1",
        "redstalk_tls_handshake_failures_total{reason=\"no_client_cert\"} 1",
        "redstalk_auth_failures_total{reason=\"unknown_cert\"} 1",
        "redstalk_auth_failures_total{reason=\"no_auth\"} 1",
        "redstalk_refusals_total{role=\"worker\"} 3",
        "redstalk_pending_connections 0",
    ] {
        assert!(
            access.contains(&want),
            "no {want:?} in\n{}",
            access.join("\n")
        );
    }
    let cert_label = format!(
        "redstalk_listener_connections_total{{listener=\"{}\"}}",
        s.cert
    );
    assert!(
        access.iter().any(|l| l.starts_with(&cert_label)),
        "{cert_label}"
    );
}

/// Every command, and what a role with no right on the beanstalk port gets for it.
#[test]
fn every_command_is_refused_to_a_role_without_the_right_and_changes_nothing() {
    let s = Secured::start(&[]);
    let mut p = s.plain();
    p.use_tube("emails");
    let id = p.put(0, 0, 60, b"body");
    let before = p.dict("stats");
    let mut n = s.authed("tok-nothing-0123456789", "nothing");
    let id = id.to_string();
    let refused = [
        "use emails".to_string(),
        "put 0 0 60 1\r\nx".into(),
        format!("put 0 0 60 70000\r\n{}", "x".repeat(70_000)),
        "watch emails".into(),
        "reserve".into(),
        "reserve-with-timeout 0".into(),
        format!("reserve-job {id}"),
        format!("delete {id}"),
        format!("peek {id}"),
        format!("stats-job {id}"),
        "peek-ready".into(),
        "peek-delayed".into(),
        "peek-buried".into(),
        "kick 10".into(),
        format!("kick-job {id}"),
        "stats-tube emails".into(),
        "stats".into(),
        "list-tubes".into(),
        "pause-tube emails 10".into(),
        "pause-tube -bad 10".into(),
    ];
    for cmd in &refused {
        n.expect(cmd.trim_end_matches("\r\n"), "FORBIDDEN");
    }
    // Its own work, and what reaches nothing, is answered as beanstalkd answers it.
    for (cmd, want) in [
        ("ignore default", "NOT_IGNORED"),
        ("list-tube-used", "USING default"),
        (&format!("release {id} 0 0") as &str, "NOT_FOUND"),
        (&format!("bury {id} 0") as &str, "NOT_FOUND"),
        (&format!("touch {id}") as &str, "NOT_FOUND"),
        ("no-such-command", "UNKNOWN_COMMAND"),
        ("stats-tube", "BAD_FORMAT"),
    ] {
        n.expect(cmd, want);
    }
    assert_eq!(n.list("list-tubes-watched"), vec!["default"]);
    let after = p.dict("stats");
    // What the refused commands would have changed, had they run.
    let allowed_ran = [
        "cmd-stats",
        "cmd-ignore",
        "cmd-list-tube-used",
        "cmd-list-tubes-watched",
        "cmd-release",
        "cmd-bury",
        "cmd-touch",
        "cmd-stats-tube",
    ];
    let changed: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .filter(|(b, _)| {
            (b.0.starts_with("cmd-") && !allowed_ran.contains(&b.0.as_str()))
                || b.0.starts_with("current-jobs")
                || b.0 == "total-jobs"
                || b.0 == "current-tubes"
        })
        .collect();
    assert!(
        changed.is_empty(),
        "refused commands changed figures: {changed:?}"
    );
    assert_eq!(p.cmd(&format!("peek {id}")).line, format!("FOUND {id} 4"));
    let next = id.parse::<u64>().unwrap() + 1;
    p.expect("put 0 0 60 1\r\ny", &format!("INSERTED {next}"));
    println!(
        "{} commands refused, nothing changed, the connection still served",
        refused.len()
    );
}

#[test]
fn a_producer_and_a_worker_do_their_own_work_only() {
    let s = Secured::start(&[]);
    let mut prod = s.authed("tok-billing-0123456789", "producer");
    prod.expect("put 0 0 60 1\r\nx", "FORBIDDEN");
    prod.use_tube("reports.daily");
    let report = prod.put(0, 0, 60, b"report");
    prod.use_tube("emails");
    let mail = prod.put(0, 0, 60, b"mail");
    prod.expect("peek-ready", "FORBIDDEN");
    assert_eq!(
        prod.cmd("stats-tube emails").word(),
        "OK",
        "a tube of its own work"
    );
    prod.expect("stats-tube default", "FORBIDDEN");
    prod.expect("reserve-with-timeout 0", "FORBIDDEN");

    let mut w = s.tls(s.cert, Some("worker"), "worker");
    w.watch_only("emails");
    assert_eq!(
        w.cmd(&format!("peek {mail}")).line,
        format!("FOUND {mail} 4")
    );
    w.expect(&format!("peek {report}"), "FORBIDDEN");
    w.expect(&format!("stats-job {report}"), "FORBIDDEN");
    w.expect(&format!("delete {report}"), "FORBIDDEN");
    w.expect(&format!("peek {}", report + 100), "NOT_FOUND");
    w.expect("peek-ready", "FORBIDDEN");
    w.expect("use emails", "FORBIDDEN");
    let (got, body) = w.reserve();
    assert_eq!((got, body.as_slice()), (mail, &b"mail"[..]));
    w.expect(&format!("release {mail} 0 0"), "RELEASED");
    w.expect(&format!("delete {mail}"), "FORBIDDEN");
    let (again, _) = w.reserve();
    w.expect(&format!("delete {again}"), "DELETED");
}

/// A job let go without a reply naming it (here `bury-key`) no longer counts as held
/// once the connection checks what it holds, at 1,024 ids: a `delete` of it, which a
/// role without `manage` may send only for its own reservations, is refused.
#[test]
fn jobs_let_go_by_key_stop_counting_as_held() {
    let s = Secured::start(&[]);
    let mut p = s.plain();
    p.use_tube("orders");
    let n = 1024;
    let ids: Vec<u64> = (0..n)
        .map(|i| {
            let put = format!("put 5 0 60 1 idp:o{i}\r\nx\r\n");
            p.try_call(put.as_bytes(), Duration::from_secs(30))
                .unwrap()
                .id()
                .expect("INSERTED")
        })
        .collect();
    let mut w = s.authed("tok-orders-0123456789", "order-desk");
    w.use_tube("orders");
    w.watch_only("orders");
    for (i, &want) in ids.iter().enumerate().take(n - 1) {
        let (id, _) = w.reserve();
        assert_eq!(id, want);
        w.expect(&format!("bury-key o{i} 5"), "BURIED");
    }
    // The 1,024th reservation makes the check.
    let (last, _) = w.reserve();
    assert_eq!(last, ids[n - 1]);
    w.expect(&format!("delete {}", ids[0]), "FORBIDDEN");
    assert_eq!(
        p.cmd(&format!("stats-job {}", ids[0])).word(),
        "OK",
        "still there"
    );
    w.expect(&format!("delete {last}"), "DELETED");
}

#[test]
fn sighup_reloads_roles_without_dropping_a_connection_and_a_broken_file_keeps_them() {
    let s = Secured::start(&[]);
    let mut prod = s.authed("tok-billing-0123456789", "producer");
    prod.use_tube("emails");
    prod.put(0, 0, 60, b"one");
    let mut idle = s.authed("tok-nothing-0123456789", "idle");
    // The producer loses emails; the idle token leaves the file.
    let reloaded = ROLES
        .replace(r#"put = ["emails", "reports.*"]"#, r#"put = ["reports.*"]"#)
        .replace("tok-nothing-0123456789", "tok-other-0123456789");
    std::fs::write(&s.roles, reloaded).unwrap();
    s.server.signal("HUP").unwrap();
    wait_for_log(&s.log, "roles file reloaded");
    prod.expect("put 0 0 60 3\r\ntwo", "FORBIDDEN");
    prod.use_tube("reports.x");
    prod.put(0, 0, 60, b"three");
    answered_then_closed(&mut idle, b"list-tube-used\r\n", "UNAUTHORIZED");
    // A broken file: the roles in force stay, the log says why.
    std::fs::write(&s.roles, "[roles.producer\nput = [").unwrap();
    s.server.signal("HUP").unwrap();
    wait_for_log(&s.log, "roles file not reloaded");
    prod.put(0, 0, 60, b"four");
    prod.expect("use emails", "FORBIDDEN");
    assert!(s.server.addr.port() > 0);
    let log = s.log.text();
    let line = log
        .lines()
        .find(|l| l.contains("roles file not reloaded"))
        .unwrap();
    println!("{line}");
    assert!(line.contains("line"), "the reason names the line: {line}");
    // New connections take the roles in force too.
    let mut again = s.authed("tok-billing-0123456789", "producer again");
    again.expect("use emails", "FORBIDDEN");

    // The TLS files: a key that cannot be read keeps the certificate in force...
    let key = s.certs.path("server.key");
    let good = std::fs::read(&key).unwrap();
    std::fs::write(&key, "not a key").unwrap();
    s.server.signal("HUP").unwrap();
    wait_for_log(&s.log, "TLS certificates not reloaded");
    let mut during = s.authed("tok-billing-0123456789", "during a broken key");
    during.expect("list-tube-used", "USING default");
    // ...and the good one back reloads; no connection was dropped throughout.
    std::fs::write(&key, good).unwrap();
    s.server.signal("HUP").unwrap();
    // The third such line: the first two came with the reloads of the roles above.
    let start = Instant::now();
    while s.log.text().matches("TLS certificates reloaded").count() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            s.log.tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    s.authed("tok-billing-0123456789", "after")
        .expect("list-tube-used", "USING default");
    for (c, name) in [
        (&mut prod, "producer"),
        (&mut again, "again"),
        (&mut during, "during"),
    ] {
        assert_eq!(
            c.cmd("list-tube-used").word(),
            "USING",
            "{name} was dropped"
        );
    }
    let text = s.metrics();
    for want in [
        "redstalk_reloads_total{what=\"roles\",outcome=\"ok\"} 1",
        "redstalk_reloads_total{what=\"roles\",outcome=\"failed\"} 3",
        "redstalk_reloads_total{what=\"tls\",outcome=\"failed\"} 1",
    ] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
}

/// Wait (up to 10 s) until the server's log says `what`.
fn wait_for_log(log: &Log, what: &str) {
    log.wait_for(what, Duration::from_secs(10));
}

/// One leader-mode instance with a token listener and a listener for instances (its
/// `--advertise`), the roles file and the instance secret of `Secured`.
fn leader_instance(
    redis: &support::redis::RedisServer,
    s: &Secured,
    secret: &str,
) -> (ServerProc, Log, SocketAddr, SocketAddr) {
    let (token, relay) = (free_port(), free_port());
    let args: Vec<String> = vec![
        "--listen".into(),
        format!("127.0.0.1:{token},tls,auth=token"),
        "--listen".into(),
        format!("127.0.0.1:{relay},auth=relay"),
        "--advertise".into(),
        format!("127.0.0.1:{relay}"),
        "--tls-cert".into(),
        s.certs.path("server.pem"),
        "--tls-key".into(),
        s.certs.path("server.key"),
        "--roles".into(),
        s.roles.display().to_string(),
        "--relay-secret-file".into(),
        secret.into(),
        "--admin-token".into(),
        ADMIN.into(),
        "--redis-lease".into(),
        support::TEST_LEASE_MS.into(),
        "-V".into(),
    ];
    let mut p =
        ServerProc::start_on_redis_as(ServerKind::Leader, &redis.url(), "auth", &args).unwrap();
    let log = p.capture_stderr();
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    (p, log, at(token), at(relay))
}

#[test]
fn a_standby_relays_the_identity_and_the_leader_enforces_its_role() {
    let Ok(redis) = support::redis::RedisServer::start() else {
        assert!(!support::oracle_required(), "redis-server is required");
        return;
    };
    let s = Secured::start(&[]);
    let secret = s.certs.path("relay-secret");
    std::fs::write(&secret, "relay-secret-0123456789abcdef\n").unwrap();
    let (a, a_log, a_token, a_relay) = leader_instance(&redis, &s, &secret);
    support::wait_served(a.addr, Duration::from_secs(20), &a_log);
    let (b, b_log, b_token, _) = leader_instance(&redis, &s, &secret);
    support::wait_served(b.addr, Duration::from_secs(20), &b_log);
    assert!(a_log.text().contains("leading") || !b_log.text().contains("leading"));

    // Through the standby: TLS and the token end there, the leader enforces the role.
    let sock = Sock::tls(b_token, &s.config(None)).unwrap();
    let mut prod = Client::from_sock(sock, "producer via the standby").unwrap();
    prod.expect("auth tok-billing-0123456789", "AUTHENTICATED");
    prod.use_tube("emails");
    let id = prod.put(0, 0, 60, b"relayed");
    prod.expect("use default", "FORBIDDEN");
    prod.expect("stats", "FORBIDDEN");
    prod.expect("reserve-with-timeout 0", "FORBIDDEN");
    // It reached the leader: the job is there, and the leader's log names the client.
    let sock = Sock::tls(a_token, &s.config(None)).unwrap();
    let mut admin = Client::from_sock(sock, "admin on the leader").unwrap();
    admin.expect(&format!("auth {ADMIN}"), "AUTHENTICATED");
    assert_eq!(
        admin.cmd(&format!("peek {id}")).line,
        format!("FOUND {id} 7")
    );
    b_log.wait_for(
        "relaying a connection to the leader",
        Duration::from_secs(10),
    );

    // A plain client speaking the relay greeting to the leader gets nothing.
    for greeting in [
        "redstalk-relay/1 hello abcd\r\nstats\r\n".to_string(),
        "redstalk-relay/1 check abcd\r\n".to_string(),
    ] {
        for addr in [a_relay, a.addr] {
            let mut raw = TcpStream::connect(addr).unwrap();
            raw.write_all(greeting.as_bytes()).unwrap();
            raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut got = Vec::new();
            let _ = raw.read_to_end(&mut got);
            assert!(got.is_empty(), "{greeting:?} to {addr}: {got:?}");
        }
    }
    // Version 2 without the secret: a nonce, then nothing for a made-up proof.
    let mut raw = TcpStream::connect(a_relay).unwrap();
    raw.write_all(b"redstalk-relay/2 hello abcd\r\n").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = [0u8; 128];
    let n = raw.read(&mut line).unwrap();
    let nonce = String::from_utf8_lossy(&line[..n]).to_string();
    assert!(nonce.starts_with("redstalk-relay/2 nonce "), "{nonce:?}");
    let forged = format!("redstalk-relay/2 proof {} -\r\nstats\r\n", "00".repeat(32));
    raw.write_all(forged.as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = raw.read_to_end(&mut got);
    assert!(got.is_empty(), "a forged proof got {got:?}");
    // A client's bytes on the listener for instances: refused.
    let mut c = Client::connect(a_relay, "client on the relay listener");
    answered_then_closed(&mut c, b"stats\r\n", "UNAUTHORIZED");
    let log = a_log.text() + &b_log.text();
    assert!(!log.contains("relay-secret-0123"), "the secret is in a log");
    assert!(!log.contains("tok-billing"), "a token is in a log");
    drop((a, b));
}

/// `clients` connections of the token listener, authenticated, each using and watching
/// a tube of its own.
fn workers(s: &Secured, clients: usize) -> Vec<Client> {
    (0..clients)
        .map(|i| {
            let mut c = s.authed(ADMIN, &format!("worker {i}"));
            c.use_tube(&format!("flood-{i}"));
            c.watch_only(&format!("flood-{i}"));
            c
        })
        .collect()
}

/// Each of `conns` runs put/reserve/delete cycles for `how_long`: jobs per second and
/// the p50 and p99 of a cycle.
fn cycles(conns: &mut [Client], how_long: Duration) -> (f64, Duration, Duration) {
    let start = Instant::now();
    let samples: Vec<Duration> = std::thread::scope(|scope| {
        let handles: Vec<_> = conns
            .iter_mut()
            .map(|c| {
                scope.spawn(move || {
                    let mut took = Vec::new();
                    while start.elapsed() < how_long {
                        let t = Instant::now();
                        c.put(0, 0, 60, b"job");
                        let (id, _) = c.reserve();
                        c.expect(&format!("delete {id}"), "DELETED");
                        took.push(t.elapsed());
                    }
                    took
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let rate = samples.len() as f64 / start.elapsed().as_secs_f64();
    let q = support::quantiles(&samples, &[0.5, 0.99]);
    (rate, q[0], q[1])
}

/// Raise this process's open files limit to its hard limit; what it is now.
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    #[allow(unsafe_code)]
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    lim.rlim_cur
}

/// 10,000 connections that open a TLS handshake and never finish it arrive while
/// authenticated clients work: at most `--max-pending` are held (the rest closed at
/// accept), and the clients keep their pace (figures printed; the assertions are
/// generous bounds, not timing).
#[test]
fn a_flood_of_slow_handshakes_does_not_starve_authenticated_clients() {
    let _serial = support::serial();
    let s = Secured::start(&["--max-pending", "1024"]);
    let flood = 10_000.min(raise_nofile().saturating_sub(2_000) as usize);
    let (clients, span) = (4, Duration::from_secs(4));
    // Connected before the flood: beyond --max-pending, new connections of the TLS
    // listeners are closed at accept until the pending ones end (as in beanstalkd-rs).
    let mut conns = workers(&s, clients);
    let (base_rate, base_p50, base_p99) = cycles(&mut conns, span);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (rate, p50, p99, opened, text) = std::thread::scope(|scope| {
        let opener = scope.spawn(|| {
            let mut held = Vec::with_capacity(flood);
            for _ in 0..flood {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                // The first bytes of a ClientHello, and nothing more.
                if let Ok(mut c) = TcpStream::connect(s.token) {
                    let _ = c.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
                    held.push(c);
                }
            }
            held
        });
        let measured = cycles(&mut conns, span);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let held = opener.join().unwrap();
        // Scraped while the flood's connections are still open.
        let text = s.metrics();
        (measured.0, measured.1, measured.2, held.len(), text)
    });
    let figure = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    let (pending, refused) = (
        figure("redstalk_pending_connections "),
        figure("redstalk_pending_refused_total "),
    );
    println!(
        "{clients} authenticated TLS clients, put/reserve/delete:\n  \
         alone:                             {base_rate:>8.0} jobs/s, p50 {base_p50:?}, p99 {base_p99:?}\n  \
         with {opened} slow handshakes arriving: {rate:>8.0} jobs/s, p50 {p50:?}, p99 {p99:?}\n  \
         pending while they were held {pending} (at most 1024), closed at accept {refused}"
    );
    assert!(pending <= 1024, "{pending} pending");
    assert!(opened < 1024 || refused > 0, "nothing refused of {opened}");
    assert!(rate > 0.0, "the clients were starved");
    assert!(p99 < Duration::from_secs(5), "p99 {p99:?}");
}

/// A large reply to a TLS client that reads late arrives whole: what TLS keeps when the
/// socket is full is flushed, not left until the next reply.
#[test]
fn a_large_reply_over_tls_to_a_slow_reader_arrives_whole() {
    let s = Secured::start(&["-z", "16777216"]);
    let body = vec![b'x'; 12 << 20];
    let mut p = s.plain();
    p.use_tube("big");
    p.put(0, 0, 60, &body);
    let mut c = s.authed(ADMIN, "slow reader");
    c.watch_only("big");
    c.send(b"reserve\r\n");
    // Let the server fill the socket's buffers and stop, before reading a byte.
    std::thread::sleep(Duration::from_secs(1));
    c.timeout = Duration::from_secs(20);
    let reply = c.reply();
    assert_eq!(reply.word(), "RESERVED");
    assert_eq!(reply.body.map(|b| b.len()), Some(body.len()));
}
