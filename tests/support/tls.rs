//! Scratch folders, and the certificates the TLS tests use (made once per test binary with the
//! openssl CLI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A scratch directory under the system's temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A new, empty folder; `tag` shows in its name.
    pub fn new(tag: &str) -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("redlock-tests-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    /// The path of `name` in the folder.
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl CLI (scripts/deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two authorities: `ca` signs the masters' certificate (for 127.0.0.1 and localhost) and the
/// proxy's client certificate; `other` signs a client certificate no master trusts.
pub struct Certs {
    dir: Scratch,
}

impl Certs {
    /// The certificates, made on first use.
    pub fn get() -> &'static Certs {
        static CERTS: OnceLock<Certs> = OnceLock::new();
        CERTS.get_or_init(|| {
            let dir = Scratch::new("certs");
            let d = &dir.0;
            let ec = [
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ];
            for ca in ["ca", "other"] {
                let key = format!("{ca}.key");
                let crt = format!("{ca}.crt");
                let subj = format!("/CN=redlock test {ca}");
                let mut a = vec!["req", "-x509"];
                a.extend(ec);
                a.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
                openssl(d, &a);
            }
            std::fs::write(
                d.join("server.ext"),
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
            )
            .expect("ext");
            std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
            for (name, ca, ext) in [
                ("server", "ca", "server.ext"),
                ("client", "ca", "client.ext"),
                ("stranger", "other", "client.ext"),
            ] {
                let key = format!("{name}.key");
                let csr = format!("{name}.csr");
                let crt = format!("{name}.crt");
                let subj = format!("/CN={name}");
                let mut a = vec!["req"];
                a.extend(ec);
                a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
                openssl(d, &a);
                let ca_crt = format!("{ca}.crt");
                let ca_key = format!("{ca}.key");
                openssl(
                    d,
                    &[
                        "x509",
                        "-req",
                        "-in",
                        &csr,
                        "-CA",
                        &ca_crt,
                        "-CAkey",
                        &ca_key,
                        "-CAcreateserial",
                        "-out",
                        &crt,
                        "-days",
                        "2",
                        "-extfile",
                        ext,
                    ],
                );
            }
            Certs { dir }
        })
    }

    /// The path of one of the files (`ca.crt`, `server.key`, `client.crt`, `stranger.key`...).
    pub fn file(&self, name: &str) -> String {
        self.dir.path(name)
    }
}
