//! A power-loss test for fencepost: what a disk that loses its unflushed writes leaves
//! behind, checked at every point where it could have lost power.
//!
//! A killed process (or a killed VM) keeps every write the kernel already accepted, so
//! kill tests cannot show a missing `fsync`. Here a QEMU guest runs fencepost on ext4
//! over the kernel's `log-writes` device-mapper target, which logs each write in the order
//! it reached stable storage, with marks after every acknowledged write ([`guest`]). The
//! host then rebuilds the disk at every flush point of that log, mounts it through a
//! loop device (another device number than the guest's, as after a reboot), runs
//! `fencepost recover` and `verify`, and checks that no acknowledged write was lost
//! ([`replay`]).
//!
//! It needs root (loop mounts), `qemu-system-x86_64`, a static busybox, `dmsetup`,
//! `mke2fs`, and an unpacked Debian cloud kernel (`fetch-kernel.sh`). It is a tool of the
//! repository's tests, not part of fencepost.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod guest;
mod log;
mod lying;
mod replay;

pub use lying::{LyingReport, lying_disk};
pub use replay::Violation;

/// One run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The fencepost binary, built with the `failpoints` feature: the guest runs it, and
    /// the host runs it on every replayed state.
    pub fencepost: PathBuf,
    /// An unpacked `linux-image-*-cloud-amd64` package.
    pub kernel: PathBuf,
    /// Rounds of claim / write / complete the guest runs (ten kinds, in turn: seven of a
    /// document, three of a tree).
    pub rounds: u32,
    /// Check the state after every log entry, not only at flush points.
    pub every_entry: bool,
    /// A scratch folder: disk images, the initramfs, the guest's console.
    pub work: PathBuf,
    /// How long the guest may run.
    pub guest_timeout: Duration,
}

impl Config {
    /// A configuration with the defaults: twenty rounds (two of each kind), flush points
    /// only.
    pub fn new(fencepost: PathBuf, kernel: PathBuf, work: PathBuf) -> Config {
        Config {
            fencepost,
            kernel,
            rounds: 20,
            every_entry: false,
            work,
            guest_timeout: guest::DEFAULT_TIMEOUT,
        }
    }
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    pub rounds: u32,
    /// Entries in the guest's log.
    pub entries: u64,
    /// Entries that flush the disk's cache or are written through it (FUA).
    pub flush_points: u64,
    /// States mounted and judged (a flush point with nothing new since the last state
    /// judged is skipped).
    pub states_checked: u64,
    /// States in which `recover` had something to undo or tidy.
    pub recovered: u64,
    /// States in which `recover` undid a write (or a removal) that had not committed.
    pub rolled_back: u64,
    /// Of those, states in which it put back a document whose removal had not committed.
    pub removals_rolled_back: u64,
    /// Of those, states in which it undid a tree publish that had not committed.
    pub trees_rolled_back: u64,
    /// States whose record, once recovered, was a removal's tombstone.
    pub tombstones: u64,
    /// States whose tree's record, once recovered, named a tree (whole at its name).
    pub trees: u64,
    /// Acknowledgements the replay saw marked.
    pub acks: u64,
    /// Acknowledgements the guest counted (its last mark), if it finished.
    pub guest_acks: Option<u64>,
    pub violations: Vec<Violation>,
    pub guest_seconds: f64,
    pub replay_seconds: f64,
    /// The guest's console, for diagnosis.
    pub console: String,
}

impl Report {
    /// One line of figures.
    pub fn summary(&self) -> String {
        format!(
            "{} rounds, {} acknowledged versions, {} log entries, {} flush points, {} states \
             replayed and checked ({} needed recovery, {} of them a roll-back, {} of a \
             removal, {} of a tree publish; {} with a tombstone recorded, {} with a tree), {} \
             violations; guest {:.1} s, replay {:.1} s",
            self.rounds,
            self.acks,
            self.entries,
            self.flush_points,
            self.states_checked,
            self.recovered,
            self.rolled_back,
            self.removals_rolled_back,
            self.trees_rolled_back,
            self.tombstones,
            self.trees,
            self.violations.len(),
            self.guest_seconds,
            self.replay_seconds
        )
    }
}

/// Why a run could not be carried out (as opposed to a violation it found).
#[derive(Debug, Clone)]
pub struct Error(String);

impl Error {
    fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Records a guest and replays its log.
pub fn run(cfg: &Config) -> Result<Report, Error> {
    let recording = guest::record(cfg)?;
    let mut report = Report {
        rounds: cfg.rounds,
        guest_seconds: recording.seconds,
        console: recording.console,
        ..Report::default()
    };
    replay::replay(cfg, &recording.log, &mut report)?;
    Ok(report)
}

/// Replays a log recorded earlier (the `log.img` a kept work folder holds).
pub fn replay_only(cfg: &Config, log: &Path) -> Result<Report, Error> {
    let mut report = Report {
        rounds: cfg.rounds,
        ..Report::default()
    };
    replay::replay(cfg, log, &mut report)?;
    Ok(report)
}

/// What this machine lacks for a run, one reason a line; empty when it can run.
pub fn unavailable(cfg: &Config) -> Vec<String> {
    let mut why = Vec::new();
    match std::fs::metadata("/proc/self") {
        Ok(meta) if std::os::unix::fs::MetadataExt::uid(&meta) == 0 => {}
        _ => why.push("needs root (it loop-mounts disk images)".to_string()),
    }
    for (name, package) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("busybox", "busybox-static"),
        ("dmsetup", "dmsetup"),
        ("mke2fs", "e2fsprogs"),
        ("mount", "mount"),
        ("umount", "mount"),
        ("ldd", "libc-bin"),
        ("timeout", "coreutils"),
    ] {
        if tool(name).is_err() {
            why.push(format!(
                "{name} is missing (Debian: apt-get install {package})"
            ));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        why.push("no loop devices (/dev/loop-control)".to_string());
    }
    if let Err(e) = guest::Kernel::find(&cfg.kernel) {
        why.push(e.to_string());
    }
    why
}

/// A scratch folder for [`Config::work`], removed when dropped: in `/dev/shm` when there
/// is one, because the guest's and the replay's flushes are then no-ops on this machine
/// (they stand for a disk's flushes, not this disk's), else in the temp folder.
pub fn scratch() -> std::io::Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("fencepost-powerloss-");
    match builder.tempdir_in("/dev/shm") {
        Ok(dir) => Ok(dir),
        Err(_) => builder.tempdir(),
    }
}

/// True when nbdkit, which the lying-disk mode needs, is not installed.
pub fn unavailable_nbdkit() -> bool {
    tool("nbdkit").is_err()
}

/// The path of an installed program, searched in PATH and the usual system folders.
fn tool(name: &str) -> Result<PathBuf, Error> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::new(format!("{name} is not installed")))
}
