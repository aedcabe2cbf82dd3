//! The roles file (`--roles FILE`, TOML; docs/SECURITY.md): roles, and the identities
//! (tokens, client-certificate names) that have them. One file for the beanstalk port
//! and the HTTP API.
//!
//! Invariants: a [`Roles`] is whole and valid or not made at all (a file with any
//! error is refused, naming the error and, for a syntax error, its line): every
//! identity names a defined role, tokens are 1 to [`MAX_TOKEN_LEN`] printable bytes
//! without spaces and unique, names are unique; nothing here logs or shows a token
//! (errors name the identity by its `name`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::role::{ADMIN, Api, Pattern, Role, Tubes};
use super::secret::Secret;
use super::token::{TokenEntry, TokenSet};

/// The longest token: `auth <token>` must fit beanstalkd's 224-byte line (CRLF
/// included), as in beanstalkd-rs.
pub const MAX_TOKEN_LEN: usize = 217;

/// An identity: who a connection or request is, and its role.
#[derive(Clone, Debug)]
pub struct Identity {
    /// For the logs: the token's or certificate's `name`, or the listener's role.
    pub name: Arc<str>,
    pub role: Arc<Role>,
}

/// The file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    roles: HashMap<String, RoleSpec>,
    #[serde(default)]
    token: Vec<TokenSpec>,
    #[serde(default)]
    cert: Vec<CertSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleSpec {
    #[serde(default)]
    put: Vec<String>,
    #[serde(default)]
    reserve: Vec<String>,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    manage: bool,
    #[serde(default)]
    api: Api,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenSpec {
    name: String,
    token: String,
    role: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CertSpec {
    name: String,
    role: String,
}

/// Why a roles file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RolesError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// Every role and identity of a roles file (plus `--admin-token`'s), as one value.
#[derive(Debug, Default)]
pub struct Roles {
    roles: HashMap<String, Arc<Role>>,
    tokens: TokenSet<Identity>,
    certs: HashMap<String, Identity>,
}

impl Roles {
    /// No file: `admin_token` (when given) is the only identity, of the built-in admin
    /// role.
    pub fn builtin(admin_token: Option<&Secret>) -> Roles {
        Roles::build(File::default(), admin_token).unwrap_or_default()
    }

    /// Read and check the file at `path`; `admin_token` is added as an identity of
    /// the role `admin` (the built-in one unless the file defines it).
    pub fn load(path: &Path, admin_token: Option<&Secret>) -> Result<Roles, RolesError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RolesError::Read {
            path: shown.clone(),
            source,
        })?;
        Roles::parse(&text, admin_token).map_err(|message| RolesError::Invalid {
            path: shown,
            message,
        })
    }

    /// [`Roles::load`] from the file's text; the error says what is wrong.
    pub fn parse(text: &str, admin_token: Option<&Secret>) -> Result<Roles, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        Roles::build(file, admin_token)
    }

    fn build(file: File, admin_token: Option<&Secret>) -> Result<Roles, String> {
        let mut roles = HashMap::new();
        for (name, spec) in file.roles {
            let role = role_of(&name, spec)?;
            roles.insert(name, Arc::new(role));
        }
        let admin = roles
            .entry(ADMIN.to_string())
            .or_insert_with(|| Arc::new(Role::admin()))
            .clone();
        let role_named = |what: &str, name: &str, role: &str| {
            roles.get(role).cloned().ok_or_else(|| {
                format!(
                    "{what} {name:?} names the role {role:?}, which is not defined under [roles]"
                )
            })
        };
        let mut names = std::collections::HashSet::new();
        let mut entries: Vec<TokenEntry<Identity>> = Vec::new();
        for t in file.token {
            if !names.insert(t.name.clone()) {
                return Err(format!("the name {:?} is given twice", t.name));
            }
            check_token(&t.name, &t.token)?;
            let role = role_named("[[token]]", &t.name, &t.role)?;
            let secret = Secret::new(t.token);
            if entries.iter().any(|e| e.secret == secret) {
                return Err(format!("[[token]] {:?} repeats another's token", t.name));
            }
            entries.push(TokenEntry {
                secret,
                value: Identity {
                    name: t.name.into(),
                    role,
                },
            });
        }
        if let Some(token) = admin_token {
            if entries.iter().any(|e| &e.secret == token) {
                return Err(
                    "--admin-token is also a [[token]] of the roles file: give it once".into(),
                );
            }
            entries.push(TokenEntry {
                secret: token.clone(),
                value: Identity {
                    name: "admin-token".into(),
                    role: admin,
                },
            });
        }
        let mut certs = HashMap::new();
        for c in file.cert {
            if c.name.is_empty() {
                return Err("a [[cert]] has an empty name".into());
            }
            let role = role_named("[[cert]]", &c.name, &c.role)?;
            let identity = Identity {
                name: c.name.as_str().into(),
                role,
            };
            if certs.insert(c.name.clone(), identity).is_some() {
                return Err(format!("[[cert]] {:?} is given twice", c.name));
            }
        }
        Ok(Roles {
            roles,
            tokens: TokenSet::new(entries),
            certs,
        })
    }

    pub fn tokens(&self) -> &TokenSet<Identity> {
        &self.tokens
    }

    /// The identity of a client certificate with these names (its subject CNs and
    /// SANs, in that order): the first the file knows.
    pub fn cert<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Option<&Identity> {
        names.into_iter().find_map(|n| self.certs.get(n))
    }

    /// Whether the file names any client certificate.
    pub fn has_certs(&self) -> bool {
        !self.certs.is_empty()
    }

    pub fn role(&self, name: &str) -> Option<&Arc<Role>> {
        self.roles.get(name)
    }
}

fn role_of(name: &str, spec: RoleSpec) -> Result<Role, String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!(
            "the role name {name:?} is not 1 or more of A-Z a-z 0-9 - _ ."
        ));
    }
    let tubes = |what: &str, list: Vec<String>| {
        list.iter()
            .map(|p| {
                Pattern::parse(p).ok_or_else(|| {
                    format!(
                        "role {name:?}: {what} pattern {p:?} is not a tube name, a tube name's \
                         beginning followed by *, or *"
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Tubes::new)
    };
    Ok(Role {
        name: name.to_string(),
        put: tubes("put", spec.put)?,
        reserve: tubes("reserve", spec.reserve)?,
        read: tubes("read", spec.read)?,
        manage: spec.manage,
        api: spec.api,
    })
}

/// A token must fit `auth <token>` in one protocol line and be one word.
fn check_token(name: &str, token: &str) -> Result<(), String> {
    let ok = !token.is_empty()
        && token.len() <= MAX_TOKEN_LEN
        && token.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        return Ok(());
    }
    Err(format!(
        "[[token]] {name:?}: a token is 1 to {MAX_TOKEN_LEN} printable ASCII characters \
         without spaces"
    ))
}

/// A warning when the file at `path` may be read by others than its owner (it holds
/// tokens).
pub fn readable_by_others(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o077 != 0).then(|| {
        format!(
            "{} holds tokens and may be read by group or others (mode {:04o}); restrict it \
             with chmod 600 (or 640 for the service's group)",
            path.display(),
            mode & 0o7777
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[roles.producer]
put = ["emails", "reports.*"]

[roles.worker]
reserve = ["emails"]
read = ["emails"]

[roles.dashboard]
api = "read"

[[token]]
name = "billing"
token = "tok-billing-1"
role = "producer"

[[cert]]
name = "worker-1.example.com"
role = "worker"
"#;

    #[test]
    fn a_file_gives_roles_to_tokens_and_certificates() {
        let admin = Secret::new("admin-tok");
        let r = Roles::parse(FILE, Some(&admin)).unwrap();
        let billing = &r.tokens().find(b"tok-billing-1").unwrap().value;
        assert_eq!(&*billing.name, "billing");
        assert_eq!(billing.role.name, "producer");
        assert!(billing.role.put.matches("reports.q1"));
        assert!(!billing.role.reserve.matches("emails"));
        let a = &r.tokens().find(b"admin-tok").unwrap().value;
        assert!(a.role.is_unrestricted() && a.role.api == Api::Admin);
        let w = r.cert(["nope", "worker-1.example.com"]).unwrap();
        assert_eq!(w.role.name, "worker");
        assert_eq!(r.role("dashboard").unwrap().api, Api::Read);
        assert!(r.tokens().find(b"tok-billing-").is_none());
    }

    #[test]
    fn a_broken_file_is_refused_with_a_reason_that_shows_no_token() {
        let bad = [
            ("[roles.x]\nput = [\"a b\"]\n", "pattern"),
            ("[roles.x]\nfly = true\n", "unknown field"),
            (
                "[[token]]\nname = \"n\"\ntoken = \"sekrit\"\nrole = \"nope\"\n",
                "not defined",
            ),
            (
                "[[token]]\nname = \"n\"\ntoken = \"sek rit\"\nrole = \"admin\"\n",
                "printable",
            ),
            (
                "[[token]]\nname = \"n\"\ntoken = \"sekrit\"\nrole = \"admin\"\n\
                 [[token]]\nname = \"m\"\ntoken = \"sekrit\"\nrole = \"admin\"\n",
                "repeats",
            ),
            ("[roles.x\n", "line 1"),
        ];
        for (text, want) in bad {
            let err = Roles::parse(text, None).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains("sekrit"), "{err}");
        }
        let long = "x".repeat(MAX_TOKEN_LEN + 1);
        let text = format!("[[token]]\nname = \"n\"\ntoken = \"{long}\"\nrole = \"admin\"\n");
        assert!(Roles::parse(&text, None).is_err());
        let fits = "x".repeat(MAX_TOKEN_LEN);
        let text = format!("[[token]]\nname = \"n\"\ntoken = \"{fits}\"\nrole = \"admin\"\n");
        assert!(Roles::parse(&text, None).is_ok());
    }
}
