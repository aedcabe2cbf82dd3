//! The Debian package on this machine's Debian (root): built from the binaries cargo
//! built for these tests, installed with apt in a container that boots this machine's
//! root under systemd over an overlay, started, socket-activated, upgraded while it
//! serves jobs from a `-b` log, removed and purged; the machine itself never changed.
//! The steps and their checks are in `deploy/debian/test` (Python), which this runs
//! with the binaries' directory.
//!
//! What the test proves: see the header of deploy/debian/test. It needs root and
//! systemd-nspawn, and refuses to run where a redstalk package or user already exists.

use std::path::Path;
use std::process::Command;

#[test]
fn the_debian_package_installs_serves_upgrades_and_purges() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_redstalk"))
        .parent()
        .unwrap()
        .to_path_buf();
    // The three binaries the package holds, built by cargo for this test.
    for bin in [
        env!("CARGO_BIN_EXE_redstalkctl"),
        env!("CARGO_BIN_EXE_redstalk-namespace"),
    ] {
        assert_eq!(Path::new(bin).parent(), Some(bin_dir.as_path()));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/debian/test");
    let status = Command::new("python3")
        .arg(script)
        .env("REDSTALK_BIN_DIR", &bin_dir)
        .status()
        .unwrap();
    assert!(status.success(), "deploy/debian/test: {status}");
}
