//! `-u USER`: become USER after binding the listening socket, as the reference does.

use std::ffi::CString;

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("no such user {0:?} (for -u)")]
    NoUser(String),
    #[error("cannot become user {user:?}: {source} (run as root, or drop -u)")]
    Switch {
        user: String,
        source: std::io::Error,
    },
}

pub fn become_user(user: &str) -> Result<(), PrivilegeError> {
    let name = CString::new(user).map_err(|_| PrivilegeError::NoUser(user.to_string()))?;
    let switch = |source| PrivilegeError::Switch {
        user: user.to_string(),
        source,
    };
    // SAFETY: `getpwnam` returns a pointer into static storage or null; it is read at
    // once, before any other call that could overwrite it.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(PrivilegeError::NoUser(user.to_string()));
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        if libc::setgid(gid) != 0 {
            return Err(switch(std::io::Error::last_os_error()));
        }
        if libc::setuid(uid) != 0 {
            return Err(switch(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
