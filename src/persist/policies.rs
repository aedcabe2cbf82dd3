//! The tube policies (store/policy.rs, docs/POLICIES.md) as a [`Book`]: where they
//! are kept (this process, `-b DIR/policies.json`, or the hash `{P}:policies` with its
//! counter `{P}:policies:version`) and how a change reaches every store that applies
//! them (`Engine::start` follows the book). `--policies FILE` (TOML, [`PolicyFile`]) is
//! the seed, written into the home at start.

use std::path::Path;

use super::book::{self, Book, Kept};
use crate::redis::keys::Keys;
use crate::store::policy::{Policies, Policy, PolicyError, PolicyFile, Rule};

pub use super::book::{ChangeError, Home, HomeError};

/// The process's tube policies.
pub type PolicyBook = Book<Policies>;

/// The `-b` home's file name, in the log's directory.
pub const FILE_NAME: &str = "policies.json";

impl Kept for Policies {
    type Entry = Policy;
    type Refused = PolicyError;
    const WHAT: &'static str = "policies";
    const FILE_NAME: &'static str = FILE_NAME;

    fn redis_keys(keys: &Keys) -> (String, String) {
        (keys.policies(), keys.policies_version())
    }
    fn with(&self, tubes: &str, policy: Policy) -> Result<Policies, PolicyError> {
        Policies::with(self, tubes, policy)
    }
    fn without(&self, tubes: &str) -> Option<Policies> {
        Policies::without(self, tubes)
    }
    fn entry(&self, tubes: &str) -> Option<Policy> {
        self.rule_for_pattern(tubes)
    }
    fn entries(&self) -> Vec<(String, Policy)> {
        self.rules()
            .into_iter()
            .map(|r| (r.tubes, r.policy))
            .collect()
    }
    fn from_kept(
        entries: Vec<(String, Policy)>,
        mut skipped: impl FnMut(&str, PolicyError),
    ) -> Policies {
        let rules = entries
            .into_iter()
            .map(|(tubes, policy)| Rule { tubes, policy });
        Policies::from_kept(rules, |rule, err| skipped(&rule.tubes, err))
    }
    fn file_text(&self) -> Vec<u8> {
        // Rules are plain values: they always serialize.
        serde_json::to_vec_pretty(&self.rules()).unwrap_or_default()
    }
    fn from_file_text(bytes: &[u8]) -> Result<Vec<(String, Policy)>, serde_json::Error> {
        let rules: Vec<Rule> = serde_json::from_slice(bytes)?;
        Ok(rules.into_iter().map(|r| (r.tubes, r.policy)).collect())
    }
}

/// The `--policies` file's rules, as a seed for [`Book::open`].
pub fn read_seed(path: &Path) -> Result<Vec<(String, Policy)>, HomeError> {
    let text = book::read_text(Policies::WHAT, path)?;
    let set = PolicyFile::parse(&text).map_err(|why| book::damaged(Policies::WHAT, path, why))?;
    Ok(set.entries())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::book::Kept;
    use crate::store::policy::DeadLetter;

    fn dl(n: u32) -> Policy {
        Policy {
            dead_letter: Some(DeadLetter {
                reserves: Some(n),
                timeouts: None,
            }),
            backoff: None,
        }
    }

    #[tokio::test]
    async fn a_file_home_keeps_changes_and_the_seed_replaces_its_tubes() {
        let dir = std::env::temp_dir().join(format!("rs-policies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        let _ = std::fs::remove_file(&path);
        let book = PolicyBook::open(Home::File(path.clone()), Vec::new())
            .await
            .unwrap();
        let mut rx = book.subscribe();
        book.set("a*", dl(3)).await.unwrap();
        book.set("b", dl(4)).await.unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().rules().len(), 2);
        assert!(book.remove("b").await.unwrap());
        assert!(!book.remove("b").await.unwrap());

        let seed = Policies::default()
            .with("a*", dl(9))
            .unwrap()
            .with("c", dl(1))
            .unwrap();
        let again = PolicyBook::open(Home::File(path.clone()), seed.entries())
            .await
            .unwrap();
        let rules = again.current().rules();
        let got: Vec<(String, u32)> = rules
            .iter()
            .map(|r| {
                (
                    r.tubes.clone(),
                    r.policy.dead_letter.unwrap().reserves.unwrap(),
                )
            })
            .collect();
        assert_eq!(got, [("c".to_string(), 1), ("a*".to_string(), 9)]);
        let third = PolicyBook::open(Home::File(path.clone()), Vec::new())
            .await
            .unwrap();
        assert_eq!(*third.current(), *again.current(), "the seed was kept");

        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            PolicyBook::open(Home::File(path), Vec::new()).await,
            Err(HomeError::Damaged { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
