//! The replaying half: rebuilds the guest's disk as it stood at each flush point (or, in
//! the long mode, after each entry) of the recorded log, mounts that state on the host
//! through a loop device, lets fencepost recover, and judges what it finds.
//!
//! The judgement uses the marks the guest logged, each of which the log places after the
//! writes it reports. The guest publishes two resources, a document and a tree (a folder,
//! `write --tree`), each judged on its own by the same rules. A version is `(epoch, seq)`
//! (seq 0 without `--seq`), and publishes bytes (a tree: the tree its hash names) or the
//! document's removal (a tombstone):
//!
//! - after recovery, `fencepost verify` passes, no file of the tool's (a temp file, a
//!   recovery link, a removal's `-gone` file, a tree publish's marker or staged tree, an
//!   old tree) is left beside them, and the document's SHA-256 (the tree's hash) is the
//!   one the record names, both computed here, not by fencepost; a tombstone's document
//!   is absent;
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

/// The document the guest's rounds of documents write.
const RESOURCE: &str = "reports/daily.md";
/// The tree its rounds of trees publish, beside it.
const TREE: &str = "reports/site";
/// The publish root inside the guest's filesystem.
const ROOT: &str = "pub";
/// A logical time later than any the guest used (its commands run with `--now`, and a
/// state file keeps the kind of clock it was made with).
const LATE: i64 = 1_000_000;
/// Later still: past the grace period of every tree a recovery at [`LATE`] takes away
/// (recovery keeps those for readers that may have opened them, as long as
/// `write --tree --keep-old` would by default: 60 ticks).
const LATER: i64 = LATE + 1000;

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
    /// The document's versions.
    doc: Versions,
    /// The tree's versions (`fp:tree:...` marks).
    tree: Versions,
    pub(crate) acks: u64,
    pub(crate) done: Option<u64>,
    pub(crate) last_mark: String,
}

/// One resource's versions some writer tried, and the last one acknowledged.
#[derive(Debug, Default, Clone)]
struct Versions {
    tries: BTreeSet<Version>,
    acked: Option<Version>,
}

impl Judge {
    /// Reads one mark. A version is `EPOCH:SEQ:SHA` (`SHA` is `removed` for a removal);
    /// `EPOCH:SHA`, with no seq, is seq 0. A mark of the tree's starts `fp:tree:` (its
    /// `SHA` is the tree hash).
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
        let (versions, what) = match parts.as_slice() {
            ["fp", "setup"] => {
                self.setup = true;
                return Ok(());
            }
            ["fp", "done", n] => {
                self.done = Some(number(n)?);
                return Ok(());
            }
            ["fp", "tree", what @ ..] => (&mut self.tree, what),
            ["fp", what @ ..] => (&mut self.doc, what),
            _ => return Ok(()), // the target's own marks (dm-log-writes-end)
        };
        match what {
            ["try", rest @ ..] => {
                versions.tries.insert(version(rest)?);
            }
            ["ack" | "seen", rest @ ..] => {
                let acked = version(rest)?;
                if versions
                    .acked
                    .as_ref()
                    .is_some_and(|(last, _)| *last >= acked.0)
                {
                    return Err(Error::new(format!(
                        "mark {text:?}: acknowledged versions must grow"
                    )));
                }
                versions.acked = Some(acked);
                self.acks += 1;
            }
            _ => return Err(Error::new(format!("unknown mark {text:?}"))),
        }
        Ok(())
    }

    /// True before the first write was tried (so perhaps before the first claim).
    pub(crate) fn nothing_tried(&self) -> bool {
        self.doc.tries.is_empty()
    }

    /// True before the first tree publish was tried (so perhaps before its first claim).
    pub(crate) fn no_tree_tried(&self) -> bool {
        self.tree.tries.is_empty()
    }

    /// Judges a recovered state: the document's record and hash (`None`: no document).
    pub(crate) fn judge(
        &self,
        record: Option<Version>,
        doc: Option<String>,
    ) -> Result<Kept, String> {
        self.doc.judge(record, doc, Noun::DOCUMENT)
    }

    /// Judges the tree in a recovered state: its record and the hash of the tree at its
    /// name, computed here (`None`: no tree).
    pub(crate) fn judge_tree(
        &self,
        record: Option<Version>,
        tree: Option<String>,
    ) -> Result<Kept, String> {
        self.tree.judge(record, tree, Noun::TREE)
    }
}

/// How the judgement names a resource and its hash.
#[derive(Debug, Clone, Copy)]
struct Noun {
    thing: &'static str,
    hash: &'static str,
}

impl Noun {
    const DOCUMENT: Noun = Noun {
        thing: "document",
        hash: "SHA-256",
    };
    const TREE: Noun = Noun {
        thing: "tree",
        hash: "hash",
    };
}

impl Versions {
    /// Judges a recovered state of this resource: the record's version and the hash of
    /// what stands at its name (`None`: nothing).
    fn judge(
        &self,
        record: Option<Version>,
        doc: Option<String>,
        noun: Noun,
    ) -> Result<Kept, String> {
        let Noun { thing, hash } = noun;
        let Some((at, body)) = record else {
            if let Some((acked, _)) = &self.acked {
                return Err(format!(
                    "{} was acknowledged but nothing is recorded",
                    place(acked)
                ));
            }
            if doc.is_some() {
                return Err(format!("a {thing} exists but no write is recorded"));
            }
            return Ok(Kept::Nothing);
        };
        let at_words = place(&at);
        match (&body, &doc) {
            (Body::Bytes(_), None) => {
                return Err(format!(
                    "the record names {at_words} but there is no {thing}"
                ));
            }
            (Body::Bytes(sha), Some(d)) if d != sha => {
                return Err(format!(
                    "the {thing}'s {hash} {} is not the one recorded for {at_words} ({})",
                    short(d),
                    short(sha)
                ));
            }
            (Body::Removed, Some(d)) => {
                return Err(format!(
                    "the record is a removal at {at_words} but a {thing} is there ({})",
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
    trees_rolled_back: u64,
    tombstones: u64,
    trees: u64,
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
    report.trees_rolled_back = found.trees_rolled_back;
    report.tombstones = found.tombstones;
    report.trees = found.trees;
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
            Some(Ok(Checked::Fine(fine))) => {
                let recovery = fine.recovery;
                found.recovered += u64::from(recovery != Recovery::None);
                found.rolled_back += u64::from(recovery.rolled_back());
                found.removals_rolled_back += u64::from(recovery == Recovery::RolledBackRemoval);
                found.trees_rolled_back += u64::from(fine.tree_rolled_back);
                found.tombstones += u64::from(fine.document == Kept::Tombstone);
                found.trees += u64::from(fine.tree == Kept::Document);
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
    /// The state passed.
    Fine(Fine),
    Violated(String),
}

/// What a state that passed held, and what `recover` did to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fine {
    /// What `recover` did, for any resource.
    pub(crate) recovery: Recovery,
    /// It undid a tree publish that had not committed.
    pub(crate) tree_rolled_back: bool,
    /// What the document's record kept.
    pub(crate) document: Kept,
    /// What the tree's record kept (`Document`: a tree, whole at its name).
    pub(crate) tree: Kept,
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
    /// A document's bytes (the tree's record: a tree).
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
        if recover.status.code() == Some(2) && judge.nothing_tried() && judge.no_tree_tried() {
            // No state file yet, or one the first claim had not finished making: nothing
            // was claimed, so there must be neither a document nor a tree.
            let none = Fine {
                recovery: Recovery::None,
                tree_rolled_back: false,
                document: Kept::Nothing,
                tree: Kept::Nothing,
            };
            return Ok(
                match (
                    judge.judge(None, document(&root)?),
                    tree(&root)?.and_then(|found| judge.judge_tree(None, found)),
                ) {
                    (Ok(_), Ok(_)) => Checked::Fine(none),
                    (Err(what), _) => Checked::Violated(what),
                    (_, Err(what)) => Checked::Violated(format!("tree: {what}")),
                },
            );
        }
        if !recover.status.success() {
            return Ok(Checked::Violated(format!(
                "recover failed: {}",
                said(&recover)
            )));
        }
        let recovered = json(&recover)?;
        let left = leftovers(&root, LATE)?;
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
        let document = match self.record(&root, RESOURCE, judge.nothing_tried())? {
            Ok(record) => judge.judge(record, document(&root)?),
            Err(what) => Err(what),
        };
        let tree = match self.record(&root, TREE, judge.no_tree_tried())? {
            Ok(record) => tree(&root)?.and_then(|found| judge.judge_tree(record, found)),
            Err(what) => Err(what),
        };
        // Once their grace period is over, the trees recovery took away are removed too.
        if document.is_ok() && tree.is_ok() {
            let later = self.run_at(&root, LATER, &["recover"])?;
            if !later.status.success() {
                return Ok(Checked::Violated(format!(
                    "recover after the grace period failed: {}",
                    said(&later)
                )));
            }
            let left = leftovers(&root, LATER)?;
            if !left.is_empty() {
                return Ok(Checked::Violated(format!(
                    "recovery after the grace period left files of the tool's: {}",
                    left.join(", ")
                )));
            }
        }
        Ok(match (document, tree) {
            (Ok(document), Ok(tree)) => Checked::Fine(Fine {
                recovery: recovery(&recovered),
                tree_rolled_back: tree_rolled_back(&recovered),
                document,
                tree,
            }),
            (Err(what), _) => Checked::Violated(what),
            (_, Err(what)) => Checked::Violated(format!("tree: {what}")),
        })
    }

    /// The record of `resource` (its version and body) from `status --json`, if it holds
    /// one; the inner error is a violation. `untried`: nothing was tried on it yet, so it
    /// may be unknown.
    fn record(
        &self,
        root: &Path,
        resource: &str,
        untried: bool,
    ) -> Result<Result<Option<Version>, String>, Error> {
        let status = self.run(root, &["status", resource])?;
        Ok(if status.status.code() == Some(2) && untried {
            Ok(None) // the first claim had not committed: the resource is not known yet
        } else if status.status.success() {
            Ok(record(&json(&status)?, resource))
        } else {
            Err(format!("status {resource} failed: {}", said(&status)))
        })
    }

    fn run(&self, root: &Path, args: &[&str]) -> Result<Output, Error> {
        self.run_at(root, LATE, args)
    }

    /// [`States::run`] at the logical time `now`.
    fn run_at(&self, root: &Path, now: i64, args: &[&str]) -> Result<Output, Error> {
        Command::new(&self.fencepost)
            .env_clear()
            .arg("--root")
            .arg(root)
            .args(["--now", &now.to_string(), "--json"])
            .args(args)
            .output()
            .map_err(|e| Error::new(format!("cannot run {}: {e}", self.fencepost.display())))
    }
}

/// Whether `recover --json` says it undid a tree publish.
fn tree_rolled_back(out: &Value) -> bool {
    out["resources"].as_array().is_some_and(|all| {
        all.iter().any(|r| {
            r["action"]
                .as_str()
                .is_some_and(|a| a.starts_with("rolled back") && a.contains("tree publish"))
        })
    })
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

/// The names of the tool's files (temp files, recovery links, `-gone` files, tree markers,
/// staged and old trees) in the document's folder, which holds the tree too; but for old
/// trees whose grace period is not over at `now` (`.<name>.fencepost-old-<token>-<deadline>`,
/// `deadline` after `now`), which recovery keeps for readers that may be walking them.
fn leftovers(root: &Path, now: i64) -> Result<Vec<String>, Error> {
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
        let kept = name
            .split_once(".fencepost-old-")
            .and_then(|(_, rest)| rest.rsplit_once('-'))
            .and_then(|(_, deadline)| deadline.parse::<i64>().ok())
            .is_some_and(|deadline| deadline > now);
        if name.contains(".fencepost-") && !kept {
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

/// The tree at its name, hashed here (not by fencepost) as fencepost hashes a tree: the
/// SHA-256 of its manifest ([`manifest`]). `None` when nothing is there; the inner error
/// (a violation) when a file or symlink stands there, or a device, FIFO or socket in it.
fn tree(root: &Path) -> Result<Result<Option<String>, String>, Error> {
    let path = root.join(TREE);
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(Err(format!("{TREE} is not a folder"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(e) => return Err(Error::new(format!("cannot read {}: {e}", path.display()))),
    }
    Ok(manifest(&path)?.map(|m| Some(hex(&Sha256::digest(m)))))
}

/// The manifest of the folder `top` in fencepost's format (src/tree.rs), computed from the
/// files themselves: one `KIND MODE SIZE SHA256 PATH` line per entry (`d` a folder, size 0
/// and hash `-`; `f` a file; `l` a symlink, mode 0777, its target's size and SHA-256),
/// the path relative to the tree (`.` for the top folder; `%`, control bytes and DEL as
/// `%XX`), sorted by path component by component. The inner error names an entry that is
/// none of those.
fn manifest(top: &Path) -> Result<Result<Vec<u8>, String>, Error> {
    let mut lines = Vec::new();
    if let Err(what) = manifest_into(top, &mut Vec::new(), &mut lines)? {
        return Ok(Err(what));
    }
    lines.sort();
    Ok(Ok(lines.into_iter().flat_map(|(_, line)| line).collect()))
}

/// One line per path component list.
type Lines = Vec<(Vec<Vec<u8>>, Vec<u8>)>;

fn manifest_into(
    dir: &Path,
    path: &mut Vec<Vec<u8>>,
    out: &mut Lines,
) -> Result<Result<(), String>, Error> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let read =
        |p: &Path, e: std::io::Error| Error::new(format!("cannot read {}: {e}", p.display()));
    let line = |kind: char, mode: u32, size: u64, sha: &str, path: &[Vec<u8>]| {
        let mut line = format!("{kind} {mode:04o} {size} {sha} ").into_bytes();
        if path.is_empty() {
            line.push(b'.');
        } else {
            for (i, part) in path.iter().enumerate() {
                if i > 0 {
                    line.push(b'/');
                }
                for &b in part {
                    if b == b'%' || b < 0x20 || b == 0x7f {
                        line.extend(format!("%{b:02X}").bytes());
                    } else {
                        line.push(b);
                    }
                }
            }
        }
        line.push(b'\n');
        line
    };
    let meta = fs::symlink_metadata(dir).map_err(|e| read(dir, e))?;
    out.push((path.clone(), line('d', meta.mode() & 0o7777, 0, "-", path)));
    for entry in fs::read_dir(dir).map_err(|e| read(dir, e))? {
        let entry = entry.map_err(|e| read(dir, e))?;
        let at = entry.path();
        let meta = fs::symlink_metadata(&at).map_err(|e| read(&at, e))?;
        path.push(entry.file_name().as_bytes().to_vec());
        let kind = meta.file_type();
        if kind.is_dir() {
            if let Err(what) = manifest_into(&at, path, out)? {
                return Ok(Err(what));
            }
        } else if kind.is_symlink() {
            let target = fs::read_link(&at).map_err(|e| read(&at, e))?;
            let target = target.as_os_str().as_bytes();
            let sha = hex(&Sha256::digest(target));
            out.push((
                path.clone(),
                line('l', 0o777, target.len() as u64, &sha, path),
            ));
        } else if kind.is_file() {
            let bytes = fs::read(&at).map_err(|e| read(&at, e))?;
            let sha = hex(&Sha256::digest(&bytes));
            let mode = meta.mode() & 0o7777;
            out.push((
                path.clone(),
                line('f', mode, bytes.len() as u64, &sha, path),
            ));
        } else {
            let what = if kind.is_fifo() || kind.is_socket() {
                "a FIFO or socket"
            } else {
                "a device"
            };
            return Ok(Err(format!("{} in the tree is {what}", at.display())));
        }
        path.pop();
    }
    Ok(Ok(()))
}

/// The record's version from `status --json RES` (its epoch, seq and SHA-256, a tree's
/// hash, or that it is a removal), if it holds one.
fn record(status: &Value, resource: &str) -> Option<Version> {
    let row = status["resources"]
        .as_array()?
        .iter()
        .find(|r| r["resource"].as_str() == Some(resource))?;
    let sink = &row["sink"];
    let at = (
        sink["content_epoch"].as_u64()?,
        sink["seq"].as_u64().unwrap_or(0),
    );
    let body = if sink["removed"].as_bool() == Some(true) {
        Body::Removed
    } else {
        let sha = sink["tree_sha256"].as_str().or(sink["sha256"].as_str())?;
        Body::Bytes(sha.to_string())
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

    /// Unmounts it. A mount found busy (another program of this machine looking into it
    /// for a moment: every process of the replay's own has ended) is tried again, for up
    /// to ten seconds.
    fn unmount(mut self) -> Result<(), Error> {
        self.done = true;
        let mut tries = 0;
        loop {
            let out = Command::new(tool("umount")?)
                .arg(self.mnt)
                .output()
                .map_err(|e| Error::new(format!("cannot run umount: {e}")))?;
            if out.status.success() {
                return Ok(());
            }
            let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
            tries += 1;
            if !said.contains("busy") || tries == 100 {
                return Err(Error::new(format!(
                    "cannot unmount {}: {said}",
                    self.mnt.display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
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
    fn a_tree_is_judged_on_its_own_marks() {
        let mut j = judge(&[
            "fp:setup",
            "fp:try:1:aaaa",
            "fp:ack:1:aaaa",
            "fp:tree:try:1:0:bbbb",
        ]);
        // The document's acknowledgement says nothing of the tree.
        assert_eq!(j.judge_tree(None, None), Ok(Kept::Nothing));
        assert!(!j.no_tree_tried());
        // A first publish not acknowledged yet: none, or the whole tree it tried.
        assert_eq!(
            j.judge_tree(versioned(1, 0, B), Some(B.into())),
            Ok(Kept::Document)
        );
        // A tree that is not the one recorded (a mix of two, or a part of one) fails.
        let err = j
            .judge_tree(versioned(1, 0, B), Some(C.into()))
            .expect_err("mixed");
        assert!(err.contains("the tree's hash"), "{err}");
        let err = j.judge_tree(None, Some(B.into())).expect_err("unrecorded");
        assert!(err.contains("a tree exists"), "{err}");
        j.mark("fp:tree:ack:1:0:bbbb").expect("ack");
        j.mark("fp:tree:try:2:0:cccc").expect("try");
        assert_eq!(
            j.judge_tree(versioned(2, 0, C), Some(C.into())),
            Ok(Kept::Document)
        );
        let err = j.judge_tree(None, None).expect_err("lost");
        assert!(err.contains("epoch 1 was acknowledged"), "{err}");
        // Acknowledged versions grow per resource: the tree's epoch 1 after the
        // document's epoch 1.
        assert_eq!(j.acks, 2);
        assert!(j.mark("fp:tree:ack:1:0:bbbb").is_err());
        assert!(j.mark("fp:tree:nonsense").is_err());
    }

    /// A tree with every kind of entry and names that need escaping, whose hash fencepost
    /// recorded when it published it (`write --tree --allow-symlinks`): the manifest
    /// computed here is fencepost's.
    #[test]
    fn the_manifest_computed_here_is_fencepost_s() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let top = dir.path().join("t");
        fs::create_dir_all(top.join("sub/empty")).expect("mkdir");
        fs::write(top.join("a"), "x\n").expect("write");
        fs::write(top.join("sub/c"), "").expect("write");
        fs::write(top.join("50%"), "y").expect("write");
        fs::write(top.join("new\nline"), "z").expect("write");
        std::os::unix::fs::symlink("../a", top.join("sub/link")).expect("symlink");
        for (path, mode) in [
            ("sub/c", 0o600),
            ("sub", 0o750),
            ("sub/empty", 0o755),
            ("", 0o755),
            ("a", 0o644),
            ("50%", 0o644),
            ("new\nline", 0o644),
        ] {
            fs::set_permissions(top.join(path), fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let manifest = manifest(&top).expect("read").expect("a tree");
        let text = String::from_utf8(manifest.clone()).expect("utf-8");
        assert!(text.starts_with("d 0755 0 - .\n"), "{text}");
        assert!(
            text.contains(" 50%25\n") && text.contains(" new%0Aline\n"),
            "{text}"
        );
        assert!(text.contains("\nl 0777 4 "), "{text}");
        assert_eq!(
            hex(&Sha256::digest(&manifest)),
            "a7d981506c70fd02269daf0e99fb2e58472af8f664f94ccb5e7beb429b065ed8",
            "{text}"
        );
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
