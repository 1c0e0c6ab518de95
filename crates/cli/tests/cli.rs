//! End-to-end tests of the `tensorfold` binary on the real SmolLM2-135M file.
//!
//! The model is looked up in `$TENSORFOLD_CACHE/models/` or `~/.cache/tensorfold/models/`;
//! fetch it with `scripts/fetch-test-models` when missing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SMOLLM2_FILE: &str = "smollm2-135m-instruct-q4_1.gguf";

fn cache_root() -> PathBuf {
    match std::env::var_os("TENSORFOLD_CACHE").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache").join("tensorfold")
        }
    }
}

fn smollm2() -> PathBuf {
    let path = cache_root().join("models").join(SMOLLM2_FILE);
    assert!(
        path.is_file(),
        "test model {} is missing: run scripts/fetch-test-models (or set TENSORFOLD_CACHE)",
        path.display()
    );
    path
}

/// The binary with the test cache, offline, two threads (tests run side by side).
fn tensorfold(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfold"));
    cmd.arg("--cache-dir")
        .arg(cache_root())
        .args(["--offline", "--threads", "2"])
        .args(args);
    cmd
}

fn run(args: &[&str]) -> Output {
    tensorfold(args).output().expect("the binary starts")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tensorfold-cli-test-{}-{name}", std::process::id()))
}

#[test]
fn models_lists_the_catalogue() {
    let out = run(&["models"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for name in ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"] {
        assert!(stdout.contains(name), "{name} missing from:\n{stdout}");
    }
}

#[test]
fn info_describes_smollm2() {
    let path = smollm2();
    let out = run(&["info", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("llama"), "{stdout}");
    let layers = stdout
        .lines()
        .find(|l| l.starts_with("layers"))
        .unwrap_or_else(|| panic!("no layers line in:\n{stdout}"));
    assert_eq!(layers.split_whitespace().last(), Some("30"), "{stdout}");
}

#[test]
fn run_completes_a_prompt() {
    smollm2();
    let out = run(&[
        "run",
        "smollm2-135m",
        "--prompt",
        "def fib(n):",
        "--max-tokens",
        "8",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).trim().is_empty(), "no text generated");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("prompt:") && stderr.contains("generated:"),
        "{stderr}"
    );
}

#[test]
fn same_seed_same_text() {
    smollm2();
    let args = [
        "run",
        "smollm2-135m",
        "--prompt",
        "def fib(n):",
        "--max-tokens",
        "8",
        "--temperature",
        "0.8",
        "--seed",
        "7",
    ];
    let a = run(&args);
    let b = run(&args);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert!(b.status.success(), "{}", text(&b.stderr));
    assert!(!a.stdout.is_empty());
    assert_eq!(text(&a.stdout), text(&b.stdout));
}

#[test]
fn chat_turns_share_the_cache() {
    smollm2();
    let mut child = tensorfold(&["run", "smollm2-135m", "--chat", "--max-tokens", "6"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello!\nWhat is 2+2?\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("generated:").count(), 2, "{stderr}");
    assert!(
        stderr.contains("re-used from the previous turn"),
        "{stderr}"
    );
}

#[test]
fn missing_model_file_is_named() {
    let path = temp_path("no-such-model.gguf");
    let out = run(&["run", path.to_str().unwrap(), "--prompt", "hi"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
}

#[test]
fn truncated_gguf_is_named() {
    let bytes = std::fs::read(smollm2()).unwrap();
    let path = temp_path("truncated.gguf");
    std::fs::write(&path, &bytes[..1000]).unwrap();
    let out = run(&["info", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn prompt_longer_than_context_is_an_error() {
    smollm2();
    let out = run(&[
        "run",
        "smollm2-135m",
        "--prompt",
        "one two three four five six seven",
        "--context",
        "4",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--context"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_flags_are_named() {
    let out = run(&["run", "--prompt", "x", "--max-tokens", "many"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--max-tokens"));
    let out = run(&["run", "--prompt", "x", "--temperature", "-1"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--temperature"));
}

/// Without a GPU (CI) or without the `cuda` feature, `--device cuda` fails with a message naming
/// the flag, and `--device auto` falls back to the CPU with the same text as `--device cpu`.
#[test]
fn device_flag_is_honoured() {
    smollm2();
    let args = |device: &'static str| {
        vec![
            "run",
            "smollm2-135m",
            "--prompt",
            "def fib(n):",
            "--max-tokens",
            "6",
            "--device",
            device,
        ]
    };
    let cpu = run(&args("cpu"));
    assert!(cpu.status.success(), "{}", text(&cpu.stderr));
    let auto = run(&args("auto"));
    assert!(auto.status.success(), "{}", text(&auto.stderr));
    assert_eq!(text(&auto.stdout), text(&cpu.stdout));
    let cuda = run(&args("cuda"));
    if !cuda.status.success() {
        let err = text(&cuda.stderr);
        assert!(err.contains("--device cuda"), "{err}");
        assert!(err.lines().count() <= 2, "a short message: {err}");
    } else {
        // A machine with a GPU: the same text, bit-exact logits.
        assert_eq!(text(&cuda.stdout), text(&cpu.stdout));
    }
    let bad = run(&["run", "--prompt", "x", "--device", "tpu"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("--device"));
}

#[test]
fn info_does_not_fetch() {
    let empty = temp_path("empty-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .arg("--cache-dir")
        .arg(&empty)
        .args(["info", "smollm2-135m"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("tensorfold pull smollm2-135m"), "{stderr}");
    assert!(!empty.join("models").exists());
}

/// `serve` plans memory before anything large is allocated: a budget smaller than the model is
/// refused with what it needs, and so is a `--context` that cannot fit beside the weights.
#[test]
fn serve_refuses_what_does_not_fit_the_memory_budget() {
    let model = smollm2();
    let model = model.to_str().unwrap();
    let out = run(&[
        "serve",
        model,
        "--draft",
        "none",
        "--port",
        "0",
        "--memory-limit-gib",
        "0.1",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("does not fit in the memory budget") && err.contains("needs at least"),
        "{err}"
    );
    let out = run(&[
        "serve",
        model,
        "--draft",
        "none",
        "--port",
        "0",
        "--memory-limit-gib",
        "0.6",
        "--context",
        "8192",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("--context 8192 does not fit in the memory budget"),
        "{err}"
    );
    let out = run(&[
        "serve",
        model,
        "--draft",
        "none",
        "--port",
        "0",
        "--context",
        "100000",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("longer than the"),
        "{}",
        text(&out.stderr)
    );
}

/// `bench --streams`: a row per stream count, every concurrent reply equal to its solo run; a
/// zero count is refused by name.
#[test]
fn bench_streams_checks_every_stream_against_its_solo_run() {
    let model = smollm2();
    let model = model.to_str().unwrap();
    let out = run(&[
        "bench",
        model,
        "--draft",
        "none",
        "--no-drafts",
        "--streams",
        "1,3",
        "--stream-prompt",
        "20",
        "--stream-tokens",
        "6",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("| 1 of 1 |"), "{stdout}");
    assert!(stdout.contains("| 3 of 3 |"), "{stdout}");
    let out = run(&["bench", model, "--streams", "0,2"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--streams"),
        "{}",
        text(&out.stderr)
    );
}

/// `run --seed S` and a completions request with `seed: S` to `serve` (the same model, prompt
/// and sampling) give the same text and the same receipt: one decode path.
#[test]
fn run_and_serve_give_the_same_reply() {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    let model = smollm2();
    let model = model.to_str().unwrap();
    let out = run(&[
        "run",
        model,
        "--prompt",
        "def fib(n):",
        "--max-tokens",
        "12",
        "--temperature",
        "0.8",
        "--seed",
        "7",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let run_sha = stderr
        .split("token_sha ")
        .nth(1)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("no token_sha in {stderr}"));
    let run_text = text(&out.stdout);

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tensorfold(&["serve", model, "--port", &port.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    let http = |request: &str| -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
        s.write_all(request.as_bytes()).ok()?;
        let mut reply = String::new();
        s.read_to_string(&mut reply).ok()?;
        Some(reply)
    };
    let started = Instant::now();
    while !http("GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve never got ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let body = serde_json::json!({"prompt": "def fib(n):", "max_tokens": 12,
        "temperature": 0.8, "seed": 7})
    .to_string();
    let reply = http(&format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    let _ = server.kill();
    let _ = server.wait();
    let reply = reply.expect("a reply");
    let json: serde_json::Value =
        serde_json::from_str(reply.split_once("\r\n\r\n").expect("a body").1).expect("JSON");
    assert_eq!(json["tensorfold"]["token_sha"], run_sha.as_str(), "{json}");
    assert_eq!(
        json["choices"][0]["text"].as_str().unwrap().trim(),
        run_text.trim(),
        "{json}"
    );
}
