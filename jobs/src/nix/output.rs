//! Reading a document output that a source's build made (MS-2, EV-1), with
//! SEC-3's bounds: the document is a regular file directly in its store
//! path (never a symbolic link, which the worker would otherwise follow to
//! a file of its host), and its size is checked from its metadata against
//! `SLIPWAY_OUTPUT_LIMIT` before a byte of it is read.

use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Why a document output was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// It is larger than the limit: `size` bytes.
    TooLarge {
        /// Its size in bytes, from its metadata.
        size: u64,
    },
    /// It is not a regular file of its store path (a symbolic link, a
    /// folder), or the output is not a folder of the store; says which.
    Unsafe(String),
    /// It is missing or cannot be read; says why.
    Unreadable(String),
}

/// The Nix store folder: `NIX_STORE_DIR`, or `/nix/store`.
pub fn store_dir() -> PathBuf {
    std::env::var_os("NIX_STORE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/nix/store"))
}

/// Whether `path` names a store path itself (`<store>/<hash>-<name>`, no
/// deeper), as text: no `..`, no further `/`.
pub fn is_store_path(path: &str) -> bool {
    let store = store_dir();
    let Some(name) = path.strip_prefix(&format!("{}/", store.display())) else { return false };
    !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-._?=".contains(&b))
}

/// The bytes of document `file` of the output at store path `out`, when it
/// is a regular file of at most `limit` bytes directly in `out`, itself a
/// folder of the store (neither followed through a symbolic link).
pub fn read_document(out: &str, file: &str, limit: u64) -> Result<Vec<u8>, Refused> {
    if !is_store_path(out) {
        return Err(Refused::Unsafe(format!("its out path {out:?} is not a path of the Nix store")));
    }
    let folder = Path::new(out);
    match std::fs::symlink_metadata(folder) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(Refused::Unsafe(format!("its out path is not a folder holding {file}"))),
        Err(e) => return Err(Refused::Unreadable(format!("{out}: {e}"))),
    }
    read_file(&folder.join(file), limit)
}

/// The bytes of the regular file at `path` (never followed through a
/// symbolic link), when it holds at most `limit` bytes: its size is read
/// from its metadata first.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, Refused> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let document = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Refused::Unsafe(format!("{file} is a symbolic link, and a document is a regular file")));
        }
        Err(e) => return Err(Refused::Unreadable(format!("{file}: {e}"))),
    };
    let meta = document.metadata().map_err(|e| Refused::Unreadable(format!("{file}: {e}")))?;
    if !meta.is_file() {
        return Err(Refused::Unsafe(format!("{file} is not a regular file")));
    }
    if meta.len() > limit {
        return Err(Refused::TooLarge { size: meta.len() });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    document.take(limit + 1).read_to_end(&mut bytes).map_err(|e| Refused::Unreadable(format!("{file}: {e}")))?;
    if bytes.len() as u64 > limit {
        return Err(Refused::TooLarge { size: bytes.len() as u64 });
    }
    Ok(bytes)
}

/// Removes every symbolic link directly in `work` that points at `path`
/// (the out links and GC roots of a job), so the path is no longer alive
/// through them.
pub fn unlink_roots(work: &Path, path: &str) {
    for entry in std::fs::read_dir(work).into_iter().flatten().flatten() {
        let link = entry.path();
        if std::fs::read_link(&link).is_ok_and(|target| target == Path::new(path)) {
            let _ = std::fs::remove_file(&link);
        }
    }
}

/// Nix's folder of indirect GC roots: `$NIX_STATE_DIR/gcroots/auto`
/// (`/nix/var/nix/gcroots/auto` by default). `--add-root … --indirect` and
/// `nix-build -o` register each link they make there, as a link to it.
pub fn auto_roots_dir() -> PathBuf {
    let state = std::env::var_os("NIX_STATE_DIR").map(PathBuf::from);
    state.unwrap_or_else(|| "/nix/var/nix".into()).join("gcroots/auto")
}

/// Removes the indirect GC roots of Nix ([`auto_roots_dir`]) that point
/// into `dir` (as given or canonical): links a removed folder held, which
/// would otherwise dangle in the host's roots until Nix's next collection.
/// Returns how many it removed; one it cannot remove is an error.
pub fn remove_roots_into(dir: &Path) -> std::io::Result<usize> {
    let canonical = std::fs::canonicalize(dir).ok();
    let mut removed = 0;
    for entry in std::fs::read_dir(auto_roots_dir()).into_iter().flatten().flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if target.starts_with(dir) || canonical.as_ref().is_some_and(|c| target.starts_with(c)) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// Removes the indirect GC roots of Nix ([`auto_roots_dir`]) that point
/// into `dir` (as given or canonical) at a link that is no longer there:
/// what an effect, which cannot write Nix's roots folder, leaves when it
/// removes a link Nix registered (a pruned generation, a removed node).
/// Nix registers a root only after its link exists, so a root whose link
/// is missing is one that was removed. Returns how many it removed.
pub fn remove_dangling_roots_into(dir: &Path) -> std::io::Result<usize> {
    let canonical = std::fs::canonicalize(dir).ok();
    let mut removed = 0;
    for entry in std::fs::read_dir(auto_roots_dir()).into_iter().flatten().flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        let inside = target.starts_with(dir) || canonical.as_ref().is_some_and(|c| target.starts_with(c));
        let gone = std::fs::symlink_metadata(&target).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        if inside && gone {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// Removes folder `dir` (absent is fine) and the GC roots into it
/// ([`remove_roots_into`]): how a job's work folder, whose out links Nix
/// registered as roots, goes without leaving a root behind.
pub fn remove_folder_and_roots(dir: &Path) -> std::io::Result<()> {
    // The roots first, while the folder can still be canonicalised.
    remove_roots_into(dir)?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_only_within_its_limit_and_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("schema.json");
        std::fs::write(&file, vec![b' '; 2048]).unwrap();
        assert_eq!(read_file(&file, 2048).unwrap().len(), 2048);
        assert_eq!(read_file(&file, 2047), Err(Refused::TooLarge { size: 2048 }));
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(matches!(read_file(&link, 4096), Err(Refused::Unsafe(why)) if why.contains("symbolic link")));
        assert!(matches!(read_file(dir.path(), 4096), Err(Refused::Unsafe(_))));
        assert!(matches!(read_file(&dir.path().join("none"), 4096), Err(Refused::Unreadable(_))));
        assert!(matches!(
            read_document(&dir.path().display().to_string(), "schema.json", 4096),
            Err(Refused::Unsafe(_))
        ));
    }

    #[test]
    fn only_a_path_directly_in_the_store_is_a_store_path() {
        let store = store_dir().display().to_string();
        assert!(is_store_path(&format!("{store}/wzifph43jqsgljmmrgbmzb7abpyjsfpz-schema")));
        for not in ["/etc", &format!("{store}/"), &format!("{store}/a/b"), &format!("{store}/../etc"), &store] {
            assert!(!is_store_path(not), "{not}");
        }
    }
}
