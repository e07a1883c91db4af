//! A folder held open by a directory handle, and the file operations made relative to it.
//!
//! Once a document's folder is found, every operation on the document (create the temp
//! file, link, symlink, rename, fsync, unlink, chmod, recovery) goes through this handle,
//! never through the folder's path again. A handle cannot be redirected: a folder swapped
//! for a symlink, or renamed, after it was opened does not move a write elsewhere. Names
//! given to these methods are single components; none of them follows a symlink.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::{Error, Result};

/// An open folder and the path it was reached by (for messages only).
#[derive(Debug)]
pub struct Folder {
    /// Shared with the registry of staged files a signal may remove (`atomic::interrupt`),
    /// which unlinks through it from another thread.
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// What `lstat` says about a name in a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The kinds of directory entry the tool tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Folder,
    Symlink,
    Other,
}

/// How [`Folder::child`] found a subfolder.
#[derive(Debug)]
pub enum Child {
    /// A real folder, opened.
    Folder(Folder),
    /// Nothing by that name.
    Missing,
    /// Something that is not a real folder: a symlink, a file, a device.
    NotAFolder(Kind),
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::RDONLY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Folder {
    /// Opens a folder by path (the publish root; the only open that follows symlinks).
    pub fn open(path: &Path) -> Result<Folder> {
        let fd = rustix::fs::openat(
            rustix::fs::CWD,
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io("cannot open folder", path)(e.into()))?;
        Ok(Folder {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
        })
    }

    /// The path this folder was reached by, for messages.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this folder, for messages.
    #[must_use]
    pub fn join(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// The folder's handle, shared: for a thread that must reach the folder while this
    /// value is in another's hands (`atomic::interrupt`).
    #[must_use]
    pub fn handle(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.fd)
    }

    /// Device and inode of the folder itself.
    pub fn id(&self) -> Result<(u64, u64)> {
        let st = rustix::fs::fstat(&self.fd).map_err(self.err("cannot inspect", None))?;
        Ok((st.st_dev, st.st_ino))
    }

    /// Opens the subfolder `name` without following a symlink.
    pub fn child(&self, name: &OsStr) -> Result<Child> {
        match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Child::Folder(Folder {
                fd: Arc::new(fd),
                path: self.join(name),
            })),
            Err(rustix::io::Errno::NOENT) => Ok(Child::Missing),
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => match self.stat(name)? {
                Some(entry) => Ok(Child::NotAFolder(entry.kind)),
                None => Ok(Child::Missing),
            },
            Err(e) => Err(self.err("cannot open folder", Some(name))(e)),
        }
    }

    /// Makes the subfolder `name` (mode 0777 under the umask). `Ok(false)` if something
    /// by that name exists already.
    pub fn make_child(&self, name: &OsStr) -> Result<bool> {
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o777)) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(self.err("cannot create folder", Some(name))(e)),
        }
    }

    /// Removes the empty subfolder `name`; `false` if it is gone or not empty.
    #[must_use]
    pub fn remove_child(&self, name: &OsStr) -> bool {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR).is_ok()
    }

    /// `lstat` of `name`: `None` if there is nothing by that name.
    pub fn stat(&self, name: &OsStr) -> Result<Option<Entry>> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(entry(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(self.err("cannot inspect", Some(name))(e)),
        }
    }

    /// Opens the regular file `name` for reading, never through a symlink.
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }

    /// Creates the new file `name` (never an existing one), read-write, with `mode`
    /// under the umask. `Ok(None)` if the name is taken.
    pub fn create_file(&self, name: &OsStr, mode: u32) -> Result<Option<File>> {
        match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        ) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(rustix::io::Errno::EXIST) => Ok(None),
            Err(e) => Err(self.err("cannot create a file in", None)(e)),
        }
    }

    /// Hard-links `from` to the new name `to`, both in this folder.
    pub fn link(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        rustix::fs::linkat(&self.fd, from, &self.fd, to, AtFlags::empty()).map_err(Into::into)
    }

    /// Makes the symlink `name` holding `target`.
    pub fn symlink(&self, target: &OsStr, name: &OsStr) -> io::Result<()> {
        rustix::fs::symlinkat(target, &self.fd, name).map_err(Into::into)
    }

    /// The target of the symlink `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<OsString> {
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new())?;
        Ok(OsStr::from_bytes(target.as_bytes()).to_os_string())
    }

    /// Renames `from` over `to`, both in this folder.
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(Into::into)
    }

    /// Removes the file (or symlink) `name`.
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(Into::into)
    }

    /// Removes `name` if it is there; an absent name is not an error.
    pub fn remove_if_present(&self, name: &OsStr) -> Result<()> {
        match self.remove(name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("cannot remove", self.join(name))(e)),
        }
    }

    /// fsyncs the folder: links, renames and removals in it become durable.
    pub fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).map_err(self.err("cannot fsync folder", None))
    }

    /// The names in the folder (without `.` and `..`).
    pub fn names(&self) -> Result<Vec<OsString>> {
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(self.err("cannot list", None))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(self.err("cannot list", None))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        Ok(names)
    }

    fn err(
        &self,
        what: &'static str,
        name: Option<&OsStr>,
    ) -> impl FnOnce(rustix::io::Errno) -> Error + use<> {
        let path = name.map_or_else(|| self.path.clone(), |n| self.join(n));
        move |e| Error::io(what, path)(e.into())
    }
}

impl AsFd for Folder {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn entry(st: &rustix::fs::Stat) -> Entry {
    let kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::RegularFile => Kind::File,
        rustix::fs::FileType::Directory => Kind::Folder,
        rustix::fs::FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    };
    Entry {
        kind,
        dev: st.st_dev,
        ino: st.st_ino,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
    }
}

/// `fstat` of an open file as an [`Entry`].
pub fn entry_of(file: &File) -> io::Result<Entry> {
    Ok(entry(&rustix::fs::fstat(file)?))
}

/// The folder a path names its file in: `.` for a bare file name.
#[must_use]
pub fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// fsyncs a folder, making renames and links in it durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("cannot fsync folder", dir))
}
