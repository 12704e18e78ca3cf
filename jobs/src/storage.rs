//! Faults of a host's own storage (a full, read-only or failing disk),
//! told apart from what a client sent: a submit that cannot be written
//! because the worker's state folder or the database's disk is full is
//! `503 storage_unavailable` naming the storage, never a client error.

/// Whether `e` is a fault of the storage it was written to: no space left
/// (`ENOSPC`), a quota reached (`EDQUOT`), a read-only file system
/// (`EROFS`) or an I/O error of the device (`EIO`).
pub fn is_storage_fault(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO))
}

/// The words tools (Nix, git, the shell) print for those faults, as
/// `strerror` gives them.
const FAULT_WORDS: [&str; 4] =
    ["No space left on device", "Disk quota exceeded", "Read-only file system", "Input/output error"];

/// The first of those words a tool's `log` holds, if any: a run that
/// failed with one failed for its host's storage, not for what it ran.
pub fn fault_in_log(log: &str) -> Option<&'static str> {
    FAULT_WORDS.into_iter().find(|w| log.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_a_storage_fault_and_a_missing_file_is_not() {
        assert!(is_storage_fault(&std::io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_storage_fault(&std::io::Error::from_raw_os_error(libc::EROFS)));
        assert!(!is_storage_fault(&std::io::Error::from_raw_os_error(libc::ENOENT)));
        assert!(!is_storage_fault(&std::io::Error::from_raw_os_error(libc::EACCES)));
        assert_eq!(fault_in_log("error: writing to file: No space left on device"), Some("No space left on device"));
        assert_eq!(fault_in_log("error: attribute 'names' missing"), None);
    }
}
