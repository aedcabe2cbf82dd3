//! `-u USER`: become USER after binding the listening socket, as the reference does.
//!
//! Invariant: afterwards the process holds USER's identity only: its uid, its primary
//! group, and its own supplementary groups (from the group database). The reference
//! changes only the uid and gid, so a beanstalkd started by root keeps root's
//! supplementary groups (0 and whatever root belongs to); redstalk replaces them first
//! (docs/COMPAT.md).

use std::ffi::CString;

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("no such user {0:?} (for -u)")]
    NoUser(String),
    #[error("cannot become user {user:?}: {step} failed: {source} (run as root, or drop -u)")]
    Switch {
        user: String,
        step: &'static str,
        source: std::io::Error,
    },
}

pub fn become_user(user: &str) -> Result<(), PrivilegeError> {
    let name = CString::new(user).map_err(|_| PrivilegeError::NoUser(user.to_string()))?;
    let failed = |step| PrivilegeError::Switch {
        user: user.to_string(),
        step,
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: `getpwnam` returns a pointer into static storage or null; it is read at
    // once, before any other call that could overwrite it.
    #[allow(unsafe_code)]
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(PrivilegeError::NoUser(user.to_string()));
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    // The groups go first: once the uid is no longer root, they cannot be changed.
    // SAFETY: plain system calls; `name` is a valid NUL-terminated string for the call.
    // glibc applies each to every thread of the process.
    #[allow(unsafe_code)]
    unsafe {
        if libc::initgroups(name.as_ptr(), gid) != 0 {
            return Err(failed("initgroups"));
        }
        if libc::setgid(gid) != 0 {
            return Err(failed("setgid"));
        }
        if libc::setuid(uid) != 0 {
            return Err(failed("setuid"));
        }
    }
    Ok(())
}
