//! Read-only file bytes: an mmap, or an owned buffer (empty files, in-memory tests).

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::error::{Result, WeightsError};

pub(crate) enum Storage {
    Mmap(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }

    /// Lets the OS drop the mapped pages of `data` (a slice of this storage) from the process:
    /// they are clean pages of a read-only file mapping, read again from the file if touched.
    /// Owned bytes and slices from elsewhere are left alone.
    pub(crate) fn drop_pages(&self, data: &[u8]) {
        #[cfg(unix)]
        if let Storage::Mmap(m) = self {
            let base = m.as_ptr() as usize;
            let at = data.as_ptr() as usize;
            if data.is_empty() || at < base || at + data.len() > base + m.len() {
                return;
            }
            // SAFETY: DONTNEED on a private, read-only file mapping only discards clean pages,
            // which later reads fault in again with the same bytes; no reference sees a change.
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at - base, data.len())
            };
        }
        #[cfg(not(unix))]
        let _ = data;
    }
}

/// Maps `path` read-only. Weight files are treated as immutable while open.
pub(crate) fn map_file(path: &Path) -> Result<Storage> {
    let file = File::open(path).map_err(|e| WeightsError::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| WeightsError::io(path, e))?
        .len();
    if len == 0 {
        // Mapping zero bytes is refused on some platforms; there is nothing to map anyway.
        return Ok(Storage::Owned(Vec::new()));
    }
    // SAFETY: the map is read-only and private to this process. Weight files are treated as
    // immutable while open (stated on every `open`); a concurrent writer truncating the file is
    // the one case an mmap reader cannot guard against.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| WeightsError::io(path, e))?;
    Ok(Storage::Mmap(map))
}
