//! `redstalkctl policy list|set|remove`: the tube policies (docs/POLICIES.md) through
//! the API's `/policies` (there is no protocol command for them: without `--api`,
//! exit 3).
//!
//! Invariant: `--json` prints the API's own answer; `set` sends exactly the rule the
//! flags say (a dead letter when a limit is given, a backoff when its base is), and the
//! server judges it (400 → exit 2 with its message).

use clap::{Args, Subcommand};
use redstalk::http::api::types::{PolicyList, PolicyRemoved};
use redstalk::store::policy::{Backoff, DeadLetter, Policy, Rule};

use crate::Ctx;
use crate::api::seg;
use crate::error::{CtlError, EXIT_OK, Result};
use crate::render::{Table, print_json};

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Every rule, most specific first.
    List,
    /// Set the rule for TUBES (a tube, `prefix*` or `*`), replacing the one it had.
    Set(SetArgs),
    /// Remove the rule for TUBES.
    Remove { tubes: String },
}

#[derive(Args)]
pub struct SetArgs {
    /// A tube, `prefix*` or `*`.
    pub tubes: String,
    /// Bury a job once it has been reserved N times without a delete.
    #[arg(long, value_name = "N")]
    pub dead_reserves: Option<u32>,
    /// Bury a job once its TTR has lapsed N times.
    #[arg(long, value_name = "N")]
    pub dead_timeouts: Option<u32>,
    /// A release with delay 0 waits MS, times the factor for each earlier release.
    #[arg(long, value_name = "MS", requires = "backoff_max")]
    pub backoff_base: Option<u64>,
    /// The longest such wait.
    #[arg(long, value_name = "MS", requires = "backoff_base")]
    pub backoff_max: Option<u64>,
    /// How much each earlier release multiplies the wait.
    #[arg(long, value_name = "F", default_value_t = 2.0)]
    pub backoff_factor: f64,
    /// Move each wait by up to this fraction of itself, either way (0 to 1).
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub backoff_jitter: f64,
}

impl SetArgs {
    fn policy(&self) -> Result<Policy> {
        let dead_letter =
            (self.dead_reserves.is_some() || self.dead_timeouts.is_some()).then_some(DeadLetter {
                reserves: self.dead_reserves,
                timeouts: self.dead_timeouts,
            });
        let backoff = match (self.backoff_base, self.backoff_max) {
            (Some(base_ms), Some(max_ms)) => Some(Backoff {
                base_ms,
                factor: self.backoff_factor,
                max_ms,
                jitter: self.backoff_jitter,
            }),
            _ => None,
        };
        if dead_letter.is_none() && backoff.is_none() {
            return Err(CtlError::Usage(
                "policy set needs --dead-reserves, --dead-timeouts or --backoff-base with \
                 --backoff-max"
                    .into(),
            ));
        }
        Ok(Policy {
            dead_letter,
            backoff,
        })
    }
}

pub fn policy(ctx: &Ctx, cmd: &PolicyCmd) -> Result<u8> {
    let api = ctx.need_api("policy")?;
    match cmd {
        PolicyCmd::List => {
            let list: PolicyList = api.get("/policies", &())?;
            if ctx.json {
                print_json(&list);
            } else {
                print!("{}", table(&list.policies));
                if !list.persisted {
                    eprintln!("(memory mode: these rules last as long as the server runs)");
                }
            }
        }
        PolicyCmd::Set(a) => {
            let rule: Rule = api.put(&format!("/policies/{}", seg(&a.tubes)), &a.policy()?)?;
            if ctx.json {
                print_json(&rule);
            } else {
                print!("{}", table(std::slice::from_ref(&rule)));
            }
        }
        PolicyCmd::Remove { tubes } => {
            let removed: PolicyRemoved = api.delete(&format!("/policies/{}", seg(tubes)))?;
            if ctx.json {
                print_json(&removed);
            } else {
                println!("removed the policy for {tubes}");
            }
        }
    }
    Ok(EXIT_OK)
}

fn table(rules: &[Rule]) -> String {
    let mut t = Table::new(&["TUBES", "DEAD AFTER", "BACKOFF"]);
    for r in rules {
        let dead = r.policy.dead_letter.map_or("-".to_string(), |d| {
            let mut parts = Vec::new();
            if let Some(n) = d.reserves {
                parts.push(format!("{n} reserves"));
            }
            if let Some(n) = d.timeouts {
                parts.push(format!("{n} timeouts"));
            }
            parts.join(", ")
        });
        let backoff = r.policy.backoff.map_or("-".to_string(), |b| {
            format!(
                "{} ms x{} up to {} ms, jitter {}",
                b.base_ms, b.factor, b.max_ms, b.jitter
            )
        });
        t.row(vec![r.tubes.clone(), dead, backoff]);
    }
    t.render()
}
