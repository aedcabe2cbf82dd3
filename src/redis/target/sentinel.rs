//! The target of a `redis+sentinel://` URL: the primary a majority of the sentinels
//! name for the master name, once it proves itself (ROLE, and the replication history
//! of the primary used before it: [`Lineage`]).
//!
//! Not redis-rs' `SentinelClient`: it takes the first sentinel's answer, and a sentinel
//! that has not yet heard of a failover names the old primary, which, restarted empty
//! by its supervisor, answers ROLE as a primary until the sentinels demote it (seen in
//! the failover test: jobs acknowledged there are wiped by the demotion). Here the
//! address must be named by a majority of the sentinels, and, once a primary has been
//! used, must continue its replication history: a majority can still lag behind a
//! failover (the failover test caught one naming the restarted, empty old primary;
//! redstalk then wrote a fresh namespace there, whose ids collided with the real one's
//! once the sentinels demoted it).
//!
//! Invariant: no URL, password or key in messages (addresses and the master name only).

use std::sync::Arc;

use redis::{Client, IntoConnectionInfo, RedisConnectionInfo, RedisResult, TlsCertificates};

use super::lineage::Lineage;
use super::{address, ask_config, client, no_primary};
use crate::redis::placement::{Placements, Topology};

/// The sentinels, and what a connection to the primary they name needs.
pub struct Sentinels {
    sentinels: Vec<Client>,
    master: String,
    node: RedisConnectionInfo,
    secure: bool,
    certs: Option<TlsCertificates>,
    /// The namespace served (for `/metrics`).
    prefix: String,
    lineage: Lineage,
    /// Where the process's connectors record the primary they use.
    placements: Arc<Placements>,
}

impl Sentinels {
    /// The sentinels `sentinels` (clients made with the sentinels' own credentials),
    /// asked for `master`; its primary is reached with `node`'s settings, and recorded
    /// in `placements`.
    pub(super) fn new(
        sentinels: Vec<Client>,
        master: String,
        node: RedisConnectionInfo,
        secure: bool,
        certs: Option<TlsCertificates>,
        prefix: &str,
        placements: Arc<Placements>,
    ) -> Sentinels {
        Sentinels {
            sentinels,
            master,
            node,
            secure,
            certs,
            prefix: prefix.to_string(),
            lineage: Lineage::default(),
            placements,
        }
    }

    /// A client for the primary a majority of the sentinels name, once it proved itself.
    pub(super) async fn primary(&self) -> RedisResult<Client> {
        let (host, port) = self.named_by_majority().await?;
        let named = format!("{host}:{port}");
        let info = address(self.secure, host, port)
            .into_connection_info()?
            .set_redis_settings(self.node.clone());
        let primary = client(info, self.certs.as_ref())?;
        let mut c = primary
            .get_multiplexed_async_connection_with_config(&ask_config())
            .await?;
        self.lineage.verify(&mut c, "the sentinels name").await?;
        self.placements
            .record(Topology::Sentinel, &self.prefix, None, &named);
        Ok(primary)
    }

    /// The address a majority of the sentinels name as the primary of `master`, asked
    /// of all of them at once.
    async fn named_by_majority(&self) -> RedisResult<(String, u16)> {
        let config = ask_config();
        let asks = self.sentinels.iter().map(|s| {
            let config = config.clone();
            async move {
                let mut c = s
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut c)
                    .await
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut named: Vec<((String, u16), usize)> = Vec::new();
        let mut errors = Vec::new();
        for answer in answers {
            match answer {
                Ok(Some(addr)) => match named.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, n)) => *n += 1,
                    None => named.push((addr, 1)),
                },
                Ok(None) => {}
                Err(e) => errors.push(e.to_string()),
            }
        }
        let majority = self.sentinels.len() / 2 + 1;
        match named.into_iter().find(|(_, n)| *n >= majority) {
            Some((addr, _)) => Ok(addr),
            None => Err(no_primary(format!(
                "no {majority} of the {} sentinels name the same primary for {:?} \
                 (failover under way?){}",
                self.sentinels.len(),
                self.master,
                if errors.is_empty() {
                    String::new()
                } else {
                    format!("; sentinel errors: {}", errors.join("; "))
                }
            ))),
        }
    }
}
