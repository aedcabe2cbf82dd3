//! Where Redis is: the `--redis` URL and the TLS and sentinel options turned into a
//! [`Target`] that names the current primary on request, and the URL as it may be
//! shown (without credentials).
//!
//! URLs: `redis://` and `rediss://` (TLS) name one server, as redis-rs reads them;
//! `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]` (and
//! `rediss+sentinel://`, TLS to the sentinels and the data nodes) name the sentinels
//! that know the primary of MASTER_NAME ([`sentinel`]). The credentials of a sentinel
//! URL are the data nodes'; the sentinels' own password is a separate option.
//! `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/0]` (and
//! `rediss+cluster://`) name seeds of a Redis Cluster: the target is the primary that
//! owns the namespace's slot ([`cluster`]). Both multi-host forms share one host-list
//! parser ([`HostList`]).
//!
//! The children: [`sentinel`] and [`cluster`], the two targets asked anew at every
//! connection; [`lineage`], the replication history a primary they name must continue;
//! [`tls`], the TLS files and certificate problems said plainly. They import from here
//! (the URL's parts, a node's client, [`TargetError`]), never from each other but for
//! [`lineage`].
//!
//! Invariant: nothing here puts the URL, a password or a key into an error message;
//! errors say which part is wrong.

pub mod cluster;
mod lineage;
pub mod sentinel;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use self::cluster::{SlotOwner, Views};
use self::sentinel::Sentinels;
use self::tls::certificates;
pub use self::tls::{CertificateProblem, TlsFiles};
use super::placement::{Placements, Topology};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, ProtocolVersion,
    RedisConnectionInfo, RedisResult, TlsCertificates,
};

/// Why the Redis options cannot be used (never quotes the URL).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("the --redis URL is not valid: {0}")]
    Url(String),
    #[error("cannot read {what} {path}: {source}")]
    File {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("--redis-tls-cert and --redis-tls-key go together: give both or neither")]
    HalfClientCert,
    #[error("TLS options were given but the --redis URL does not use TLS (rediss://)")]
    TlsWithoutTls,
    #[error(
        "--redis-sentinel-password was given with a redis+cluster:// URL: a Redis Cluster \
         has no sentinels; drop the option"
    )]
    SentinelPasswordOnCluster,
    #[error(
        "the redis+cluster:// URL names database {0}: a Redis Cluster has only database 0; \
         drop the /{0}"
    )]
    ClusterDb(String),
}

/// What the targets of one process share, so that its connectors (the schema step, the
/// store, the lease: each has its own) agree: where each namespace was found
/// ([`Placements`]: a failover they all follow counts once, a cluster primary's node
/// timeout is read once) and a Redis Cluster's last answer ([`Views`]: the connections a
/// start opens at once ask the nodes once). Made once per process, with its Redis
/// options (`RedisConfig`), which every connector is made from; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Lookups {
    placements: Arc<Placements>,
    views: Arc<Views>,
}

impl Lookups {
    /// Where this process's namespaces live (what `/metrics` shows).
    pub fn placements(&self) -> &Arc<Placements> {
        &self.placements
    }
}

/// Which server to connect to: one address, whichever the sentinels name primary, or
/// the primary that owns the namespace's slot of a Redis Cluster.
pub enum Target {
    /// One server, for the namespace `prefix` (its address is shown in `/metrics`).
    Direct {
        client: Client,
        prefix: String,
        placements: Arc<Placements>,
    },
    /// Asked anew at every connection, so a failover is followed.
    Sentinel(Sentinels),
    /// Asked anew at every connection (a MOVED reply's address first).
    Cluster(SlotOwner),
}

/// How long asking one sentinel (or cluster node), or checking the primary's role, may
/// take.
const ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// The connection settings of asking a sentinel or a node, and of checking a primary:
/// each step within [`ASK_TIMEOUT`].
fn ask_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(ASK_TIMEOUT))
        .set_response_timeout(Some(ASK_TIMEOUT))
}

impl Target {
    /// A client for the current primary; with sentinels, the one a majority of them
    /// name, once it answers ROLE as a primary.
    pub async fn primary(&self) -> RedisResult<Client> {
        match self {
            Target::Direct {
                client,
                prefix,
                placements,
            } => {
                let primary = client.get_connection_info().addr().to_string();
                placements.record(Topology::Standalone, prefix, None, &primary);
                Ok(client.clone())
            }
            Target::Sentinel(s) => s.primary().await,
            Target::Cluster(c) => c.primary().await,
        }
    }

    /// In leader mode: a cluster primary's `cluster-node-timeout` is checked against
    /// the leader `lease` as each connection verifies it (other targets have no node
    /// timeout).
    pub fn with_leader_lease(self, lease: Duration) -> Target {
        match self {
            Target::Cluster(c) => Target::Cluster(c.with_leader_lease(lease)),
            other => other,
        }
    }

    /// Whether this is a Redis Cluster's slot owner (else a standalone Redis, or one
    /// behind Sentinel, which must not be a cluster node).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// A MOVED reply named `addr` as the owner of the namespace's slot: asked first
    /// at the next connection (a hint; it must still prove itself the primary).
    pub fn moved_to(&self, addr: &str) {
        if let Target::Cluster(c) = self {
            c.moved_to(addr);
        }
    }

    /// The target of `url` with `tls` and the sentinels' password, for the namespace
    /// `prefix` (a cluster's target is the owner of its slot), sharing `lookups` with
    /// the other targets of the process.
    pub fn new(
        url: &str,
        tls: &TlsFiles,
        sentinel_password: Option<&str>,
        prefix: &str,
        lookups: &Lookups,
    ) -> Result<Target, TargetError> {
        let certs = certificates(tls)?;
        let secure = url.starts_with("rediss");
        if certs.is_some() && !secure {
            return Err(TargetError::TlsWithoutTls);
        }
        if let Some(rest) = url
            .strip_prefix("redis+cluster://")
            .or_else(|| url.strip_prefix("rediss+cluster://"))
        {
            if sentinel_password.is_some() {
                return Err(TargetError::SentinelPasswordOnCluster);
            }
            let hosts = cluster_url(rest)?;
            return Ok(Target::Cluster(SlotOwner::new(
                hosts, secure, certs, prefix, lookups,
            )));
        }
        if let Some(rest) = url
            .strip_prefix("redis+sentinel://")
            .or_else(|| url.strip_prefix("rediss+sentinel://"))
        {
            let parsed = SentinelUrl::parse(rest)?;
            return parsed.client(secure, certs, sentinel_password, prefix, lookups);
        }
        let info = url
            .into_connection_info()
            .map_err(|e| TargetError::Url(e.kind_text()))?;
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let client = client(info, certs.as_ref()).map_err(|e| TargetError::Url(e.kind_text()))?;
        Ok(Target::Direct {
            client,
            prefix: prefix.to_string(),
            placements: lookups.placements.clone(),
        })
    }
}

/// The refusals a `redis+cluster://` URL can meet before any connection: a sentinel
/// password beside it, a database other than 0, a malformed host list (checked with
/// the other options, so they exit as a usage error).
pub fn check_cluster_url(url: &str, sentinel_password: bool) -> Result<(), TargetError> {
    let Some(rest) = url
        .strip_prefix("redis+cluster://")
        .or_else(|| url.strip_prefix("rediss+cluster://"))
    else {
        return Ok(());
    };
    if sentinel_password {
        return Err(TargetError::SentinelPasswordOnCluster);
    }
    cluster_url(rest).map(|_| ())
}

/// An error's kind and description, without details that could quote the input.
trait KindText {
    fn kind_text(&self) -> String;
}

impl KindText for redis::RedisError {
    fn kind_text(&self) -> String {
        format!(
            "redis-rs refused it ({:?}); expected redis://[USER:PASSWORD@]HOST[:PORT][/DB], \
             rediss://..., redis+sentinel://[USER:PASSWORD@]HOST:PORT[,...]/MASTER_NAME[/DB] \
             or redis+cluster://[USER:PASSWORD@]HOST:PORT[,...]",
            self.kind()
        )
    }
}

/// The part of a sentinel or cluster URL before its path: optional credentials and a
/// comma-separated list of `HOST:PORT`.
#[derive(Debug, PartialEq)]
struct HostList {
    pub username: Option<String>,
    pub password: Option<String>,
    pub hosts: Vec<(String, u16)>,
}

impl HostList {
    /// `authority` is `[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]`; `what` names a host
    /// in messages ("sentinel", "cluster node").
    fn parse(authority: &str, what: &str) -> Result<HostList, TargetError> {
        let bad = |m: String| TargetError::Url(m);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (
                    Some(percent_decode(user)?).filter(|u| !u.is_empty()),
                    Some(percent_decode(pass)?),
                ),
                None => (Some(percent_decode(u)?), None),
            },
        };
        let mut list = Vec::new();
        for host in hosts.split(',').filter(|h| !h.is_empty()) {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad(format!("each {what} is HOST:PORT")))?;
            let port = port
                .parse()
                .map_err(|_| bad(format!("a {what}'s port is not a number")))?;
            let name = name.trim_start_matches('[').trim_end_matches(']');
            list.push((name.to_string(), port));
        }
        if list.is_empty() {
            return Err(bad(format!("the URL names no {what} HOST:PORT")));
        }
        Ok(HostList {
            username,
            password,
            hosts: list,
        })
    }

    /// The data nodes' settings: these credentials, database `db`, RESP3.
    pub fn node_settings(&self, db: i64) -> RedisConnectionInfo {
        let mut node = RedisConnectionInfo::default()
            .set_db(db)
            .set_protocol(ProtocolVersion::RESP3);
        if let Some(u) = &self.username {
            node = node.set_username(u);
        }
        if let Some(p) = &self.password {
            node = node.set_password(p);
        }
        node
    }
}

/// The parts of a cluster URL after its scheme: the seeds; a database other than 0 is
/// refused (a cluster has no other).
fn cluster_url(rest: &str) -> Result<HostList, TargetError> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts = HostList::parse(authority, "cluster node")?;
    let db = path.trim_end_matches('/');
    if !db.is_empty() && db != "0" {
        // Only a number is quoted back: anything else might be a mistyped secret.
        return Err(match db.parse::<u32>() {
            Ok(n) => TargetError::ClusterDb(n.to_string()),
            Err(_) => {
                TargetError::Url("the path of a redis+cluster:// URL is /0 or nothing".into())
            }
        });
    }
    Ok(hosts)
}

/// The parts of a sentinel URL after its scheme.
#[derive(Debug, PartialEq)]
struct SentinelUrl {
    hosts: HostList,
    master: String,
    db: i64,
}

impl SentinelUrl {
    fn parse(rest: &str) -> Result<SentinelUrl, TargetError> {
        let bad = |what: &str| TargetError::Url(what.to_string());
        let (authority, path) = rest.split_once('/').ok_or_else(|| {
            bad("a sentinel URL needs /MASTER_NAME after the sentinels' addresses")
        })?;
        let hosts = HostList::parse(authority, "sentinel")?;
        let mut segments = path.split('/');
        let master = segments.next().unwrap_or_default().to_string();
        if master.is_empty() {
            return Err(bad("a sentinel URL needs /MASTER_NAME"));
        }
        let db = match segments.next().filter(|s| !s.is_empty()) {
            None => 0,
            Some(d) => d
                .parse()
                .map_err(|_| bad("the database after /MASTER_NAME/ is not a number"))?,
        };
        Ok(SentinelUrl { hosts, master, db })
    }

    fn client(
        self,
        secure: bool,
        certs: Option<TlsCertificates>,
        sentinel_password: Option<&str>,
        prefix: &str,
        lookups: &Lookups,
    ) -> Result<Target, TargetError> {
        let failed = |e: redis::RedisError| TargetError::Url(e.kind_text());
        let mut sentinel_settings = RedisConnectionInfo::default();
        if let Some(p) = sentinel_password {
            sentinel_settings = sentinel_settings.set_password(p);
        }
        let mut sentinels = Vec::new();
        let node = self.hosts.node_settings(self.db);
        for (host, port) in self.hosts.hosts {
            let info = address(secure, host, port)
                .into_connection_info()
                .map_err(failed)?
                .set_redis_settings(sentinel_settings.clone());
            sentinels.push(client(info, certs.as_ref()).map_err(failed)?);
        }
        Ok(Target::Sentinel(Sentinels::new(
            sentinels,
            self.master,
            node,
            secure,
            certs,
            prefix,
            lookups.placements.clone(),
        )))
    }
}

fn address(secure: bool, host: String, port: u16) -> ConnectionAddr {
    if secure {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    }
}

/// A client for one node. `TCP_NODELAY` on (redis-rs leaves it off): with Nagle, a
/// leader's batch written while the previous one is unanswered waits for that answer (or
/// a delayed ACK) before it leaves, so batches "in flight" went one at a time
/// (bench/results/2026-11-27-leader-commit-path.md).
fn client(info: redis::ConnectionInfo, certs: Option<&TlsCertificates>) -> RedisResult<Client> {
    let info = info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    match certs {
        Some(c) => Client::build_with_tls(info, c.clone()),
        None => Client::open(info),
    }
}

/// An attempt that found no primary: calls wait briefly for the next one, as when
/// Redis refuses connections (a failover is under way).
fn no_primary(detail: String) -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, detail).into()
}

/// `%XX` escapes in a URL's user or password.
fn percent_decode(s: &str) -> Result<String, TargetError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| TargetError::Url("a bad %-escape in the credentials".into()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| TargetError::Url("credentials are not UTF-8".into()))
}

/// A Redis URL without its credentials, for messages: `scheme://***@rest` when it
/// had any.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return "<not a URL>".to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &rest[at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_parse() {
        let u = SentinelUrl::parse("app:s%40cret@h1:26379,h2:26380/mymaster/3").unwrap();
        assert_eq!(u.hosts.username.as_deref(), Some("app"));
        assert_eq!(u.hosts.password.as_deref(), Some("s@cret"));
        assert_eq!(
            u.hosts.hosts,
            vec![("h1".to_string(), 26379), ("h2".to_string(), 26380)]
        );
        assert_eq!(u.master, "mymaster");
        assert_eq!(u.db, 3);
        let u = SentinelUrl::parse(":pw@h:1/m").unwrap();
        assert_eq!(
            (u.hosts.username, u.hosts.password.as_deref(), u.db),
            (None, Some("pw"), 0)
        );
        for bad in ["h:1", "h:1/", "/m", "h/m", "h:x/m", "h:1/m/x"] {
            assert!(SentinelUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_never_quote_the_url() {
        let secret = "hunter2";
        for url in [
            "redis+sentinel://u:hunter2@h:1/",
            "redis+sentinel://u:hunter2@h:x/m",
            "redis://u:hunter2@h:notaport/0",
            "redis://u:hunter2@h:1/notadb",
            "redis+cluster://u:hunter2@h:x",
            "redis+cluster://u:hunter2@h:1/hunter2",
            "redis+cluster://u:hunter2@h:1/3",
            "rediss+cluster://u:hunter2@",
        ] {
            let err = Target::new(url, &TlsFiles::default(), None, "p", &Lookups::default())
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert!(!err.to_string().contains(secret), "{err}");
        }
    }

    #[test]
    fn cluster_urls_parse() {
        let h = cluster_url("app:s%40cret@h1:7001,[::1]:7002/0").unwrap();
        assert_eq!(h.username.as_deref(), Some("app"));
        assert_eq!(h.password.as_deref(), Some("s@cret"));
        assert_eq!(
            h.hosts,
            vec![("h1".to_string(), 7001), ("::1".to_string(), 7002)]
        );
        assert!(cluster_url("h:1").is_ok());
        assert!(cluster_url("h:1/").is_ok());
        assert!(matches!(cluster_url("h:1/2"), Err(TargetError::ClusterDb(d)) if d == "2"));
        for bad in ["", "h", "h:x", "h:1/x"] {
            assert!(cluster_url(bad).is_err(), "{bad}");
        }
        let t = Target::new(
            "redis+cluster://h:1,h:2",
            &TlsFiles::default(),
            None,
            "billing",
            &Lookups::default(),
        );
        assert!(matches!(t, Ok(Target::Cluster(ref c)) if c.slot() == 12682));
        assert!(matches!(
            Target::new(
                "redis+cluster://h:1",
                &TlsFiles::default(),
                Some("pw"),
                "p",
                &Lookups::default()
            ),
            Err(TargetError::SentinelPasswordOnCluster)
        ));
    }

    #[test]
    fn tls_options_need_a_tls_url() {
        let tls = TlsFiles {
            cert: Some("/nonexistent".into()),
            ..TlsFiles::default()
        };
        assert!(matches!(
            Target::new("rediss://h:1", &tls, None, "p", &Lookups::default()),
            Err(TargetError::HalfClientCert)
        ));
        let tls = TlsFiles {
            ca: Some("/etc/hostname".into()),
            ..TlsFiles::default()
        };
        assert!(matches!(
            Target::new("redis://h:1", &tls, None, "p", &Lookups::default()),
            Err(TargetError::TlsWithoutTls)
        ));
    }

    #[test]
    fn redaction_hides_credentials_only() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(
            redact("redis+sentinel://:pw@a:1,b:2/m"),
            "redis+sentinel://***@a:1,b:2/m"
        );
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(redact("redis://h:1/a@b"), "redis://h:1/a@b");
        assert_eq!(redact("u:pw@h"), "<not a URL>");
    }
}
