//! Unit tests of the Redis connections: a MOVED reply's address, as an error or as a
//! value; a start's attempts against a silent Redis and against a closed port.

use super::*;
use crate::redis::error::error_reply;

#[test]
fn a_moved_reply_names_its_address_as_an_error_or_as_a_value() {
    let e = error_reply("MOVED 12682 127.0.0.1:7002");
    assert_eq!(
        moved_address(Code::of(&e), e.detail()),
        Some("127.0.0.1:7002")
    );
    let Ok(Value::ServerError(v)) = redis::parse_redis_value(b"-MOVED 1 [::1]:7003\r\n") else {
        panic!("an error reply parses to a value");
    };
    assert_eq!(
        moved_address(Some(Code::of_reply(&v)), v.details()),
        Some("[::1]:7003")
    );
    let ask = error_reply("ASK 12682 127.0.0.1:7002");
    assert_eq!(moved_address(Code::of(&ask), ask.detail()), None);
    assert_eq!(moved_address(Some(Code::Moved), None), None);
}

fn connector_to(addr: std::net::SocketAddr) -> Connector {
    Connector::new(&format!("redis://{addr}"), &TlsFiles::default(), None, "t")
        .expect("a plain URL")
}

/// A Redis that takes connections and never answers: a start tries it
/// FIRST_ATTEMPTS times (each attempt a connection of its own), then says it timed out.
#[tokio::test]
async fn a_start_tries_a_silent_redis_again_before_it_gives_up() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
            println!("connection {} taken, never answered", held.len());
        }
    });
    let started = Instant::now();
    let err = connector_to(addr)
        .managed("test", RESPONSE_TIMEOUT)
        .await
        .err()
        .expect("a silent Redis cannot be connected to");
    println!("gave up after {:?}: {err}", started.elapsed());
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= CONNECT_TIMEOUT * FIRST_ATTEMPTS);
    held.abort();
}

/// Nothing listens: the start fails on its first attempt, without waiting.
#[tokio::test]
async fn a_start_against_a_closed_port_fails_on_its_first_attempt() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let started = Instant::now();
    let err = connector_to(addr)
        .managed("test", RESPONSE_TIMEOUT)
        .await
        .err()
        .expect("nothing listens");
    println!("failed after {:?}: {err}", started.elapsed());
    assert!(!err.is_timeout() && err.is_connection_refusal(), "{err}");
}
