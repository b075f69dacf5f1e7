//! Helpers for the TLS tests (`tls.rs`, `fanout_tls.rs`, `limits.rs`): test certificates made
//! with the `openssl` CLI, a bounded command runner, [`garbage_is_closed`], and a blocking TLS client over `redis-cli`'s
//! view of the world (`openssl s_client` is not needed).
//!
//! Certificates: a throwaway CA (P-256, CA:TRUE, one day), a server certificate for
//! `localhost` / `127.0.0.1` (serverAuth) and a client certificate (clientAuth), both signed
//! by the CA. webpki (rustls' verifier) wants v3 certificates with SANs, which is why the
//! extensions are spelled out.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The files of one test PKI, in a directory removed on drop.
pub struct Certs {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl (the openssl CLI is needed for the TLS tests)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Certs {
    /// Generates the CA, server and client certificates (about 0.1 s).
    pub fn generate(name: &str) -> Certs {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("certs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=recached-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&dir, &ca);
        for (who, eku) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let key = format!("{who}.key");
            let csr = format!("{who}.csr");
            let crt = format!("{who}.crt");
            let ext = format!("{who}.ext");
            std::fs::write(
                dir.join(&ext),
                format!(
                    "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage={eku}\n\
                     basicConstraints=CA:FALSE\n"
                ),
            )
            .unwrap();
            let mut req = vec!["req"];
            req.extend(ec);
            req.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=localhost"]);
            openssl(&dir, &req);
            openssl(
                &dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    "1",
                    "-extfile",
                    &ext,
                ],
            );
        }
        Certs {
            ca: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
            dir,
        }
    }

    /// `--tls-cert-file … --tls-key-file … --tls-ca-cert-file …` for a recached role.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert-file".into(),
            self.server_cert.display().to_string(),
            "--tls-key-file".into(),
            self.server_key.display().to_string(),
            "--tls-ca-cert-file".into(),
            self.ca.display().to_string(),
        ]
    }

    /// `redis-cli` TLS flags trusting the test CA, with the client certificate if `cert`.
    pub fn cli_args(&self, cert: bool) -> Vec<String> {
        let mut v = vec![
            "--tls".to_string(),
            "--cacert".into(),
            self.ca.display().to_string(),
        ];
        if cert {
            v.extend([
                "--cert".into(),
                self.client_cert.display().to_string(),
                "--key".into(),
                self.client_key.display().to_string(),
            ]);
        }
        v
    }
}

/// Output of [`run`].
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to completion, killed after `timeout` (then `ok` is false).
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("collect output");
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `redis-cli -h 127.0.0.1 -p port <tls flags> args…` (10 s at most).
pub fn tls_cli(port: u16, tls: &[String], args: &[&str]) -> Output {
    run(
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(tls)
            .args(args),
        Duration::from_secs(10),
    )
}

/// The Python of the smart-client tests (tests/cluster/.venv, with redis-py), if installed.
pub fn python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/.venv/bin/python");
    p.exists().then_some(p)
}

/// Sends `bytes` to 127.0.0.1:`port` (a TLS port) and waits (≤ 5 s) for the server to close
/// the connection; a TLS alert may come first.
pub fn garbage_is_closed(port: u16, bytes: &[u8]) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "garbage on TLS port {port}: no close"
        );
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!(
                "garbage on TLS port {port}: no close after {:?} ({e})",
                start.elapsed()
            ),
        }
    }
}
