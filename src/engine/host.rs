//! Facts about this process that `stats` reports: pid, a random per-process id, the
//! host's uname fields, and CPU usage.

use rand::RngExt;

/// Identity fixed at startup.
#[derive(Clone, Debug)]
pub struct HostInfo {
    pub pid: u32,
    /// 16 lowercase hex digits, new at every start (clients combine it with job ids).
    pub id: String,
    pub hostname: String,
    pub os: String,
    pub platform: String,
}

impl HostInfo {
    pub fn detect() -> HostInfo {
        let bytes: [u8; 8] = rand::rng().random();
        let id = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let (hostname, os, platform) = uname();
        HostInfo {
            pid: std::process::id(),
            id,
            hostname,
            os,
            platform,
        }
    }
}

/// (nodename, version, machine), as the reference reports them.
fn uname() -> (String, String, String) {
    // SAFETY: `uname` fills a caller-owned, zero-initialised struct; the fields are
    // NUL-terminated C strings within their arrays.
    #[allow(unsafe_code)]
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return (String::new(), String::new(), String::new());
        }
        let field = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (field(&u.nodename), field(&u.version), field(&u.machine))
    }
}

/// User and system CPU time of this process, as (seconds, microseconds).
pub fn rusage() -> ((u64, u32), (u64, u32)) {
    // SAFETY: `getrusage` fills a caller-owned, zero-initialised struct.
    #[allow(unsafe_code)]
    unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut r) != 0 {
            return ((0, 0), (0, 0));
        }
        let tv = |t: libc::timeval| (t.tv_sec.max(0) as u64, t.tv_usec.max(0) as u32);
        (tv(r.ru_utime), tv(r.ru_stime))
    }
}
