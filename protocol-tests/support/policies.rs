//! Tube policies as the operator API lists them (docs/POLICIES.md), for the tests
//! that set them through the API and through redstalkctl.

use serde_json::Value;

/// The patterns of a `GET /policies` answer, in its order (most specific first).
pub fn patterns(list: &Value) -> Vec<&str> {
    list["policies"]
        .as_array()
        .map(|rules| rules.iter().filter_map(|r| r["tubes"].as_str()).collect())
        .unwrap_or_default()
}
