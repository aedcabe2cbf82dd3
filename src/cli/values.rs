//! Values of the flags read beanstalkd's way (`-z`, `-s`: `parse_size`) and redstalk's
//! own (durations and byte counts with units), and this host's name.

/// This host's name, for the address other instances reach it at.
pub(super) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A duration: whole seconds, or a number with `s`, `m`, `h` or `d` (`--retain`), in ms.
pub(super) fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid duration: {s} (e.g. 90s, 30m, 24h, 7d)");
    let (digits, unit_ms) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1_000),
        Some(b'm') => (&s[..s.len() - 1], 60_000),
        Some(b'h') => (&s[..s.len() - 1], 3_600_000),
        Some(b'd') => (&s[..s.len() - 1], 86_400_000),
        _ => (s, 1_000),
    };
    let n: u64 = digits.parse().map_err(|_| invalid())?;
    n.checked_mul(unit_ms).ok_or_else(invalid)
}

/// A byte count with an optional binary `K`, `M` or `G` (`--retain-bytes`).
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size: {s} (e.g. 65536, 512K, 64M, 1G)");
    let (digits, unit) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = digits.parse().map_err(|_| invalid())?;
    n.checked_mul(unit).ok_or_else(invalid)
}

/// A size as the reference's `parse_size_t` reads it with `sscanf("%zu%c")`: leading
/// white space, an optional sign, decimal digits, nothing after. A value too large for
/// 64 bits saturates and a negative one wraps (`-5` is 2^64 - 5), as `strtoull` does;
/// either is then clamped to the maximum job size with a warning.
pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size: {s}");
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let value = digits.bytes().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    Ok(match value {
        None => u64::MAX,
        Some(n) if negative => n.wrapping_neg(),
        Some(n) => n,
    })
}
