//! An on-disk cache of compiled kernel images, keyed by everything that
//! went into them.
//!
//! Runtime compilation (NVRTC, hiprtc) of the built-in kernels takes
//! hundreds of milliseconds; the result is cached per device architecture
//! in `$GPUPORT_CACHE_DIR`, else `$XDG_CACHE_HOME/gpuport`, else
//! `~/.cache/gpuport`. An entry stores a SHA-256 of its payload, and a
//! truncated, corrupt or foreign file is rebuilt and replaced, never trusted.
//! Writes go to a temporary file renamed into place, so concurrent processes
//! see either no entry or a whole one.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::Result;

/// The environment variable that sets the cache folder.
pub const CACHE_DIR_ENV: &str = "GPUPORT_CACHE_DIR";
const MAGIC: &[u8; 8] = b"GPUPKC01";

/// The cache folder, if one can be determined.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("gpuport"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("gpuport"))
}

/// The hex SHA-256 of `parts`, each length-prefixed so boundaries count.
pub fn key(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads a valid entry, or `None` if it is missing, truncated or corrupt.
fn read_entry(path: &Path) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    let (header, payload) = data.split_at_checked(MAGIC.len() + 8 + 32)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    let (len, digest) = rest.split_at(8);
    if magic != MAGIC || u64::from_le_bytes(len.try_into().ok()?) != payload.len() as u64 {
        return None;
    }
    (Sha256::digest(payload).as_slice() == digest).then(|| payload.to_vec())
}

fn write_entry(path: &Path, payload: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(MAGIC)?;
    file.write_all(&(payload.len() as u64).to_le_bytes())?;
    file.write_all(&Sha256::digest(payload))?;
    file.write_all(payload)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Whether an image came from the cache or was just built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Read from a valid cache entry.
    Cached,
    /// Compiled now (and stored, if the cache folder is writable).
    Built,
}

/// Returns the cached image for `key` under `dir` (a subfolder per
/// architecture keeps listings readable), or builds it with `build` and
/// stores it. Cache I/O failures never fail the call: they only cost a rebuild.
pub fn get_or_build(
    dir: Option<&Path>,
    arch: &str,
    key: &str,
    build: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<(Vec<u8>, Origin)> {
    let path = dir.map(|d| d.join(arch).join(format!("{key}.bin")));
    if let Some(image) = path.as_deref().and_then(read_entry) {
        return Ok((image, Origin::Cached));
    }
    let image = build()?;
    if let Some(path) = &path {
        let _ = write_entry(path, &image);
    }
    Ok((image, Origin::Built))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuport-cache-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_built_image_is_served_from_the_cache_next_time() {
        let dir = temp_dir("hit");
        let k = key(&[b"source", b"-O3"]);
        let (a, o1) = get_or_build(Some(&dir), "sm_90", &k, || Ok(b"image".to_vec())).unwrap();
        let (b, o2) = get_or_build(Some(&dir), "sm_90", &k, || panic!("must not rebuild")).unwrap();
        assert_eq!((a.as_slice(), o1, b.as_slice(), o2), (&b"image"[..], Origin::Built, &b"image"[..], Origin::Cached));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_truncated_or_foreign_entries_are_rebuilt_not_trusted() {
        let dir = temp_dir("corrupt");
        let k = key(&[b"source"]);
        get_or_build(Some(&dir), "sm_90", &k, || Ok(vec![7u8; 1000])).unwrap();
        let path = dir.join("sm_90").join(format!("{k}.bin"));
        let good = std::fs::read(&path).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let corruptions: [Vec<u8>; 4] = [flipped, good[..good.len() - 10].to_vec(), b"garbage".to_vec(), Vec::new()];
        for bad in corruptions {
            std::fs::write(&path, &bad).unwrap();
            let (image, origin) = get_or_build(Some(&dir), "sm_90", &k, || Ok(vec![7u8; 1000])).unwrap();
            assert_eq!((image, origin), (vec![7u8; 1000], Origin::Built));
            assert_eq!(std::fs::read(&path).unwrap(), good, "the bad entry is replaced by a good one");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_change_with_any_input_and_with_part_boundaries() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"src", b"sm_80"]), key(&[b"src", b"sm_90"]));
        assert_eq!(key(&[b"x"]).len(), 64);
    }

    #[test]
    fn an_unwritable_cache_costs_a_rebuild_not_an_error() {
        let (image, origin) =
            get_or_build(Some(Path::new("/proc/gpuport-no-such-dir")), "a", "k", || Ok(vec![1])).unwrap();
        assert_eq!((image, origin), (vec![1], Origin::Built));
        let (_, origin) = get_or_build(None, "a", "k", || Ok(vec![1])).unwrap();
        assert_eq!(origin, Origin::Built);
    }
}
