//! The tubes' policies (store/policy.rs) as the scripts take them where a reservation
//! ends: `release.lua` and `tick.lua` one tube's rule, `batch.lua` and `close.lua` one
//! per tube of the call (prelude.lua's `rule_of` and `rules_of` read them back).
//!
//! Invariants: with no policies every argument is empty or '-', which a script reads
//! without a Redis command more (a policy costs nothing measurable); a backoff's jitter
//! is drawn here, one spread per release (Lua's `math.random` is not random per call
//! on every Redis version), and the script computes the delay as `Backoff::delay_ms`
//! does, since the job's releases are only known in Redis.

use std::sync::Arc;

use super::RedisStore;
use crate::store::Policies;
use crate::store::policy::Policy;
use crate::util::lock;

impl RedisStore {
    /// The tubes' policies now (the lock is held only to clone the `Arc`).
    pub(super) fn policies(&self) -> Arc<Policies> {
        lock(&self.policies).clone()
    }
}

/// `tube`'s rule: "<reserves> <timeouts> <base_ms> <factor> <max_ms> <jitter>", 0 for
/// a limit or a backoff it lacks (a limit is at least 1, a base at least 1 ms:
/// `Policy::check`); '-' for a tube without one.
pub(super) fn rule(policies: &Policies, tube: &str) -> String {
    let Some(p) = policies.for_tube(tube) else {
        return "-".to_string();
    };
    let dl = p.dead_letter.unwrap_or_default();
    let (base, factor, max, jitter) = p.backoff.map_or((0, 1.0, 0, 0.0), |b| {
        (b.base_ms, b.factor, b.max_ms, b.jitter)
    });
    format!(
        "{} {} {base} {factor} {max} {jitter}",
        dl.reserves.unwrap_or(0),
        dl.timeouts.unwrap_or(0)
    )
}

/// The rules of a call's `tubes`, one line each in order; '' when none has one.
pub(super) fn rules(policies: &Policies, tubes: &[&str]) -> String {
    if policies.is_empty() || tubes.iter().all(|t| policies.for_tube(t).is_none()) {
        return String::new();
    }
    let lines: Vec<String> = tubes.iter().map(|t| rule(policies, t)).collect();
    lines.join("\n")
}

/// Where in `tube`'s backoff jitter a release lands: uniform in [-1, 1]; 0 without
/// jitter (or without a backoff), so the argument stays "0".
pub(super) fn spread(policies: &Policies, tube: &str) -> f64 {
    policies
        .for_tube(tube)
        .and_then(|p: &Policy| p.backoff)
        .map_or(0.0, |b| b.spread())
}

/// The spreads of a batch's releases, one per id sent, in order (`tubes`: each id's
/// tube), joined by ' '; '' when no tube's rule has jitter (each then reads 0).
pub(super) fn spreads<'a>(policies: &Policies, tubes: impl Iterator<Item = &'a str>) -> String {
    if policies.is_empty() {
        return String::new();
    }
    let drawn: Vec<f64> = tubes.map(|t| spread(policies, t)).collect();
    if drawn.iter().all(|s| *s == 0.0) {
        return String::new();
    }
    let words: Vec<String> = drawn.iter().map(f64::to_string).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::policy::{Backoff, DeadLetter};

    fn set() -> Policies {
        Policies::default()
            .with(
                "dl*",
                Policy {
                    dead_letter: Some(DeadLetter {
                        reserves: Some(5),
                        timeouts: None,
                    }),
                    backoff: Some(Backoff {
                        base_ms: 100,
                        factor: 2.5,
                        max_ms: 60_000,
                        jitter: 0.25,
                    }),
                },
            )
            .unwrap()
    }

    #[test]
    fn a_rule_is_six_numbers_and_no_rule_is_a_dash() {
        let p = set();
        assert_eq!(rule(&p, "dl-a"), "5 0 100 2.5 60000 0.25");
        assert_eq!(rule(&p, "other"), "-");
        assert_eq!(rules(&p, &["other", "x"]), "", "no tube with a rule");
        assert_eq!(rules(&p, &["other", "dl"]), "-\n5 0 100 2.5 60000 0.25");
        assert_eq!(rules(&Policies::default(), &["dl"]), "");
        assert_eq!(spreads(&p, ["other", "x"].into_iter()), "");
        let s = spreads(&p, ["other", "dl"].into_iter());
        let words: Vec<f64> = s.split(' ').map(|w| w.parse().unwrap()).collect();
        assert_eq!(words.len(), 2);
        assert_eq!(words[0], 0.0);
        assert!((-1.0..=1.0).contains(&words[1]));
    }

    /// The prelude's `backoff_delay` answers what `Backoff::delay_ms` does, run in a
    /// real redis-server on the numbers as this module writes them: growth, the cap,
    /// jitter either way (past the maximum too), the 1 ms floor, huge release counts.
    #[test]
    fn lua_backoff_is_rusts() {
        let Some(redis) = crate::redis::testing::PrivateRedis::start("the Lua backoff test") else {
            return;
        };
        let prelude = include_str!("lua/prelude.lua");
        let start = prelude
            .find("local function backoff_delay(")
            .expect("backoff_delay in the prelude");
        let len = prelude[start..].find("\nend\n").expect("its end") + "\nend\n".len();
        let script = format!(
            "{}\nlocal r = {{ base = tonumber(ARGV[1]), factor = tonumber(ARGV[2]), \
             max = tonumber(ARGV[3]), jitter = tonumber(ARGV[4]) }}\n\
             return backoff_delay(r, tonumber(ARGV[5]), tonumber(ARGV[6]))",
            &prelude[start..start + len]
        );
        let max = crate::protocol::ext::Millis::MAX.as_millis();
        let mut conn = redis.connection().expect("connect");
        let mut checked = 0;
        for (base_ms, factor, max_ms, jitter) in [
            (2000, 3.0, 10_000, 0.0),
            (100, 2.5, 60_000, 0.25),
            (1, 1.0, 1, 1.0),
            (7, 1.7, max, 0.5),
            (1000, 100.0, max, 1.0),
        ] {
            let b = Backoff {
                base_ms,
                factor,
                max_ms,
                jitter,
            };
            for releases in [0, 1, 2, 5, 17, 40, 1023, 5000] {
                for spread in [-1.0, -0.5, -0.123_456_789, 0.0, 0.3, 0.999, 1.0] {
                    let lua: u64 = redis::cmd("EVAL")
                        .arg(&script)
                        .arg(0)
                        .arg(base_ms.to_string())
                        .arg(factor.to_string())
                        .arg(max_ms.to_string())
                        .arg(jitter.to_string())
                        .arg(releases)
                        .arg(spread.to_string())
                        .query(&mut conn)
                        .expect("EVAL backoff_delay");
                    let rust = b.delay_ms(releases, spread);
                    assert_eq!(lua, rust, "{b:?} releases {releases} spread {spread}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 5 * 8 * 7);
    }
}
