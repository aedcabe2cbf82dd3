//! What a listener asks of its clients: TLS or not, and how they authenticate
//! (`--listen ADDRESS[,tls][,auth=MODE][,role=ROLE]`; docs/SECURITY.md, *Listeners*).
//!
//! Invariants: a parsed [`ListenerSpec`] is coherent: `cert` and `token-or-cert` imply
//! TLS; a token never travels in clear over TCP (a `token` TCP listener is TLS); `role=`
//! goes only with `auth=none`; a `relay` listener is plain TCP (instances relay over
//! plain TCP; their proof is the instance secret).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// How a listener's clients authenticate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// Not at all (beanstalkd's behaviour).
    #[default]
    None,
    /// `auth <token>` as the first command.
    Token,
    /// A client certificate that chains to `--tls-client-ca`.
    Cert,
    /// Either: a certificate the roles know, else `auth <token>` first.
    TokenOrCert,
    /// Only other instances of leader mode, proving the instance secret.
    Relay,
}

impl AuthMode {
    pub fn name(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Token => "token",
            AuthMode::Cert => "cert",
            AuthMode::TokenOrCert => "token-or-cert",
            AuthMode::Relay => "relay",
        }
    }

    /// Whether `auth <token>` is a command on this listener.
    pub fn takes_tokens(self) -> bool {
        matches!(self, AuthMode::Token | AuthMode::TokenOrCert)
    }
}

/// A listener's policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub tls: bool,
    pub auth: AuthMode,
    /// With `auth=none`: the role every connection has (`None`: may do everything).
    pub role: Option<String>,
}

impl Policy {
    /// A connection may be *pending* (handshaking, or not yet authenticated) on this
    /// listener: it counts against `--max-pending`.
    pub fn has_pending(&self) -> bool {
        self.tls || self.auth.takes_tokens()
    }

    /// beanstalkd's own: plain, open.
    pub fn is_open(&self) -> bool {
        !self.tls && self.auth == AuthMode::None && self.role.is_none()
    }
}

/// Where a `--listen` listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// A socket passed by systemd, by its `FileDescriptorName=`.
    Fd(String),
}

impl std::fmt::Display for SpecAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecAddr::Tcp(a) => write!(f, "{a}"),
            SpecAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            SpecAddr::Fd(n) => write!(f, "fd:{n}"),
        }
    }
}

/// One `--listen`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSpec {
    pub addr: SpecAddr,
    pub policy: Policy,
}

impl std::str::FromStr for ListenerSpec {
    type Err = String;

    fn from_str(spec: &str) -> Result<ListenerSpec, String> {
        let mut parts = spec.split(',');
        let addr = parts.next().unwrap_or_default().trim();
        let addr = if let Some(path) = addr.strip_prefix("unix:") {
            SpecAddr::Unix(PathBuf::from(path))
        } else if let Some(name) = addr.strip_prefix("fd:") {
            if name.is_empty() {
                return Err("fd: needs the socket's FileDescriptorName".into());
            }
            SpecAddr::Fd(name.to_string())
        } else {
            let resolved = addr.to_socket_addrs().ok().and_then(|mut a| a.next());
            SpecAddr::Tcp(
                resolved
                    .ok_or_else(|| format!("{addr:?} is not HOST:PORT, unix:/path or fd:NAME"))?,
            )
        };
        let mut policy = Policy::default();
        for opt in parts {
            match opt.trim().split_once('=') {
                None if opt.trim() == "tls" => policy.tls = true,
                Some(("auth", mode)) => {
                    policy.auth = match mode {
                        "none" => AuthMode::None,
                        "token" => AuthMode::Token,
                        "cert" => AuthMode::Cert,
                        "token-or-cert" => AuthMode::TokenOrCert,
                        "relay" => AuthMode::Relay,
                        other => {
                            return Err(format!(
                                "auth={other}: give none, token, cert, token-or-cert or relay"
                            ));
                        }
                    }
                }
                Some(("role", role)) if !role.is_empty() => policy.role = Some(role.to_string()),
                _ => {
                    return Err(format!(
                        "{opt:?}: the options of a listener are tls, auth=MODE and role=ROLE"
                    ));
                }
            }
        }
        if matches!(policy.auth, AuthMode::Cert | AuthMode::TokenOrCert) {
            policy.tls = true;
        }
        let tcp = !matches!(addr, SpecAddr::Unix(_));
        if policy.auth == AuthMode::Token && tcp && !policy.tls {
            return Err(format!(
                "{spec}: a token listener on TCP must be TLS (add ,tls), so tokens never \
                 travel in clear"
            ));
        }
        if policy.role.is_some() && policy.auth != AuthMode::None {
            return Err(format!(
                "{spec}: role= gives every connection of an auth=none listener its role; \
                 with auth=, the identity's role decides"
            ));
        }
        if policy.auth == AuthMode::Relay && policy.tls {
            return Err(format!(
                "{spec}: instances relay over plain TCP (their proof is the instance \
                 secret): a relay listener is not TLS"
            ));
        }
        if policy.tls && matches!(addr, SpecAddr::Unix(_)) {
            return Err(format!("{spec}: TLS is for TCP listeners"));
        }
        Ok(ListenerSpec { addr, policy })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_incoherent_ones_are_refused() {
        let s: ListenerSpec = "127.0.0.1:11301,tls,auth=token".parse().unwrap();
        assert_eq!(s.addr, SpecAddr::Tcp("127.0.0.1:11301".parse().unwrap()));
        assert!(s.policy.tls && s.policy.auth == AuthMode::Token);
        let s: ListenerSpec = "127.0.0.1:1,auth=cert".parse().unwrap();
        assert!(s.policy.tls, "cert implies tls");
        let s: ListenerSpec = "unix:/run/r.sock,auth=token".parse().unwrap();
        assert!(!s.policy.tls, "a unix socket may take tokens in clear");
        let s: ListenerSpec = "fd:beanstalk-tls,tls,auth=token".parse().unwrap();
        assert_eq!(s.addr, SpecAddr::Fd("beanstalk-tls".into()));
        let s: ListenerSpec = "127.0.0.1:2,role=producer".parse().unwrap();
        assert_eq!(s.policy.role.as_deref(), Some("producer"));
        for bad in [
            "127.0.0.1:1,auth=token",
            "127.0.0.1:1,auth=magic",
            "127.0.0.1:1,tls,auth=token,role=x",
            "127.0.0.1:1,tls,auth=relay",
            "unix:/x,tls",
            "nowhere",
            "127.0.0.1:1,colour=blue",
            "fd:",
        ] {
            assert!(bad.parse::<ListenerSpec>().is_err(), "{bad}");
        }
    }
}
