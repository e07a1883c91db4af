//! The durable atomic replace of a document, and the file side of crash recovery.
//!
//! A write stages its bytes in `.<name>.fencepost-tmp-XXXXXXXXXXXX` beside the document
//! (same folder, so the rename is atomic), fsyncs it, and only then takes the state
//! file's lock. Under the lock the caller links `-pre-<ino>` to the current document and
//! `-new-<ino>` to the staged file, renames, fsyncs the folder and commits. The two links
//! let recovery undo a rename whose commit never happened (see `sink::recovery`).
//!
//! `<ino>` is the staged file's inode number, which no other live file on the filesystem
//! has while its writer holds the file open (it does until it has removed its links): one
//! writer's links can never be taken for another's, so a writer paused after its COMMIT
//! cannot remove the links of the writer that came after it. Every operation goes through
//! the document folder's handle (`folder::Folder`), never through a path.
//!
//! Staged files stay locked (`flock`) by their writer for its whole life, also once
//! renamed into place, so recovery removes only temp files whose writer is gone, and
//! `status`/`verify` tell a write in progress from one that crashed.
//!
//! The recorded SHA-256 is always that of the staged bytes: stdin is hashed from the very
//! buffers written into the staged file, and a `--from` file, copied by the kernel, is
//! hashed by reading the staged file back (see `copy_file`), never the source again.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::folder::{self, Entry, Kind};
use crate::resource::DocPath;
use crate::sink::{FileId, Leftovers};
use crate::text::hex;

pub mod interrupt;

/// What follows `.<name>.fencepost-` in a staged temp file's name (then random chars).
pub(crate) const TEMP: &str = "tmp-";

/// Random characters in a temp file's name.
pub(crate) const TEMP_RANDOM: usize = 12;

/// Size of the buffer that streams content: memory stays flat whatever the size.
const CHUNK: usize = 128 * 1024;

/// The document as it is now: `None` if absent. Symlinks, folders and special files are
/// refused: the tool replaces regular files only.
pub fn inspect_document(doc: &DocPath) -> Result<Option<Entry>> {
    match doc.folder.stat(&doc.name)? {
        Some(entry) if entry.kind == Kind::File => Ok(Some(entry)),
        Some(entry) => {
            let what = match entry.kind {
                Kind::Symlink => "a symlink",
                Kind::Folder => "a folder",
                _ => "a special file",
            };
            let hint = if entry.kind == Kind::Folder {
                "a document is a regular file; a folder is published whole with `write --tree \
                 DIR`, whose first publish needs the name free: move this folder aside"
            } else {
                "fencepost replaces regular files only; remove it or pick another resource"
            };
            Err(Error::usage_hint(
                format!(
                    "document {} is {what}, not a regular file",
                    doc.path().display()
                ),
                hint,
            ))
        }
        None => Ok(None),
    }
}

/// Identity of a file: inode number and size. No device number: it changes when the
/// same filesystem is mounted through another device (loop, dm, NVMe or USB ordering).
#[must_use]
pub fn file_id(entry: &Entry) -> FileId {
    FileId {
        ino: entry.ino,
        size: entry.size,
    }
}

/// Bytes staged for a document: written, fsynced, hashed, locked by this process. While
/// it is not renamed into place, dropping it removes the temp file; until its write
/// commits to it ([`Staged::commit_to`]), a signal may remove it too (`interrupt`).
#[derive(Debug)]
pub struct Staged<'d> {
    /// Kept open until the writer is done: the `flock` on it marks the writer alive, and
    /// its inode number (in the link names) cannot be reused meanwhile.
    file: File,
    doc: &'d DocPath,
    temp: OsString,
    renamed: bool,
    /// Its place among the staged files a signal removes.
    registration: interrupt::Registration,
    pub sha256: String,
    pub size: u64,
    pub id: FileId,
}

/// Where a write's content comes from.
pub enum Source<'a> {
    /// A file named by `--from`: copied in the kernel when it is a regular file.
    File(File),
    /// A stream (stdin): read and written in chunks, hashed as it passes.
    Stream(Box<dyn Read + 'a>),
}

impl std::fmt::Debug for Source<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(file) => f.debug_tuple("File").field(file).finish(),
            Source::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// Copies `source` into a new temp file beside the document, not yet durable:
/// [`Unsynced::sync`] (from any thread) and then [`Unsynced::synced`] make it a
/// [`Staged`], and one dropped before its rename removes the temp file. A new document
/// gets the mode an ordinary file creation gets under the umask; a rewrite keeps the
/// existing document's mode (and owner, where allowed), set once the bytes are written (a
/// write by a non-root user clears set-user-ID and set-group-ID).
pub fn stage_unsynced<'d>(
    doc: &'d DocPath,
    source: &mut Source<'_>,
    existing: Option<&Entry>,
) -> Result<Unsynced<'d>> {
    let prefix = doc.sibling_name(TEMP);
    let (file, temp, registration) = loop {
        let mut name = prefix.clone();
        name.push(random_chars(TEMP_RANDOM));
        let create_mode = if existing.is_some() { 0o600 } else { 0o666 };
        let created = interrupt::create(doc.folder.handle(), &name, || {
            doc.folder.create_file(&name, create_mode)
        })?;
        let Some((file, registration)) = created else {
            continue;
        };
        // From here on, dropping `registration` (an error) removes the file.
        file.lock()
            .map_err(Error::io("cannot lock", doc.folder.join(&name)))?;
        // A cleaner may have removed the file between its creation and our lock (it looked
        // abandoned). Only a file still at its name is ours to use.
        let ours = doc
            .folder
            .stat(&name)
            .ok()
            .flatten()
            .zip(folder::entry_of(&file).ok())
            .is_some_and(|(named, open)| named.ino == open.ino && named.dev == open.dev);
        if ours {
            break (file, name, registration);
        }
        registration.forget();
    };
    let mut staged = Staged {
        file,
        doc,
        temp,
        renamed: false,
        registration,
        sha256: String::new(),
        size: 0,
        id: FileId { ino: 0, size: 0 },
    };
    let temp_path = staged.temp_path();
    let (sha256, size) = match source {
        Source::File(from) => copy_file(from, &mut staged.file, &doc.path(), &temp_path)?,
        Source::Stream(from) => copy_hashed(from, &mut staged.file, &doc.path(), &temp_path)?,
    };
    crate::failpoints::failpoint!("write.after_temp_write");
    if let Some(meta) = existing {
        keep_mode_and_owner(&staged.file, meta, &temp_path)?;
    }
    staged.sha256 = sha256;
    staged.size = size;
    Ok(Unsynced(staged))
}

/// Gives the staged file the document's owner (best effort: only root may give a file
/// away) and mode. Runs after the bytes are written: the kernel clears set-user-ID and
/// set-group-ID on a write or an owner change.
fn keep_mode_and_owner(file: &File, meta: &Entry, temp: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let own = folder::entry_of(file).map_err(Error::io("cannot inspect", temp))?;
    if own.uid != meta.uid || own.gid != meta.gid {
        let _ = std::os::unix::fs::fchown(file, Some(meta.uid), Some(meta.gid));
    }
    file.set_permissions(std::fs::Permissions::from_mode(meta.mode))
        .map_err(Error::io("cannot set mode of", temp))
}

/// `n` random letters and digits.
pub(crate) fn random_chars(n: usize) -> String {
    (0..n).map(|_| fastrand::alphanumeric()).collect()
}

/// Buffers in flight between the copy and the hashing thread (memory: this many chunks).
const BUFFERS: usize = 4;

/// Copies `source` into the temp file and returns the bytes' SHA-256 and size. Beyond the
/// first chunk, a second thread hashes each chunk while the next one is read and written,
/// so SHA-256 is off the copy's critical path (it was about a sixth of a big write's time
/// in series). Content that fits one chunk is hashed in series: for a 4 KiB write that
/// saved about 0.2 ms of 5-6 ms (bench/notes.md).
fn copy_hashed(
    source: &mut dyn Read,
    file: &mut File,
    doc: &Path,
    temp: &Path,
) -> Result<(String, u64)> {
    // Most documents fit in one chunk: read that much first, and when the content ends
    // there, hash it in series (a thread and more buffers cost more than they save).
    let mut first = vec![0u8; CHUNK];
    let mut filled = 0;
    while filled < CHUNK {
        let n = read_some(source, &mut first[filled..], doc)?;
        if n == 0 {
            return copy_serial(source, file, doc, temp, &mut first, filled, false);
        }
        filled += n;
    }
    // Chunks go to the hasher with their length and come back for reuse.
    let (to_hasher, filled_rx) = mpsc::sync_channel::<(Vec<u8>, usize)>(BUFFERS);
    let (to_copier, free) = mpsc::sync_channel::<Vec<u8>>(BUFFERS);
    for _ in 1..BUFFERS {
        to_copier
            .send(vec![0u8; CHUNK])
            .expect("the channel has room for every buffer");
    }
    thread::scope(|scope| {
        let spawned = thread::Builder::new().spawn_scoped(scope, move || {
            let mut hasher = Sha256::new();
            for (buf, n) in filled_rx {
                hasher.update(&buf[..n]);
                // The copier may have stopped on an error; then nobody needs the buffer.
                let _ = to_copier.send(buf);
            }
            hasher.finalize()
        });
        let Ok(hashing) = spawned else {
            // No thread to be had (a process limit): hash in series instead.
            return copy_serial(source, file, doc, temp, &mut first, CHUNK, true);
        };
        let copied = file
            .write_all(&first)
            .map_err(Error::io("cannot write", temp.to_path_buf()))
            .and_then(|()| {
                to_hasher
                    .send((first, CHUNK))
                    .map_err(|_| hasher_gone(doc))?;
                copy_chunks(source, file, &free, &to_hasher, doc, temp)
            });
        // Closing the channel ends the hasher's loop, whatever the copy's outcome.
        drop(to_hasher);
        let digest = hashing.join().map_err(|_| {
            Error::io("cannot hash the content for", doc)(io::Error::other(
                "the hashing thread failed",
            ))
        })?;
        copied.map(|size| (hex(&digest), CHUNK as u64 + size))
    })
}

/// Most bytes one `copy_file_range` call is asked for: the copy reports its progress to
/// the hasher after each call, so the hasher trails it by at most this much.
const KERNEL_CHUNK: usize = 8 << 20;

/// Copies a `--from` file into the staged file and returns the SHA-256 and size of what
/// was staged.
///
/// A regular file is copied by the kernel (`copy_file_range`: no pass through this
/// process's memory, and a filesystem that can share extents does so). Where the kernel
/// refuses (another filesystem on some kernels, a filesystem without support, a pseudo
/// file that reports no size), the rest goes through the read/write loop. A FIFO or a
/// device is read as a stream.
///
/// The hash is computed from the staged file, read back behind the copy (its pages are
/// still in the page cache), never from the source: a source changed while it is copied
/// (rewritten, grown, truncated) may give a staged file that mixes old and new bytes, and
/// the hash must describe what is published, which is the staged file. Beyond the first
/// chunk the read-back runs on a second thread, overlapped with the copy.
fn copy_file(from: &mut File, file: &mut File, doc: &Path, temp: &Path) -> Result<(String, u64)> {
    let meta = from
        .metadata()
        .map_err(Error::io("cannot read the content for", doc))?;
    if !meta.file_type().is_file() {
        return copy_hashed(from, file, doc, temp);
    }
    if meta.len() <= CHUNK as u64 {
        let size = copy_kernel(from, file, doc, temp, |_| true)?;
        return hash_staged(file, size, temp);
    }
    let (progress, marks) = mpsc::channel::<u64>();
    thread::scope(|scope| {
        let staged: &File = file;
        let spawned = thread::Builder::new().spawn_scoped(scope, move || {
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; CHUNK];
            let mut hashed = 0u64;
            let mut behind = WriteBehind::default();
            for mark in marks {
                hash_range(staged, &mut hasher, &mut buf, hashed, mark, temp)?;
                hashed = mark;
                behind.done_with(staged, hashed);
            }
            Ok::<_, Error>((hex(&hasher.finalize()), hashed))
        });
        let Ok(hashing) = spawned else {
            // No thread to be had (a process limit): hash once the copy is done.
            let size = copy_kernel(from, staged, doc, temp, |_| true)?;
            return hash_staged(staged, size, temp);
        };
        // A failed send means the hasher stopped on an error: stop copying, report it.
        let copied = copy_kernel(from, staged, doc, temp, |mark| progress.send(mark).is_ok());
        drop(progress);
        let hashed = hashing.join().map_err(|_| {
            Error::io("cannot hash the content for", doc)(io::Error::other(
                "the hashing thread failed",
            ))
        })?;
        // The hasher's own error first: the copy only reports that the hasher stopped.
        let (sha256, hashed) = hashed?;
        let size = copied?;
        if hashed != size {
            return Err(staged_changed(temp));
        }
        Ok((sha256, size))
    })
}

/// The copying half of `copy_file`: `copy_file_range` until the end of the source, or
/// the read/write loop once the kernel refuses. Calls `progress` with the bytes staged so
/// far after each step, and stops (with an error) when it returns false.
fn copy_kernel(
    from: &mut File,
    file: &File,
    doc: &Path,
    temp: &Path,
    mut progress: impl FnMut(u64) -> bool,
) -> Result<u64> {
    use rustix::io::Errno;
    let mut size = 0u64;
    let mut kernel = true;
    let mut buf = Vec::new();
    loop {
        let n = if kernel {
            match rustix::fs::copy_file_range(&*from, None, file, None, KERNEL_CHUNK) {
                // Nothing at all: an empty file, or a pseudo file whose size the kernel
                // does not know; a read tells them apart.
                Ok(0) if size == 0 => {
                    kernel = false;
                    continue;
                }
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                // Refused, not failed: the rest goes through this process (the file
                // offsets of both files have moved by what was copied).
                Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                    kernel = false;
                    continue;
                }
                Err(e) => return Err(Error::io("cannot copy the content into", temp)(e.into())),
            }
        } else {
            if buf.is_empty() {
                buf = vec![0u8; CHUNK];
            }
            let n = read_some(from, &mut buf, doc)?;
            (&*file)
                .write_all(&buf[..n])
                .map_err(Error::io("cannot write", temp.to_path_buf()))?;
            n
        };
        if n == 0 {
            return Ok(size);
        }
        size += n as u64;
        if !progress(size) {
            return Err(hasher_gone(doc));
        }
        if size == n as u64 {
            crate::failpoints::failpoint!("write.copying");
        }
    }
}

/// SHA-256 of the first `size` bytes of the staged file, read back from it.
fn hash_staged(file: &File, size: u64, temp: &Path) -> Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK.min(usize::try_from(size).unwrap_or(CHUNK).max(1))];
    hash_range(file, &mut hasher, &mut buf, 0, size, temp)?;
    Ok((hex(&hasher.finalize()), size))
}

/// Feeds bytes `from..to` of the staged file to `hasher`.
fn hash_range(
    file: &File,
    hasher: &mut Sha256,
    buf: &mut [u8],
    from: u64,
    to: u64,
    temp: &Path,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut at = from;
    while at < to {
        let want = usize::try_from(to - at)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = match file.read_at(&mut buf[..want], at) {
            Ok(0) => return Err(staged_changed(temp)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("cannot read back", temp.to_path_buf())(e)),
        };
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

/// The error when the staged file no longer holds what was copied into it.
fn staged_changed(temp: &Path) -> Error {
    Error::io("cannot read back", temp.to_path_buf())(io::Error::other(
        "the staged file is shorter than what was copied into it",
    ))
}

/// `copy_hashed` without the second thread: SHA-256 in series with the copy, starting
/// with the first `filled` bytes already read into `buf`. `more` says whether to go on
/// reading: not once the content has ended, since a terminal or a FIFO can give more
/// after its end, which is not part of this content.
fn copy_serial(
    source: &mut dyn Read,
    file: &mut File,
    doc: &Path,
    temp: &Path,
    buf: &mut [u8],
    filled: usize,
    more: bool,
) -> Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut size: u64 = 0;
    let mut n = filled;
    while n > 0 {
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])
            .map_err(Error::io("cannot write", temp.to_path_buf()))?;
        size += n as u64;
        n = if more {
            read_some(source, buf, doc)?
        } else {
            0
        };
    }
    Ok((hex(&hasher.finalize()), size))
}

/// One read of the content (0 at its end), retried when a signal interrupts it.
fn read_some(source: &mut dyn Read, buf: &mut [u8], doc: &Path) -> Result<usize> {
    read_retrying(source, buf).map_err(Error::io("cannot read the content for", doc))
}

/// One read, retried when a signal interrupts it.
fn read_retrying(source: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match source.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            done => return done,
        }
    }
}

/// The copying half of `copy_hashed`: reads, writes, hands each chunk to the hasher.
fn copy_chunks(
    source: &mut dyn Read,
    file: &mut File,
    free: &Receiver<Vec<u8>>,
    to_hasher: &SyncSender<(Vec<u8>, usize)>,
    doc: &Path,
    temp: &Path,
) -> Result<u64> {
    let mut size: u64 = 0;
    let mut behind = WriteBehind::default();
    loop {
        let mut buf = free.recv().map_err(|_| hasher_gone(doc))?;
        let n = read_some(source, &mut buf, doc)?;
        if n == 0 {
            return Ok(size);
        }
        file.write_all(&buf[..n])
            .map_err(Error::io("cannot write", temp.to_path_buf()))?;
        size += n as u64;
        behind.done_with(file, size);
        to_hasher.send((buf, n)).map_err(|_| hasher_gone(doc))?;
    }
}

/// Bytes staged between two write-behind hints.
const WRITE_BEHIND_STEP: u64 = 8 << 20;

/// Starts writing a big staged file to disk while it is still being copied, instead of
/// all at once in the fsync before the rename. Each time another [`WRITE_BEHIND_STEP`]
/// bytes are staged and no longer needed by this process (written, and hashed when the
/// hash reads them back), the kernel is told it may drop them (`POSIX_FADV_DONTNEED`):
/// Linux starts their writeback at once, and drops the pages that are clean by then,
/// which it is asked again one step later for the pages still being written. The fsync
/// then waits for the last steps only, and a big write leaves little of its document in
/// the page cache. Advice only: an error is ignored, and the fsync still makes every
/// byte durable (a writeback error is reported by it).
#[derive(Debug, Default)]
struct WriteBehind {
    /// Offset up to which the kernel has been told twice (pages dropped if clean).
    dropped: u64,
    /// Offset up to which the kernel has been told once (writeback started).
    started: u64,
}

impl WriteBehind {
    /// The first `upto` bytes of `file` are staged and no longer needed here.
    fn done_with(&mut self, file: &File, upto: u64) {
        if upto - self.started < WRITE_BEHIND_STEP {
            return;
        }
        let _ = rustix::fs::fadvise(
            file,
            self.dropped,
            std::num::NonZeroU64::new(upto - self.dropped),
            rustix::fs::Advice::DontNeed,
        );
        self.dropped = self.started;
        self.started = upto;
    }
}

/// The error when the hashing thread is no longer there to take a chunk.
fn hasher_gone(doc: &Path) -> Error {
    Error::io("cannot hash the content for", doc)(io::Error::other("the hashing thread stopped"))
}

impl Staged<'_> {
    /// The temp file's path, for error messages.
    fn temp_path(&self) -> PathBuf {
        self.doc.folder.join(&self.temp)
    }

    /// This writer's link names: `.<name>.fencepost-<what>-<ino>`.
    fn link_name(&self, what: &str) -> OsString {
        link_name(self.doc, what, OsStr::new(&self.id.ino.to_string()))
    }

    /// The write's point of no return, under the lock once the sink has accepted it and
    /// before [`Staged::link_for_recovery`]: from here a signal no longer removes the
    /// staged file (which becomes `-new-<ino>`, then the document, and recovery's should
    /// the process die); it lets the write end first (see `interrupt`).
    pub fn commit_to(&mut self) {
        self.registration.commit();
    }

    /// Links `-pre-<ino>` to the current document (if any) and `-new-<ino>` to the staged
    /// file, so a crash from here to the commit can be undone, and keeps the staged bytes'
    /// hash in `-sum-<ino>`. Call under the state file's lock, after recovery.
    pub fn link_for_recovery(&self, document_exists: bool) -> Result<()> {
        let folder = &self.doc.folder;
        let (pre, new, sum) = (
            self.link_name("pre"),
            self.link_name("new"),
            self.link_name("sum"),
        );
        // Names with this inode number can only be left by a dead writer whose file had
        // it before: garbage, never another live writer's.
        for name in [&pre, &new, &sum] {
            folder.remove_if_present(name)?;
        }
        if document_exists {
            folder
                .link(&self.doc.name, &pre)
                .map_err(Error::io(crate::error::PRE_IMAGE_LINK, folder.join(&pre)))?;
        }
        crate::failpoints::failpoint!("write.after_pre_link");
        folder
            .link(&self.temp, &new)
            .map_err(Error::io("cannot link staged file", folder.join(&new)))?;
        crate::failpoints::failpoint!("write.after_new_link");
        // The staged bytes' hash, kept beside `-new` (a symlink's target: no extra fsync;
        // the folder fsync after the rename makes it durable). After a crash the document
        // may be the `-new` file edited in place; then it is no longer ours to roll back.
        folder
            .symlink(OsStr::new(&self.sha256[..SUM_LEN]), &sum)
            .map_err(Error::io(
                "cannot record the staged hash in",
                folder.join(&sum),
            ))?;
        Ok(())
    }

    /// Renames the staged file over the document and fsyncs the folder, so the new name
    /// is durable before the caller commits. The file stays open (and locked).
    pub fn rename_into_place(&mut self) -> Result<()> {
        let folder = &self.doc.folder;
        folder
            .rename(&self.temp, &self.doc.name)
            .map_err(Error::io("cannot rename into", self.doc.path()))?;
        self.renamed = true;
        crate::failpoints::failpoint!("write.after_rename");
        folder.sync()?;
        crate::failpoints::failpoint!("write.after_dir_fsync");
        Ok(())
    }

    /// The link set this write made, as recovery sees it.
    #[must_use]
    pub fn links(&self) -> LinkSet {
        LinkSet {
            token: self.id.ino.to_string().into(),
        }
    }

    /// Removes this writer's own links once its write committed. Runs without the lock:
    /// no other writer uses these names, and recovery may have removed them already.
    pub fn drop_links(&self) {
        drop_set(self.doc, &self.links());
    }
}

/// A staged file whose bytes are written but not yet durable (see [`stage_unsynced`]):
/// only [`Unsynced::synced`], after [`Unsynced::sync`], gives the [`Staged`] a write can
/// publish.
#[derive(Debug)]
pub struct Unsynced<'d>(Staged<'d>);

impl<'d> Unsynced<'d> {
    /// Makes the staged bytes durable (the temp file's fsync). Takes `&self`, so another
    /// thread can wait in it while this one goes on.
    pub fn sync(&self) -> Result<()> {
        let staged = &self.0;
        staged
            .file
            .sync_all()
            .map_err(Error::io("cannot fsync", staged.temp_path()))
    }

    /// The staged file, once [`Unsynced::sync`] returned: its identity recorded for the
    /// links.
    pub fn synced(self) -> Result<Staged<'d>> {
        let mut staged = self.0;
        crate::failpoints::failpoint!("write.after_temp_fsync");
        let own = folder::entry_of(&staged.file)
            .map_err(Error::io("cannot inspect", staged.temp_path()))?;
        staged.id = file_id(&own);
        Ok(staged)
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        // While registered, the registration removes the file as it drops (unless a
        // signal did already), after this.
        if !self.renamed && !self.registration.is_staged() {
            let _ = self.doc.folder.remove(&self.temp);
        }
    }
}

/// The recovery links of one write: `.<name>.fencepost-{pre,new,sum}-<token>` (an empty
/// token: the fixed names `-pre`, `-new`, `-sum` of older versions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSet {
    token: OsString,
}

/// The kinds of recovery link (`gone`: a removal's, the document it took away).
const LINKS: [&str; 4] = ["pre", "new", "sum", "gone"];

fn link_name(doc: &DocPath, what: &str, token: &OsStr) -> OsString {
    let mut name = doc.sibling_name(what);
    if !token.is_empty() {
        name.push("-");
        name.push(token);
    }
    name
}

/// The link sets of writes that left links beside the document, found by listing its
/// folder.
pub fn link_sets(doc: &DocPath) -> Result<Vec<LinkSet>> {
    Ok(link_sets_in(doc, &doc.folder.names()?))
}

/// [`link_sets`] among `names`, the folder's names as listed.
#[must_use]
pub fn link_sets_in(doc: &DocPath, names: &[OsString]) -> Vec<LinkSet> {
    let prefix = doc.sibling_name("");
    let mut tokens: Vec<OsString> = Vec::new();
    for name in names {
        let Some(rest) = name.as_bytes().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        for what in LINKS {
            let Some(after) = rest.strip_prefix(what.as_bytes()) else {
                continue;
            };
            let token = match after {
                [] => OsString::new(),
                [b'-', token @ ..] if !token.is_empty() => OsStr::from_bytes(token).into(),
                _ => continue,
            };
            if !tokens.contains(&token) {
                tokens.push(token);
            }
        }
    }
    tokens.sort();
    tokens.into_iter().map(|token| LinkSet { token }).collect()
}

/// What a crashed write may have left next to the document, for one link set.
pub fn leftovers(doc: &DocPath, set: &LinkSet) -> Result<Leftovers> {
    let id_of = |name: OsString| -> Result<Option<FileId>> {
        Ok(doc.folder.stat(&name)?.map(|entry| file_id(&entry)))
    };
    Ok(Leftovers {
        new: id_of(link_name(doc, "new", &set.token))?,
        pre: id_of(link_name(doc, "pre", &set.token))?.is_some(),
        gone: id_of(link_name(doc, "gone", &set.token))?,
        doc: id_of(doc.name.clone())?,
    })
}

/// Whether the writer of a link set is still running (or paused): it holds the `flock`
/// of its staged file, which `-new-<ino>` names (a removal's: of the file `-gone-<ino>`
/// names).
#[must_use]
pub fn writer_alive(doc: &DocPath, set: &LinkSet) -> bool {
    ["new", "gone"].iter().any(|what| {
        doc.folder
            .open_file(&link_name(doc, what, &set.token))
            .is_ok_and(|file| {
                matches!(
                    file.try_lock_shared(),
                    Err(std::fs::TryLockError::WouldBlock)
                )
            })
    })
}

/// How much of the staged content's SHA-256 (hex) the `-sum` symlink keeps: 128 bits,
/// short enough to live in the inode.
const SUM_LEN: usize = 32;

/// Whether the document, found to be the `-new` file of a write that did not commit,
/// still holds the bytes that write staged (`sha256`: the document's hash). An edit made
/// in place after the crash changes them: the file is then someone's edit, not an
/// uncommitted write to roll back. Without a `-sum` link (none is made before the `-new`
/// link), it is taken as staged.
#[must_use]
pub fn still_staged(doc: &DocPath, set: &LinkSet, sha256: &str) -> bool {
    match doc.folder.read_link(&link_name(doc, "sum", &set.token)) {
        Ok(sum) => sum
            .to_str()
            .is_some_and(|sum| sum.len() == SUM_LEN && sha256.starts_with(sum)),
        Err(_) => true,
    }
}

/// Removes a link set (after a commit, or a rollback). Leftovers are harmless: the next
/// recovery removes them.
pub fn drop_set(doc: &DocPath, set: &LinkSet) {
    for what in ["sum", "new", "pre"] {
        let _ = doc.folder.remove(&link_name(doc, what, &set.token));
    }
    // A tree's removal takes its folder away under this name.
    let _ = crate::tree::remove_tree(&doc.folder, &link_name(doc, "gone", &set.token));
}

/// Puts the pre-image back over a document whose write never committed.
pub fn restore_pre(doc: &DocPath, set: &LinkSet) -> Result<()> {
    let pre = link_name(doc, "pre", &set.token);
    doc.folder
        .rename(&pre, &doc.name)
        .map_err(Error::io("cannot restore pre-image", doc.folder.join(&pre)))?;
    doc.folder.sync()?;
    drop_set(doc, set);
    Ok(())
}

/// Puts back a document whose removal never committed.
pub fn restore_removed(doc: &DocPath, set: &LinkSet) -> Result<()> {
    let gone = link_name(doc, "gone", &set.token);
    doc.folder.rename(&gone, &doc.name).map_err(Error::io(
        "cannot restore removed document",
        doc.folder.join(&gone),
    ))?;
    doc.folder.sync()?;
    drop_set(doc, set);
    Ok(())
}

/// A removal in progress: the document renamed to `-gone-<ino>` beside its name, the
/// file kept open and locked (`flock`, as a staged file is) so `status` tells a removal
/// in progress from one that crashed.
#[derive(Debug)]
pub struct Removal<'d> {
    doc: &'d DocPath,
    /// The removed file's identity, which the tombstone records.
    pub id: FileId,
    token: OsString,
    _file: File,
}

impl<'d> Removal<'d> {
    /// Takes the document away under the state file's lock: renames it to its `-gone`
    /// link. `None`: there was no document. The caller makes the rename durable
    /// ([`Removal::sync`]) before it commits, and puts the document back if anything
    /// fails before its COMMIT.
    pub fn take(doc: &'d DocPath, tree: bool) -> Result<Option<Removal<'d>>> {
        let entry = if tree {
            match doc.folder.stat(&doc.name)? {
                Some(e) if e.kind == Kind::Folder => Some(e),
                Some(_) => {
                    return Err(Error::usage(format!(
                        "{} is not a folder, and the resource is a tree",
                        doc.path().display()
                    )));
                }
                None => None,
            }
        } else {
            inspect_document(doc)?
        };
        let Some(entry) = entry else {
            return Ok(None);
        };
        let file = doc
            .folder
            .open_file(&doc.name)
            .map_err(Error::io("cannot open", doc.path()))?;
        // The file may still be locked by the writer that placed it, in its clean-up:
        // then `status` takes this removal for that writer's, in progress, until it is
        // done.
        let _ = file.try_lock();
        let opened = folder::entry_of(&file).map_err(Error::io("cannot inspect", doc.path()))?;
        if opened.ino != entry.ino {
            return Err(Error::io("cannot remove", doc.path())(io::Error::other(
                "the document was replaced while it was being removed",
            )));
        }
        let id = file_id(&opened);
        let token: OsString = id.ino.to_string().into();
        let gone = link_name(doc, "gone", &token);
        crate::tree::remove_tree(&doc.folder, &gone)?;
        doc.folder
            .rename(&doc.name, &gone)
            .map_err(Error::io("cannot remove", doc.path()))?;
        Ok(Some(Removal {
            doc,
            id,
            token,
            _file: file,
        }))
    }

    /// Fsyncs the folder, so the removal's rename is durable before the caller commits.
    pub fn sync(&self) -> Result<()> {
        crate::failpoints::failpoint!("remove.after_rename");
        self.doc.folder.sync()?;
        crate::failpoints::failpoint!("remove.after_dir_fsync");
        Ok(())
    }

    /// The link set of this removal, as recovery sees it.
    #[must_use]
    pub fn links(&self) -> LinkSet {
        LinkSet {
            token: self.token.clone(),
        }
    }

    /// Removes the `-gone` file once the removal committed. Runs without the lock.
    pub fn drop_links(&self) {
        drop_set(self.doc, &self.links());
    }
}

/// Removes a first document whose write never committed.
pub fn remove_uncommitted(doc: &DocPath, set: &LinkSet) -> Result<()> {
    doc.folder
        .remove(&doc.name)
        .map_err(Error::io("cannot remove uncommitted", doc.path()))?;
    doc.folder.sync()?;
    drop_set(doc, set);
    Ok(())
}

/// Removes temp files of writers that are gone (their `flock` is free). A writer that is
/// still running, or paused, still holds its lock, and its file is left alone.
/// Returns how many were removed.
pub fn remove_abandoned_temps(doc: &DocPath) -> Result<usize> {
    sweep_temps(doc, true)
}

/// Counts temp files of writers that are gone, without removing them.
pub fn abandoned_temps(doc: &DocPath) -> Result<usize> {
    sweep_temps(doc, false)
}

fn sweep_temps(doc: &DocPath, remove: bool) -> Result<usize> {
    let prefix = doc.sibling_name(TEMP);
    let mut removed = 0;
    for name in doc.folder.names()? {
        if !name.as_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        // A staged tree (a folder) is its writer's while the writer holds its lock, and
        // a tree publish's marker names it from the swap on: recovery resolves markers
        // before it sweeps, so one left here is a dead writer's.
        if let Ok(Some(entry)) = doc.folder.stat(&name)
            && entry.kind == Kind::Folder
        {
            let Ok(crate::folder::Child::Folder(dir)) = doc.folder.child(&name) else {
                continue;
            };
            let free =
                rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok();
            if free && (!remove || crate::tree::remove_tree(&doc.folder, &name).is_ok()) {
                removed += 1;
            }
            continue;
        }
        let Ok(file) = doc.folder.open_file(&name) else {
            continue;
        };
        if file.try_lock().is_ok() && (!remove || doc.folder.remove(&name).is_ok()) {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Fails early, before anything is written, when the folder cannot hold `size` bytes.
pub fn ensure_space(dir: &Path, size: u64) -> Result<()> {
    match fs2::available_space(dir) {
        Ok(free) if free < size => Err(Error::Io {
            context: "not enough free space in",
            path: dir.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::StorageFull,
                format!("{size} bytes needed, {free} available"),
            ),
        }),
        _ => Ok(()),
    }
}

/// SHA-256 and size of the document, streamed (never through a symlink).
pub fn hash_document(doc: &DocPath) -> Result<(String, u64)> {
    doc.folder
        .open_file(&doc.name)
        .and_then(|mut file| hash_stream(&mut file))
        .map_err(Error::io("cannot read", doc.path()))
}

/// SHA-256 and size of what `source` gives until its end.
fn hash_stream(source: &mut dyn Read) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = read_retrying(source, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Content in reads of up to 1000 bytes, then its end (a read of 0), then `late` once
    /// and the end again, as a terminal or a FIFO with a new writer can give.
    struct EndsThenMore {
        content: Vec<u8>,
        at: usize,
        ends: usize,
    }

    impl Read for EndsThenMore {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.content.len() {
                self.ends += 1;
                if self.ends != 2 {
                    return Ok(0);
                }
                let late = b"late";
                let n = late.len().min(buf.len());
                buf[..n].copy_from_slice(&late[..n]);
                return Ok(n);
            }
            let n = (self.content.len() - self.at).min(buf.len()).min(1000);
            buf[..n].copy_from_slice(&self.content[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn the_copy_ends_at_the_first_end_of_the_content() {
        for size in [0, 3, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7] {
            let content: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let mut source = EndsThenMore {
                content: content.clone(),
                at: 0,
                ends: 0,
            };
            let mut file = tempfile::tempfile().expect("temp file");
            let (sha256, copied) =
                copy_hashed(&mut source, &mut file, Path::new("doc"), Path::new("temp"))
                    .expect("copy");
            assert_eq!(copied, size as u64, "{size} bytes");
            assert_eq!(sha256, hex(&Sha256::digest(&content)), "{size} bytes");
            let mut written = Vec::new();
            io::Seek::rewind(&mut file).expect("rewind");
            file.read_to_end(&mut written).expect("read back");
            assert!(written == content, "{size} bytes: the file differs");
        }
    }
}
