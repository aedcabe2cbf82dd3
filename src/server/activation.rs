//! Socket activation: the listening sockets systemd (or `systemd-socket-activate`) hands
//! over through `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES`, as sd_listen_fds(3)
//! reads them. beanstalkd 1.12 uses libsystemd's `sd_listen_fds` for this; the rules
//! here are that function's, written out.
//!
//! Invariants: [`take_from_env`] runs once, before any other thread exists, and always
//! removes the three variables (so a child process never believes the sockets are its
//! own). A passed descriptor is owned only after it proved to be a listening stream
//! socket, TCP or unix; it is then close-on-exec and non-blocking.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// A listening socket, not yet registered with the async runtime.
#[derive(Debug)]
pub enum InheritedListener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// One socket handed over by systemd.
#[derive(Debug)]
pub struct Inherited {
    pub fd: RawFd,
    /// Its `LISTEN_FDNAMES` entry (`FileDescriptorName=`, by default the socket unit's
    /// name), for the logs.
    pub name: Option<String>,
    pub listener: InheritedListener,
}

/// Sockets were passed to us, but not in a usable form. redstalk does not start: the
/// socket unit (or whatever set the variables) must be fixed.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error(
        "{var}={value:?} is not a valid value (socket activation); fix the unit that starts \
         redstalk or unset {var}"
    )]
    BadVariable { var: &'static str, value: String },
    #[error(
        "descriptor {fd} passed by systemd (LISTEN_FDS) is {what}, not a listening TCP or \
         unix stream socket; use ListenStream= in the socket unit"
    )]
    NotAListener { fd: RawFd, what: String },
    #[error("descriptor {fd} passed by systemd (LISTEN_FDS) cannot be used: {source}")]
    Unusable { fd: RawFd, source: io::Error },
}

/// The variables sd_listen_fds(3) reads, removed from the environment.
#[derive(Debug, Default)]
struct Passed {
    pid: Option<String>,
    fds: Option<String>,
    names: Option<String>,
}

/// The sockets systemd passed to this process, in descriptor order; empty when none
/// were (then redstalk binds `-l`/`-p` itself).
///
/// Must be called before any other thread starts: it removes the variables from the
/// process environment.
pub fn take_from_env() -> Result<Vec<Inherited>, ActivationError> {
    let passed = Passed {
        pid: std::env::var("LISTEN_PID").ok(),
        fds: std::env::var("LISTEN_FDS").ok(),
        names: std::env::var("LISTEN_FDNAMES").ok(),
    };
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        // SAFETY: the caller runs this before the async runtime or any other thread
        // exists, so nothing reads the environment concurrently.
        #[allow(unsafe_code)]
        unsafe {
            std::env::remove_var(var);
        }
    }
    descriptors(&passed, std::process::id())?
        .into_iter()
        .map(|(fd, name)| {
            Ok(Inherited {
                fd,
                name,
                listener: adopt(fd)?,
            })
        })
        .collect()
}

/// The descriptors (with their names) the variables pass to process `pid`: none unless
/// `LISTEN_PID` names it, as in sd_listen_fds(3). Names are optional and only label the
/// logs, so a name list of the wrong length is ignored.
fn descriptors(passed: &Passed, pid: u32) -> Result<Vec<(RawFd, Option<String>)>, ActivationError> {
    let bad = |var, value: &str| ActivationError::BadVariable {
        var,
        value: value.to_string(),
    };
    let Some(listen_pid) = passed.pid.as_deref() else {
        return Ok(Vec::new());
    };
    let for_pid: u32 = listen_pid
        .trim()
        .parse()
        .map_err(|_| bad("LISTEN_PID", listen_pid))?;
    if for_pid != pid {
        // Meant for another process (we inherited the environment of one).
        return Ok(Vec::new());
    }
    let Some(listen_fds) = passed.fds.as_deref() else {
        return Ok(Vec::new());
    };
    let count: RawFd = listen_fds
        .trim()
        .parse()
        .ok()
        .filter(|n| *n > 0 && *n <= RawFd::MAX - LISTEN_FDS_START)
        .ok_or_else(|| bad("LISTEN_FDS", listen_fds))?;
    let names: Vec<&str> = passed
        .names
        .as_deref()
        .map(|n| n.split(':').collect())
        .unwrap_or_default();
    let named = names.len() == count as usize;
    Ok((0..count)
        .map(|i| {
            let name = names
                .get(i as usize)
                .filter(|n| named && !n.is_empty())
                .map(|n| n.to_string());
            (LISTEN_FDS_START + i, name)
        })
        .collect())
}

/// Check that `fd` is a listening stream socket (TCP or unix), own it, and make it
/// close-on-exec and non-blocking.
fn adopt(fd: RawFd) -> Result<InheritedListener, ActivationError> {
    let unusable = |source| ActivationError::Unusable { fd, source };
    let not = |what: &str| ActivationError::NotAListener {
        fd,
        what: what.to_string(),
    };
    // Close-on-exec first: it also proves the descriptor is open (EBADF otherwise).
    set_cloexec(fd).map_err(unusable)?;
    let kind = match sockopt(fd, libc::SO_TYPE) {
        Ok(kind) => kind,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => return Err(not("not a socket")),
        Err(e) => return Err(unusable(e)),
    };
    if kind != libc::SOCK_STREAM {
        return Err(not("a datagram or other non-stream socket"));
    }
    if sockopt(fd, libc::SO_ACCEPTCONN).map_err(unusable)? == 0 {
        return Err(not("a stream socket that is not listening"));
    }
    let family = socket_family(fd).map_err(unusable)?;
    if ![libc::AF_INET, libc::AF_INET6, libc::AF_UNIX].contains(&family) {
        return Err(not(&format!("a socket of address family {family}")));
    }
    // SAFETY: systemd passed `fd` to this process for it to own; nothing else in the
    // process knows it (the variables are read once), and it is an open socket (checked
    // above), so owning it is sound. It is closed when the listener is dropped.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let listener = if family == libc::AF_UNIX {
        let l = std::os::unix::net::UnixListener::from(owned);
        l.set_nonblocking(true).map_err(unusable)?;
        InheritedListener::Unix(l)
    } else {
        let l = std::net::TcpListener::from(owned);
        l.set_nonblocking(true).map_err(unusable)?;
        InheritedListener::Tcp(l)
    };
    Ok(listener)
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor; an invalid one yields EBADF, no UB.
    #[allow(unsafe_code)]
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    #[allow(unsafe_code)]
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An integer `SOL_SOCKET` option of `fd`.
fn sockopt(fd: RawFd, option: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writes and `len` holds `value`'s size.
    #[allow(unsafe_code)]
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// The address family of the socket `fd` is bound to (`AF_INET`, `AF_UNIX`, …).
fn socket_family(fd: RawFd) -> io::Result<libc::c_int> {
    // SAFETY: an all-zero sockaddr_storage is a valid value of that plain C struct.
    #[allow(unsafe_code)]
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `addr` and `len` are valid for writes and `len` holds `addr`'s size, the
    // largest any address family needs.
    #[allow(unsafe_code)]
    let r = unsafe { libc::getsockname(fd, (&raw mut addr).cast(), &raw mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(libc::c_int::from(addr.ss_family))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passed(pid: Option<&str>, fds: Option<&str>, names: Option<&str>) -> Passed {
        Passed {
            pid: pid.map(String::from),
            fds: fds.map(String::from),
            names: names.map(String::from),
        }
    }

    #[test]
    fn descriptors_are_ours_only_when_listen_pid_names_us() {
        let fds = |p| descriptors(&p, 42).unwrap();
        assert!(fds(passed(None, Some("2"), None)).is_empty());
        assert!(fds(passed(Some("41"), Some("2"), None)).is_empty());
        assert!(fds(passed(Some("42"), None, None)).is_empty());
        assert_eq!(
            fds(passed(Some("42"), Some("2"), None)),
            vec![(3, None), (4, None)]
        );
    }

    #[test]
    fn names_label_the_descriptors_when_there_is_one_per_descriptor() {
        let got = descriptors(&passed(Some("7"), Some("2"), Some("tcp:unix")), 7).unwrap();
        assert_eq!(
            got,
            vec![(3, Some("tcp".to_string())), (4, Some("unix".to_string()))]
        );
        let got = descriptors(&passed(Some("7"), Some("2"), Some("only-one")), 7).unwrap();
        assert_eq!(got, vec![(3, None), (4, None)]);
        let got = descriptors(&passed(Some("7"), Some("1"), Some("")), 7).unwrap();
        assert_eq!(got, vec![(3, None)]);
    }

    #[test]
    fn malformed_variables_are_errors_as_in_sd_listen_fds() {
        for (pid, fds) in [("x", "1"), ("7", "two"), ("7", "0"), ("7", "-1")] {
            let err = descriptors(&passed(Some(pid), Some(fds), None), 7).unwrap_err();
            assert!(
                matches!(err, ActivationError::BadVariable { .. }),
                "{pid} {fds}: {err}"
            );
        }
    }

    #[test]
    fn a_descriptor_that_is_not_a_listening_stream_socket_is_refused() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        assert!(matches!(
            adopt(fd),
            Err(ActivationError::NotAListener { .. })
        ));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&udp);
        assert!(matches!(
            adopt(fd),
            Err(ActivationError::NotAListener { .. })
        ));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&a);
        assert!(matches!(
            adopt(fd),
            Err(ActivationError::NotAListener { .. })
        ));
    }

    #[test]
    fn a_listening_socket_is_adopted_non_blocking_and_close_on_exec() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(tcp);
        let InheritedListener::Tcp(adopted) = adopt(fd).unwrap() else {
            panic!("a TCP listener adopted as unix");
        };
        assert_eq!(adopted.local_addr().unwrap(), addr);
        // Non-blocking: no pending connection answers WouldBlock at once.
        assert_eq!(
            adopted.accept().unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // SAFETY (test): fcntl on a descriptor the listener owns.
        #[allow(unsafe_code)]
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
    }
}
