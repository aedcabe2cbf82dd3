//! Job bodies that carry their own send time and can be checked on arrival.
//!
//! A body is 16 lowercase hex digits (nanoseconds since the run started, taken when the
//! put was queued) followed by filler derived from that time, so a worker can tell
//! the end-to-end latency of each job and notice a body that was cut, padded or mixed
//! up with another job's.

use anyhow::{Result, bail};

/// The smallest body: the 16 hex digits of the send time.
pub const MIN_SIZE: usize = 16;

fn filler(ts: u64, i: usize) -> u8 {
    // `ts % 26` and `i % 26` keep the sum small; the result is a lowercase letter.
    b'a' + ((ts % 26) as usize + i % 26) as u8 % 26
}

/// Append a body of `size` bytes (at least [`MIN_SIZE`]) stamped with `ts`.
pub fn write(out: &mut Vec<u8>, ts: u64, size: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        out.push(HEX[((ts >> (shift * 4)) & 0xf) as usize]);
    }
    out.extend((MIN_SIZE..size).map(|i| filler(ts, i)));
}

/// Check a body of the expected `size` and return its send time.
pub fn check(body: &[u8], size: usize) -> Result<u64> {
    if body.len() != size {
        bail!("body of {} bytes, expected {size}", body.len());
    }
    let Some(stamp) = body.get(..MIN_SIZE) else {
        bail!("body shorter than {MIN_SIZE} bytes");
    };
    let ts = std::str::from_utf8(stamp)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok());
    let Some(ts) = ts else {
        bail!(
            "body does not start with a time stamp: {:?}",
            String::from_utf8_lossy(stamp)
        );
    };
    if let Some(i) = (MIN_SIZE..size).find(|&i| body[i] != filler(ts, i)) {
        bail!("body byte {i} differs from what was put");
    }
    Ok(ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for size in [16, 17, 1024] {
            let mut b = Vec::new();
            write(&mut b, 0x1234_5678_9abc, size);
            assert_eq!(b.len(), size);
            assert_eq!(check(&b, size).unwrap(), 0x1234_5678_9abc);
        }
    }

    #[test]
    fn damage_is_noticed() {
        let mut b = Vec::new();
        write(&mut b, 42, 64);
        assert!(check(&b, 65).is_err());
        b[40] ^= 1;
        assert!(check(&b, 64).is_err());
        let mut c = Vec::new();
        write(&mut c, u64::MAX, 16);
        c[0] = b'z';
        assert!(check(&c, 16).is_err());
    }
}
