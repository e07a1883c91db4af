//! Trees: a folder published as one version (`write --tree`). This module is the file
//! side: the manifest that names a tree's content and gives its hash, the survey of a
//! source folder against the limits, the staged copy beside the resource, the walk that
//! reads a published tree back, and the removal of a tree. Every operation goes through
//! folder handles (`folder::Folder`), and none follows a symlink.
//!
//! A tree's identity is its manifest: one line per entry, sorted by path, saying its
//! kind (folder, file, symlink), its permission bits, its size and the SHA-256 of its
//! bytes (a symlink's: of its target). The tree hash is the SHA-256 of the manifest, so
//! the same tree copied from another folder has the same hash (a replay), and a tree
//! that differs in one mode bit does not. Owners are not part of it: they depend on who
//! copies.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::folder::{Child, Folder, Kind};
use crate::text::hex;

/// Entries a tree may hold by default (`--max-entries`), folders included.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Bytes a tree's files may hold together by default (`--max-size`): 64 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;
/// Folders a path may go down by default (`--max-depth`).
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// What a tree may hold; a source past any of them is bad input, refused before a byte
/// is staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub entries: u64,
    pub bytes: u64,
    pub depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            entries: DEFAULT_MAX_ENTRIES,
            bytes: DEFAULT_MAX_BYTES,
            depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// The kinds of entry a tree holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    Folder,
    File,
    Symlink,
}

impl ItemKind {
    fn letter(self) -> u8 {
        match self {
            ItemKind::Folder => b'd',
            ItemKind::File => b'f',
            ItemKind::Symlink => b'l',
        }
    }

    fn from_letter(letter: &[u8]) -> Option<ItemKind> {
        match letter {
            b"d" => Some(ItemKind::Folder),
            b"f" => Some(ItemKind::File),
            b"l" => Some(ItemKind::Symlink),
            _ => None,
        }
    }
}

/// One entry of a tree: its path relative to the tree (empty for the top folder), kind,
/// permission bits, and for a file its size and SHA-256 (a symlink: its target's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub path: Vec<u8>,
    pub kind: ItemKind,
    pub mode: u32,
    pub size: u64,
    /// Lower-case hex; empty for a folder.
    pub sha256: String,
}

impl Item {
    /// The path as a person reads it (`.` for the top folder).
    #[must_use]
    pub fn shown(&self) -> String {
        if self.path.is_empty() {
            ".".to_string()
        } else {
            String::from_utf8_lossy(&self.path).into_owned()
        }
    }
}

/// A tree's content: its entries, sorted by path (component by component, so a folder's
/// entries follow it), the top folder first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    pub items: Vec<Item>,
}

impl Manifest {
    /// Sorts the entries into the manifest's order.
    fn sort(&mut self) {
        self.items
            .sort_by(|a, b| components(&a.path).cmp(&components(&b.path)));
    }

    /// The manifest as stored and hashed: `KIND MODE SIZE SHA256 PATH` lines, the path
    /// last (`.` for the top folder; `%`, control bytes and DEL as `%XX`), a folder's hash
    /// as `-`.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.items.len() * 100);
        for item in &self.items {
            out.push(item.kind.letter());
            let sha = if item.sha256.is_empty() {
                "-"
            } else {
                &item.sha256
            };
            let _ = write!(out, " {:04o} {} {sha} ", item.mode, item.size);
            if item.path.is_empty() {
                out.push(b'.');
            } else {
                escape(&item.path, &mut out);
            }
            out.push(b'\n');
        }
        out
    }

    /// Reads a manifest made by [`Manifest::to_bytes`].
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        let bad = || Error::Internal("a stored tree manifest is not in the manifest format");
        let mut items = Vec::new();
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let mut fields = line.splitn(5, |b| *b == b' ');
            let kind = fields
                .next()
                .and_then(ItemKind::from_letter)
                .ok_or_else(bad)?;
            let number = |field: Option<&[u8]>, radix| {
                field
                    .and_then(|f| std::str::from_utf8(f).ok())
                    .and_then(|f| u64::from_str_radix(f, radix).ok())
            };
            let mode = number(fields.next(), 8).ok_or_else(bad)?;
            let size = number(fields.next(), 10).ok_or_else(bad)?;
            let sha = fields
                .next()
                .and_then(|f| std::str::from_utf8(f).ok())
                .ok_or_else(bad)?;
            let path = fields.next().ok_or_else(bad)?;
            items.push(Item {
                path: if path == b"." {
                    Vec::new()
                } else {
                    unescape(path).ok_or_else(bad)?
                },
                kind,
                mode: u32::try_from(mode).map_err(|_| bad())?,
                size,
                sha256: if sha == "-" {
                    String::new()
                } else {
                    sha.to_string()
                },
            });
        }
        Ok(Manifest { items })
    }

    /// The tree hash: the SHA-256 of the manifest.
    #[must_use]
    pub fn sha256(&self) -> String {
        hex(&Sha256::digest(self.to_bytes()))
    }

    /// The bytes of its files, together.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.items
            .iter()
            .filter(|i| i.kind == ItemKind::File)
            .map(|i| i.size)
            .sum()
    }

    /// The entry at `path`, if any.
    #[must_use]
    pub fn get(&self, path: &[u8]) -> Option<&Item> {
        self.items.iter().find(|i| i.path == path)
    }
}

/// A path's components, for the manifest's order.
fn components(path: &[u8]) -> Vec<&[u8]> {
    if path.is_empty() {
        Vec::new()
    } else {
        path.split(|b| *b == b'/').collect()
    }
}

fn escape(path: &[u8], out: &mut Vec<u8>) {
    for &b in path {
        if b == b'%' || b < 0x20 || b == 0x7f {
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(b);
        }
    }
}

fn unescape(path: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            let hexits = std::str::from_utf8(path.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hexits, 16).ok()?);
            i += 3;
        } else {
            out.push(path[i]);
            i += 1;
        }
    }
    Some(out)
}

/// How a tree on disk differs from a manifest, entry by entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The path relative to the tree (`.` for the top folder).
    pub path: String,
    /// `added`, `removed` or `changed`.
    pub what: &'static str,
}

/// The entries `found` adds to, removes from or changes in `recorded`, in path order.
#[must_use]
pub fn diff(recorded: &Manifest, found: &Manifest) -> Vec<Difference> {
    let mut out = Vec::new();
    let (mut r, mut f) = (
        recorded.items.iter().peekable(),
        found.items.iter().peekable(),
    );
    loop {
        let order = match (r.peek(), f.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => components(&a.path).cmp(&components(&b.path)),
        };
        match order {
            std::cmp::Ordering::Less => {
                let item = r.next().expect("peeked");
                out.push(Difference {
                    path: item.shown(),
                    what: "removed",
                });
            }
            std::cmp::Ordering::Greater => {
                let item = f.next().expect("peeked");
                out.push(Difference {
                    path: item.shown(),
                    what: "added",
                });
            }
            std::cmp::Ordering::Equal => {
                let (a, b) = (r.next().expect("peeked"), f.next().expect("peeked"));
                if a != b {
                    out.push(Difference {
                        path: a.shown(),
                        what: "changed",
                    });
                }
            }
        }
    }
    out
}

/// A source folder as surveyed: its entries (folders included, the top one not) and the
/// bytes of its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Survey {
    pub entries: u64,
    pub bytes: u64,
}

/// Surveys the source folder `src` (reached by `shown`, for messages) against `limits`:
/// bad input when it holds a device, FIFO or socket, a symlink (unless
/// `allow_symlinks`), or more than the limits allow. Reads no file.
pub fn survey(src: &Folder, allow_symlinks: bool, limits: &Limits) -> Result<Survey> {
    let mut survey = Survey::default();
    survey_into(src, &mut Vec::new(), allow_symlinks, limits, &mut survey)?;
    Ok(survey)
}

fn survey_into(
    dir: &Folder,
    path: &mut Vec<u8>,
    allow_symlinks: bool,
    limits: &Limits,
    survey: &mut Survey,
) -> Result<()> {
    // The folders each entry of `dir` goes down: `dir`'s own depth.
    let depth = components(path).len();
    let mut names = dir.names()?;
    names.sort();
    for name in names {
        let Some(entry) = dir.stat(&name)? else {
            continue;
        };
        if depth > limits.depth {
            return Err(Error::usage_hint(
                format!(
                    "{} is more than {} folders deep: not published",
                    shown_path(&dir.join(&name)),
                    limits.depth
                ),
                "pass a higher --max-depth if the tree is meant to be that deep",
            ));
        }
        survey.entries += 1;
        if survey.entries > limits.entries {
            return Err(Error::usage_hint(
                format!(
                    "{} holds more than {} entries: not published",
                    shown_path(dir.path()),
                    limits.entries
                ),
                "pass a higher --max-entries if the tree is meant to be that big",
            ));
        }
        match entry.kind {
            Kind::File => {
                survey.bytes = survey.bytes.saturating_add(entry.size);
                if survey.bytes > limits.bytes {
                    return Err(Error::usage_hint(
                        format!(
                            "the files under {} hold more than {} bytes: not published",
                            shown_path(dir.path()),
                            limits.bytes
                        ),
                        "pass a higher --max-size if the tree is meant to be that big",
                    ));
                }
            }
            Kind::Folder => {
                let Child::Folder(child) = dir.child(&name)? else {
                    return Err(changed_under(&dir.join(&name)));
                };
                let len = path.len();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name.as_bytes());
                survey_into(&child, path, allow_symlinks, limits, survey)?;
                path.truncate(len);
            }
            Kind::Symlink if allow_symlinks => {}
            Kind::Symlink => {
                return Err(Error::usage_hint(
                    format!(
                        "{} is a symlink: a tree holds files and folders",
                        shown_path(&dir.join(&name))
                    ),
                    "pass --allow-symlinks to publish symlinks as symlinks (never followed)",
                ));
            }
            Kind::Other => {
                return Err(Error::usage(format!(
                    "{} is a device, FIFO or socket: a tree holds files, folders and \
                     (with --allow-symlinks) symlinks",
                    shown_path(&dir.join(&name))
                )));
            }
        }
    }
    Ok(())
}

/// A path under a source folder for a message: its names are anyone's, so one that holds
/// a newline or another misleading character is quoted with it escaped, never printed as
/// a line of its own.
fn shown_path(path: &std::path::Path) -> String {
    crate::text::display_name(&path.to_string_lossy())
}

fn changed_under(path: &std::path::Path) -> Error {
    Error::usage(format!(
        "{} changed while it was being copied: not published",
        shown_path(path)
    ))
}

/// How a copy treats owners: kept (run as root), or left to whoever copies; and whether
/// a big file's hash may run on a second thread (`overlap`: the caller found a CPU to
/// spare; see `copy_in_steps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copying {
    pub allow_symlinks: bool,
    pub keep_owners: bool,
    pub limits: Limits,
    pub overlap: bool,
}

/// Copies the folder `src` into the empty folder `dst` (the staged tree): files (see
/// `copy_file`), folders, and symlinks as symlinks, each with its permission bits (and
/// its owner with `keep_owners`), the top folder's mode last. Returns the manifest of what
/// was staged, each file hashed as it lies in the staged copy (the bytes written into it,
/// or read back from it after a kernel copy; never a second read of the source: a source
/// changed meanwhile cannot give a hash that differs from what is published). Nothing is
/// fsynced here (see [`sync_staged`]).
pub fn copy(src: &Folder, dst: &Folder, how: &Copying) -> Result<Manifest> {
    let mut manifest = Manifest::default();
    let mut count = Survey::default();
    copy_into(src, dst, &mut Vec::new(), how, &mut manifest, &mut count)?;
    let top =
        rustix::fs::fstat(src).map_err(|e| Error::io("cannot inspect", src.path())(e.into()))?;
    let mode = top.st_mode & 0o7777;
    set_owner_and_mode(dst.as_fd(), how.keep_owners, &top, dst.path())?;
    manifest.items.push(Item {
        path: Vec::new(),
        kind: ItemKind::Folder,
        mode,
        size: 0,
        sha256: String::new(),
    });
    manifest.sort();
    Ok(manifest)
}

fn copy_into(
    src: &Folder,
    dst: &Folder,
    path: &mut Vec<u8>,
    how: &Copying,
    manifest: &mut Manifest,
    count: &mut Survey,
) -> Result<()> {
    let mut names = src.names()?;
    names.sort();
    for name in names {
        let Some(entry) = src.stat(&name)? else {
            continue;
        };
        // The limits again: the source may have grown since it was surveyed.
        count.entries += 1;
        if count.entries > how.limits.entries || components(path).len() > how.limits.depth {
            return Err(changed_under(&src.join(&name)));
        }
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name.as_bytes());
        let item = match entry.kind {
            Kind::File => {
                let (size, sha256, mode) = copy_file(src, dst, &name, how)?;
                count.bytes = count.bytes.saturating_add(size);
                if count.bytes > how.limits.bytes {
                    return Err(changed_under(&src.join(&name)));
                }
                Item {
                    path: path.clone(),
                    kind: ItemKind::File,
                    mode,
                    size,
                    sha256,
                }
            }
            Kind::Folder => {
                let Child::Folder(from) = src.child(&name)? else {
                    return Err(changed_under(&src.join(&name)));
                };
                if !dst.make_child(&name)? {
                    return Err(changed_under(&dst.join(&name)));
                }
                let Child::Folder(to) = dst.child(&name)? else {
                    return Err(changed_under(&dst.join(&name)));
                };
                copy_into(&from, &to, path, how, manifest, count)?;
                // The mode last: a read-only folder is filled before it becomes one.
                let st = rustix::fs::fstat(&from)
                    .map_err(|e| Error::io("cannot inspect", from.path())(e.into()))?;
                set_owner_and_mode(to.as_fd(), how.keep_owners, &st, to.path())?;
                Item {
                    path: path.clone(),
                    kind: ItemKind::Folder,
                    mode: st.st_mode & 0o7777,
                    size: 0,
                    sha256: String::new(),
                }
            }
            Kind::Symlink if how.allow_symlinks => {
                copy_symlink(src, dst, &name, &entry, how, path)?
            }
            Kind::Symlink | Kind::Other => return Err(changed_under(&src.join(&name))),
        };
        manifest.items.push(item);
        path.truncate(len);
    }
    Ok(())
}

/// Copies the symlink `name` of `src` into `dst` as a symlink (its target as it is,
/// never followed); `path` is its path in the tree.
fn copy_symlink(
    src: &Folder,
    dst: &Folder,
    name: &OsStr,
    entry: &crate::folder::Entry,
    how: &Copying,
    path: &[u8],
) -> Result<Item> {
    let target = src
        .read_link(name)
        .map_err(Error::io("cannot read the symlink", src.join(name)))?;
    dst.symlink(&target, name)
        .map_err(Error::io("cannot create the symlink", dst.join(name)))?;
    if how.keep_owners {
        let _ = rustix::fs::chownat(
            dst,
            name,
            Some(rustix::fs::Uid::from_raw(entry.uid)),
            Some(rustix::fs::Gid::from_raw(entry.gid)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        );
    }
    Ok(Item {
        path: path.to_vec(),
        kind: ItemKind::Symlink,
        mode: 0o777,
        size: target.len() as u64,
        sha256: hex(&Sha256::digest(target.as_bytes())),
    })
}

/// Files up to this size are copied through this process, one buffer at a time, and
/// hashed from the buffer as it is written: three calls for a small file (read, write, the
/// read that finds its end), where a kernel copy and a read-back take six or more.
const SMALL_FILE: u64 = 128 * 1024;

/// Bytes of a bigger file copied by the kernel in one step, before that step is read back
/// and hashed; from a file of this size on, each step hashed is also written behind.
const KERNEL_STEP: u64 = 8 << 20;

/// Copies the file `name` of `src` into `dst`: returns its size, the SHA-256 of the
/// staged copy and its mode. A small file goes through one buffer, hashed as it is
/// written; a bigger one is copied by the kernel and hashed from the staged copy, read
/// back step by step ([`copy_in_steps`]).
fn copy_file(
    src: &Folder,
    dst: &Folder,
    name: &OsStr,
    how: &Copying,
) -> Result<(u64, String, u32)> {
    let mut from = src
        .open_file(name)
        .map_err(Error::io("cannot read", src.join(name)))?;
    let st = rustix::fs::fstat(&from)
        .map_err(|e| Error::io("cannot inspect", src.join(name))(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(changed_under(&src.join(name)));
    }
    let mut to = dst
        .create_file(name, 0o600)?
        .ok_or_else(|| changed_under(&dst.join(name)))?;
    let shown = dst.join(name);
    let expected = u64::try_from(st.st_size).unwrap_or(0);
    let (sha256, size) = if expected <= SMALL_FILE {
        copy_through(&mut from, &mut to, expected, &shown)?
    } else {
        copy_in_steps(&from, &to, how.overlap && expected > KERNEL_STEP, &shown)?
    };
    set_owner_and_mode(to.as_fd(), how.keep_owners, &st, &shown)?;
    Ok((size, sha256, st.st_mode & 0o7777))
}

/// Copies `from` into `to` through a buffer of this process (sized for `expected` bytes;
/// a file that grew meanwhile is copied to its new end), hashing each chunk as it is
/// written: the SHA-256 and size of what `to` now holds.
fn copy_through(
    from: &mut File,
    to: &mut File,
    expected: u64,
    shown: &std::path::Path,
) -> Result<(String, u64)> {
    let mut hasher = Sha256::new();
    // One byte more than expected: the read that finds the end needs no second buffer.
    let len = usize::try_from(expected.saturating_add(1).min(SMALL_FILE)).unwrap_or(1);
    let mut buf = vec![0u8; len];
    let mut size = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("cannot copy into", shown)(e)),
        };
        to.write_all(&buf[..n])
            .map_err(Error::io("cannot copy into", shown))?;
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

/// Copies `from` into `to` [`KERNEL_STEP`] bytes at a time: each step copied by the kernel
/// (`copy_file_range` where the filesystem allows, sharing extents where it can; through
/// a buffer of this process where it cannot), then read back from the staged copy and
/// hashed. Returns the SHA-256 and size of what `to` now holds.
///
/// Write-behind, from [`KERNEL_STEP`] bytes on: the kernel is told that each step hashed
/// is no longer needed here (`POSIX_FADV_DONTNEED`). Linux starts its writeback at once
/// and drops the pages that are clean by then; told again one step later, it drops those
/// it was still writing. The disk writes while the rest is copied and hashed, and the
/// flush before the swap finds little left to write. Advice only: an error is ignored,
/// and [`sync_staged`] still makes every byte durable (and reports a writeback error).
///
/// With `overlap`, the read-back, hash and advice run on a second thread that follows the
/// copy step by step, so that copying and hashing use two CPUs. Measured side by side on 2
/// CPUs (bench/notes.md): faster on a quiet machine, slower on a loaded one, where the
/// second thread waits for a CPU; hence the caller's choice. Without a thread to be had
/// (a process limit), the copy goes on in series.
fn copy_in_steps(
    from: &File,
    to: &File,
    overlap: bool,
    shown: &std::path::Path,
) -> Result<(String, u64)> {
    let copy = |progress: &mut dyn FnMut(u64) -> bool| -> Result<u64> {
        let mut size = 0u64;
        loop {
            // `io::copy` from a `Take` of one file to another uses `copy_file_range`
            // where the filesystem allows, and a buffer of this process where it does not.
            let n = io::copy(&mut Read::take(from, KERNEL_STEP), &mut &*to)
                .map_err(Error::io("cannot copy into", shown))?;
            size += n;
            if n == 0 || !progress(size) {
                return Ok(size);
            }
        }
    };
    if overlap {
        let (marks, staged) = std::sync::mpsc::channel::<u64>();
        let done = std::thread::scope(|scope| {
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                let mut hashing = Hashing::new(to, shown);
                for mark in staged {
                    hashing.up_to(mark)?;
                }
                Ok::<_, Error>(hashing)
            });
            let Ok(hasher) = spawned else {
                return None;
            };
            // A failed send means the hasher stopped on an error: the copy stops, and the
            // hasher's error is the one reported.
            let copied = copy(&mut |mark| marks.send(mark).is_ok());
            drop(marks);
            let hashed = hasher.join().map_err(|_| {
                Error::io("cannot read back", shown)(io::Error::other("the hashing thread failed"))
            });
            Some(hashed.and_then(|h| h).and_then(|h| h.end(copied?)))
        });
        if let Some(done) = done {
            return done;
        }
    }
    let mut hashing = Hashing::new(to, shown);
    let mut failed = None;
    let copied = copy(&mut |mark| match hashing.up_to(mark) {
        Ok(()) => true,
        Err(e) => {
            failed = Some(e);
            false
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    hashing.end(copied?)
}

/// The read-back of a staged copy in steps, as [`copy_in_steps`] hashes it, and the
/// write-behind that follows the hash.
struct Hashing<'f> {
    file: &'f File,
    shown: &'f std::path::Path,
    hasher: Sha256,
    buf: Vec<u8>,
    /// Bytes hashed so far.
    hashed: u64,
    /// Bytes the kernel has been told once that they are no longer needed here.
    told: u64,
}

impl<'f> Hashing<'f> {
    fn new(file: &'f File, shown: &'f std::path::Path) -> Hashing<'f> {
        Hashing {
            file,
            shown,
            hasher: Sha256::new(),
            buf: vec![0u8; 128 * 1024],
            hashed: 0,
            told: 0,
        }
    }

    /// Reads back and hashes the staged copy up to `mark` (the bytes copied so far),
    /// then advises the kernel (see [`copy_in_steps`]).
    fn up_to(&mut self, mark: u64) -> Result<()> {
        hash_range(
            self.file,
            &mut self.hasher,
            &mut self.buf,
            self.hashed,
            mark,
        )
        .map_err(Error::io("cannot read back", self.shown))?;
        if mark >= KERNEL_STEP {
            let _ = rustix::fs::fadvise(
                self.file,
                self.told,
                std::num::NonZeroU64::new(mark - self.told),
                rustix::fs::Advice::DontNeed,
            );
            self.told = self.hashed;
        }
        self.hashed = mark;
        Ok(())
    }

    /// The SHA-256 and size of the copy, once `copied` bytes were copied in all.
    fn end(self, copied: u64) -> Result<(String, u64)> {
        if self.hashed != copied {
            return Err(Error::io("cannot read back", self.shown)(io::Error::other(
                "the staged file is shorter than what was copied into it",
            )));
        }
        Ok((hex(&self.hasher.finalize()), copied))
    }
}

/// Feeds bytes `at..end` of `file` to `hasher` (positioned reads: the file's offset is
/// the copy's).
fn hash_range(
    file: &File,
    hasher: &mut Sha256,
    buf: &mut [u8],
    mut at: u64,
    end: u64,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    while at < end {
        let want = usize::try_from(end - at)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = match file.read_at(&mut buf[..want], at) {
            Ok(0) => {
                return Err(io::Error::other(
                    "the staged file is shorter than what was copied into it",
                ));
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

/// Gives `fd` the owner (with `keep_owners`, best effort) and permission bits of `st`.
/// The owner first: a change of owner clears set-user-ID and set-group-ID.
fn set_owner_and_mode(
    fd: std::os::fd::BorrowedFd<'_>,
    keep_owners: bool,
    st: &rustix::fs::Stat,
    shown: &std::path::Path,
) -> Result<()> {
    if keep_owners {
        let _ = rustix::fs::fchown(
            fd,
            Some(rustix::fs::Uid::from_raw(st.st_uid)),
            Some(rustix::fs::Gid::from_raw(st.st_gid)),
        );
    }
    rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(st.st_mode & 0o7777))
        .map_err(|e| Error::io("cannot set mode of", shown)(e.into()))
}

/// SHA-256 and size of what `file` holds from its current offset.
fn hash_file(file: &mut File) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 128 * 1024];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

/// Makes a staged tree durable before it is swapped in: every file's bytes, every
/// folder's entries. One `syncfs` of the filesystem that holds it, rather than an fsync
/// per file: a thousand small files cost one flush, not a thousand (bench/notes.md).
pub fn sync_staged(staged: &Folder) -> Result<()> {
    rustix::fs::syncfs(staged).map_err(|e| Error::io("cannot flush", staged.path())(e.into()))
}

/// Reads the tree at `dir` back as a manifest, hashing every file (a walk that follows
/// no symlink; a device, FIFO or socket in it is named as an error).
pub fn read_manifest(dir: &Folder) -> Result<Manifest> {
    let mut manifest = Manifest::default();
    read_into(dir, &mut Vec::new(), &mut manifest)?;
    let top =
        rustix::fs::fstat(dir).map_err(|e| Error::io("cannot inspect", dir.path())(e.into()))?;
    manifest.items.push(Item {
        path: Vec::new(),
        kind: ItemKind::Folder,
        mode: top.st_mode & 0o7777,
        size: 0,
        sha256: String::new(),
    });
    manifest.sort();
    Ok(manifest)
}

fn read_into(dir: &Folder, path: &mut Vec<u8>, manifest: &mut Manifest) -> Result<()> {
    for name in dir.names()? {
        let Some(entry) = dir.stat(&name)? else {
            continue;
        };
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name.as_bytes());
        let item = match entry.kind {
            Kind::File => {
                let mut file = dir
                    .open_file(&name)
                    .map_err(Error::io("cannot read", dir.join(&name)))?;
                let (sha256, size) =
                    hash_file(&mut file).map_err(Error::io("cannot read", dir.join(&name)))?;
                Item {
                    path: path.clone(),
                    kind: ItemKind::File,
                    mode: entry.mode,
                    size,
                    sha256,
                }
            }
            Kind::Folder => {
                if let Child::Folder(child) = dir.child(&name)? {
                    read_into(&child, path, manifest)?;
                }
                Item {
                    path: path.clone(),
                    kind: ItemKind::Folder,
                    mode: entry.mode,
                    size: 0,
                    sha256: String::new(),
                }
            }
            Kind::Symlink => {
                let target = dir
                    .read_link(&name)
                    .map_err(Error::io("cannot read the symlink", dir.join(&name)))?;
                Item {
                    path: path.clone(),
                    kind: ItemKind::Symlink,
                    mode: 0o777,
                    size: target.len() as u64,
                    sha256: hex(&Sha256::digest(target.as_bytes())),
                }
            }
            Kind::Other => {
                return Err(Error::io("cannot read", dir.join(&name))(io::Error::other(
                    "a device, FIFO or socket stands in the tree",
                )));
            }
        };
        manifest.items.push(item);
        path.truncate(len);
    }
    Ok(())
}

/// Removes the folder `name` of `parent` and everything in it, through handles (a
/// symlink in it is removed, never followed). A folder without write permission is made
/// writable for its owner first, so that its entries can go.
pub fn remove_tree(parent: &Folder, name: &OsStr) -> Result<()> {
    let Child::Folder(dir) = parent.child(name)? else {
        return parent.remove_if_present(name);
    };
    let _ = rustix::fs::fchmod(&dir, rustix::fs::Mode::from_raw_mode(0o700));
    for entry in dir.names()? {
        match dir.stat(&entry)? {
            Some(e) if e.kind == Kind::Folder => remove_tree(&dir, &entry)?,
            Some(_) => dir.remove_if_present(&entry)?,
            None => {}
        }
    }
    match rustix::fs::unlinkat(parent, name, rustix::fs::AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(Error::io("cannot remove", parent.join(name))(e.into())),
    }
}

/// Exchanges the names `a` and `b` of `folder` in one step (`renameat2` with
/// `RENAME_EXCHANGE`). A filesystem that cannot is bad input, said so: a tree is never
/// swapped in by steps a reader could see between.
pub fn exchange(folder: &Folder, a: &OsStr, b: &OsStr) -> Result<()> {
    match rustix::fs::renameat_with(folder, a, folder, b, rustix::fs::RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {
            Err(Error::usage(format!(
                "the filesystem of {} cannot exchange two folders in one step \
                 (renameat2 RENAME_EXCHANGE): trees cannot be published there",
                folder.path().display()
            )))
        }
        Err(e) => Err(Error::io("cannot swap in", folder.join(b))(e.into())),
    }
}

/// Retires the tree at `name` (the old one at the staged name, after a swap; one that
/// recovery takes away): renamed to `.<name>.fencepost-old-<token>-<deadline>`, kept for
/// readers walking it until the deadline, then removed by the next write or `recover`
/// (at once by the write, when the deadline has passed already: `--keep-old 0`).
pub fn retire(
    doc: &crate::resource::DocPath,
    name: &OsString,
    token: u64,
    deadline: i64,
) -> Result<()> {
    let retired = sibling(doc, "old", &format!("{token}-{deadline}"));
    doc.folder.rename(name, &retired).map_err(Error::io(
        "cannot retire the old tree",
        doc.folder.join(name),
    ))
}

/// The folder's own name for its `what` sibling with `token`: `.<name>.fencepost-<what>-<token>`.
#[must_use]
pub fn sibling(doc: &crate::resource::DocPath, what: &str, token: &str) -> OsString {
    let mut name = doc.sibling_name(what);
    name.push("-");
    name.push(token);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(path: &str, kind: ItemKind, sha: &str) -> Item {
        Item {
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o644,
            size: 1,
            sha256: sha.to_string(),
        }
    }

    #[test]
    fn a_manifest_reads_back_what_it_wrote_whatever_its_paths_hold() {
        let mut m = Manifest {
            items: vec![
                item("", ItemKind::Folder, ""),
                item("a b/c%d", ItemKind::File, "aa"),
                item("a b", ItemKind::Folder, ""),
                item("new\nline", ItemKind::Symlink, "bb"),
            ],
        };
        m.sort();
        let bytes = m.to_bytes();
        assert_eq!(Manifest::parse(&bytes).expect("parses"), m);
        assert_eq!(m.items[0].path, b"");
        // A folder's entries follow it: "a b" before "a b/c%d".
        assert_eq!(m.items[1].path, b"a b");
        assert!(String::from_utf8_lossy(&bytes).contains("new%0Aline"));
    }

    #[test]
    fn a_copy_hashes_what_it_staged_whichever_way_each_file_is_copied() {
        let src = tempfile::tempdir().expect("a temporary folder");
        let dst = tempfile::tempdir().expect("a temporary folder");
        // Sizes on each side of each way: through a buffer, one kernel step, several
        // steps with write-behind.
        let sizes = [
            ("empty", 0),
            ("small", 4096),
            ("at-small", SMALL_FILE),
            ("past-small", SMALL_FILE + 1),
            ("at-step", KERNEL_STEP),
            ("steps", 2 * KERNEL_STEP + 5),
        ];
        let content = |size: u64| -> Vec<u8> { (0..size).map(|i| (i * 31 % 251) as u8).collect() };
        for (name, size) in sizes {
            std::fs::write(src.path().join(name), content(size)).expect("write a file");
        }
        for overlap in [false, true] {
            let how = Copying {
                allow_symlinks: false,
                keep_owners: false,
                limits: Limits::default(),
                overlap,
            };
            let into = dst.path().join(format!("overlap-{overlap}"));
            std::fs::create_dir(&into).expect("make the staged folder");
            let staged = Folder::open(&into).expect("open the staged folder");
            let manifest = copy(
                &Folder::open(src.path()).expect("open the source"),
                &staged,
                &how,
            )
            .expect("copy");
            assert_eq!(
                manifest,
                read_manifest(&staged).expect("read the copy back")
            );
            for (name, size) in sizes {
                let item = manifest.get(name.as_bytes()).expect("copied");
                assert_eq!(item.size, size, "{name}");
                assert_eq!(item.sha256, hex(&Sha256::digest(content(size))), "{name}");
                assert_eq!(
                    std::fs::read(into.join(name)).expect("read the copy"),
                    content(size),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn the_differences_name_each_entry_added_removed_or_changed() {
        let recorded = Manifest {
            items: vec![
                item("a", ItemKind::File, "aa"),
                item("b", ItemKind::File, "bb"),
                item("c", ItemKind::File, "cc"),
            ],
        };
        let found = Manifest {
            items: vec![
                item("a", ItemKind::File, "aa"),
                item("c", ItemKind::File, "c2"),
                item("d", ItemKind::File, "dd"),
            ],
        };
        let got: Vec<(String, &str)> = diff(&recorded, &found)
            .into_iter()
            .map(|d| (d.path, d.what))
            .collect();
        assert_eq!(
            got,
            [
                ("b".to_string(), "removed"),
                ("c".to_string(), "changed"),
                ("d".to_string(), "added")
            ]
        );
    }
}
