//! The protocol over real sockets, against the server in this process
//! ([`super::testing::TestServer`]): pipelining, a reserve released by another
//! connection's put, a hang-up while waiting, quit, and shutdown. Real time (sockets and
//! tokio's paused clock do not mix); every read is bounded, so a wrong server fails a
//! test instead of hanging it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::testing::TestServer;

const READ_LIMIT: Duration = Duration::from_secs(5);

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.addr()).await.unwrap()
}

/// Read exactly `expected.len()` bytes and compare.
async fn expect(stream: &mut TcpStream, expected: &str) {
    let mut buf = vec![0; expected.len()];
    tokio::time::timeout(READ_LIMIT, stream.read_exact(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("no {expected:?} within {READ_LIMIT:?}"))
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&buf), expected);
}

/// The connection ends (a read sees end of file) with nothing more said.
async fn expect_eof(stream: &mut TcpStream) {
    let mut buf = [0; 64];
    let n = tokio::time::timeout(READ_LIMIT, stream.read(&mut buf))
        .await
        .expect("the connection stayed open")
        .unwrap_or(0);
    assert_eq!(n, 0, "got {:?}", String::from_utf8_lossy(&buf[..n]));
}

/// Nothing arrives for a while.
async fn expect_silence(stream: &mut TcpStream) {
    let mut buf = [0; 64];
    let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
    if let Ok(r) = read {
        let n = r.unwrap();
        panic!("unexpected {:?}", String::from_utf8_lossy(&buf[..n]));
    }
}

/// Wait until the server counts `n` waiting reserves.
async fn until_waiting(server: &TestServer, n: u64) {
    let engine = server.engine();
    tokio::time::timeout(READ_LIMIT, async {
        loop {
            let now = engine.clock.now();
            if engine.server_stats(now).await.unwrap().current_waiting == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {n} waiting"));
}

#[tokio::test]
async fn pipelined_put_and_reserve_in_one_write() {
    let server = TestServer::start().await.unwrap();
    let mut c = connect(&server).await;
    c.write_all(b"put 0 0 10 5\r\nhello\r\nreserve\r\ndelete 1\r\nreserve-with-timeout 0\r\n")
        .await
        .unwrap();
    expect(
        &mut c,
        "INSERTED 1\r\nRESERVED 1 5\r\nhello\r\nDELETED\r\nTIMED_OUT\r\n",
    )
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_reserve_is_released_by_a_put_from_another_connection() {
    let server = TestServer::start().await.unwrap();
    let mut worker = connect(&server).await;
    let mut producer = connect(&server).await;
    // The command pipelined after the reserve waits its turn.
    worker
        .write_all(b"reserve\r\nlist-tube-used\r\n")
        .await
        .unwrap();
    until_waiting(&server, 1).await;
    expect_silence(&mut worker).await;
    producer
        .write_all(b"put 0 0 10 3\r\njob\r\n")
        .await
        .unwrap();
    expect(&mut producer, "INSERTED 1\r\n").await;
    expect(&mut worker, "RESERVED 1 3\r\njob\r\nUSING default\r\n").await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_hang_up_while_waiting_answers_timed_out_and_returns_nothing() {
    let server = TestServer::start().await.unwrap();
    let mut worker = connect(&server).await;
    let mut producer = connect(&server).await;
    worker.write_all(b"reserve\r\n").await.unwrap();
    until_waiting(&server, 1).await;
    worker.shutdown().await.unwrap();
    expect(&mut worker, "TIMED_OUT\r\n").await;
    expect_eof(&mut worker).await;
    until_waiting(&server, 0).await;
    producer
        .write_all(b"put 0 0 10 1\r\nx\r\nstats-job 1\r\n")
        .await
        .unwrap();
    expect(&mut producer, "INSERTED 1\r\nOK ").await;
    let mut rest = [0; 64];
    let n = producer.read(&mut rest).await.unwrap();
    assert!(
        String::from_utf8_lossy(&rest[..n]).contains("state: ready"),
        "the job went to a connection that hung up"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn quit_closes_the_connection_and_ignores_what_follows() {
    let server = TestServer::start().await.unwrap();
    let mut c = connect(&server).await;
    c.write_all(b"put 0 0 10 1\r\nx\r\nquit\r\nput 0 0 10 1\r\ny\r\n")
        .await
        .unwrap();
    expect(&mut c, "INSERTED 1\r\n").await;
    expect_eof(&mut c).await;
    let mut other = connect(&server).await;
    other.write_all(b"peek 2\r\npeek-ready\r\n").await.unwrap();
    expect(&mut other, "NOT_FOUND\r\nFOUND 1 1\r\nx\r\n").await;
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_connections_and_stops_listening() {
    let server = TestServer::start().await.unwrap();
    let addr = server.addr();
    let mut c = connect(&server).await;
    c.write_all(b"reserve\r\n").await.unwrap();
    until_waiting(&server, 1).await;
    server.shutdown().await;
    expect_eof(&mut c).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

/// Outside leader mode a relay greeting is nothing but an unknown command, as it is
/// to beanstalkd.
#[tokio::test]
async fn a_relay_greeting_is_an_unknown_command_outside_leader_mode() {
    let server = TestServer::start().await.unwrap();
    let mut c = connect(&server).await;
    c.write_all(&super::hello::greeting("ab12", false, false))
        .await
        .unwrap();
    c.write_all(b"list-tube-used\r\n").await.unwrap();
    expect(&mut c, "UNKNOWN_COMMAND\r\nUSING default\r\n").await;
    server.shutdown().await;
}

/// Only running out of a resource pauses accepting; an error about one connection
/// (reset while queued, refused by a firewall hook) lets the next be accepted at once.
#[test]
fn accepting_pauses_only_when_a_resource_runs_out() {
    use std::io::Error;
    for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
        assert!(super::accept_backoff(&Error::from_raw_os_error(errno)).is_some());
    }
    for errno in [libc::ECONNABORTED, libc::EPERM, libc::EPROTO, libc::EINVAL] {
        assert_eq!(
            super::accept_backoff(&Error::from_raw_os_error(errno)),
            None
        );
    }
    assert_eq!(
        super::accept_backoff(&Error::other("setsockopt failed")),
        None
    );
}
