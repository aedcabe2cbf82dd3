//! TLS to Redis and credentials, against real processes: a private redis-server with a
//! TLS port and a certificate the test makes with the `openssl` command line (a CA of
//! its own, a server certificate for 127.0.0.1, a client certificate), and redstalk
//! on `rediss://`.
//!
//! What the tests prove:
//! - `put_reserve_delete_over_rediss` — in both Redis modes, with `--redis-tls-ca`
//!   naming the test's CA and a client certificate (`--redis-tls-cert`/`--redis-tls-key`,
//!   which this Redis requires), jobs go in, out and away over TLS.
//! - `a_server_certificate_from_another_ca_is_refused_clearly` — with another CA,
//!   redstalk refuses to start, and says the certificate is not trusted.
//! - `a_ca_certificate_used_as_the_servers_own_is_refused_with_what_to_do` — a Redis
//!   whose certificate is the (self-signed) CA itself: redstalk refuses to start and
//!   says so, and to issue a server certificate from that CA (rustls alone said
//!   `invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))`).
//! - `credentials_never_show_and_a_wrong_password_says_so` — a wrong password stops the
//!   start with Redis' own WRONGPASS, not "did not answer"; with Redis down, the message
//!   says so; neither shows the password.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::certs::{Certs, tls_args};
use support::client::Client;
use support::redis::{RedisServer, redis_server_path};
use support::sentinel::wait_for;
use support::{ServerKind, ServerProc, free_port, is_listening_by, serial};

/// A redis-server that also listens with TLS (client certificates required); its TLS
/// port.
fn tls_redis(certs: &Certs) -> (RedisServer, u16) {
    tls_redis_presenting(certs, "server")
}

/// [`tls_redis`] presenting the certificate `<name>.pem` (with `<name>.key`).
fn tls_redis_presenting(certs: &Certs, name: &str) -> (RedisServer, u16) {
    let port = free_port();
    let (p, cert, key, ca) = (
        port.to_string(),
        certs.path(&format!("{name}.pem")),
        certs.path(&format!("{name}.key")),
        certs.path("ca.pem"),
    );
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &p,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "yes",
    ])
    .expect("start redis-server with TLS");
    wait_for("Redis listens with TLS", Duration::from_secs(5), || {
        is_listening_by(redis.pid().unwrap(), port)
    });
    (redis, port)
}

/// Whether redis-server is here (a loud skip otherwise, unless required).
fn redis_available() -> bool {
    if redis_server_path().is_some() {
        return true;
    }
    assert!(!support::oracle_required(), "redis-server is required");
    eprintln!("!!! redis-server is not installed: the TLS tests are SKIPPED.");
    false
}

/// Certificates, a Redis with TLS, and its `rediss://` URL; `None` (after a notice)
/// without redis-server.
fn tls_setup() -> Option<(Certs, RedisServer, String)> {
    if !redis_available() {
        return None;
    }
    let certs = Certs::make();
    let (redis, port) = tls_redis(&certs);
    Some((certs, redis, format!("rediss://127.0.0.1:{port}/0")))
}

#[test]
fn put_reserve_delete_over_rediss() {
    let _serial = serial();
    let Some((certs, _redis, url)) = tls_setup() else {
        return;
    };
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let mut srv = ServerProc::start_on_redis_as(
            kind,
            &url,
            &format!("tls-{}", kind.name()),
            &tls_args(&certs, "ca.pem"),
        )
        .unwrap_or_else(|e| panic!("start redstalk ({}) over TLS: {e}", kind.name()));
        let log = srv.capture_stderr();
        let mut c = Client::connect(srv.addr, "client");
        let mut id = None;
        for _ in 0..100 {
            // Leader mode serves once it holds the lease.
            let r = c.put_reply(1, 0, 60, b"over tls");
            if r.word() == "INSERTED" {
                id = r.id();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let id = id.unwrap_or_else(|| panic!("no put over TLS: {}", log.tail()));
        let (got, body) = c.reserve();
        assert_eq!((got, body.as_slice()), (id, &b"over tls"[..]));
        c.expect(&format!("delete {id}"), "DELETED");
        c.expect(&format!("peek {id}"), "NOT_FOUND");
        println!(
            "tls: {} mode: put, reserve, delete over rediss:// with a client certificate",
            kind.name()
        );
    }
}

#[test]
fn a_server_certificate_from_another_ca_is_refused_clearly() {
    let _serial = serial();
    let Some((certs, _redis, url)) = tls_setup() else {
        return;
    };
    let err = ServerProc::start_on_redis_as(
        ServerKind::Redis,
        &url,
        "tls-wrong-ca",
        &tls_args(&certs, "other-ca.pem"),
    )
    .err()
    .expect("redstalk started although the server's certificate is not trusted");
    println!("tls: with another CA: {err}");
    let lower = err.to_lowercase();
    assert!(
        lower.contains("certificate")
            && (lower.contains("unknownissuer") || lower.contains("issuer")),
        "the refusal does not say the certificate is not trusted: {err}"
    );
}

#[test]
fn a_ca_certificate_used_as_the_servers_own_is_refused_with_what_to_do() {
    let _serial = serial();
    if !redis_available() {
        return;
    }
    let certs = Certs::make();
    let (_redis, port) = tls_redis_presenting(&certs, "ca");
    let url = format!("rediss://127.0.0.1:{port}/0");
    let err = ServerProc::start_on_redis_as(
        ServerKind::Redis,
        &url,
        "tls-ca-as-server",
        &tls_args(&certs, "ca.pem"),
    )
    .err()
    .expect("redstalk started although Redis presents a CA certificate as its own");
    println!("tls: a CA certificate as the server's own: {err}");
    assert!(
        err.contains("presents a CA certificate")
            && err.contains("issue a server certificate from that CA"),
        "the refusal does not say what is wrong and what to do: {err}"
    );
}

#[test]
fn credentials_never_show_and_a_wrong_password_says_so() {
    let _serial = serial();
    let Some(redis) =
        support::redis::private_redis(&["--requirepass", "the-right-one"], "credential tests")
    else {
        return;
    };
    let secret = "hunter2-secret";
    let url = format!("redis://:{secret}@127.0.0.1:{}/0", redis.port);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let err = ServerProc::start_on_redis_as(kind, &url, "creds", &[])
            .err()
            .expect("redstalk started with a wrong password");
        println!("credentials: {} mode, wrong password: {err}", kind.name());
        assert!(!err.contains(secret), "the password is shown: {err}");
        assert!(
            err.contains("WRONGPASS") || err.contains("NOAUTH"),
            "a wrong password does not say so: {err}"
        );
        assert!(!err.contains("did not answer"), "{err}");
    }
    let closed = support::ClosedPort::new();
    let down = format!("redis://app:{secret}@{}/0", closed.addr);
    let err = ServerProc::start_on_redis_as(ServerKind::Redis, &down, "creds", &[])
        .err()
        .expect("redstalk started without Redis");
    println!("credentials: Redis down: {err}");
    assert!(!err.contains(secret), "the password is shown: {err}");
    assert!(
        err.contains("***@127.0.0.1"),
        "the address is not named: {err}"
    );
}
