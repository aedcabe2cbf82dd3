//! The Redis behind the server under test (`--redis-info HOST:PORT`): `INFO` spoken in
//! RESP over a plain TCP connection, for Redis' `used_memory` (drain's memory figures)
//! and its `commandstats` (how many commands the measured phase cost, by name).
//!
//! Redis counts every command it executes, the ones a Lua script runs (`redis.call`)
//! and the ones queued in a `MULTI` included, and counts `EVALSHA`, `MULTI` and `EXEC`
//! themselves too: the figure is Redis' work, not round trips.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The text of `INFO <section>` from the Redis at `addr` (`host:port`).
async fn info(addr: &str, section: &str) -> Result<String> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to Redis at {addr}"))?;
    let mut stream = BufReader::new(stream);
    let request = format!("*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len());
    stream
        .get_mut()
        .write_all(request.as_bytes())
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
    text.truncate(len);
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// `used_memory` of the Redis at `addr`, in bytes.
pub async fn used_memory(addr: &str) -> Result<u64> {
    info_field(&info(addr, "memory").await?, "used_memory")
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

/// Calls per command name (`get`, `evalsha`, `client|setname`) in an
/// `INFO commandstats` text: lines `cmdstat_<name>:calls=<n>,usec=...`.
fn parse_commandstats(info: &str) -> Result<BTreeMap<String, u64>> {
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest
            .split_once(':')
            .with_context(|| format!("malformed commandstats line {line:?}"))?;
        let n = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no calls= in commandstats line {line:?}"))?;
        calls.insert(name.to_string(), n);
    }
    Ok(calls)
}

async fn command_calls(addr: &str) -> Result<BTreeMap<String, u64>> {
    parse_commandstats(&info(addr, "commandstats").await?)
}

/// `INFO commandstats` at the start of the measured phase.
#[derive(Debug)]
pub struct CommandMeter {
    addr: String,
    start: BTreeMap<String, u64>,
}

impl CommandMeter {
    /// Read the command counts of the Redis at `addr` now.
    pub async fn start(addr: &str) -> Result<CommandMeter> {
        Ok(CommandMeter {
            addr: addr.to_string(),
            start: command_calls(addr).await?,
        })
    }

    /// The commands Redis ran since [`CommandMeter::start`], without the `INFO` that
    /// took the starting reading (Redis counts a command once it has run, so the closing
    /// `INFO` is not in its own reply).
    pub async fn stop(self) -> Result<RedisCommands> {
        let end = command_calls(&self.addr).await?;
        let mut by_command = BTreeMap::new();
        for (name, n) in end {
            let mut delta = n.saturating_sub(self.start.get(&name).copied().unwrap_or(0));
            if name == "info" {
                delta = delta.saturating_sub(1);
            }
            if delta > 0 {
                by_command.insert(name, delta);
            }
        }
        Ok(RedisCommands {
            addr: self.addr,
            by_command,
        })
    }
}

/// The commands a Redis ran during the measured phase.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RedisCommands {
    pub addr: String,
    /// Calls per command name, only names called at least once.
    pub by_command: BTreeMap<String, u64>,
}

impl RedisCommands {
    pub fn total(&self) -> u64 {
        self.by_command.values().sum()
    }

    /// The largest counts first, as `name count` pairs.
    pub fn busiest(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self
            .by_command
            .iter()
            .map(|(k, &n)| (k.as_str(), n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }

    /// As JSON: the total, the total per op, and the calls of each command.
    pub fn json(&self, ops: u64) -> Value {
        let per_op = |n: u64| (ops > 0).then(|| n as f64 / ops as f64);
        json!({
            "addr": self.addr,
            "total": self.total(),
            "per_op": per_op(self.total()),
            "by_command": self.by_command,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_fields() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_field(info, "used_memory").unwrap(), 1_048_576);
        assert!(info_field(info, "nope").is_err());
    }

    #[test]
    fn parses_commandstats() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=12,usec=300,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setname:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n";
        let c = parse_commandstats(info).unwrap();
        assert_eq!(c.get("evalsha"), Some(&12));
        assert_eq!(c.get("client|setname"), Some(&1));
        assert!(parse_commandstats("cmdstat_get:usec=3\r\n").is_err());
    }

    #[test]
    fn busiest_first() {
        let r = RedisCommands {
            addr: "x".into(),
            by_command: [
                ("del".to_string(), 3),
                ("exec".to_string(), 7),
                ("multi".into(), 7),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(r.total(), 17);
        assert_eq!(r.busiest(), vec![("exec", 7), ("multi", 7), ("del", 3)]);
        assert_eq!(r.json(10)["per_op"], 1.7);
        assert_eq!(r.json(10)["by_command"]["exec"], 7);
    }
}
