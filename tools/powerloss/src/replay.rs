//! The replaying half: rebuilds the guest's disk as it stood at each flush point (or, in
//! the long mode, after each entry) of the recorded log, mounts that state on the host
//! through a loop device, lets fencepost recover, and judges what it finds.
//!
//! The judgement uses the marks the guest logged, each of which the log places after the
//! writes it reports. A version is `(epoch, seq)` (seq 0 without `--seq`), and publishes
//! bytes or the document's removal (a tombstone):
//!
//! - after recovery, `fencepost verify` passes, no file of the tool's (a temp file, a
//!   recovery link, a removal's `-gone` file) is left beside the document, and the
//!   document's SHA-256 (hashed here, not by fencepost) is the one the record names; a
//!   tombstone's document is absent;
//! - the record names a version some writer tried (a `fp:try` mark), with its body;
//! - once a version was acknowledged (`fp:ack`, `fp:seen`), the record's version is never
//!   lower, and if it is that version, its body is the acknowledged one. A higher version
//!   is a later write or removal that was in progress or acknowledged since;
//! - with no record, there is no document and nothing was acknowledged.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::Instant;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::guest::DATA_BYTES;
use crate::log::{DISCARD, Entry, Log};
use crate::{Config, Error, Report, tool};

/// The document every round writes.
const RESOURCE: &str = "reports/daily.md";
/// The publish root inside the guest's filesystem.
const ROOT: &str = "pub";
/// A logical time later than any the guest used (its commands run with `--now`, and a
/// state file keeps the kind of clock it was made with).
const LATE: &str = "1000000";

/// A state in which the judgement failed.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The log entry the state ends with.
    pub entry: u64,
    /// The last mark before it.
    pub after: String,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "log entry {} (after {}): {}",
            self.entry, self.after, self.what
        )
    }
}

/// A version's place in the order: `(epoch, seq)`.
pub(crate) type Place = (u64, u64);

/// What a version publishes: bytes (their SHA-256, hex), or the document's removal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Body {
    Bytes(String),
    Removed,
}

impl Body {
    /// The body a mark names: its SHA-256, or `removed`.
    fn of_mark(text: &str) -> Body {
        if text == "removed" {
            Body::Removed
        } else {
            Body::Bytes(text.to_string())
        }
    }
}

impl fmt::Display for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Bytes(sha) => f.write_str(short(sha)),
            Body::Removed => f.write_str("a removal"),
        }
    }
}

/// A version as the record holds it: its place and its body.
pub(crate) type Version = (Place, Body);

/// A place in words: `epoch E`, and `seq S` when it has one.
fn place(&(epoch, seq): &Place) -> String {
    if seq == 0 {
        format!("epoch {epoch}")
    } else {
        format!("epoch {epoch} seq {seq}")
    }
}

/// What the marks so far say was tried and acknowledged.
#[derive(Debug, Default, Clone)]
pub(crate) struct Judge {
    setup: bool,
    tries: BTreeSet<Version>,
    acked: Option<Version>,
    pub(crate) acks: u64,
    pub(crate) done: Option<u64>,
    pub(crate) last_mark: String,
}

impl Judge {
    /// Reads one mark. A version is `EPOCH:SEQ:SHA` (`SHA` is `removed` for a removal);
    /// `EPOCH:SHA`, with no seq, is seq 0.
    pub(crate) fn mark(&mut self, text: &str) -> Result<(), Error> {
        self.last_mark = text.to_string();
        let parts: Vec<&str> = text.split(':').collect();
        let number = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| Error::new(format!("mark {text:?}: bad number {s:?}")))
        };
        let version = |rest: &[&str]| -> Result<Version, Error> {
            match rest {
                [e, sha] => Ok(((number(e)?, 0), Body::of_mark(sha))),
                [e, seq, sha] => Ok(((number(e)?, number(seq)?), Body::of_mark(sha))),
                _ => Err(Error::new(format!("mark {text:?}: bad version"))),
            }
        };
        match parts.as_slice() {
            ["fp", "setup"] => self.setup = true,
            ["fp", "try", rest @ ..] => {
                self.tries.insert(version(rest)?);
            }
            ["fp", "ack" | "seen", rest @ ..] => {
                let acked = version(rest)?;
                if self
                    .acked
                    .as_ref()
                    .is_some_and(|(last, _)| *last >= acked.0)
                {
                    return Err(Error::new(format!(
                        "mark {text:?}: acknowledged versions must grow"
                    )));
                }
                self.acked = Some(acked);
                self.acks += 1;
            }
            ["fp", "done", n] => self.done = Some(number(n)?),
            ["fp", ..] => return Err(Error::new(format!("unknown mark {text:?}"))),
            _ => {} // the target's own marks (dm-log-writes-end)
        }
        Ok(())
    }

    /// True before the first write was tried (so perhaps before the first claim).
    pub(crate) fn nothing_tried(&self) -> bool {
        self.tries.is_empty()
    }

    /// Judges a recovered state: the record's version and the document's hash (`None`:
    /// no document).
    pub(crate) fn judge(
        &self,
        record: Option<Version>,
        doc: Option<String>,
    ) -> Result<Kept, String> {
        let Some((at, body)) = record else {
            if let Some((acked, _)) = &self.acked {
                return Err(format!(
                    "{} was acknowledged but nothing is recorded",
                    place(acked)
                ));
            }
            if doc.is_some() {
                return Err("a document exists but no write is recorded".into());
            }
            return Ok(Kept::Nothing);
        };
        let at_words = place(&at);
        match (&body, &doc) {
            (Body::Bytes(_), None) => {
                return Err(format!(
                    "the record names {at_words} but there is no document"
                ));
            }
            (Body::Bytes(sha), Some(d)) if d != sha => {
                return Err(format!(
                    "the document's SHA-256 {} is not the one recorded for {at_words} ({})",
                    short(d),
                    short(sha)
                ));
            }
            (Body::Removed, Some(d)) => {
                return Err(format!(
                    "the record is a removal at {at_words} but a document is there ({})",
                    short(d)
                ));
            }
            _ => {}
        }
        let version = (at, body);
        if !self.tries.contains(&version) {
            return Err(format!(
                "the record names content no writer tried ({at_words}, {})",
                version.1
            ));
        }
        if let Some((acked, acked_body)) = &self.acked {
            if version.0 < *acked {
                return Err(format!(
                    "acknowledged {} lost: the record went back to {at_words}",
                    place(acked)
                ));
            }
            if version.0 == *acked && version.1 != *acked_body {
                return Err(format!(
                    "acknowledged {} holds other content ({}, not {acked_body})",
                    place(acked),
                    version.1
                ));
            }
        }
        Ok(match version.1 {
            Body::Bytes(_) => Kept::Document,
            Body::Removed => Kept::Tombstone,
        })
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// One state to judge: a copy of the replayed image, and what the marks said by then.
struct Job {
    image: PathBuf,
    entry: u64,
    judge: Judge,
}

/// What the workers found.
#[derive(Default)]
struct Found {
    recovered: u64,
    rolled_back: u64,
    removals_rolled_back: u64,
    tombstones: u64,
    violations: Vec<Violation>,
    /// The image of the earliest violating state found so far (the others are removed).
    first: Option<(u64, PathBuf)>,
    error: Option<Error>,
}

/// Replays `log` to every flush point (every entry with `cfg.every_entry`) and judges
/// each state; fills the replay fields of `report`. The log is applied in order on one
/// thread; each state to judge is copied and handed to a pool of workers, each with its
/// own mount point.
pub(crate) fn replay(cfg: &Config, log: &Path, report: &mut Report) -> Result<(), Error> {
    let started = Instant::now();
    let image = cfg.work.join("replay.img");
    let mut disk = Disk {
        log: Log::open(log)?,
        file: create(&image)?,
        image,
        judge: Judge::default(),
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let (send, receive) = mpsc::sync_channel::<Job>(workers);
    let receive = Mutex::new(receive);
    let found = Mutex::new(Found::default());
    let failed = AtomicBool::new(false);
    let produced = std::thread::scope(|scope| {
        for n in 0..workers {
            let (receive, found, failed) = (&receive, &found, &failed);
            scope.spawn(move || work(cfg, n, receive, found, failed));
        }
        let produced = produce(cfg, &mut disk, report, &send, &failed);
        drop(send);
        produced
    });
    let found = found.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = found.error {
        return Err(e);
    }
    produced?;
    let mut violations = found.violations;
    violations.sort_by_key(|v| v.entry);
    if let Some((_, first)) = found.first {
        let keep = cfg.work.join("first-violation.img");
        fs::rename(&first, &keep)
            .map_err(|e| Error::new(format!("cannot keep {}: {e}", keep.display())))?;
    }
    report.violations = violations;
    report.recovered = found.recovered;
    report.rolled_back = found.rolled_back;
    report.removals_rolled_back = found.removals_rolled_back;
    report.tombstones = found.tombstones;
    report.acks = disk.judge.acks;
    report.guest_acks = disk.judge.done;
    report.replay_seconds = started.elapsed().as_secs_f64();
    if !disk.judge.setup {
        return Err(Error::new("the log has no fp:setup mark"));
    }
    Ok(())
}

/// The disk being rebuilt: the log, the image it is applied to, and what its marks said.
struct Disk<R> {
    log: Log<R>,
    file: File,
    image: PathBuf,
    judge: Judge,
}

/// Applies the log entry by entry and queues a copy of each state to judge.
fn produce<R: std::io::Read + std::io::Seek>(
    cfg: &Config,
    disk: &mut Disk<R>,
    report: &mut Report,
    send: &mpsc::SyncSender<Job>,
    failed: &AtomicBool,
) -> Result<(), Error> {
    let Disk {
        log,
        file,
        image,
        judge,
    } = disk;
    let mut changed = false;
    while let Some(entry) = log.next_entry()? {
        if failed.load(Ordering::Relaxed) {
            return Ok(()); // a worker's error is the one to report
        }
        apply(file, &entry, log.sectorsize)?;
        report.entries += 1;
        changed |= entry.changes_data();
        if let Some(text) = &entry.mark {
            judge.mark(text)?;
            changed = true; // the same bytes, judged against more acknowledgements
        }
        let point = entry.is_flush_point();
        report.flush_points += u64::from(point);
        if !judge.setup || !(point || cfg.every_entry) || !changed {
            continue;
        }
        changed = false;
        report.states_checked += 1;
        let copy = cfg.work.join(format!("state-{}.img", entry.index));
        fs::copy(&*image, &copy)
            .map_err(|e| Error::new(format!("cannot copy {}: {e}", image.display())))?;
        let job = Job {
            image: copy,
            entry: entry.index,
            judge: judge.clone(),
        };
        if send.send(job).is_err() {
            return Err(Error::new("every replay worker stopped"));
        }
    }
    Ok(())
}

/// A worker: judges the states it receives until the queue closes.
fn work(
    cfg: &Config,
    n: usize,
    receive: &Mutex<mpsc::Receiver<Job>>,
    found: &Mutex<Found>,
    failed: &AtomicBool,
) {
    let states = States::new(cfg, n);
    loop {
        let job = match receive.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let checked = if failed.load(Ordering::Relaxed) {
            None
        } else {
            Some(
                states
                    .as_ref()
                    .map_err(Error::clone)
                    .and_then(|s| s.check(&job.image, &job.judge)),
            )
        };
        let mut found = found.lock().unwrap_or_else(|e| e.into_inner());
        match checked {
            Some(Ok(Checked::Fine(recovery, kept))) => {
                found.recovered += u64::from(recovery != Recovery::None);
                found.rolled_back += u64::from(recovery.rolled_back());
                found.removals_rolled_back += u64::from(recovery == Recovery::RolledBackRemoval);
                found.tombstones += u64::from(kept == Kept::Tombstone);
            }
            Some(Ok(Checked::Violated(what))) => {
                let violation = Violation {
                    entry: job.entry,
                    after: job.judge.last_mark.clone(),
                    what,
                };
                found.violations.push(violation);
                let earlier = found.first.as_ref().is_some_and(|(e, _)| *e < job.entry);
                if !earlier {
                    if let Some((_, old)) = found.first.replace((job.entry, job.image)) {
                        let _ = fs::remove_file(old);
                    }
                    continue;
                }
            }
            Some(Err(e)) => {
                failed.store(true, Ordering::Relaxed);
                found.error.get_or_insert(e);
            }
            None => {}
        }
        let _ = fs::remove_file(&job.image);
    }
}

fn create(path: &Path) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", path.display())))?;
    file.set_len(DATA_BYTES)
        .map_err(|e| Error::new(format!("cannot size {}: {e}", path.display())))?;
    Ok(file)
}

/// Applies one entry to the disk image: its data, or zeroes for a discard.
fn apply(disk: &File, entry: &Entry, sectorsize: u64) -> Result<(), Error> {
    let at = entry.sector.saturating_mul(sectorsize);
    let len = entry.nr_sectors.saturating_mul(sectorsize);
    if !entry.changes_data() {
        return Ok(());
    }
    if at.saturating_add(len) > DATA_BYTES {
        return Err(Error::new(format!(
            "log entry {} writes past the end of the disk (sector {}, {} sectors)",
            entry.index, entry.sector, entry.nr_sectors
        )));
    }
    let io = |e: std::io::Error| Error::new(format!("cannot replay entry {}: {e}", entry.index));
    if entry.flags & DISCARD != 0 {
        let zeroes = vec![0u8; usize::try_from(len).map_err(|_| Error::new("huge discard"))?];
        disk.write_all_at(&zeroes, at).map_err(io)
    } else {
        disk.write_all_at(&entry.data, at).map_err(io)
    }
}

pub(crate) enum Checked {
    /// The state passed: what `recover` did, and what the record kept.
    Fine(Recovery, Kept),
    Violated(String),
}

/// What `recover` did in a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovery {
    None,
    /// Removed recovery links, a committed removal's `-gone` file or dead writers' temp
    /// files only.
    Tidied,
    /// Undid a write that had not committed.
    RolledBack,
    /// Put back a document whose removal had not committed.
    RolledBackRemoval,
}

impl Recovery {
    /// Whether it undid a write or a removal.
    pub(crate) fn rolled_back(self) -> bool {
        matches!(self, Recovery::RolledBack | Recovery::RolledBackRemoval)
    }
}

/// What the record holds in a state that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    Nothing,
    Document,
    /// A removal's tombstone (and no document).
    Tombstone,
}

/// Mounts states and runs fencepost on them (one per worker).
pub(crate) struct States {
    fencepost: PathBuf,
    mnt: PathBuf,
}

impl States {
    pub(crate) fn new(cfg: &Config, n: usize) -> Result<States, Error> {
        let mnt = cfg.work.join(format!("mnt-{n}"));
        fs::create_dir_all(&mnt)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", mnt.display())))?;
        Ok(States {
            fencepost: cfg.fencepost.clone(),
            mnt,
        })
    }

    /// Mounts `image` (which recovery then changes), judges it and unmounts it.
    pub(crate) fn check(&self, image: &Path, judge: &Judge) -> Result<Checked, Error> {
        let mounted = match Mounted::new(image, &self.mnt)? {
            Ok(m) => m,
            Err(why) => {
                return Ok(Checked::Violated(format!(
                    "the filesystem does not mount: {why}"
                )));
            }
        };
        let verdict = self.inspect(judge);
        mounted.unmount()?;
        verdict
    }

    fn inspect(&self, judge: &Judge) -> Result<Checked, Error> {
        let root = self.mnt.join(ROOT);
        if !root.is_dir() {
            return Ok(Checked::Violated("the publish root is missing".into()));
        }
        let recover = self.run(&root, &["recover"])?;
        if recover.status.code() == Some(2) && judge.nothing_tried() {
            // No state file yet, or one the first claim had not finished making: nothing
            // was claimed, so there must be no document either.
            return Ok(verdict(judge.judge(None, document(&root)?), Recovery::None));
        }
        if !recover.status.success() {
            return Ok(Checked::Violated(format!(
                "recover failed: {}",
                said(&recover)
            )));
        }
        let recovered = recovery(&json(&recover)?);
        let left = leftovers(&root)?;
        if !left.is_empty() {
            return Ok(Checked::Violated(format!(
                "recovery left files of the tool's beside the document: {}",
                left.join(", ")
            )));
        }
        let verify = self.run(&root, &["verify"])?;
        if !verify.status.success() {
            return Ok(Checked::Violated(format!("verify: {}", problems(&verify))));
        }
        let status = self.run(&root, &["status", RESOURCE])?;
        let record = if status.status.code() == Some(2) && judge.nothing_tried() {
            None // the first claim had not committed: the resource is not known yet
        } else if status.status.success() {
            record(&json(&status)?)
        } else {
            return Ok(Checked::Violated(format!(
                "status failed: {}",
                said(&status)
            )));
        };
        Ok(verdict(judge.judge(record, document(&root)?), recovered))
    }

    fn run(&self, root: &Path, args: &[&str]) -> Result<Output, Error> {
        Command::new(&self.fencepost)
            .env_clear()
            .arg("--root")
            .arg(root)
            .args(["--now", LATE, "--json"])
            .args(args)
            .output()
            .map_err(|e| Error::new(format!("cannot run {}: {e}", self.fencepost.display())))
    }
}

/// What `recover --json` says it did.
fn recovery(out: &Value) -> Recovery {
    let actions = out["resources"].as_array().cloned().unwrap_or_default();
    let did = |r: &Value| r["action"].as_str().unwrap_or("nothing to do").to_string();
    if actions
        .iter()
        .any(|r| did(r).starts_with("rolled back an uncommitted removal"))
    {
        Recovery::RolledBackRemoval
    } else if actions.iter().any(|r| did(r).starts_with("rolled back")) {
        Recovery::RolledBack
    } else if actions
        .iter()
        .any(|r| did(r) != "nothing to do" || r["temps_removed"].as_u64().is_some_and(|n| n > 0))
    {
        Recovery::Tidied
    } else {
        Recovery::None
    }
}

fn verdict(judged: Result<Kept, String>, recovered: Recovery) -> Checked {
    match judged {
        Ok(kept) => Checked::Fine(recovered, kept),
        Err(what) => Checked::Violated(what),
    }
}

/// The names of the tool's files (temp files, recovery links, `-gone` files) in the
/// document's folder.
fn leftovers(root: &Path) -> Result<Vec<String>, Error> {
    let path = root.join(RESOURCE);
    let Some(folder) = path.parent() else {
        return Ok(Vec::new());
    };
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::new(format!("cannot list {}: {e}", folder.display()))),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| Error::new(format!("cannot list {}: {e}", folder.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains(".fencepost-") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The document's SHA-256 (hashed here, not by fencepost), or None if there is none.
fn document(root: &Path) -> Result<Option<String>, Error> {
    let path = root.join(RESOURCE);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(hex(&Sha256::digest(&bytes)))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::new(format!("cannot read {}: {e}", path.display()))),
    }
}

/// The record's version from `status --json RES` (its epoch, seq and SHA-256, or that it
/// is a removal), if it holds one.
fn record(status: &Value) -> Option<Version> {
    let row = status["resources"]
        .as_array()?
        .iter()
        .find(|r| r["resource"].as_str() == Some(RESOURCE))?;
    let sink = &row["sink"];
    let at = (
        sink["content_epoch"].as_u64()?,
        sink["seq"].as_u64().unwrap_or(0),
    );
    let body = if sink["removed"].as_bool() == Some(true) {
        Body::Removed
    } else {
        Body::Bytes(sink["sha256"].as_str()?.to_string())
    };
    Some((at, body))
}

fn json(out: &Output) -> Result<Value, Error> {
    serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::new(format!("fencepost printed no JSON ({e}): {}", said(out))))
}

/// The problems `verify --json` lists, one `kind: message` each, else all it said.
fn problems(out: &Output) -> String {
    let listed: Option<Vec<String>> =
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| {
                v["problems"].as_array().map(|all| {
                    all.iter()
                        .map(|p| {
                            let kind = p["problem"].as_str().unwrap_or("?");
                            let message = p["message"].as_str().unwrap_or("?");
                            format!("{kind}: {message}")
                        })
                        .collect()
                })
            });
    match listed {
        Some(list) if !list.is_empty() => list.join("; "),
        _ => said(out),
    }
}

fn said(out: &Output) -> String {
    format!(
        "exit {}: {} {}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A loop mount, undone when dropped if not before.
struct Mounted<'a> {
    mnt: &'a Path,
    done: bool,
}

impl<'a> Mounted<'a> {
    /// Mounts `image` on `mnt`; the inner error says why the filesystem did not mount.
    fn new(image: &Path, mnt: &'a Path) -> Result<Result<Mounted<'a>, String>, Error> {
        let out = Command::new(tool("mount")?)
            .args(["-t", "ext4", "-o", "loop"])
            .arg(image)
            .arg(mnt)
            .output()
            .map_err(|e| Error::new(format!("cannot run mount: {e}")))?;
        if !out.status.success() {
            return Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
        }
        Ok(Ok(Mounted { mnt, done: false }))
    }

    fn unmount(mut self) -> Result<(), Error> {
        self.done = true;
        let out = Command::new(tool("umount")?)
            .arg(self.mnt)
            .output()
            .map_err(|e| Error::new(format!("cannot run umount: {e}")))?;
        if !out.status.success() {
            return Err(Error::new(format!(
                "cannot unmount {}: {}",
                self.mnt.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Ok(umount) = tool("umount")
        {
            let _ = Command::new(umount).arg(self.mnt).output();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaa";
    const B: &str = "bbbb";
    const C: &str = "cccc";

    fn judge(marks: &[&str]) -> Judge {
        let mut j = Judge::default();
        for m in marks {
            j.mark(m).expect("mark");
        }
        j
    }

    fn rec(epoch: u64, sha: &str) -> Option<Version> {
        versioned(epoch, 0, sha)
    }

    /// The record of a version (`removed` for a removal's tombstone).
    fn versioned(epoch: u64, seq: u64, sha: &str) -> Option<Version> {
        Some(((epoch, seq), Body::of_mark(sha)))
    }

    #[test]
    fn nothing_recorded_before_any_acknowledgement_is_fine() {
        let j = judge(&["fp:setup", "fp:try:1:aaaa"]);
        assert_eq!(j.judge(None, None), Ok(Kept::Nothing));
        assert!(
            j.judge(None, Some(A.into())).is_err(),
            "an unrecorded document survived"
        );
    }

    #[test]
    fn the_acknowledged_version_or_a_later_tried_one_passes() {
        let j = judge(&[
            "fp:setup",
            "fp:try:1:aaaa",
            "fp:ack:1:aaaa",
            "fp:try:2:bbbb",
        ]);
        assert_eq!(j.judge(rec(1, A), Some(A.into())), Ok(Kept::Document));
        assert_eq!(j.judge(rec(2, B), Some(B.into())), Ok(Kept::Document));
    }

    #[test]
    fn a_lost_acknowledged_write_fails() {
        let j = judge(&[
            "fp:try:1:aaaa",
            "fp:ack:1:aaaa",
            "fp:try:2:bbbb",
            "fp:seen:2:bbbb",
        ]);
        let err = j.judge(rec(1, A), Some(A.into())).expect_err("rolled back");
        assert!(err.contains("acknowledged epoch 2 lost"), "{err}");
        let err = j.judge(None, None).expect_err("gone");
        assert!(err.contains("epoch 2 was acknowledged"), "{err}");
    }

    #[test]
    fn a_document_unlike_its_record_or_an_untried_record_fails() {
        let j = judge(&["fp:try:1:aaaa", "fp:ack:1:aaaa", "fp:try:2:bbbb"]);
        let err = j.judge(rec(2, B), Some(A.into())).expect_err("drifted");
        assert!(err.contains("is not the one recorded for epoch 2"), "{err}");
        let err = j.judge(rec(2, B), None).expect_err("missing");
        assert!(err.contains("there is no document"), "{err}");
        let err = j.judge(rec(3, C), Some(C.into())).expect_err("untried");
        assert!(err.contains("no writer tried"), "{err}");
        let err = j
            .judge(rec(1, B), Some(B.into()))
            .expect_err("other content");
        assert!(err.contains("no writer tried"), "{err}");
    }

    #[test]
    fn an_acknowledged_seq_is_never_lost_to_an_earlier_one() {
        let mut j = judge(&["fp:try:1:1:aaaa", "fp:ack:1:1:aaaa", "fp:try:1:2:bbbb"]);
        // Before seq 2's acknowledgement, either version.
        assert_eq!(
            j.judge(versioned(1, 1, A), Some(A.into())),
            Ok(Kept::Document)
        );
        assert_eq!(
            j.judge(versioned(1, 2, B), Some(B.into())),
            Ok(Kept::Document)
        );
        j.mark("fp:ack:1:2:bbbb").expect("ack");
        let err = j
            .judge(versioned(1, 1, A), Some(A.into()))
            .expect_err("back to seq 1");
        assert!(err.contains("acknowledged epoch 1 seq 2 lost"), "{err}");
        assert_eq!(
            j.judge(versioned(1, 2, B), Some(B.into())),
            Ok(Kept::Document)
        );
        // Seq 2's bytes recorded as seq 1 were never tried.
        let err = j
            .judge(versioned(1, 1, B), Some(B.into()))
            .expect_err("untried");
        assert!(err.contains("no writer tried"), "{err}");
    }

    #[test]
    fn a_removal_is_the_old_document_or_a_tombstone_never_half() {
        let mut j = judge(&["fp:try:1:1:aaaa", "fp:ack:1:1:aaaa", "fp:try:1:2:removed"]);
        // Before its acknowledgement: the old document and record, or removed.
        assert_eq!(
            j.judge(versioned(1, 1, A), Some(A.into())),
            Ok(Kept::Document)
        );
        assert_eq!(
            j.judge(versioned(1, 2, "removed"), None),
            Ok(Kept::Tombstone)
        );
        // Half states: the document gone under the old record, or there under the
        // tombstone.
        let err = j
            .judge(versioned(1, 1, A), None)
            .expect_err("gone, old record");
        assert!(err.contains("there is no document"), "{err}");
        let err = j
            .judge(versioned(1, 2, "removed"), Some(A.into()))
            .expect_err("a document under a tombstone");
        assert!(err.contains("a document is there"), "{err}");
        j.mark("fp:ack:1:2:removed").expect("ack");
        let err = j
            .judge(versioned(1, 1, A), Some(A.into()))
            .expect_err("removal lost");
        assert!(err.contains("acknowledged epoch 1 seq 2 lost"), "{err}");
        assert_eq!(
            j.judge(versioned(1, 2, "removed"), None),
            Ok(Kept::Tombstone)
        );
        // A later version writes the document again.
        j.mark("fp:try:2:0:cccc").expect("try");
        assert_eq!(j.judge(rec(2, C), Some(C.into())), Ok(Kept::Document));
    }

    #[test]
    fn marks_are_checked() {
        let mut j = judge(&["fp:ack:2:aaaa"]);
        assert!(
            j.mark("fp:ack:2:bbbb").is_err(),
            "acknowledged epochs must grow"
        );
        assert!(
            j.mark("fp:ack:2:0:bbbb").is_err(),
            "the same version, with its seq"
        );
        j.mark("fp:ack:2:1:bbbb").expect("a later seq");
        assert!(j.mark("fp:nonsense").is_err());
        assert!(j.mark("fp:try:x:aaaa").is_err());
        assert!(j.mark("dm-log-writes-end").is_ok());
        assert!(j.mark("fp:try:1:x:aaaa").is_err());
        assert!(j.mark("fp:try:1:1:2:aaaa").is_err());
        j.mark("fp:done:2").expect("done");
        assert_eq!((j.acks, j.done), (2, Some(2)));
    }

    #[test]
    fn entries_are_applied_to_the_image_and_discards_zero_their_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("img");
        let disk = create(&image).expect("image");
        let write = Entry {
            index: 0,
            sector: 2,
            nr_sectors: 2,
            flags: 0,
            data: vec![9u8; 1024],
            mark: None,
        };
        apply(&disk, &write, 512).expect("write");
        let discard = Entry {
            index: 1,
            sector: 3,
            nr_sectors: 1,
            flags: DISCARD,
            data: Vec::new(),
            mark: None,
        };
        apply(&disk, &discard, 512).expect("discard");
        let bytes = fs::read(&image).expect("read");
        assert_eq!(bytes.len() as u64, DATA_BYTES);
        assert!(bytes[..1024].iter().all(|&b| b == 0));
        assert!(bytes[1024..1536].iter().all(|&b| b == 9));
        assert!(bytes[1536..2048].iter().all(|&b| b == 0));
        let past = Entry {
            sector: DATA_BYTES / 512,
            ..write
        };
        assert!(apply(&disk, &past, 512).is_err());
    }
}
