//! A dictionary: the named values of a `stats`, `stats-tube` or `stats-job` reply (or
//! their admin API twins), in the order the server gave them, as the tool prints them.
//!
//! Invariants: keys are beanstalkd's YAML names on both paths (protocol and API), so
//! the tool's tables and `--json` output are the same whichever path a command took;
//! a value is a JSON number when the server printed a number and the key is not one of
//! the caller's string keys (a `version` of `1.12` or a server `id` of digits stays a
//! string), otherwise a JSON string.

use redstalk::http::api::types::StatsDoc;
use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dict(pub Vec<(String, Value)>);

impl Dict {
    /// Parse a YAML dictionary reply (`---` then `key: value` lines); values of
    /// `string_keys` stay strings.
    pub fn from_yaml(text: &str, string_keys: &[&str]) -> Dict {
        let pairs = text
            .lines()
            .filter(|l| *l != "---")
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| {
                let v = unquote(v.trim());
                let value = if string_keys.contains(&k) {
                    Value::String(v.to_string())
                } else {
                    number_or_string(v)
                };
                (k.to_string(), value)
            })
            .collect();
        Dict(pairs)
    }

    /// An API stats document, in its order.
    pub fn of_stats(doc: StatsDoc) -> Dict {
        Dict(doc.0.into_iter().collect())
    }

    /// An API answer's fields, in the order its type declares them.
    pub fn of(answer: &impl Serialize) -> Dict {
        match serde_json::to_value(answer) {
            Ok(Value::Object(m)) => Dict(m.into_iter().collect()),
            _ => Dict::default(),
        }
    }

    pub fn to_json(&self) -> Value {
        let map: Map<String, Value> = self.0.iter().cloned().collect();
        Value::Object(map)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A figure as a number (0 when missing or not a number).
    pub fn u64(&self, key: &str) -> u64 {
        self.get(key).and_then(Value::as_u64).unwrap_or(0)
    }

    /// A figure as display text (empty when missing).
    pub fn text(&self, key: &str) -> String {
        self.get(key).map(display).unwrap_or_default()
    }

    pub fn push(&mut self, key: &str, value: Value) {
        self.0.push((key.to_string(), value));
    }
}

/// A value as a table cell: strings without their JSON quotes, `null` as `-`.
pub fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

/// beanstalkd 1.13 quotes string values with plain `"` and never escapes (1.12 does
/// not quote): strip one pair of quotes.
fn unquote(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(v)
}

fn number_or_string(v: &str) -> Value {
    if let Ok(n) = v.parse::<u64>() {
        return Value::from(n);
    }
    if let Ok(n) = v.parse::<i64>() {
        return Value::from(n);
    }
    // rusage-utime and friends: seconds with a fraction.
    if v.contains('.')
        && let Ok(f) = v.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Value::Number(n);
    }
    Value::String(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_numbers_strings_and_quotes() {
        let f = Dict::from_yaml(
            "---\nname: \"emails\"\ncurrent-jobs-ready: 3\nrusage-utime: 0.012000\nversion: 1.12\nid: 1234\n",
            &["version", "id"],
        );
        assert_eq!(f.text("name"), "emails");
        assert_eq!(f.u64("current-jobs-ready"), 3);
        assert!(f.get("rusage-utime").is_some_and(Value::is_f64));
        assert_eq!(f.get("version"), Some(&Value::from("1.12")));
        assert_eq!(f.get("id"), Some(&Value::from("1234")));
        assert_eq!(f.0[0].0, "name", "server order kept");
    }
}
