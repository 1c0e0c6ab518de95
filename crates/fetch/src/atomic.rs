//! Downloads that never leave a half file under the final name.
//!
//! Bytes go to `.<name>.partial` in the destination directory while being hashed; only after the
//! file is fsynced and its size and SHA-256 match is it renamed into place (a rename within one
//! directory is atomic). Any failure, or dropping the writer early, deletes the partial file.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use sha2::{Digest, Sha256};

use crate::cache::{file_label, hex};
use crate::error::FetchError;
use crate::progress::CHUNK_BYTES;

/// `.<name>.partial` beside `path`.
pub fn partial_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.partial"))
}

/// What the finished file must be.
pub(crate) struct Expected<'a> {
    pub sha256: &'a str,
    pub size_bytes: Option<u64>,
}

pub(crate) struct PartialFile {
    final_path: PathBuf,
    partial_path: PathBuf,
    writer: Option<BufWriter<File>>,
    hasher: Sha256,
    written_bytes: u64,
    bar: ProgressBar,
    renamed: bool,
}

impl PartialFile {
    /// Starts `.<name>.partial` beside `final_path`, replacing any leftover from an earlier run.
    pub fn create(final_path: &Path, bar: ProgressBar) -> Result<Self, FetchError> {
        let partial_path = partial_path(final_path);
        if let Some(dir) = final_path.parent() {
            fs::create_dir_all(dir)
                .map_err(|e| FetchError::io(format!("creating {}", dir.display()), e))?;
        }
        let file = File::create(&partial_path)
            .map_err(|e| FetchError::io(format!("creating {}", partial_path.display()), e))?;
        Ok(PartialFile {
            final_path: final_path.to_path_buf(),
            partial_path,
            writer: Some(BufWriter::with_capacity(CHUNK_BYTES, file)),
            hasher: Sha256::new(),
            written_bytes: 0,
            bar,
            renamed: false,
        })
    }

    pub fn bar(&self) -> &ProgressBar {
        &self.bar
    }

    /// Appends everything `reader` yields; returns the number of bytes copied.
    pub fn append_from(&mut self, reader: &mut impl Read) -> io::Result<u64> {
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut copied = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(copied),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.write_all(&buf[..n])?;
            copied += n as u64;
        }
    }

    /// Flushes, fsyncs, verifies and renames into place; returns the SHA-256. On a mismatch the
    /// partial file is deleted (by `Drop`) and nothing appears under the final name.
    pub fn finish(mut self, expected: Expected<'_>) -> Result<String, FetchError> {
        let what = file_label(&self.final_path);
        let writer = self.writer.take().expect("finish is called once");
        let file = writer.into_inner().map_err(|e| {
            FetchError::io(
                format!("writing {}", self.partial_path.display()),
                e.into_error(),
            )
        })?;
        file.sync_all()
            .map_err(|e| FetchError::io(format!("syncing {}", self.partial_path.display()), e))?;
        drop(file);
        self.bar.finish_and_clear();

        if let Some(size) = expected.size_bytes {
            if size != self.written_bytes {
                return Err(FetchError::SizeMismatch {
                    what,
                    expected: size,
                    actual: self.written_bytes,
                });
            }
        }
        let actual = hex(&std::mem::take(&mut self.hasher).finalize());
        if !actual.eq_ignore_ascii_case(expected.sha256) {
            return Err(FetchError::ChecksumMismatch {
                what,
                expected: expected.sha256.to_ascii_lowercase(),
                actual,
            });
        }
        fs::rename(&self.partial_path, &self.final_path).map_err(|e| {
            FetchError::io(
                format!("renaming into place {}", self.final_path.display()),
                e,
            )
        })?;
        self.renamed = true;
        // Make the rename itself durable; failure here does not make the file wrong.
        if let Some(dir) = self.final_path.parent() {
            if let Ok(dir) = File::open(dir) {
                let _ = dir.sync_all();
            }
        }
        Ok(actual)
    }
}

impl Write for PartialFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let writer = self.writer.as_mut().expect("not written after finish");
        let n = writer.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written_bytes += n as u64;
        self.bar.inc(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.as_mut().map_or(Ok(()), |w| w.flush())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        drop(self.writer.take());
        if !self.renamed {
            let _ = fs::remove_file(&self.partial_path);
        }
        self.bar.finish_and_clear();
    }
}
