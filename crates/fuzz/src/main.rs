//! `tf-fuzz run TARGET|all [--seconds N] [--seed S]`: fuzzes each target for N seconds (default
//! 20) in a child process limited to 8 GiB of address space, so that a panic, an abort (an
//! absurd allocation) or a hang (a case over 20 s) is caught with the input that caused it. A
//! finding is written to `crates/fuzz/crashes/TARGET/` (replayed by the tests from then on) and
//! makes the exit status 1.
//!
//! `tf-fuzz replay TARGET|all`: runs every seed and kept finding once.

use std::io::{BufRead, BufReader, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use tf_fuzz::mutate::Mutator;
use tf_fuzz::{crashes_dir, target, Target, NAMES};

/// A case running longer than this is a hang.
const HANG_SECS: u64 = 20;
/// The child's address-space limit, in KiB (`ulimit -v`).
const MEMORY_KIB: u64 = 8 << 20;
/// Corpus entries kept besides the seeds.
const MAX_CORPUS: usize = 256;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Keeps `input` as a finding of `target`; returns its path.
fn keep(target: &str, input: &[u8]) -> Result<PathBuf> {
    let dir = crashes_dir(target);
    std::fs::create_dir_all(&dir)?;
    let hash = Sha256::digest(input);
    let name: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("{name}.bin"));
    std::fs::write(&path, input)?;
    Ok(path)
}

fn names(which: &str) -> Result<Vec<&'static str>> {
    if which == "all" {
        return Ok(NAMES.to_vec());
    }
    match NAMES.iter().find(|n| **n == which) {
        Some(n) => Ok(vec![*n]),
        None => bail!(
            "unknown target '{which}' (one of {}, or all)",
            NAMES.join(", ")
        ),
    }
}

/// The child: mutates and runs cases until the time is up.
fn worker(name: &str, seconds: u64, seed: u64, current: &Path) -> Result<()> {
    let t = target(name)?;
    let mut corpus = t.seeds();
    if corpus.is_empty() {
        bail!("{name}: no seeds");
    }
    let seeds = corpus.len();
    let started = Arc::new(AtomicU64::new(0));
    {
        let started = started.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let s = started.load(Ordering::Relaxed);
            if s != 0 && now_ms().saturating_sub(s) > HANG_SECS * 1000 {
                eprintln!("tf-fuzz: a case ran over {HANG_SECS} s: a hang");
                std::process::exit(3);
            }
        });
    }
    let mut m = Mutator::new(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut cases = 0u64;
    // The seeds first, as they are, then mutations.
    let mut pending: Vec<Vec<u8>> = corpus.clone();
    while Instant::now() < deadline {
        let input = match pending.pop() {
            Some(i) => i,
            None => {
                let a = m.rng.below(corpus.len());
                let b = m.rng.below(corpus.len());
                t.mutate(&mut m, &corpus[a], &corpus[b])
            }
        };
        std::fs::write(current, &input)?;
        started.store(now_ms(), Ordering::Relaxed);
        let verdict = catch_unwind(AssertUnwindSafe(|| t.run(&input)));
        started.store(0, Ordering::Relaxed);
        cases += 1;
        let finding = match verdict {
            Ok(Ok(())) => None,
            Ok(Err(msg)) => Some(msg),
            Err(_) => Some("panicked (message above)".to_string()),
        };
        if let Some(msg) = finding {
            let path = keep(name, &input)?;
            eprintln!("tf-fuzz: {name}: {msg}\n  input kept as {}", path.display());
            std::process::exit(2);
        }
        // Accepted inputs sometimes join the corpus, to reach deeper from them.
        if m.rng.chance(0.05) {
            if corpus.len() < seeds + MAX_CORPUS {
                corpus.push(input);
            } else {
                let i = seeds + m.rng.below(MAX_CORPUS);
                corpus[i] = input;
            }
        }
    }
    println!("{name}: {cases} cases in {seconds} s, no finding");
    std::io::stdout().flush()?;
    Ok(())
}

/// The server's log line of a finished request (`request 12: length, prompt ...`).
fn is_request_log(line: &str) -> bool {
    line.strip_prefix("request ")
        .and_then(|r| r.split_once(':'))
        .is_some_and(|(n, _)| n.bytes().all(|b| b.is_ascii_digit()))
}

/// The parent: one child per target; an abort or a hang keeps the child's last input.
fn run(which: &str, seconds: u64, seed: u64) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut found = 0;
    for name in names(which)? {
        let current =
            std::env::temp_dir().join(format!("tf-fuzz-{name}-{}.current", std::process::id()));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {MEMORY_KIB} && exec \"$0\" \"$@\""))
            .arg(&exe)
            .args(["worker", name, &seconds.to_string(), &seed.to_string()])
            .arg(&current)
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the {name} worker"))?;
        // The server's one line per request is left out; everything else is passed on.
        if let Some(err) = child.stderr.take() {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if !is_request_log(&line) {
                    eprintln!("{line}");
                }
            }
        }
        let status = child.wait()?;
        match status.code() {
            Some(0) => {}
            Some(2) => found += 1,
            other => {
                found += 1;
                let input = std::fs::read(&current).unwrap_or_default();
                let path = keep(name, &input)?;
                eprintln!(
                    "tf-fuzz: {name}: the worker died ({}); its last input kept as {}",
                    other.map_or("killed by a signal: an abort".to_string(), |c| {
                        format!("exit {c}")
                    }),
                    path.display()
                );
            }
        }
        let _ = std::fs::remove_file(&current);
    }
    if found > 0 {
        bail!("{found} target(s) with a finding (kept under crates/fuzz/crashes/)");
    }
    Ok(())
}

/// Runs every seed and kept finding of the targets once.
fn replay(which: &str) -> Result<()> {
    for name in names(which)? {
        let t: Box<dyn Target> = target(name)?;
        let kept = tf_fuzz::files_in(&crashes_dir(name));
        let mut inputs = t.seeds();
        for p in &kept {
            inputs.push(std::fs::read(p)?);
        }
        for (i, input) in inputs.iter().enumerate() {
            if let Err(e) = t.run(input) {
                bail!("{name}: input {i}: {e}");
            }
        }
        println!(
            "{name}: {} inputs ({} kept findings) pass",
            inputs.len(),
            kept.len()
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: u64| -> Result<u64> {
        match args.iter().position(|a| a == name) {
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{name} needs a number")),
            None => Ok(default),
        }
    };
    match args.first().map(String::as_str) {
        Some("run") => {
            let which = args.get(1).map_or("all", String::as_str);
            run(which, flag("--seconds", 20)?, flag("--seed", now_ms())?)
        }
        Some("replay") => replay(args.get(1).map_or("all", String::as_str)),
        Some("worker") if args.len() == 5 => worker(
            &args[1],
            args[2].parse()?,
            args[3].parse()?,
            Path::new(&args[4]),
        ),
        _ => bail!("usage: tf-fuzz run TARGET|all [--seconds N] [--seed S] | replay TARGET|all"),
    }
}
