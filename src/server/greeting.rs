//! The leader's side of the relay greeting (Redis leader mode; the lines are
//! [`super::hello`]'s): the first bytes of a connection tell a client from another
//! instance relaying one, and a relaying instance is answered, proven (with the
//! instance secret) and its client served under the identity it says.
//!
//! Invariants: with an instance secret, nothing is served to a greeting that does not
//! prove it (version 1, a wrong proof, no proof in time): the connection is closed
//! without a word and counts in no `stats`; a relayed client's role is the leader's
//! own role of the name the standby gave; on a listener for instances only
//! (`auth=relay`), a client's bytes are answered UNAUTHORIZED and closed.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rand::RngExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::admit::ConnAuth;
use super::hello::{self, First, Relayed};
use super::security::Security;
use crate::access::{Grant, Identity, IdentityKey};
use crate::engine::{Engine, Session};

/// How long a standby has to send its proof once the nonce went out.
const PROOF_TIMEOUT: Duration = Duration::from_secs(2);

/// What a leader's connection needs to answer a relay greeting.
#[derive(Clone, Debug)]
pub struct Greeting {
    /// This instance's id.
    pub me: Arc<str>,
    pub security: Arc<Security>,
    /// The listener is for instances only (`auth=relay`).
    pub only_relays: bool,
}

/// What the first bytes were.
#[derive(Debug)]
pub enum Greeted {
    /// A client's: serve them as they are.
    Client,
    /// An instance relaying a client (answered): serve the rest under this access
    /// (`None`: the client may do everything).
    Relayed(Option<ConnAuth>),
    /// An instance checking whom it reaches (answered), a greeting refused, or a client
    /// on a listener for instances only (answered UNAUTHORIZED): close, counted in no
    /// `stats`.
    Done,
}

/// Answer the greeting at the head of `rbuf`, if the first bytes are one; `None`
/// while they cannot tell yet (read more).
pub async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    rbuf: &mut BytesMut,
    greeting: &Greeting,
    engine: &Engine,
    session: &Session,
) -> Option<Greeted> {
    let security = &greeting.security;
    let (from, len, check, proven) = match hello::first_line(rbuf) {
        First::Undecided => return None,
        First::Client if greeting.only_relays => {
            super::admit::refuse(stream, security, "not_an_instance").await;
            return Some(Greeted::Done);
        }
        First::Client => return Some(Greeted::Client),
        First::Greeting {
            from,
            len,
            check,
            proven,
        } => (from.to_string(), len, check, proven),
    };
    let _ = rbuf.split_to(len);
    let secret = security.relay_secret.as_ref();
    let who = match (secret, proven) {
        (None, false) if !greeting.only_relays => Relayed::Open,
        (Some(secret), true) => match prove(stream, rbuf, secret, &from).await {
            Some(who) => who,
            None => {
                security.figures.auth_failed("relay_proof");
                tracing::warn!(
                    from,
                    "a relay greeting without a valid proof of the instance secret; closed \
                     without an answer"
                );
                return Some(Greeted::Done);
            }
        },
        _ => {
            security.figures.auth_failed("relay_unproven");
            tracing::warn!(
                from,
                proven,
                "a relay greeting of the wrong version for this instance's secret (all \
                 instances need the same --relay-secret-file); closed without an answer"
            );
            return Some(Greeted::Done);
        }
    };
    tracing::debug!(from, check, "another instance greets this leader");
    let mut out = BytesMut::new();
    hello::answer(&mut out, proven, true, &greeting.me);
    let answered = async {
        stream.write_all(&out).await?;
        stream.flush().await
    };
    if answered.await.is_err() || check {
        return Some(Greeted::Done);
    }
    engine.note_relayed(session.id, &from);
    let Relayed::As {
        role,
        name,
        takes_tokens,
    } = who
    else {
        return Some(Greeted::Relayed(None));
    };
    let control = &security.control;
    let Some(role_now) = control.roles().role(&role).cloned() else {
        tracing::warn!(
            from,
            role,
            "a relayed client's role is not in this leader's roles file"
        );
        super::admit::refuse(stream, security, "unknown_role").await;
        return Some(Greeted::Done);
    };
    let identity = Identity {
        name: name.into(),
        role: role_now,
    };
    let grant = Grant::new(IdentityKey::Role(role), identity, control.generation());
    Some(Greeted::Relayed(Some(ConnAuth {
        grant,
        security: security.clone(),
        takes_tokens,
        // The standby applied the guessing bound with the client's own address; a
        // second `auth` here counts against the standby's.
        ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
    })))
}

/// Send a nonce and read the standby's proof: whom it relays, if the proof holds.
async fn prove<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    rbuf: &mut BytesMut,
    secret: &crate::access::Secret,
    from: &str,
) -> Option<Relayed> {
    let bytes: [u8; 16] = rand::rng().random();
    let nonce: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut out = BytesMut::new();
    hello::nonce(&mut out, &nonce);
    stream.write_all(&out).await.ok()?;
    stream.flush().await.ok()?;
    let read_line = async {
        loop {
            let window = &rbuf[..rbuf.len().min(hello::MAX_PROOF_LINE)];
            if let Some(end) = window.windows(2).position(|w| w == b"\r\n") {
                let line = rbuf.split_to(end + 2);
                return Some(line);
            }
            if rbuf.len() >= hello::MAX_PROOF_LINE {
                return None;
            }
            rbuf.reserve(hello::MAX_PROOF_LINE);
            match stream.read_buf(rbuf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    let line = tokio::time::timeout(PROOF_TIMEOUT, read_line)
        .await
        .ok()??;
    hello::check_proof(secret, &nonce, from, &line[..line.len() - 2])
}
