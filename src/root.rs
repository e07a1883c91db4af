//! Which publish root a command works on, which state file keeps it, and the rules that
//! give every document exactly one root.
//!
//! A publish root is a folder holding `.fencepost/`. Without `--root`, a command works on
//! the nearest ancestor of the current folder that holds one, as git finds its repository,
//! without crossing into another filesystem; names typed on the command line are then
//! relative to the current folder. A root whose state file lives elsewhere (`--db`) still
//! holds `.fencepost/`, with a one-line file naming that state file, so it is found from
//! inside, and with the right state file. Roots never nest: two roots over one document
//! would give it two leases and two fences, and each holder could overwrite the other.
//!
//! The state file itself, SQLite's files beside it and its folder are known by device and
//! inode ([`StateFiles`]), so no spelling of a resource (symlink, hard link, symlinked
//! folder) can name one of them as a document.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::resource::{Resource, STATE_DIR};
use crate::text::shown;

/// The file in `.fencepost/` that names a state file kept outside that folder.
pub const MARKER: &str = "state-file";

/// Longest path the kernel accepts (`PATH_MAX`, counting its terminating NUL).
const PATH_MAX: usize = 4096;

/// Room left beside a document's path for the tool's own sibling names
/// (`.<name>.fencepost-tmp-<token>` and the like, with a token of up to 40 bytes).
const SIBLING_ROOM: usize = 64;

/// The SQLite files that go with a state file, as suffixes of its name.
const COMPANIONS: [&str; 4] = ["", "-wal", "-shm", "-journal"];

/// How the root of a command was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// `--root` or `FENCEPOST_ROOT`: names are relative to it.
    Given,
    /// The nearest ancestor of the current folder holding `.fencepost/`.
    Found,
    /// No root above: the current folder, which becomes a root with its first claim.
    Current,
}

/// The root a command works on and its state file.
#[derive(Debug, Clone)]
pub struct Place {
    /// The publish root, canonical.
    pub root: PathBuf,
    /// The state file, as it will be opened.
    pub db: PathBuf,
    pub how: How,
    /// The current folder under a found root: names typed on the command line start there.
    pub here: Option<PathBuf>,
}

/// Chooses the root and the state file: `given` (`--root`) wins, else discovery from the
/// current folder; `db` (`--db`) wins over the state file the root names, but must be
/// that file when the root names one.
pub fn resolve(given: Option<&Path>, db: Option<&Path>) -> Result<Place> {
    let (root, how, here) = if let Some(dir) = given {
        (usable_root(dir)?, How::Given, None)
    } else {
        let cwd = std::env::current_dir()
            .and_then(fs::canonicalize)
            .map_err(|e| {
                Error::usage_hint(
                    format!("the current folder is not usable: {e}"),
                    "pass --root DIR (FENCEPOST_ROOT)",
                )
            })?;
        match discover(&cwd) {
            Some(root) => {
                let here = cwd
                    .strip_prefix(&root)
                    .unwrap_or(Path::new(""))
                    .to_path_buf();
                let here = (!here.as_os_str().is_empty()).then_some(here);
                (root, How::Found, here)
            }
            None => (cwd, How::Current, None),
        }
    };
    let kept = kept_db(&root)?;
    let db = match (db, kept) {
        (Some(db), Some(kept)) if !same_file(db, &kept) => {
            return Err(Error::usage_hint(
                format!(
                    "publish root {} keeps its state in {}, not {}",
                    root.display(),
                    kept.display(),
                    db.display()
                ),
                format!(
                    "drop --db (FENCEPOST_DB), or pass --db {}: one state file per root",
                    kept.display()
                ),
            ));
        }
        (Some(db), _) => db.to_path_buf(),
        (None, Some(kept)) => kept,
        (None, None) => default_db(&root),
    };
    Ok(Place {
        root,
        db,
        how,
        here,
    })
}

fn usable_root(dir: &Path) -> Result<PathBuf> {
    let root = fs::canonicalize(dir).map_err(|e| {
        Error::usage_hint(
            format!("publish root {} is not usable: {e}", dir.display()),
            "create it first, or pass --root DIR (FENCEPOST_ROOT)",
        )
    })?;
    if !root.is_dir() {
        return Err(Error::usage(format!(
            "publish root {} is not a folder",
            root.display()
        )));
    }
    Ok(root)
}

/// Where the default state file is for a root.
#[must_use]
pub fn default_db(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join("state.db")
}

/// True when `dir` holds a `.fencepost` entry: it is a publish root.
#[must_use]
pub fn is_root(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(STATE_DIR)).is_ok()
}

/// The nearest folder from `cwd` up that is a root, on `cwd`'s filesystem.
fn discover(cwd: &Path) -> Option<PathBuf> {
    let dev = fs::metadata(cwd).ok()?.dev();
    cwd.ancestors()
        .take_while(|dir| fs::metadata(dir).is_ok_and(|m| m.dev() == dev))
        .find(|dir| is_root(dir))
        .map(Path::to_path_buf)
}

/// The nearest root strictly above `root`, on any filesystem: a root there would already
/// fence this one's documents.
pub fn enclosing(root: &Path) -> Option<PathBuf> {
    root.ancestors()
        .skip(1)
        .find(|dir| is_root(dir))
        .map(Path::to_path_buf)
}

/// The state file a root keeps: the one its marker names, else its default one if that
/// exists; `None` for a folder that has none yet.
fn kept_db(root: &Path) -> Result<Option<PathBuf>> {
    let marker = root.join(STATE_DIR).join(MARKER);
    match fs::read(&marker) {
        Ok(mut bytes) => {
            if bytes.last() == Some(&b'\n') {
                bytes.pop();
            }
            if bytes.is_empty() {
                return Err(Error::usage_hint(
                    format!("{} names no state file", marker.display()),
                    "write the state file's path in it, or remove it",
                ));
            }
            Ok(Some(root.join(OsString::from_vec(bytes))))
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            let db = default_db(root);
            Ok(fs::symlink_metadata(&db).is_ok().then_some(db))
        }
        Err(e) => Err(Error::io("cannot read", marker)(e)),
    }
}

/// True when two paths name one file: same device and inode when both exist, else the
/// same real path.
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => real_path(a) == real_path(b),
    }
}

/// The absolute path `path` resolves to, following symlinks even when the file they lead
/// to does not exist yet (SQLite creates a state file where its symlink points). Folders
/// that do not exist keep their spelling.
#[must_use]
pub fn real_path(path: &Path) -> PathBuf {
    let mut path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for _ in 0..40 {
        if let Ok(real) = fs::canonicalize(&path) {
            return real;
        }
        match fs::read_link(&path) {
            Ok(target) => path = crate::folder::folder_of(&path).join(target),
            Err(_) => break,
        }
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if dir != path => real_path(dir).join(name),
        _ => path,
    }
}

/// Turns a name typed on the command line into a name under the root: a found root's
/// names start in the current folder (`here`), and leading `..` steps go up from it, never
/// above the root.
pub fn under(root: &Path, here: Option<&Path>, typed: &OsStr) -> Result<OsString> {
    let Some(here) = here else {
        return Ok(typed.to_os_string());
    };
    let mut rest = typed.as_bytes();
    if rest.starts_with(b"/") {
        return Ok(typed.to_os_string());
    }
    let mut base: Vec<&[u8]> = here.iter().map(OsStr::as_bytes).collect();
    loop {
        let (step, tail) = match rest.iter().position(|b| *b == b'/') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &b""[..]),
        };
        match step {
            b"" | b"." if !rest.is_empty() => {}
            b".." => {
                if base.pop().is_none() {
                    return Err(Error::usage_hint(
                        format!(
                            "resource {typed:?} leads out of the publish root {}",
                            root.display()
                        ),
                        "name a document inside the root",
                    ));
                }
            }
            _ => break,
        }
        rest = tail;
    }
    let mut joined = base.join(&b'/');
    if !joined.is_empty() {
        joined.push(b'/');
    }
    joined.extend_from_slice(rest);
    Ok(OsString::from_vec(joined))
}

/// Refuses a resource whose path under `root`, with the tool's sibling names beside its
/// document, would not fit in a path the kernel takes.
pub fn fits(root: &Path, resource: &Resource) -> Result<()> {
    let len = root.as_os_str().len() + 1 + resource.as_str().len() + SIBLING_ROOM;
    if len >= PATH_MAX {
        return Err(Error::usage(format!(
            "resource {} is too long: under {} its path and the tool's files beside it \
             would pass the system's {PATH_MAX}-byte limit",
            shown(resource.as_str()),
            root.display()
        )));
    }
    Ok(())
}

/// Refuses a resource whose real folders pass through another publish root: its
/// documents are that root's, and the hint names them as that root does. Only the plain
/// folders at the start of the path are looked at; the walk that resolves symlinks
/// refuses the rest.
pub fn refuse_nested(root: &Path, resource: &Resource) -> Result<()> {
    let parts: Vec<&str> = resource.as_str().split('/').collect();
    let mut dir = root.to_path_buf();
    for (i, folder) in parts[..parts.len() - 1].iter().enumerate() {
        dir.push(folder);
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            _ => return Ok(()),
        }
        if is_root(&dir) {
            return Err(Error::usage_hint(
                format!(
                    "resource {resource} is in {}, another publish root (it has {STATE_DIR}/): \
                     one document, one root",
                    dir.display()
                ),
                format!(
                    "name it {} under {}: run from inside it without --root, or pass --root {}",
                    parts[i + 1..].join("/"),
                    dir.display(),
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Makes `place.root` a publish root before its state file is first created: refuses one
/// inside another root, and gives it `.fencepost/` (with a marker naming the state file
/// when that lives elsewhere). `resource` is what is being claimed, for the hint. True
/// when this call made `.fencepost/` (the folder was not a root before).
pub fn establish(place: &Place, resource: Option<&Resource>) -> Result<bool> {
    let state_dir = place.root.join(STATE_DIR);
    let made = if is_root(&place.root) {
        false
    } else {
        refuse_enclosed(place, resource)?;
        match fs::create_dir(&state_dir) {
            Ok(()) => {
                crate::folder::fsync_dir(&place.root)?;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(Error::io("cannot create folder", &state_dir)(e)),
        }
    };
    let marked = mark(place);
    // Checked again once marked: of two roots made at once, one inside the other, the
    // inner one sees the outer's mark here, or the outer one's walk sees the inner's.
    let checked = marked.and_then(|()| {
        if made {
            refuse_enclosed(place, resource)
        } else {
            Ok(())
        }
    });
    if checked.is_err() && made {
        let _ = fs::remove_file(state_dir.join(MARKER));
        let _ = fs::remove_dir(&state_dir);
    }
    checked.map(|()| made)
}

/// Writes the marker naming a state file kept outside `.fencepost/` (relative to the root
/// when the root holds it, so the whole tree can move), unless it is there already.
fn mark(place: &Place) -> Result<()> {
    let db = real_path(&place.db);
    if db == real_path(&default_db(&place.root)) || kept_db(&place.root)?.is_some() {
        // `resolve` already refused a state file other than the one kept.
        return Ok(());
    }
    let named = db.strip_prefix(&place.root).unwrap_or(&db);
    let mut line = named.as_os_str().as_bytes().to_vec();
    line.push(b'\n');
    let state_dir = place.root.join(STATE_DIR);
    let marker = state_dir.join(MARKER);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .and_then(|mut file| {
            io::Write::write_all(&mut file, &line)?;
            file.sync_all()
        });
    match written {
        Ok(()) => crate::folder::fsync_dir(&state_dir),
        // Another first claim wrote it meanwhile: it must name the same state file.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match kept_db(&place.root)? {
            Some(kept) if same_file(&kept, &place.db) => Ok(()),
            _ => Err(Error::usage(format!(
                "publish root {} was just given another state file ({})",
                place.root.display(),
                marker.display()
            ))),
        },
        Err(e) => Err(Error::io("cannot write", marker)(e)),
    }
}

/// Refuses to make a root inside another one (`resource`: the one being claimed, named
/// in the hint as the outer root would name it).
fn refuse_enclosed(place: &Place, resource: Option<&Resource>) -> Result<()> {
    let Some(outer) = enclosing(&place.root) else {
        return Ok(());
    };
    let inside = place.root.strip_prefix(&outer).unwrap_or(Path::new(""));
    let Some(resource) = resource else {
        return Err(Error::usage_hint(
            format!(
                "{} is inside the publish root {} (it has {STATE_DIR}/): roots do not nest",
                place.root.display(),
                outer.display()
            ),
            format!(
                "use the root {}: its documents under {} are named from there",
                outer.display(),
                inside.display()
            ),
        ));
    };
    Err(Error::usage_hint(
        format!(
            "{} is inside the publish root {} (it has {STATE_DIR}/): one document, one root",
            place.root.display(),
            outer.display()
        ),
        format!(
            "name it {} under {}: run from inside it without --root, or pass --root {}",
            inside.join(resource.as_str()).display(),
            outer.display(),
            outer.display()
        ),
    ))
}

/// How a state file names its root: relative to the state file's folder when the root
/// contains it (`..` for the default `<root>/.fencepost/state.db`, so moving the whole
/// tree keeps working), else the root's absolute real path.
#[must_use]
pub fn pin(root: &Path, db: &Path) -> Vec<u8> {
    match db_dir(db).strip_prefix(root) {
        Ok(inside) => {
            let ups = vec![".."; inside.components().count()];
            if ups.is_empty() {
                b".".to_vec()
            } else {
                ups.join("/").into_bytes()
            }
        }
        Err(_) => root.as_os_str().as_bytes().to_vec(),
    }
}

/// The root a pin names, for messages.
#[must_use]
pub fn pinned_root(db: &Path, pin: &[u8]) -> PathBuf {
    let pinned = Path::new(OsStr::from_bytes(pin));
    if pinned.is_absolute() {
        return pinned.to_path_buf();
    }
    let mut named = db_dir(db);
    for _ in pinned
        .components()
        .filter(|c| *c == std::path::Component::ParentDir)
    {
        named.pop();
    }
    named
}

/// The state file's real folder: through a symlinked state file to the folder of the file
/// SQLite opens.
fn db_dir(db: &Path) -> PathBuf {
    crate::folder::folder_of(&real_path(db)).to_path_buf()
}

/// The state file and SQLite's files beside it, known by what they are on disk: the
/// folder they live in (device and inode) with their names, and their paths, to compare
/// a document's device and inode with.
#[derive(Debug, Clone, Default)]
pub struct StateFiles {
    names: Vec<((u64, u64), OsString)>,
    paths: Vec<PathBuf>,
}

impl StateFiles {
    /// The files of the state file `db`: under its real name in its real folder, and
    /// under the name it was given, in the folder that name is in.
    pub fn of(db: &Path) -> StateFiles {
        let mut files = StateFiles::default();
        let real = real_path(db);
        let typed_dir = crate::folder::folder_of(db);
        let typed_dir = fs::canonicalize(typed_dir).unwrap_or_else(|_| real_path(typed_dir));
        let spellings = [
            (real.parent().map(Path::to_path_buf), real.file_name()),
            (Some(typed_dir), db.file_name()),
        ];
        for (dir, name) in spellings {
            let (Some(dir), Some(name)) = (dir, name) else {
                continue;
            };
            let id = fs::metadata(&dir).ok().map(|m| (m.dev(), m.ino()));
            for suffix in COMPANIONS {
                let mut file = name.to_os_string();
                file.push(suffix);
                let path = dir.join(&file);
                if files.paths.contains(&path) {
                    continue;
                }
                files.paths.push(path);
                if let Some(id) = id {
                    files.names.push((id, file));
                }
            }
        }
        files
    }

    /// True when the file `name` in the folder `dir` (device, inode), which is `doc`
    /// (device, inode; `None` if it does not exist), is the state file or one of its
    /// companions.
    #[must_use]
    pub fn holds(&self, dir: (u64, u64), name: &OsStr, doc: Option<(u64, u64)>) -> bool {
        if self.names.iter().any(|(d, n)| *d == dir && n == name) {
            return true;
        }
        doc.is_some_and(|doc| {
            self.paths
                .iter()
                .any(|path| fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == doc))
        })
    }

    /// True when `path` (real folders, then names not made yet) is where the state file
    /// or a companion is or will be.
    #[must_use]
    pub fn at(&self, path: &Path) -> bool {
        self.paths.iter().any(|p| p == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn under_text(here: &str, typed: &str) -> Result<String> {
        let here = (!here.is_empty()).then(|| Path::new(here));
        under(Path::new("/r"), here, OsStr::new(typed)).map(|s| s.to_string_lossy().into_owned())
    }

    #[test]
    fn typed_names_start_in_the_current_folder() {
        assert_eq!(under_text("", "a/b.md").ok().as_deref(), Some("a/b.md"));
        assert_eq!(
            under_text("reports", "daily.md").ok().as_deref(),
            Some("reports/daily.md")
        );
        assert_eq!(under_text("a/b", "../c.md").ok().as_deref(), Some("a/c.md"));
        assert_eq!(
            under_text("a/b", "./../../c.md").ok().as_deref(),
            Some("c.md")
        );
        assert_eq!(
            under_text("a", "x/../y.md").ok().as_deref(),
            Some("a/x/../y.md")
        );
        assert_eq!(under_text("a", "/abs.md").ok().as_deref(), Some("/abs.md"));
        assert!(under_text("a", "../../out.md").is_err());
        assert!(
            under_text("", "../out.md").is_ok(),
            "the root's own names are parsed as typed"
        );
    }

    #[test]
    fn long_names_are_shortened_in_messages() {
        let long = "é".repeat(100);
        let shown = shown(&long);
        assert!(shown.ends_with("(200 bytes)"), "{shown}");
        assert!(shown.len() < 80);
    }
}
