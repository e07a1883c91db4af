//! Resource names and where their documents live.
//!
//! A resource is a document's path relative to the publish root (`reports/daily.md`).
//! [`Resource::parse`] is lexical and refuses anything that could escape the root or
//! touch the tool's own files; [`locate`] then walks the real directories one component
//! at a time, so a symlink placed inside the root can never carry a write outside it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::folder::{Child, Folder, Kind};
use crate::text::{first_misleading, padded};

/// The folder under the root that holds the default state file.
pub const STATE_DIR: &str = ".fencepost";

/// Marker inside file names that the tool reserves for its temp and link files.
pub const RESERVED: &str = ".fencepost-";

/// Longest file name accepted, so the tool's `.<name>.fencepost-tmp-XXXXXXXXXXXX`
/// sibling names still fit in the usual 255-byte limit (`NAME_MAX`).
const MAX_NAME: usize = 200;

/// Longest folder name accepted: `NAME_MAX` (folders get no sibling names).
const MAX_FOLDER: usize = 255;

/// Longest resource accepted, the same on every store: the PostgreSQL store keeps names in
/// btree-indexed columns, whose entries cannot pass about 2,700 bytes (a third of a page),
/// and its log's index holds the name with more beside it; 1,024 bytes leaves a wide
/// margin. It is also well under `PATH_MAX` with the tool's sibling names beside the
/// document; the root's own length is checked where the root is known.
pub const MAX_RESOURCE: usize = 1024;

/// A validated resource name: relative, normalised, `/`-separated, UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource(String);

impl Resource {
    /// Checks a resource name as given on the command line.
    pub fn parse(raw: &OsStr) -> Result<Resource> {
        let text = raw
            .to_str()
            .ok_or_else(|| Error::usage(format!("resource {raw:?} is not valid UTF-8")))?;
        let bad = |why: &str| Error::usage(format!("resource {text:?} {why}"));
        if text.is_empty() {
            return Err(Error::usage("resource name is empty"));
        }
        if text.chars().any(char::is_control) {
            return Err(bad("contains control characters"));
        }
        if let Some(c) = first_misleading(text) {
            return Err(bad(&format!(
                "contains an invisible or direction-changing character ({c}), which would \
                 make it show as another name"
            )));
        }
        if text.ends_with('/') {
            return Err(bad("ends with '/': a resource names a file, not a folder"));
        }
        let mut parts = Vec::new();
        for component in Path::new(text).components() {
            match component {
                Component::Normal(part) => parts.push(part.to_str().unwrap_or_default()),
                Component::CurDir => {}
                Component::ParentDir => return Err(bad("contains '..'")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Error::usage_hint(
                        format!("resource {text:?} is absolute"),
                        "name the document relative to the root (under a root found from the current \
                         folder, relative to that folder), e.g. reports/daily.md",
                    ));
                }
            }
        }
        let Some(name) = parts.last() else {
            return Err(bad("names no file"));
        };
        if parts.contains(&STATE_DIR) {
            return Err(bad(
                "points into a .fencepost folder, which holds a state file",
            ));
        }
        if parts.iter().any(|p| p.contains(RESERVED)) {
            return Err(bad(
                "contains '.fencepost-', which is reserved for the tool's temp files",
            ));
        }
        if parts.iter().any(|p| padded(p)) {
            return Err(bad(
                "has a name with leading or trailing white space, which would show as \
                 another name",
            ));
        }
        if name.len() > MAX_NAME {
            return Err(bad(&format!(
                "has a file name longer than {MAX_NAME} bytes"
            )));
        }
        if let Some(folder) = parts.iter().find(|p| p.len() > MAX_FOLDER) {
            return Err(Error::usage(format!(
                "resource {:?} has a folder name of {} bytes, longer than {MAX_FOLDER}",
                crate::text::shown(text),
                folder.len()
            )));
        }
        let joined = parts.join("/");
        if joined.len() > MAX_RESOURCE {
            return Err(Error::usage(format!(
                "resource {:?} is {} bytes long, longer than {MAX_RESOURCE} (the longest \
                 name every store can index)",
                crate::text::shown(text),
                joined.len()
            )));
        }
        Ok(Resource(joined))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a resource's document lives: its folder, held open by a handle, and its file
/// name. Every operation on the document goes through the handle (see `folder`).
#[derive(Debug)]
pub struct DocPath {
    pub folder: Folder,
    pub name: OsString,
    /// Folders made by this locate (each with its parent), outermost first: removed again
    /// by [`DocPath::remove_made_folders`] when the write that made them fails.
    made: Vec<(Folder, OsString)>,
}

impl DocPath {
    /// The document's full path, for messages.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.folder.join(&self.name)
    }

    /// Re-walks the resource's path from the root and checks it still leads to the very
    /// folder this handle holds. Run under the lock before the recovery links are made and
    /// again just before the rename: a folder swapped for a symlink, or moved out of the
    /// root, meanwhile refuses the write (the handle would still reach the moved folder).
    pub fn check_unmoved(&self, root: &Path, resource: &Resource) -> Result<()> {
        let again = locate(root, resource, false)?;
        let same = match &again {
            Some(doc) => doc.folder.id()? == self.folder.id()?,
            None => false,
        };
        if same {
            Ok(())
        } else {
            Err(Error::usage(format!(
                "the folder of {resource} ({}) was moved or replaced during the write; nothing was published",
                self.folder.path().display()
            )))
        }
    }

    /// Removes the folders this locate made, innermost first, where they are still empty:
    /// a write that failed leaves no folders behind.
    pub fn remove_made_folders(&mut self) {
        while let Some((parent, name)) = self.made.pop() {
            if parent.remove_child(&name) {
                let _ = parent.sync();
            }
        }
    }

    /// The file name of a sibling owned by the tool: `.<name>.fencepost-<what>` (with
    /// `what` = `tmp-`, the prefix of the staged temp files).
    #[must_use]
    pub fn sibling_name(&self, what: &str) -> OsString {
        let mut name = OsString::from(".");
        name.push(&self.name);
        name.push(RESERVED);
        name.push(what);
        name
    }
}

/// How far a resource's folders exist on disk: the real (symlink-free, canonical) folder
/// reached, and the folders below it that do not exist yet.
struct Walk {
    dir: PathBuf,
    missing: Vec<String>,
    name: String,
}

/// Walks the folders of `resource` under `root` (canonical), following symlinks only
/// while they stay inside the root, and never into its `.fencepost` folder.
fn walk(root: &Path, resource: &Resource) -> Result<Walk> {
    let parts: Vec<&str> = resource.as_str().split('/').collect();
    let (name, folders) = parts.split_last().unwrap_or((&"", &[]));
    let state_dir = root.join(STATE_DIR);
    let mut dir = root.to_path_buf();
    for (i, folder) in folders.iter().enumerate() {
        let next = dir.join(folder);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let real = std::fs::canonicalize(&next).map_err(|e| {
                    if e.kind() == io::ErrorKind::NotFound {
                        Error::usage(format!(
                            "resource {resource} passes through symlink {} that leads nowhere",
                            next.display()
                        ))
                    } else {
                        Error::io("cannot follow", &next)(e)
                    }
                })?;
                if !real.starts_with(root) {
                    return Err(Error::usage_hint(
                        format!(
                            "resource {resource} passes through symlink {} that leads outside the root",
                            next.display()
                        ),
                        format!("writes stay inside {}", root.display()),
                    ));
                }
                if !real.is_dir() {
                    return Err(Error::usage(format!("{} is not a folder", next.display())));
                }
                skipped_folders(root, &real, resource)?;
                dir = real;
            }
            Ok(meta) if meta.is_dir() => dir = next,
            Ok(_) => {
                return Err(Error::usage(format!(
                    "resource {resource}: {} is not a folder",
                    next.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Walk {
                    dir,
                    missing: folders[i..]
                        .iter()
                        .map(std::string::ToString::to_string)
                        .collect(),
                    name: name.to_string(),
                });
            }
            Err(e) => return Err(Error::io("cannot inspect", &next)(e)),
        }
        if dir.starts_with(&state_dir) {
            return Err(Error::usage(format!(
                "resource {resource} leads into the tool's own .fencepost folder"
            )));
        }
        if dir != root {
            another_root(&dir, resource)?;
        }
    }
    Ok(Walk {
        dir,
        missing: Vec::new(),
        name: name.to_string(),
    })
}

/// Checks the folders a symlink jumps over as if they had been walked one by one: none
/// may be a `.fencepost` folder or another publish root.
fn skipped_folders(root: &Path, real: &Path, resource: &Resource) -> Result<()> {
    let Ok(inside) = real.strip_prefix(root) else {
        return Ok(());
    };
    let mut dir = root.to_path_buf();
    for part in inside.components() {
        if part.as_os_str() == STATE_DIR {
            return Err(Error::usage(format!(
                "resource {resource} leads into a .fencepost folder, which holds a state file"
            )));
        }
        dir.push(part);
        another_root(&dir, resource)?;
    }
    Ok(())
}

/// Refuses a folder under the root that is itself a publish root (it has a `.fencepost`
/// folder): its documents are fenced by that root's state file, and a second set of
/// leases and fences for the same files would let each side overwrite the other.
fn another_root(dir: &Path, resource: &Resource) -> Result<()> {
    let marker = dir.join(STATE_DIR);
    match std::fs::symlink_metadata(&marker) {
        Ok(_) => Err(Error::usage_hint(
            format!(
                "resource {resource} passes through {}, another publish root (it has {STATE_DIR}/)",
                dir.display()
            ),
            format!("use --root {} for its documents", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("cannot inspect", &marker)(e)),
    }
}

/// The resource's canonical name: its real path relative to the root, so that two
/// spellings of one file (`current/report.md` through a symlink, and
/// `releases/v1/report.md`) share one lease and one fence. Folders that do not exist
/// yet keep their spelling. The real name passes the same rules as a typed one: a
/// symlink cannot lead to a name the rules would refuse (a reserved part, control
/// characters, bytes that are not UTF-8).
pub fn canonical(root: &Path, resource: &Resource) -> Result<Resource> {
    let walk = walk(root, resource)?;
    let mut parts: Vec<String> = Vec::new();
    let inside = walk.dir.strip_prefix(root).unwrap_or(Path::new(""));
    for part in inside.components() {
        let Some(text) = part.as_os_str().to_str() else {
            return Err(Error::usage_hint(
                format!(
                    "resource {resource} leads to the folder {}, whose name is not valid UTF-8",
                    walk.dir.display()
                ),
                "fencepost names documents in UTF-8; rename the folder",
            ));
        };
        parts.push(text.to_string());
    }
    parts.extend(walk.missing);
    parts.push(walk.name);
    let real = parts.join("/");
    if real == resource.as_str() {
        return Ok(Resource(real));
    }
    Resource::parse(OsStr::new(&real)).map_err(|e| match e {
        Error::Usage { message, .. } => Error::usage_hint(
            format!(
                "resource {resource} leads through a symlink to a name that is refused: {message}"
            ),
            "rename the folder the symlink points to, or name another document",
        ),
        other => other,
    })
}

/// Opens the folder of `resource` (a canonical name) from a handle on `root`, one
/// component at a time, following no symlink: a symlink, a file or another publish root
/// on the way is refused. With `create`, missing folders are made (each new folder's
/// parent fsynced, so a committed document never loses its folder); without it, a missing
/// folder gives `Ok(None)` (no document).
pub fn locate(root: &Path, resource: &Resource, create: bool) -> Result<Option<DocPath>> {
    let parts: Vec<&str> = resource.as_str().split('/').collect();
    let (name, folders) = parts.split_last().unwrap_or((&"", &[]));
    let mut dir = Folder::open(root)?;
    let mut made = Vec::new();
    for folder in folders {
        let part = OsStr::new(folder);
        let mut fresh = false;
        let child = match dir.child(part)? {
            Child::Missing if create => {
                fresh = dir.make_child(part)?;
                if fresh {
                    dir.sync()?;
                }
                dir.child(part)?
            }
            found => found,
        };
        let next = match child {
            Child::Folder(next) => next,
            Child::Missing => return Ok(None),
            Child::NotAFolder(kind) => {
                let what = match kind {
                    Kind::Symlink => "a symlink",
                    _ => "not a folder",
                };
                return Err(Error::usage(format!(
                    "resource {resource}: {} is {what}",
                    dir.join(part).display()
                )));
            }
        };
        if next.stat(OsStr::new(STATE_DIR))?.is_some() {
            return Err(Error::usage_hint(
                format!(
                    "resource {resource} passes through {}, another publish root (it has {STATE_DIR}/)",
                    next.path().display()
                ),
                format!("use --root {} for its documents", next.path().display()),
            ));
        }
        let parent = std::mem::replace(&mut dir, next);
        if fresh {
            made.push((parent, part.to_os_string()));
        }
    }
    Ok(Some(DocPath {
        folder: dir,
        name: OsString::from(name),
        made,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::display_name;

    fn parse(s: &str) -> Result<Resource> {
        Resource::parse(OsStr::new(s))
    }

    #[test]
    fn names_are_normalised() {
        assert_eq!(
            parse("./reports//daily.md").ok().map(|r| r.0),
            Some("reports/daily.md".into())
        );
    }

    #[test]
    fn escaping_and_reserved_names_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/",
            ".",
            ".fencepost/state.db",
            "reports/.fencepost/state.db",
            "a/.x.fencepost-tmp-1",
            "bad\nname",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn names_that_show_as_another_are_refused_and_shown_escaped() {
        for bad in [
            "evil\u{202e}txt.md",
            "zero\u{200b}width.md",
            "\u{feff}bom.md",
            "a\u{2028}b.md",
            " lead.md",
            "trail.md ",
            "dir /x.md",
            "dir/\u{a0}x.md",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
            assert_ne!(display_name(bad), bad, "{bad:?} shown raw");
        }
        for good in ["my report.md", "naïve/café.md", "工人甲.md"] {
            assert!(parse(good).is_ok(), "{good:?} refused");
            assert_eq!(display_name(good), good);
        }
        assert_eq!(display_name("a\u{202e}b"), "\"a\\u{202e}b\"");
        assert_eq!(display_name("doc.md "), "\"doc.md \"");
    }

    #[test]
    fn names_too_long_for_the_filesystem_are_refused() {
        let folder = |n| "d".repeat(n);
        assert!(parse(&format!("{}/x.md", folder(255))).is_ok());
        assert!(parse(&format!("{}/x.md", folder(256))).is_err());
        assert!(parse(&"f".repeat(200)).is_ok());
        assert!(parse(&"f".repeat(201)).is_err());
        // Many short folders: the whole name counts, up to MAX_RESOURCE bytes.
        let deep = |n| vec!["ab"; n].join("/") + "/x.md";
        assert_eq!(deep(340).len(), MAX_RESOURCE);
        assert!(parse(&deep(340)).is_ok(), "{} bytes", deep(340).len());
        let over = deep(340) + "x";
        assert!(parse(&over).is_err(), "{} bytes", over.len());
        // The limit counts the normalised name, not its spelling.
        let padded = format!("./{}", ".//".repeat(2000)) + "x.md";
        assert!(parse(&padded).is_ok());
    }
}
