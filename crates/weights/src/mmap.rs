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
