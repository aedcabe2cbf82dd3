//! How many connections the process's file descriptor limit allows.
//!
//! At start the soft limit of open files (`RLIMIT_NOFILE`) is raised to the hard limit,
//! as servers commonly do (the usual soft limit, 1024, is a relic of `select`). The
//! connections then get what the limit leaves after [`RESERVED`] descriptors for the
//! rest of the process (Redis connections, the HTTP listener and its clients, log
//! files, the runtime's own). A served connection takes one descriptor, a relayed one
//! (a standby in leader mode) two: the client's and its side of the leader. The server
//! refuses (closes at once) a connection it has no descriptor for, rather than let
//! `accept` fail and new clients wait in the listen queue.

/// Descriptors kept for everything but client connections.
pub const RESERVED: u64 = 128;
/// The connection limit when none is given and descriptors allow more.
pub const DEFAULT_MAX_CONNECTIONS: usize = 65_536;
/// Descriptors counted at most (a hard limit may be near 2^30; a semaphore that large
/// is not needed, nor allowed).
const MAX_COUNTED: u64 = 1 << 24;

/// The open-files limit after [`raise_nofile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    pub soft: u64,
    pub hard: u64,
    /// The soft limit before it was raised, when it was.
    pub raised_from: Option<u64>,
}

/// Raise the soft limit of open files to the hard limit; the limit that holds now. A
/// refusal to raise it keeps the old one (the budget then follows that).
pub fn raise_nofile() -> std::io::Result<FdLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    #[allow(unsafe_code)]
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    if soft >= hard {
        return Ok(FdLimit {
            soft,
            hard,
            raised_from: None,
        });
    }
    let raised = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit from the struct it is given.
    #[allow(unsafe_code)]
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Ok(FdLimit {
            soft,
            hard,
            raised_from: None,
        });
    }
    Ok(FdLimit {
        soft: hard,
        hard,
        raised_from: Some(soft),
    })
}

/// The limits the server runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub max_connections: usize,
    /// Descriptors the connections may use together.
    pub max_descriptors: usize,
    /// What the operator should hear about (a limit given above what the descriptors
    /// allow).
    pub warnings: Vec<String>,
}

/// The limits for `soft` open files, with `given` the `--max-connections` asked for
/// (`None`: as many as the descriptors allow, up to [`DEFAULT_MAX_CONNECTIONS`]);
/// `relays`: this instance may relay its clients (leader mode), two descriptors each.
pub fn budget(soft: u64, given: Option<usize>, relays: bool) -> Budget {
    // Half of a tiny limit still goes to connections, so a test with 64 descriptors
    // serves a few clients.
    let reserved = RESERVED.min(soft / 2);
    let descriptors = usize::try_from((soft - reserved).min(MAX_COUNTED)).unwrap_or(usize::MAX);
    let mut warnings = Vec::new();
    let max_connections = match given {
        None => descriptors.min(DEFAULT_MAX_CONNECTIONS),
        Some(n) => {
            if n > descriptors {
                warnings.push(format!(
                    "--max-connections {n} is more than the file descriptor limit allows \
                     (RLIMIT_NOFILE {soft}: {descriptors} for connections); connections \
                     beyond {descriptors} are refused: raise the limit (LimitNOFILE=, \
                     ulimit -n) or lower --max-connections"
                ));
            } else if relays && n > descriptors / 2 {
                warnings.push(format!(
                    "--max-connections {n}: as a standby (relaying each client to the \
                     leader, two descriptors each) the file descriptor limit \
                     (RLIMIT_NOFILE {soft}) allows {} clients; more are refused: raise \
                     the limit (LimitNOFILE=, ulimit -n) or lower --max-connections",
                    descriptors / 2
                ));
            }
            n.min(descriptors)
        }
    };
    Budget {
        max_connections: max_connections.max(1),
        max_descriptors: descriptors.max(1),
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_get_what_the_descriptors_leave() {
        let b = budget(1024, None, true);
        assert_eq!((b.max_connections, b.max_descriptors), (896, 896));
        assert!(b.warnings.is_empty());
        let b = budget(1 << 20, None, true);
        assert_eq!(b.max_connections, DEFAULT_MAX_CONNECTIONS);
        let b = budget(64, None, false);
        assert_eq!(b.max_descriptors, 32);
    }

    #[test]
    fn a_limit_above_the_descriptors_is_capped_and_warned_of() {
        let b = budget(1024, Some(65_536), false);
        assert_eq!(b.max_connections, 896);
        assert_eq!(b.warnings.len(), 1, "{:?}", b.warnings);
        assert!(b.warnings[0].contains("RLIMIT_NOFILE 1024"));
        // Served alone it fits; relayed (two descriptors each) it does not.
        assert!(budget(1024, Some(600), false).warnings.is_empty());
        let relayed = budget(1024, Some(600), true);
        assert_eq!(relayed.max_connections, 600);
        assert!(
            relayed.warnings[0].contains("448 clients"),
            "{:?}",
            relayed.warnings
        );
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let lim = raise_nofile().unwrap();
        assert_eq!(lim.soft, lim.hard);
    }
}
