//! Tube policies (docs/POLICIES.md): what a store does with a job that keeps failing.
//! A **dead letter** rule buries a job whose reservations keep ending without a delete
//! once it has been reserved, or has timed out, a number of times, and records why; a
//! **backoff** rule gives a `release` with delay 0 a delay that grows with the job's
//! releases, so a failing job does not spin. Pure values: the stores apply them where a
//! reservation ends (`release`, a lapsed TTR, the holder's close), the engine keeps the
//! set and where it is persisted.
//!
//! Invariants:
//! - with no rule for a tube, nothing changes: a store asks [`Policies::for_tube`] only
//!   where a reservation ends, and an empty set answers at once;
//! - the most specific rule wins: the tube's own name, else the longest prefix, else
//!   `*` (rules do not combine);
//! - every rule is bounded ([`Policy::check`]): limits at least 1, a backoff's delays
//!   within what a `release` may ask, at most [`MAX_RULES`] rules;
//! - each kick gives a dead letter its limits again: the verdict compares the job's
//!   counters with the limit times the kicks plus one, so counters (which `stats-job`
//!   shows as the reference does) never need resetting.

use serde::{Deserialize, Serialize};

use crate::protocol::ext::Millis;
use crate::protocol::pattern::Pattern;

/// The most rules a set holds (each release and lapsed TTR scans them in order).
pub const MAX_RULES: usize = 1000;

/// Bury a job after this many reserves, or this many lapsed TTRs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserves: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<u32>,
}

/// A `release` with delay 0 gets `base_ms * factor^releases` (the job's releases before
/// this one), at most `max_ms`, then moved by up to `jitter` of itself either way.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    pub base_ms: u64,
    #[serde(default = "Backoff::default_factor")]
    pub factor: f64,
    pub max_ms: u64,
    #[serde(default)]
    pub jitter: f64,
}

/// What a tube's failing jobs get.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
}

/// Which limit buried a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadCause {
    Reserves,
    Timeouts,
}

impl DeadCause {
    pub fn name(self) -> &'static str {
        match self {
            DeadCause::Reserves => "reserves",
            DeadCause::Timeouts => "timeouts",
        }
    }

    pub fn code(self) -> u8 {
        match self {
            DeadCause::Reserves => 1,
            DeadCause::Timeouts => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<DeadCause> {
        match code {
            1 => Some(DeadCause::Reserves),
            2 => Some(DeadCause::Timeouts),
            _ => None,
        }
    }
}

/// Why a dead letter rule buried a job: its counter and the limit it reached. Kept with
/// the job while it stays buried (persisted in every mode), shown by the operator API;
/// `stats-job` does not show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadReason {
    pub cause: DeadCause,
    pub count: u32,
    pub limit: u32,
}

impl DeadReason {
    /// `reserves:5:5`: how Redis keeps it (a job's meta field) and reads it back.
    pub fn encode(&self) -> String {
        format!("{}:{}:{}", self.cause.name(), self.count, self.limit)
    }

    pub fn decode(s: &str) -> Option<DeadReason> {
        let mut parts = s.split(':');
        let cause = match parts.next()? {
            "reserves" => DeadCause::Reserves,
            "timeouts" => DeadCause::Timeouts,
            _ => return None,
        };
        let count = parts.next()?.parse().ok()?;
        let limit = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(DeadReason {
            cause,
            count,
            limit,
        })
    }
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.cause {
            DeadCause::Reserves => "reserved",
            DeadCause::Timeouts => "timed out",
        };
        write!(f, "{what} {} times (limit {})", self.count, self.limit)
    }
}

impl DeadLetter {
    /// Whether a job whose reservation ended without a delete is buried, and why:
    /// `reserves` and `timeouts` are its counters with this reservation counted.
    pub fn verdict(&self, reserves: u32, timeouts: u32, kicks: u32) -> Option<DeadReason> {
        let reached = |limit: Option<u32>, count: u32, cause| {
            let limit = limit?;
            let scaled = limit.saturating_mul(kicks.saturating_add(1));
            (count >= scaled).then_some(DeadReason {
                cause,
                count,
                limit,
            })
        };
        reached(self.timeouts, timeouts, DeadCause::Timeouts)
            .or_else(|| reached(self.reserves, reserves, DeadCause::Reserves))
    }
}

impl Backoff {
    fn default_factor() -> f64 {
        2.0
    }

    /// Where in the jitter a release lands: uniform in [-1, 1]; 0 without jitter. Drawn
    /// by the store that applies the backoff (shared mode: in Rust, for the script).
    pub fn spread(&self) -> f64 {
        if self.jitter > 0.0 {
            rand::random_range(-1.0..=1.0)
        } else {
            0.0
        }
    }

    /// The delay of a `release` with delay 0 of a job released `releases` times before;
    /// `spread` in [-1, 1] picks where in the jitter it lands.
    pub fn delay_ms(&self, releases: u32, spread: f64) -> u64 {
        let grown = self.base_ms as f64 * self.factor.powi(releases.min(1024) as i32);
        let capped = grown.min(self.max_ms as f64);
        let moved = capped * (1.0 + self.jitter * spread.clamp(-1.0, 1.0));
        // Jitter may carry it past the maximum: the maximum is what a release may ask.
        (moved.round() as u64).clamp(1, Millis::MAX.as_millis())
    }
}

impl Policy {
    /// Why this rule cannot be kept, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.dead_letter.is_none() && self.backoff.is_none() {
            return Err("a policy needs dead_letter, backoff or both".into());
        }
        if let Some(d) = &self.dead_letter {
            if d.reserves.is_none() && d.timeouts.is_none() {
                return Err("dead_letter needs reserves, timeouts or both".into());
            }
            if d.reserves == Some(0) || d.timeouts == Some(0) {
                return Err("dead_letter limits are at least 1".into());
            }
        }
        if let Some(b) = &self.backoff {
            let max = Millis::MAX.as_millis();
            if b.base_ms == 0 || b.base_ms > b.max_ms || b.max_ms > max {
                return Err(format!(
                    "backoff needs 1 <= base_ms <= max_ms <= {max} (a release's longest delay)"
                ));
            }
            if !(1.0..=100.0).contains(&b.factor) {
                return Err("backoff factor is from 1 to 100".into());
            }
            if !(0.0..=1.0).contains(&b.jitter) {
                return Err("backoff jitter is from 0 to 1 (a fraction of the delay)".into());
            }
        }
        Ok(())
    }
}

/// One rule: the tubes it governs and what they get.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// `name`, `prefix*` or `*`.
    pub tubes: String,
    #[serde(flatten)]
    pub policy: Policy,
}

/// Why a set of rules cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{0:?} is not a tube name, a prefix followed by *, or *")]
    Pattern(String),
    #[error("policy for {tubes}: {why}")]
    Invalid { tubes: String, why: String },
    #[error("at most {MAX_RULES} policies")]
    TooMany,
}

/// Every tube's rules. Cheap to share (`Arc<Policies>`); a change builds a new set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policies {
    /// Most specific first: tubes, then prefixes longest first, then `*`.
    rules: Vec<(Pattern, Policy)>,
    /// The same rules indexed for [`Policies::for_tube`], which runs at every ended
    /// reservation: a scan of 1,000 prefixes cost a release about 5 µs
    /// (bench/policies); a lookup per distinct prefix length costs next to nothing.
    index: Index,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Index {
    tubes: foldhash::HashMap<String, Policy>,
    prefixes: foldhash::HashMap<String, Policy>,
    /// The prefixes' lengths, longest first, each once.
    prefix_lens: Vec<usize>,
    any: Option<Policy>,
}

impl Index {
    fn of(rules: &[(Pattern, Policy)]) -> Index {
        let mut index = Index::default();
        for (pattern, policy) in rules {
            match pattern {
                Pattern::Tube(t) => {
                    index.tubes.insert(t.clone(), *policy);
                }
                Pattern::Prefix(p) => {
                    index.prefixes.insert(p.clone(), *policy);
                    index.prefix_lens.push(p.len());
                }
                Pattern::Any => index.any = Some(*policy),
            }
        }
        index.prefix_lens.sort_unstable_by(|a, b| b.cmp(a));
        index.prefix_lens.dedup();
        index
    }
}

fn specificity(p: &Pattern) -> (u8, std::cmp::Reverse<usize>) {
    match p {
        Pattern::Tube(t) => (0, std::cmp::Reverse(t.len())),
        Pattern::Prefix(x) => (1, std::cmp::Reverse(x.len())),
        Pattern::Any => (2, std::cmp::Reverse(0)),
    }
}

impl Policies {
    /// A set from rules; a later rule for the same tubes replaces an earlier one.
    pub fn from_rules(rules: impl IntoIterator<Item = Rule>) -> Result<Policies, PolicyError> {
        let mut checked = Vec::new();
        for rule in rules {
            checked.push(checked_rule(&rule.tubes, rule.policy)?);
        }
        Policies::of(checked)
    }

    /// A set of the valid rules of `rules`, each invalid one handed to `skipped`: what
    /// a home holds, where one bad rule must not cost the others.
    pub fn from_kept(
        rules: impl IntoIterator<Item = Rule>,
        mut skipped: impl FnMut(&Rule, PolicyError),
    ) -> Policies {
        let mut checked = Vec::new();
        for rule in rules {
            match checked_rule(&rule.tubes, rule.policy) {
                Ok(r) => checked.push(r),
                Err(e) => skipped(&rule, e),
            }
        }
        // A home holds at most what `with` lets in; should it hold more, the most
        // specific are kept and the others said.
        let mut set = Policies::sorted(unique(checked));
        if set.rules.len() > MAX_RULES {
            for (pattern, policy) in set.rules.split_off(MAX_RULES) {
                let rule = Rule {
                    tubes: pattern.to_string(),
                    policy,
                };
                skipped(&rule, PolicyError::TooMany);
            }
            set = Policies::sorted(set.rules);
        }
        set
    }

    /// This set with `policy` for `tubes` (replacing the rule it had).
    pub fn with(&self, tubes: &str, policy: Policy) -> Result<Policies, PolicyError> {
        let (pattern, policy) = checked_rule(tubes, policy)?;
        let mut rules = self.rules.clone();
        rules.retain(|(p, _)| *p != pattern);
        rules.push((pattern, policy));
        Policies::of(rules)
    }

    /// The set of `rules` (a later rule for the same pattern replaces an earlier one),
    /// sorted once and indexed once, or `TooMany`.
    fn of(rules: Vec<(Pattern, Policy)>) -> Result<Policies, PolicyError> {
        let rules = unique(rules);
        if rules.len() > MAX_RULES {
            return Err(PolicyError::TooMany);
        }
        Ok(Policies::sorted(rules))
    }

    fn sorted(mut rules: Vec<(Pattern, Policy)>) -> Policies {
        rules.sort_by_cached_key(|(p, _)| (specificity(p), p.to_string()));
        Policies {
            index: Index::of(&rules),
            rules,
        }
    }

    /// This set without the rule for `tubes`; `None` when it had none.
    pub fn without(&self, tubes: &str) -> Option<Policies> {
        let pattern = Pattern::parse(tubes)?;
        let mut rules = self.rules.clone();
        let before = rules.len();
        rules.retain(|(p, _)| *p != pattern);
        (rules.len() < before).then(|| Policies::sorted(rules))
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule that governs `tube`, most specific first.
    pub fn for_tube(&self, tube: &str) -> Option<&Policy> {
        if self.rules.is_empty() {
            return None;
        }
        let ix = &self.index;
        ix.tubes
            .get(tube)
            .or_else(|| {
                ix.prefix_lens
                    .iter()
                    .filter_map(|&n| tube.get(..n))
                    .find_map(|prefix| ix.prefixes.get(prefix))
            })
            .or(ix.any.as_ref())
    }

    /// The rule for `tube` and the pattern it was set for.
    pub fn rule_for(&self, tube: &str) -> Option<Rule> {
        self.rules
            .iter()
            .find(|(p, _)| p.matches(tube))
            .map(|(p, policy)| Rule {
                tubes: p.to_string(),
                policy: *policy,
            })
    }

    /// The rule set exactly for `tubes` (not the one that would govern such a tube).
    pub fn rule_for_pattern(&self, tubes: &str) -> Option<Policy> {
        let pattern = Pattern::parse(tubes)?;
        self.rules
            .iter()
            .find(|(p, _)| *p == pattern)
            .map(|(_, policy)| *policy)
    }

    /// Every rule, most specific first.
    pub fn rules(&self) -> Vec<Rule> {
        self.rules
            .iter()
            .map(|(p, policy)| Rule {
                tubes: p.to_string(),
                policy: *policy,
            })
            .collect()
    }
}

/// `rules` with one rule per pattern: the last given for it.
fn unique(rules: Vec<(Pattern, Policy)>) -> Vec<(Pattern, Policy)> {
    let mut out: Vec<(Pattern, Policy)> = Vec::with_capacity(rules.len());
    let mut seen = foldhash::HashMap::default();
    for (pattern, policy) in rules {
        match seen.get(&pattern) {
            Some(&i) => out[i] = (pattern, policy),
            None => {
                seen.insert(pattern.clone(), out.len());
                out.push((pattern, policy));
            }
        }
    }
    out
}

/// `policy` for `tubes`, when both are valid.
fn checked_rule(tubes: &str, policy: Policy) -> Result<(Pattern, Policy), PolicyError> {
    let pattern = Pattern::parse(tubes).ok_or_else(|| PolicyError::Pattern(tubes.into()))?;
    policy.check().map_err(|why| PolicyError::Invalid {
        tubes: tubes.into(),
        why,
    })?;
    Ok((pattern, policy))
}

/// The policies file (TOML): `[[policy]]` tables, each a [`Rule`].
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub policy: Vec<Rule>,
}

impl PolicyFile {
    pub fn parse(text: &str) -> Result<Policies, String> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Policies::from_rules(file.policy).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dl(reserves: Option<u32>, timeouts: Option<u32>) -> Policy {
        Policy {
            dead_letter: Some(DeadLetter { reserves, timeouts }),
            backoff: None,
        }
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let set = Policies::default()
            .with("*", dl(Some(9), None))
            .unwrap()
            .with("mail*", dl(Some(5), None))
            .unwrap()
            .with("mail-eu*", dl(Some(3), None))
            .unwrap()
            .with("mail-eu-1", dl(Some(1), None))
            .unwrap();
        let limit = |t: &str| set.for_tube(t).unwrap().dead_letter.unwrap().reserves;
        assert_eq!(limit("mail-eu-1"), Some(1));
        assert_eq!(limit("mail-eu-2"), Some(3));
        assert_eq!(limit("mail-us"), Some(5));
        assert_eq!(limit("other"), Some(9));
        let set = set.without("*").unwrap();
        assert!(set.for_tube("other").is_none());
        assert!(set.without("*").is_none(), "no rule left for *");
        assert_eq!(set.rule_for("mail-eu-2").unwrap().tubes, "mail-eu*");
    }

    #[test]
    fn a_rule_replaces_the_one_for_the_same_tubes() {
        let set = Policies::default()
            .with("a*", dl(Some(5), None))
            .unwrap()
            .with("a*", dl(None, Some(2)))
            .unwrap();
        assert_eq!(set.rules().len(), 1);
        assert_eq!(set.for_tube("ab"), Some(&dl(None, Some(2))));
    }

    #[test]
    fn bad_rules_are_refused() {
        let none = Policies::default();
        assert!(matches!(
            none.with("a b", dl(Some(1), None)),
            Err(PolicyError::Pattern(_))
        ));
        assert!(none.with("a", Policy::default()).is_err());
        assert!(none.with("a", dl(None, None)).is_err());
        assert!(none.with("a", dl(Some(0), None)).is_err());
        let backoff = |base_ms, factor, max_ms, jitter| Policy {
            dead_letter: None,
            backoff: Some(Backoff {
                base_ms,
                factor,
                max_ms,
                jitter,
            }),
        };
        assert!(none.with("a", backoff(0, 2.0, 10, 0.0)).is_err());
        assert!(none.with("a", backoff(20, 2.0, 10, 0.0)).is_err());
        assert!(none.with("a", backoff(1, 0.5, 10, 0.0)).is_err());
        assert!(none.with("a", backoff(1, 2.0, 10, 1.5)).is_err());
        assert!(none.with("a", backoff(1, 2.0, u64::MAX, 0.0)).is_err());
        assert!(none.with("a", backoff(1, 2.0, 10, 0.5)).is_ok());
    }

    #[test]
    fn dead_letter_counts_from_each_kick() {
        let d = DeadLetter {
            reserves: Some(3),
            timeouts: Some(2),
        };
        assert_eq!(d.verdict(2, 0, 0), None);
        assert_eq!(
            d.verdict(3, 0, 0),
            Some(DeadReason {
                cause: DeadCause::Reserves,
                count: 3,
                limit: 3
            })
        );
        assert_eq!(d.verdict(3, 0, 1), None, "a kick gives three more");
        assert_eq!(
            d.verdict(6, 0, 1).map(|r| r.cause),
            Some(DeadCause::Reserves)
        );
        assert_eq!(
            d.verdict(3, 2, 0).map(|r| r.cause),
            Some(DeadCause::Timeouts)
        );
        let r = d.verdict(3, 2, 0).unwrap();
        assert_eq!(DeadReason::decode(&r.encode()), Some(r));
        assert_eq!(r.to_string(), "timed out 2 times (limit 2)");
        assert_eq!(DeadReason::decode("reserves:1"), None);
    }

    #[test]
    fn backoff_grows_to_its_maximum_within_its_jitter() {
        let b = Backoff {
            base_ms: 100,
            factor: 2.0,
            max_ms: 1000,
            jitter: 0.0,
        };
        let delays: Vec<u64> = (0..6).map(|n| b.delay_ms(n, 0.0)).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay_ms(u32::MAX, 0.0), 1000);
        let j = Backoff { jitter: 0.5, ..b };
        assert_eq!(j.delay_ms(0, -1.0), 50);
        assert_eq!(j.delay_ms(0, 1.0), 150);
    }

    #[test]
    fn the_file_reads_rules() {
        let set = PolicyFile::parse(
            r#"
            [[policy]]
            tubes = "mail*"
            dead_letter = { reserves = 5 }
            backoff = { base_ms = 1000, max_ms = 60000, jitter = 0.2 }
            "#,
        )
        .unwrap();
        let p = set.for_tube("mail-1").unwrap();
        assert_eq!(p.backoff.unwrap().factor, 2.0);
        assert!(PolicyFile::parse("[[policy]]\ntubes = \"x\"\ncolour = 1\n").is_err());
    }
}
