//! Memory figures of the server under test: its resident set (from `/proc/PID/status`)
//! and, for the Redis engine, Redis' own `used_memory` (from `INFO memory`, spoken in
//! RESP over a plain TCP connection).

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Resident set size of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status_kb(&status, "VmRSS:").with_context(|| format!("no VmRSS in {path}"))
}

fn status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// `used_memory` of the Redis at `addr` (`host:port`), in bytes.
pub async fn redis_used_memory(addr: &str) -> Result<u64> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to Redis at {addr}"))?;
    let mut stream = BufReader::new(stream);
    stream
        .get_mut()
        .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
        .await
        .context("sending INFO to Redis")?;
    let mut head = String::new();
    stream
        .read_line(&mut head)
        .await
        .context("reading INFO reply")?;
    let len: usize = head
        .strip_prefix('$')
        .and_then(|n| n.trim_end().parse().ok())
        .with_context(|| format!("unexpected INFO reply {head:?}"))?;
    let mut text = vec![0; len + 2];
    stream
        .read_exact(&mut text)
        .await
        .context("reading INFO body")?;
    let text = String::from_utf8_lossy(&text);
    info_field(&text, "used_memory")
}

fn info_field(info: &str, key: &str) -> Result<u64> {
    for line in info.lines() {
        if let Some((k, v)) = line.split_once(':')
            && k == key
        {
            return v.trim().parse().with_context(|| format!("{key} is {v:?}"));
        }
    }
    bail!("Redis INFO has no {key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_info() {
        let status = "Name:\tx\nVmHWM:\t  9000 kB\nVmRSS:\t    5120 kB\n";
        assert_eq!(status_kb(status, "VmRSS:"), Some(5120 * 1024));
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_field(info, "used_memory").unwrap(), 1_048_576);
        assert!(info_field(info, "nope").is_err());
    }

    #[test]
    fn own_rss_is_readable() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
    }
}
