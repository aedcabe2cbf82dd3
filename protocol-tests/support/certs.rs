//! Certificates for the tests of TLS (to Redis, and on redstalk's own listeners), made
//! with the `openssl` command line: a CA of the test's own, a server certificate for
//! 127.0.0.1 and localhost (which Redis also presents as a client, on a TLS cluster bus
//! and replication link), a client certificate, and a second CA that signed nothing;
//! more client certificates on demand ([`Certs::issue`]). Removed when dropped.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::free_port;

/// A directory of certificates: `ca.pem`, `server.{pem,key}`, `client.{pem,key}`, and
/// `other-ca.pem` (a CA that signed nothing here).
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    pub fn make() -> Certs {
        let dir = std::env::temp_dir().join(format!(
            "redstalk-test-tls-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ssl = |args: &[&str]| openssl(&dir, args);
        for ca in ["ca", "other-ca"] {
            ssl(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=redstalk test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for who in ["server", "client"] {
            ssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={who}"),
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
            ]);
            ssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
                "-out",
                &format!("{who}.pem"),
            ]);
        }
        Certs { dir }
    }

    /// Issue `{name}.pem` and `{name}.key`: a client certificate with subject CN `cn`,
    /// the subject alternative names `san` (e.g. `DNS:worker-1.example.com`; empty:
    /// none), signed by `ca` (`ca` or `other-ca`), valid for `days` (negative: already
    /// expired).
    pub fn issue(&self, name: &str, cn: &str, san: &str, ca: &str, days: i32) {
        let mut ext = String::from("extendedKeyUsage=clientAuth\n");
        if !san.is_empty() {
            ext.push_str(&format!("subjectAltName={san}\n"));
        }
        std::fs::write(self.dir.join(format!("{name}.ext")), ext).unwrap();
        let ssl = |args: &[&str]| openssl(&self.dir, args);
        ssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        ssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            &days.to_string(),
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// Run `openssl ARGS` in `dir`; panics, with its error output, when it fails.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// redstalk's `--redis-tls-*` arguments: trust `ca` (a file of [`Certs`]), present the
/// client certificate.
pub fn tls_args(certs: &Certs, ca: &str) -> Vec<String> {
    vec![
        "--redis-tls-ca".into(),
        certs.path(ca),
        "--redis-tls-cert".into(),
        certs.path("client.pem"),
        "--redis-tls-key".into(),
        certs.path("client.key"),
    ]
}
