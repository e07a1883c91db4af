//! The durable atomic replace of a document, and the file side of crash recovery.
//!
//! A write stages its bytes in `.<name>.fencepost-tmp-XXXXXXXX` beside the document
//! (same folder, so the rename is atomic), fsyncs it, and only then takes the state
//! file's lock. Under the lock the caller links `-pre` to the current document and
//! `-new` to the staged file, renames, fsyncs the folder and commits. The two links let
//! recovery undo a rename whose commit never happened (see `sink::recovery`).
//!
//! Staged files stay locked (`flock`) by their writer for its whole life, so recovery
//! removes only temp files whose writer is gone, never those of a writer still running
//! or paused.

use std::fs::{self, File, Metadata, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread;

use sha2::{Digest, Sha256};
use tempfile::TempPath;

use crate::error::{Error, Result};
use crate::resource::DocPath;
use crate::sink::{FileId, Leftovers};

/// What follows `.<name>.fencepost-` in a staged temp file's name (then random chars).
const TEMP: &str = "tmp-";

/// Size of the buffer that streams content: memory stays flat whatever the size.
const CHUNK: usize = 128 * 1024;

/// Fires a failpoint: a no-op unless built with the `failpoints` feature (crash tests).
#[macro_export]
macro_rules! failpoint {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        $crate::failpoints::hit($name)?;
    };
}

/// The document as it is now: `None` if absent. Symlinks, folders and special files are
/// refused: the tool replaces regular files only.
pub fn inspect_document(doc: &DocPath) -> Result<Option<Metadata>> {
    let path = doc.path();
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_file() => Ok(Some(meta)),
        Ok(meta) => {
            let what = if meta.file_type().is_symlink() {
                "a symlink"
            } else if meta.is_dir() {
                "a folder"
            } else {
                "a special file"
            };
            Err(Error::usage_hint(
                format!("document {} is {what}, not a regular file", path.display()),
                "fencepost replaces regular files only; remove it or pick another resource",
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("cannot inspect", path)(e)),
    }
}

/// Identity of a file from its metadata.
pub fn file_id(meta: &Metadata) -> FileId {
    FileId {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
    }
}

/// Bytes staged for a document: written, fsynced, hashed, locked by this process.
#[derive(Debug)]
pub struct Staged {
    /// Kept open so the `flock` that protects the temp file lives as long as we do.
    file: File,
    path: TempPath,
    pub sha256: String,
    pub size: u64,
    pub id: FileId,
}

/// Streams `source` into a new temp file beside the document and makes it durable.
/// A new document gets the mode an ordinary file creation gets under the umask; a
/// rewrite keeps the existing document's mode (and owner, where allowed).
pub fn stage(doc: &DocPath, source: &mut dyn Read, existing: Option<&Metadata>) -> Result<Staged> {
    let prefix = doc.sibling_name(TEMP);
    let mode = existing.map_or(0o666, |m| m.permissions().mode() & 0o7777);
    let (file, path) = loop {
        let temp = tempfile::Builder::new()
            .prefix(&prefix)
            .rand_bytes(8)
            .permissions(Permissions::from_mode(0o666))
            .tempfile_in(&doc.dir)
            .map_err(Error::io("cannot create temp file in", &doc.dir))?;
        let (file, path) = temp.into_parts();
        file.lock()
            .map_err(Error::io("cannot lock", path.to_path_buf()))?;
        // A cleaner may have removed the file between its creation and our lock (it looked
        // abandoned). Only a file still at its path is ours to use.
        let ours = fs::symlink_metadata(&path)
            .ok()
            .zip(file.metadata().ok())
            .is_some_and(|(at_path, open)| {
                at_path.ino() == open.ino() && at_path.dev() == open.dev()
            });
        if ours {
            break (file, path);
        }
    };
    let mut file = file;
    if let Some(meta) = existing {
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(Error::io("cannot set mode of", path.to_path_buf()))?;
        let own = file
            .metadata()
            .map_err(Error::io("cannot inspect", path.to_path_buf()))?;
        if own.uid() != meta.uid() || own.gid() != meta.gid() {
            // Best effort: only root may give a file away; others keep their own ids.
            let _ = std::os::unix::fs::fchown(&file, Some(meta.uid()), Some(meta.gid()));
            file.set_permissions(Permissions::from_mode(mode))
                .map_err(Error::io("cannot set mode of", path.to_path_buf()))?;
        }
    }
    let (sha256, size) = copy_hashed(source, &mut file, &doc.path(), &path)?;
    crate::failpoint!("write.after_temp_write");
    file.sync_all()
        .map_err(Error::io("cannot fsync", path.to_path_buf()))?;
    crate::failpoint!("write.after_temp_fsync");
    let id = file_id(
        &file
            .metadata()
            .map_err(Error::io("cannot inspect", path.to_path_buf()))?,
    );
    Ok(Staged {
        file,
        path,
        sha256,
        size,
        id,
    })
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
    loop {
        let mut buf = free.recv().map_err(|_| hasher_gone(doc))?;
        let n = read_some(source, &mut buf, doc)?;
        if n == 0 {
            return Ok(size);
        }
        file.write_all(&buf[..n])
            .map_err(Error::io("cannot write", temp.to_path_buf()))?;
        size += n as u64;
        to_hasher.send((buf, n)).map_err(|_| hasher_gone(doc))?;
    }
}

/// The error when the hashing thread is no longer there to take a chunk.
fn hasher_gone(doc: &Path) -> Error {
    Error::io("cannot hash the content for", doc)(io::Error::other("the hashing thread stopped"))
}

impl Staged {
    /// Links `-pre` to the current document (if any) and `-new` to the staged file, so a
    /// crash from here to the commit can be undone. Call under the state file's lock.
    pub fn link_for_recovery(&self, doc: &DocPath, document_exists: bool) -> Result<()> {
        let pre = doc.sibling("pre");
        let new = doc.sibling("new");
        remove_if_present(&pre)?;
        remove_if_present(&new)?;
        if document_exists {
            fs::hard_link(doc.path(), &pre)
                .map_err(Error::io(crate::error::PRE_IMAGE_LINK, &pre))?;
        }
        crate::failpoint!("write.after_pre_link");
        fs::hard_link(&self.path, &new).map_err(Error::io("cannot link staged file", &new))?;
        crate::failpoint!("write.after_new_link");
        // The staged bytes' hash, kept beside `-new` (a symlink's target: no extra fsync;
        // the folder fsync after the rename makes it durable). After a crash the document
        // may be the `-new` file edited in place; then it is no longer ours to roll back.
        let sum = doc.sibling("sum");
        remove_if_present(&sum)?;
        std::os::unix::fs::symlink(&self.sha256[..SUM_LEN], &sum)
            .map_err(Error::io("cannot record the staged hash in", &sum))?;
        Ok(())
    }

    /// Renames the staged file over the document and fsyncs the folder, so the new name
    /// is durable before the caller commits.
    pub fn rename_into_place(self, doc: &DocPath) -> Result<()> {
        let target = doc.path();
        let Staged { file, path, .. } = self;
        path.persist(&target)
            .map_err(|e| Error::io("cannot rename into", target.clone())(e.error))?;
        drop(file);
        crate::failpoint!("write.after_rename");
        fsync_dir(&doc.dir)?;
        crate::failpoint!("write.after_dir_fsync");
        Ok(())
    }
}

/// Removes the recovery links after a commit (or a rollback). Leftovers are harmless:
/// the next recovery removes them.
pub fn drop_links(doc: &DocPath) {
    let _ = fs::remove_file(doc.sibling("sum"));
    let _ = fs::remove_file(doc.sibling("new"));
    let _ = fs::remove_file(doc.sibling("pre"));
}

/// What a crashed write may have left next to the document.
pub fn leftovers(doc: &DocPath) -> Result<Leftovers> {
    let id_of = |path: PathBuf| -> Result<Option<FileId>> {
        match fs::symlink_metadata(&path) {
            Ok(meta) => Ok(Some(file_id(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("cannot inspect", path)(e)),
        }
    };
    Ok(Leftovers {
        new: id_of(doc.sibling("new"))?,
        pre: id_of(doc.sibling("pre"))?.is_some(),
        doc: id_of(doc.path())?,
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
pub fn still_staged(doc: &DocPath, sha256: &str) -> bool {
    match fs::read_link(doc.sibling("sum")) {
        Ok(sum) => sum
            .to_str()
            .is_some_and(|sum| sum.len() == SUM_LEN && sha256.starts_with(sum)),
        Err(_) => true,
    }
}

/// Puts the pre-image back over a document whose write never committed.
pub fn restore_pre(doc: &DocPath) -> Result<()> {
    let pre = doc.sibling("pre");
    fs::rename(&pre, doc.path()).map_err(Error::io("cannot restore pre-image", &pre))?;
    fsync_dir(&doc.dir)?;
    drop_links(doc);
    Ok(())
}

/// Removes a first document whose write never committed.
pub fn remove_uncommitted(doc: &DocPath) -> Result<()> {
    let path = doc.path();
    fs::remove_file(&path).map_err(Error::io("cannot remove uncommitted", &path))?;
    fsync_dir(&doc.dir)?;
    drop_links(doc);
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
    let prefix = prefix.as_encoded_bytes();
    let entries = match fs::read_dir(&doc.dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io("cannot list", &doc.dir)(e)),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().as_encoded_bytes().starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = File::open(&path) else {
            continue;
        };
        if file.try_lock().is_ok() && (!remove || fs::remove_file(&path).is_ok()) {
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

/// The folder a path names its file in: `.` for a bare file name.
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

/// SHA-256 and size of a file, streamed.
pub fn hash_file(path: &Path) -> io::Result<(String, u64)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = read_retrying(&mut file, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("cannot remove", path)(e)),
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
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
