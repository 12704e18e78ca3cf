//! What a module source's tree may hold (SEC-3): folders, regular files and
//! symbolic links that stay inside the tree, and at most
//! `SLIPWAY_SOURCE_LIMIT` bytes in all.
//!
//! A link is judged by where it leads, component by component, without
//! asking the host: an absolute target leaves the tree; a `..` past the
//! tree's top leaves it; a component that is itself a link of the tree is
//! followed (at most [`MAX_HOPS`] links in all), so `a -> b/..` with
//! `b -> .` leaves the tree as the kernel would resolve it. A link to a
//! name the tree does not hold is judged by its text alone. Anything else
//! (a fifo, a socket, a device) is refused too: git cannot carry one, so
//! only a `path:` folder could hold it, and reading a fifo would hang an
//! evaluation.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The most links one link's resolution may pass through (Linux's own
/// limit on a path's symbolic links).
pub const MAX_HOPS: u32 = 40;

/// Why a tree is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An entry a source may not hold.
    Unsafe {
        /// The entry, relative to the tree (`core/schema.json`).
        path: String,
        /// What it is (`is a link to /etc/passwd, outside the source`).
        reason: String,
    },
    /// The tree holds more than the limit: at least this many bytes.
    TooLarge(u64),
    /// The tree could not be read on this host.
    Unreadable(String),
}

/// Walks `root` without following links and returns the bytes it holds
/// (file sizes, and each link's target text); refuses the first entry,
/// in name order, that a source may not hold (see the module doc), or a
/// total past `limit` bytes as soon as the walk passes it.
pub fn inspect(root: &Path, limit: u64) -> Result<u64, Refusal> {
    let unreadable = |path: &Path, e: std::io::Error| Refusal::Unreadable(format!("{}: {e}", path.display()));
    let mut bytes: u64 = 0;
    // Relative paths still to look at, the next one last.
    let mut pending: Vec<PathBuf> = children(root, Path::new("")).map_err(|e| unreadable(root, e))?;
    while let Some(relative) = pending.pop() {
        let path = root.join(&relative);
        let meta = std::fs::symlink_metadata(&path).map_err(|e| unreadable(&path, e))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            pending.extend(children(root, &relative).map_err(|e| unreadable(&path, e))?);
        } else if kind.is_file() {
            bytes = bytes.saturating_add(meta.len());
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| unreadable(&path, e))?;
            bytes = bytes.saturating_add(target.as_os_str().len() as u64);
            let parent: Vec<OsString> = parts(relative.parent().unwrap_or(Path::new("")));
            let mut hops = 0;
            if let Err(leads) = resolve(root, parent, &target, &mut hops) {
                let reason = match leads {
                    Leads::Outside => format!("is a link to {}, outside the source", shown(&target)),
                    Leads::TooFar => format!("is a link that passes through more than {MAX_HOPS} links"),
                };
                return Err(Refusal::Unsafe { path: shown(&relative), reason });
            }
        } else {
            let what = file_kind(&kind);
            return Err(Refusal::Unsafe {
                path: shown(&relative),
                reason: format!("is {what}, which a source may not hold"),
            });
        }
        if bytes > limit {
            return Err(Refusal::TooLarge(bytes));
        }
    }
    Ok(bytes)
}

/// The entries of folder `relative` of `root`, as paths relative to
/// `root`, in reverse name order (so the walk pops them in name order).
fn children(root: &Path, relative: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut names: Vec<OsString> =
        std::fs::read_dir(root.join(relative))?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>()?;
    names.sort_unstable_by(|a, b| b.cmp(a));
    Ok(names.into_iter().map(|n| relative.join(n)).collect())
}

/// Where a link leads that it may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leads {
    /// Outside the tree: an absolute target, or a `..` past the top.
    Outside,
    /// Through more than [`MAX_HOPS`] links (a loop, or a chain built to
    /// outlast the check).
    TooFar,
}

/// The folder `target` names from folder `at` (both inside `root`, as
/// components), following the tree's own links on the way.
fn resolve(root: &Path, mut at: Vec<OsString>, target: &Path, hops: &mut u32) -> Result<Vec<OsString>, Leads> {
    for component in target.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => return Err(Leads::Outside),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop().ok_or(Leads::Outside)?;
            }
            Component::Normal(name) => {
                at.push(name.to_os_string());
                let here: PathBuf = at.iter().fold(root.to_path_buf(), |p, c| p.join(c));
                if std::fs::symlink_metadata(&here).is_ok_and(|m| m.file_type().is_symlink()) {
                    *hops += 1;
                    if *hops > MAX_HOPS {
                        return Err(Leads::TooFar);
                    }
                    let next = std::fs::read_link(&here).map_err(|_| Leads::Outside)?;
                    at.pop();
                    at = resolve(root, at, &next, hops)?;
                }
            }
        }
    }
    Ok(at)
}

/// The normal components of a relative path.
fn parts(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            _ => None,
        })
        .collect()
}

/// What a file that is neither a folder, a regular file nor a link is.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a fifo"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}

/// A path of the tree (the source's own text) as a message shows it: as
/// it is when short and printable, quoted and cut otherwise.
fn shown(path: &Path) -> String {
    let text = path.to_string_lossy();
    if text.chars().count() <= 200 && !text.chars().any(|c| c.is_control()) && !text.contains('\u{fffd}') {
        text.into_owned()
    } else {
        crate::id::quoted(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("core/effects")).unwrap();
        std::fs::create_dir_all(dir.path().join("shared")).unwrap();
        std::fs::write(dir.path().join("core/default.nix"), "{ ... }: { }\n").unwrap();
        std::fs::write(dir.path().join("shared/deploy"), "#!/bin/sh\n").unwrap();
        dir
    }

    fn refused(dir: &Path) -> (String, String) {
        match inspect(dir, u64::MAX) {
            Err(Refusal::Unsafe { path, reason }) => (path, reason),
            other => panic!("not refused as unsafe: {other:?}"),
        }
    }

    #[test]
    fn links_that_stay_inside_the_tree_are_allowed() {
        let dir = tree();
        let root = dir.path();
        symlink("../../shared/deploy", root.join("core/effects/deploy")).unwrap();
        symlink("core", root.join("also-core")).unwrap();
        symlink("./also-core/../shared/./deploy", root.join("chain")).unwrap();
        symlink("missing/../core", root.join("dangling-but-inside")).unwrap();
        let bytes = inspect(root, u64::MAX).unwrap();
        let texts = ["../../shared/deploy", "core", "./also-core/../shared/./deploy", "missing/../core"];
        let links: u64 = texts.iter().map(|t| t.len() as u64).sum();
        assert_eq!(bytes, 13 + 10 + links);
    }

    #[test]
    fn an_absolute_link_is_refused_naming_its_path_and_target() {
        let dir = tree();
        symlink("/etc/passwd", dir.path().join("core/schema.json")).unwrap();
        assert_eq!(
            refused(dir.path()),
            ("core/schema.json".to_owned(), "is a link to /etc/passwd, outside the source".to_owned())
        );
    }

    #[test]
    fn a_link_whose_dot_dots_pass_the_top_of_the_tree_is_refused() {
        let dir = tree();
        symlink("../../../etc/passwd", dir.path().join("core/effects/destroy")).unwrap();
        assert_eq!(refused(dir.path()).0, "core/effects/destroy");
        let dir = tree();
        std::fs::remove_dir_all(dir.path().join("core")).unwrap();
        symlink("../outside", dir.path().join("core")).unwrap();
        assert_eq!(refused(dir.path()), ("core".to_owned(), "is a link to ../outside, outside the source".into()));
    }

    #[test]
    fn a_link_through_another_link_is_resolved_as_the_kernel_would() {
        // `here` stays inside by its text, but `dot` is the tree's top, so
        // `dot/..` is the folder above the tree.
        let dir = tree();
        symlink(".", dir.path().join("dot")).unwrap();
        symlink("dot/../secret", dir.path().join("here")).unwrap();
        assert_eq!(refused(dir.path()), ("here".to_owned(), "is a link to dot/../secret, outside the source".into()));
        // An inside link that names an outside one leaves the tree with it.
        let dir = tree();
        symlink("/etc", dir.path().join("b")).unwrap();
        symlink("b/passwd", dir.path().join("a")).unwrap();
        assert_eq!(refused(dir.path()).0, "a");
    }

    #[test]
    fn a_loop_of_links_is_refused() {
        let dir = tree();
        symlink("b", dir.path().join("a")).unwrap();
        symlink("a", dir.path().join("b")).unwrap();
        let (path, reason) = refused(dir.path());
        assert_eq!(path, "a");
        assert!(reason.contains("more than 40 links"), "{reason}");
    }

    #[test]
    fn a_fifo_is_refused() {
        let dir = tree();
        let fifo = std::ffi::CString::new(dir.path().join("core/pipe").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a path we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(refused(dir.path()), ("core/pipe".to_owned(), "is a fifo, which a source may not hold".into()));
    }

    #[test]
    fn a_tree_past_the_limit_is_refused_as_soon_as_the_walk_passes_it() {
        let dir = tree();
        std::fs::write(dir.path().join("big"), vec![0u8; 2048]).unwrap();
        assert_eq!(inspect(dir.path(), 2048 + 23).unwrap(), 2048 + 23);
        assert!(matches!(inspect(dir.path(), 2048 + 22), Err(Refusal::TooLarge(n)) if n > 2048 + 22));
    }
}
