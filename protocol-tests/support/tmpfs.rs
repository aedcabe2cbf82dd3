//! A tmpfs of a given size mounted on a fresh directory (needs root), for tests of a
//! full disk under the log (`-b`) or under Redis' AOF; unmounted when dropped.

use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::Duration;

use super::fresh_dir;

/// A tmpfs mounted on a fresh directory; unmounted (and the directory removed) on drop.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = fresh_dir();
        let opts = format!("size={size}");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Tmpfs { dir })
    }

    pub fn resize(&self, size: &str) {
        let opts = format!("remount,size={size}");
        let status = Command::new("mount")
            .args(["-o", &opts])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(status.success(), "remount to {size} failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut cmd = Command::new("umount");
            if lazy {
                cmd.arg("-l");
            }
            cmd.arg(&self.dir)
                .status()
                .is_ok_and(|status| status.success())
        };
        // A process that just died may hold the mount busy for a moment.
        let unmounted = (0..20).any(|_| {
            umount(false) || {
                thread::sleep(Duration::from_millis(100));
                false
            }
        }) || umount(true);
        if unmounted {
            let _ = std::fs::remove_dir(&self.dir);
        } else {
            eprintln!("could not unmount {}", self.dir.display());
        }
    }
}
