//! The refusal of requests made from a page of another site: a browser sends an
//! operator's cookie (or a page's script its token) along, so a change must come from
//! this listener's own origin. CSRF protection, which tower-http's CORS layer does not
//! give.

use axum::http::{HeaderMap, header};

/// Whether a request came from a page of another origin: its `Sec-Fetch-Site` says
/// so, or its `Origin` is not this listener's own host.
pub fn cross_origin(headers: &HeaderMap) -> bool {
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if matches!(site, "cross-site" | "same-site") {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    origin_host.is_none_or(|o| !o.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_compared_with_the_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9100".parse().unwrap());
        assert!(!cross_origin(&h));
        h.insert(header::ORIGIN, "http://127.0.0.1:9100".parse().unwrap());
        assert!(!cross_origin(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(cross_origin(&h));
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(cross_origin(&h));
    }
}
