//! A role: what an identity may do, on the beanstalk port (tubes to put to, reserve
//! from, read; whether it may reach beyond its own work) and on the HTTP API.
//!
//! Invariants: a [`Pattern`] is a valid tube name, or a valid tube name's beginning
//! followed by `*`, or `*` alone; a role is immutable once built (a reload builds new
//! ones), so a connection may keep an `Arc<Role>` and read it without a lock.

pub use crate::protocol::pattern::Pattern;

/// A list of patterns; matches a tube when any of them does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tubes(Vec<Pattern>);

impl Tubes {
    pub fn new(patterns: Vec<Pattern>) -> Tubes {
        // `*` alone says it all, and keeps the common case one comparison.
        if patterns.contains(&Pattern::Any) {
            return Tubes(vec![Pattern::Any]);
        }
        Tubes(patterns)
    }

    pub fn all() -> Tubes {
        Tubes(vec![Pattern::Any])
    }

    pub fn matches(&self, tube: &str) -> bool {
        self.0.iter().any(|p| p.matches(tube))
    }

    /// Every tube.
    pub fn is_all(&self) -> bool {
        self.0.first() == Some(&Pattern::Any)
    }
}

/// What a role may do in the HTTP API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// Nothing that needs a token.
    #[default]
    None,
    /// Reads (under `--admin-read-auth`, where they need a token).
    Read,
    /// Reads and changes.
    Admin,
}

/// What an identity may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    /// `use` and `put`.
    pub put: Tubes,
    /// `watch`, `reserve`, `reserve-with-timeout`.
    pub reserve: Tubes,
    /// `peek*`, `stats-job`, `stats-tube`.
    pub read: Tubes,
    /// What reaches beyond its own work: `kick`, `kick-job`, `pause-tube`,
    /// `reserve-job`, `delete` of a job it does not hold, `stats-tube` of other tubes,
    /// `list-tubes`, `stats`.
    pub manage: bool,
    pub api: Api,
}

/// The name of the built-in role that may do everything (`--admin-token`'s).
pub const ADMIN: &str = "admin";

impl Role {
    /// Everything, on the beanstalk port and in the HTTP API.
    pub fn admin() -> Role {
        Role {
            name: ADMIN.to_string(),
            put: Tubes::all(),
            reserve: Tubes::all(),
            read: Tubes::all(),
            manage: true,
            api: Api::Admin,
        }
    }

    /// Whether the beanstalk port checks nothing for this role (every command of it is
    /// allowed, so its connections take the unrestricted path).
    pub fn is_unrestricted(&self) -> bool {
        self.manage && self.put.is_all() && self.reserve.is_all() && self.read.is_all()
    }

    /// `stats-tube` of `tube`: a tube of its own work, or any with `manage`.
    pub fn may_inspect(&self, tube: &str) -> bool {
        self.manage
            || self.read.matches(tube)
            || self.put.matches(tube)
            || self.reserve.matches(tube)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_a_tube_a_prefix_or_everything() {
        let t = |s| Pattern::parse(s).unwrap();
        assert!(t("emails").matches("emails"));
        assert!(!t("emails").matches("emails2"));
        assert!(t("reports.*").matches("reports.daily"));
        assert!(t("reports.*").matches("reports."));
        assert!(!t("reports.*").matches("report"));
        assert!(t("*").matches("anything"));
        for bad in ["", "-x", "a b", "a*b", "é", "**"] {
            assert_eq!(Pattern::parse(bad), None, "{bad:?}");
        }
        let tubes = Tubes::new(vec![t("a"), t("*")]);
        assert!(tubes.is_all());
        assert!(!Tubes::new(vec![t("a")]).is_all());
        assert!(Role::admin().is_unrestricted());
    }
}
