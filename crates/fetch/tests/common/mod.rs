//! Helpers shared by the integration tests: temp dirs, test catalogue entries, a canned HTTP
//! server standing in for the Hub, and wheels built on the spot.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tf_fetch::{CatalogueEntry, HubSource, MirrorSource, PullOptions, WheelPart};

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("tf-fetch-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic bytes that do not compress to nothing.
pub fn test_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// Options that never touch the real cache, the real Hub or the network.
pub fn options(cache: &Path) -> PullOptions {
    let mut opts = PullOptions::new(cache.to_path_buf());
    opts.progress = false;
    opts.offline = true;
    opts.hub_endpoint = closed_port_endpoint();
    opts.hub_token = None;
    opts.hub_timeout = Duration::from_secs(5);
    opts.pip_args = Vec::new();
    opts
}

pub fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// A catalogue entry of the tests' own.
pub fn entry(
    file_name: &str,
    size_bytes: u64,
    hub: HubSource,
    mirror: Option<MirrorSource>,
) -> &'static CatalogueEntry {
    Box::leak(Box::new(CatalogueEntry {
        name: "test-model",
        aliases: &[],
        description: "a test entry",
        file_name: leak(file_name.to_string()),
        size_bytes,
        hub,
        mirror,
        draft: None,
    }))
}

pub fn mirror_of(parts: Vec<WheelPart>, sha256: &str) -> MirrorSource {
    MirrorSource {
        parts: Box::leak(parts.into_boxed_slice()),
        sha256: leak(sha256.to_string()),
    }
}

pub const TEST_HUB: HubSource = HubSource {
    repo: "test-org/test-repo",
    file: "model.gguf",
};

/// An endpoint on which nothing listens: connecting is refused at once.
pub fn closed_port_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// One canned response.
#[derive(Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Canned {
    pub fn ok(body: Vec<u8>, headers: &[(&str, &str)]) -> Self {
        Canned {
            status: 200,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body,
        }
    }

    pub fn status(status: u16, headers: &[(&str, &str)]) -> Self {
        Canned {
            status,
            ..Canned::ok(Vec::new(), headers)
        }
    }
}

/// A request as the server saw it: path and lowercased header names to values.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub path: String,
    pub headers: HashMap<String, String>,
}

/// A tiny HTTP/1.1 server on 127.0.0.1 answering each path with its canned response (404 for
/// others), one connection at a time, `Connection: close`. Lives until the test process ends.
pub struct TestServer {
    pub endpoint: String,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
}

pub fn serve(routes: Vec<(&str, Canned)>) -> TestServer {
    let routes: HashMap<String, Canned> = routes
        .into_iter()
        .map(|(path, canned)| (path.to_string(), canned))
        .collect();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_server = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_string();
            let mut headers = HashMap::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                }
            }
            seen_by_server.lock().unwrap().push(SeenRequest {
                path: path.clone(),
                headers,
            });
            let canned = routes
                .get(&path)
                .cloned()
                .unwrap_or_else(|| Canned::status(404, &[]));
            let mut head = format!("HTTP/1.1 {} Canned\r\n", canned.status);
            for (k, v) in &canned.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                canned.body.len()
            ));
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&canned.body);
            let _ = stream.flush();
        }
    });
    TestServer { endpoint, seen }
}

/// Builds `<dist>-<version>-py3-none-any.whl` in `dir` holding `data` at `member`, with the
/// dist-info pip needs. Uses Python's zipfile, as the wheel format is just a zip.
pub fn build_wheel(dir: &Path, package: &str, version: &str, member: &str, data: &[u8]) -> PathBuf {
    const SCRIPT: &str = r#"
import sys, zipfile
wheel, name, version, member, data_path = sys.argv[1:6]
dist = name.replace("-", "_")
info = f"{dist}-{version}.dist-info"
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
    with open(data_path, "rb") as f:
        z.writestr(member, f.read())
    z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tf-fetch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(f"{info}/RECORD", "")
"#;
    let dist = package.replace('-', "_");
    let wheel = dir.join(format!("{dist}-{version}-py3-none-any.whl"));
    let data_path = dir.join(format!(".{dist}.data"));
    std::fs::write(&data_path, data).unwrap();
    let status = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(&wheel)
        .args([package, version, member])
        .arg(&data_path)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "building {}", wheel.display());
    std::fs::remove_file(&data_path).unwrap();
    wheel
}

/// Names in `dir` (empty if it does not exist).
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
