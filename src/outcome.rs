//! What the operations answer, as types: the `--json` contract in one place.
//!
//! An operation (a [`crate::Client`] call, or a command of the `fencepost` binary) returns
//! one of these values or a refusal carrying a [`RefusalDetail`]; the objects `--json`
//! prints are derived from them with serde, and nothing reads a field back out of JSON by
//! name. Every object also has `outcome`, `resource` and `epoch`: `outcome` is the
//! [`Outcome`] variant's name (or the refusal's or error's word), and the command line
//! gives `resource` and `epoch` as `null` to an answer that has none of its own. Objects
//! print with their keys sorted.

use serde::Serialize;

use crate::clock::ClockKind;
use crate::lease::Lease;
use crate::refusal::RefusalKind;
use crate::sink::Recovery;

/// A successful command's answer; `outcome` in its JSON is the variant's name.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Outcome {
    Claimed(Claimed),
    Renewed(Renewed),
    Completed(Completed),
    Released(Released),
    Written(Written),
    /// The same epoch wrote the same bytes before: the document was not rewritten.
    Replay(Written),
    /// `remove`: the document is gone, its fence kept (a tombstone).
    Removed(Removed),
    /// `remove` repeated: the same version removed the resource before; nothing changed.
    #[serde(rename = "replay")]
    RemoveReplay(Removed),
    Status(Status),
    Recovered(Recovered),
    Log(Log),
    Pruned(Pruned),
    /// `verify` found every resource consistent.
    Ok(Verified),
    Generated(Generated),
    /// `mirror`: what each pass found and applied.
    Mirrored(Mirrored),
    /// `cat`: the version whose bytes were printed.
    Printed(Printed),
    /// `store init` made the store's schema.
    Initialized(StoreSchema),
    /// `store init` found the store's schema made (and up to date).
    Ready(StoreSchema),
    /// `store init --print-grants`: the SQL that gives a role what it needs.
    Grants(Grants),
    /// `mirror --follow`: it stopped on a signal, its last apply finished.
    Stopped(Stopped),
    /// `init` made the publish root (or its state file), as `store init` makes a
    /// store's tables.
    #[serde(rename = "initialized")]
    RootInitialized(RootState),
    /// `init` found the publish root and its state file there already.
    #[serde(rename = "ready")]
    RootReady(RootState),
}

/// `init`: the publish root and its state file.
#[derive(Debug, Serialize)]
pub struct RootState {
    pub root: String,
    pub db: String,
}

/// `store init`: the store, and its schema version.
#[derive(Debug, Serialize)]
pub struct StoreSchema {
    /// The store's URL as shown (no password).
    pub store: String,
    /// How many of fencepost's schema versions the store has run.
    pub schema: usize,
}

/// `store init --print-grants`: the role, `writer` or `reader`, and the SQL.
#[derive(Debug, Serialize)]
pub struct Grants {
    pub role: String,
    pub access: &'static str,
    pub sql: String,
}

/// A lease as answers show it, its `state` as a person reads it at the time of asking
/// (`held`, `expired`, `released`, `completed`).
#[derive(Debug, Clone, Serialize)]
pub struct LeaseView {
    pub owner: String,
    pub epoch: i64,
    pub deadline: i64,
    pub state: &'static str,
    pub result: Option<String>,
}

impl LeaseView {
    /// `lease` as seen at `now`.
    #[must_use]
    pub fn at(lease: Option<&Lease>, now: i64) -> Option<LeaseView> {
        lease.map(|l| LeaseView {
            owner: l.owner.clone(),
            epoch: l.epoch,
            deadline: l.deadline,
            state: l.view(now),
            result: l.result.clone(),
        })
    }
}

/// `claim`: the new lease, and the one it replaced.
#[derive(Debug, Serialize)]
pub struct Claimed {
    pub resource: String,
    pub epoch: i64,
    pub owner: String,
    pub deadline: i64,
    /// The sink's fence was raised to this epoch with the claim (not `--lazy-fence`).
    pub fenced_at_sink: bool,
    pub previous: Option<LeaseView>,
    /// A retry by the lease's own owner, answered with the lease it holds (the key is
    /// there only then): nothing was changed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replay: bool,
}

/// `renew`: the new deadline.
#[derive(Debug, Serialize)]
pub struct Renewed {
    pub resource: String,
    pub epoch: i64,
    pub owner: String,
    pub deadline: i64,
}

/// `complete`, and `run` whose command exited 0 (then with its exit).
#[derive(Debug, Serialize)]
pub struct Completed {
    pub resource: String,
    pub epoch: i64,
    pub owner: String,
    pub result: Option<String>,
    #[serde(flatten)]
    pub exit: Option<Exit>,
    /// Already completed so, by this owner and epoch: a retry, nothing was changed (the
    /// key is there only then).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replay: bool,
}

/// `release`.
#[derive(Debug, Serialize)]
pub struct Released {
    pub resource: String,
    pub epoch: i64,
    pub owner: String,
    /// Already released by this owner and epoch: a retry, nothing was changed (the key
    /// is there only then).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replay: bool,
}

/// How `run` ended: the exit code and which side it came from (`command` or
/// `fencepost`).
#[derive(Debug, Clone, Serialize)]
pub struct Exit {
    pub exit_code: i32,
    pub exit_from: &'static str,
}

/// `run` whose command failed (it exits with the command's code).
#[derive(Debug, Serialize)]
pub struct RunFailed {
    pub resource: String,
    pub epoch: i64,
    pub owner: String,
    #[serde(flatten)]
    pub exit: Exit,
}

/// `write` accepted: `written`, or `replay`.
#[derive(Debug, Serialize)]
pub struct Written {
    pub resource: String,
    pub epoch: i64,
    /// The version's seq within the epoch (`--seq`; 0 without).
    pub seq: i64,
    /// `--owner`, or the owner `claim` issued the epoch to (null once that is forgotten).
    pub owner: Option<String>,
    pub sha256: String,
    pub size: u64,
    pub unfenced: bool,
    /// The fence before this write (null for a first write with no claim's fence).
    pub previous_fence: Option<i64>,
    /// A tree (`write --tree`): `sha256` is the tree hash (the key is there only then).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tree: bool,
    /// The same epoch had written these bytes: the document was not rewritten (`--json`
    /// says so by its `outcome`, `replay`).
    #[serde(skip)]
    pub replay: bool,
}

/// `remove` accepted: `removed`, or `replay` (its JSON has `"removed": true` either way).
#[derive(Debug, Serialize)]
pub struct Removed {
    pub resource: String,
    pub epoch: i64,
    /// The version's seq within the epoch (`--seq`; 0 without).
    pub seq: i64,
    /// `--owner`, or the owner `claim` issued the epoch to (null once that is forgotten).
    pub owner: Option<String>,
    /// The fence before this removal.
    pub previous_fence: Option<i64>,
    /// A document was there and was removed (false: a tombstone only, for a resource
    /// with no document).
    pub had_document: bool,
    /// Always true: tells a removal's replay from a write's.
    pub removed: bool,
    /// The same version had removed the resource already: nothing was changed (`--json`
    /// says so by its `outcome`, `replay`).
    #[serde(skip)]
    pub replay: bool,
}

/// `status`: one row per resource.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The resource asked about (null for all), and then the highest epoch claimed for
    /// it (null if never, or for all).
    pub resource: Option<String>,
    pub epoch: Option<i64>,
    /// The time of the answer, on the state file's clock.
    pub now: i64,
    pub resources: Vec<StatusRow>,
}

/// One resource in `status`: lease, sink record and the document on disk side by side.
#[derive(Debug, Serialize)]
pub struct StatusRow {
    /// The name as the state file stores it.
    pub resource: String,
    /// The lease, as seen now (null if never claimed).
    pub lease: Option<LeaseView>,
    /// The sink's record (null if nothing was written or fenced).
    pub sink: Option<SinkView>,
    /// The document on disk.
    pub document: DocumentView,
    /// On a mirror root, the epochs on both sides (the keys are there only then).
    #[serde(flatten)]
    pub mirror: Option<MirrorEpochs>,
}

/// A mirror root's document in `status`: the epoch the mirror holds and the one the store
/// publishes (each null when there is none).
#[derive(Debug, Serialize)]
pub struct MirrorEpochs {
    pub mirror_epoch: Option<i64>,
    pub store_epoch: Option<i64>,
}

/// A sink record in `status`.
#[derive(Debug, Serialize)]
pub struct SinkView {
    pub fence: i64,
    pub content_epoch: Option<i64>,
    /// The recorded version's seq within its epoch (0 without `--seq`; null with no
    /// content).
    pub seq: Option<i64>,
    /// The recorded version is a removal (a tombstone).
    pub removed: bool,
    /// A tree's hash (`write --tree`; `sha256` is then null): SHA-256 over its manifest
    /// (the sorted paths, kinds, modes and content hashes). The key is there only for a
    /// tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree_sha256: Option<String>,
    pub sha256: Option<String>,
    pub size: Option<u64>,
    pub written_at: Option<i64>,
    /// The store publishes the content as written with `--unfenced` (the key is there
    /// only then): no fence kept older epochs out.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unfenced: bool,
}

/// The document on disk in `status`, compared with the sink's record.
#[derive(Debug, Clone, Serialize)]
pub struct DocumentView {
    /// `matches`, `drifted`, `missing`, ... (the list is in `status --help`).
    pub state: &'static str,
    pub sha256: Option<String>,
    pub size: Option<u64>,
    /// Why the document could not be looked at (`invalid`, `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// `recover`: what it did for each resource (also the fields of a partial recovery).
#[derive(Debug, Serialize)]
pub struct Recovered {
    pub resources: Vec<RecoverLine>,
    /// With a shared store: the orphan blobs removed (contents uploaded by writes that
    /// never published them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blobs_removed: Option<usize>,
    /// With a mirror root: the unfinished downloads of `mirror` processes that are gone,
    /// removed (said in the plain report only).
    #[serde(skip)]
    pub downloads_removed: usize,
}

/// What `recover` did for one resource, or why it could not.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum RecoverLine {
    Done {
        resource: String,
        action: &'static str,
        temps_removed: usize,
        /// What recovery did, as the rules name it (`action` says it in words).
        #[serde(skip)]
        recovery: Recovery,
    },
    /// With a mirror root: a crashed apply of the store's version kept and recorded
    /// (`action` is `rolled forward`, `temps_removed` 0).
    RolledForward {
        resource: String,
        action: &'static str,
        temps_removed: usize,
        /// The epoch of the version rolled forward.
        #[serde(skip)]
        epoch: i64,
    },
    Failed {
        resource: String,
        error: String,
        /// The exit code of the failure (the command line exits with the first one's).
        #[serde(skip)]
        code: i32,
    },
}

/// `log`: the events, oldest first.
#[derive(Debug, Serialize)]
pub struct Log {
    pub events: Vec<LoggedEvent>,
    /// The resource asked about (null for all).
    pub resource: Option<String>,
    /// The state file's clock, which the events' times are on (for the command line's
    /// table: times show as UTC on the wall clock).
    #[serde(skip)]
    pub clock: ClockKind,
}

/// One event of `log`, and whether it was a refusal.
#[derive(Debug, Serialize)]
pub struct LoggedEvent {
    #[serde(flatten)]
    pub event: crate::audit::Event,
    pub refused: bool,
}

/// `log --prune`.
#[derive(Debug, Serialize)]
pub struct Pruned {
    pub dropped: usize,
    pub keep: i64,
}

/// One inconsistency `verify` found.
#[derive(Debug, Serialize)]
pub struct Problem {
    pub resource: String,
    /// `drifted`, `missing`, `interrupted`, ... (the list is in `verify --help`).
    pub problem: &'static str,
    pub message: String,
    /// `behind` only: how far, and since when.
    #[serde(flatten)]
    pub behind: Option<Behind>,
}

/// How far a mirror is behind its store: the epoch it holds (null: none yet), the one the
/// store publishes, and since when (`since`, on the store's clock: when the store
/// published the first version the mirror does not hold).
#[derive(Debug, Clone, Serialize)]
pub struct Behind {
    pub mirror_epoch: Option<i64>,
    pub store_epoch: i64,
    pub since: i64,
}

/// `verify`: how many resources were checked and what was found (also the fields of its
/// `diverged` error).
#[derive(Debug, Serialize)]
pub struct Verified {
    /// The resource asked about (null for all).
    pub resource: Option<String>,
    /// How many resources were checked.
    pub checked: usize,
    /// What was found, one entry per problem (none when all is well).
    pub problems: Vec<Problem>,
    /// With `--max-lag`, the mirror's `behind` found within it: noted, not problems
    /// (the key is there only then).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lagging: Vec<Problem>,
}

/// `man --dir`: where the pages went (completions and a man page on stdout print the
/// text itself, never JSON).
#[derive(Debug, Serialize)]
pub struct Generated {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// `mirror`: the mirror root, its store, and each published resource it looked at.
#[derive(Debug, Serialize)]
pub struct Mirrored {
    pub root: String,
    pub store: String,
    pub applied: Vec<Applied>,
}

/// `mirror --follow` stopped: the root and store it followed, the signal that stopped it
/// (`SIGTERM`), and when (`time`, wall-clock milliseconds).
#[derive(Debug, Serialize)]
pub struct Stopped {
    pub root: String,
    pub store: String,
    pub signal: String,
    pub time: i64,
}

/// One resource of a `mirror` pass: `applied` (the mirror now holds this version),
/// `current` (it held it already), `stale` (it holds a newer epoch: this one came late),
/// `failed` (it could not be applied on this host: `error` says why; the others were),
/// `ahead` (it holds a version the store does not know: the store lost history; `error`
/// says what it holds, and whether the store could be told).
#[derive(Debug, Serialize)]
pub struct Applied {
    pub resource: String,
    pub epoch: i64,
    /// The version's seq within its epoch (0 without `--seq`).
    pub seq: i64,
    /// The version is a removal: applied, the mirror's copy is gone.
    pub removed: bool,
    pub sha256: String,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The exit code of the failure (`failed` only).
    #[serde(skip)]
    pub code: i32,
}

/// `cat`: the version printed.
#[derive(Debug, Serialize)]
pub struct Printed {
    pub resource: String,
    /// A file of a tree (`cat TREE/PATH`): its path in the tree (the key is there only
    /// then; `sha256` and `size` are the file's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub epoch: i64,
    /// The version's seq within its epoch (0 without `--seq`).
    pub seq: i64,
    pub sha256: String,
    pub size: u64,
}

/// What a refusal says beyond its resource, epoch and owner; its kind follows from it.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum RefusalDetail {
    /// claim: someone else holds a live lease (`waited_ms`: how long `--wait` waited).
    Held {
        holder: String,
        holder_epoch: i64,
        deadline: i64,
        waited_ms: Option<u64>,
        lease: Option<LeaseView>,
    },
    /// renew, complete, release: why the lease is not the caller's, and what it is now.
    Lost {
        reason: &'static str,
        lease: Option<LeaseView>,
    },
    /// run: the lease was lost while the command ran. `lease`: the lease of whoever took
    /// it over (another epoch), when run could read it at the loss.
    LostWhileRunning { lease: Option<LeaseView> },
    /// write, remove: a newer version was accepted: a newer epoch (`fence`), or a higher
    /// seq of this one (`fence` is this epoch); `seq` is the seq the sink holds of epoch
    /// `fence` (0 if none).
    Stale { fence: i64, seq: i64 },
    /// write, remove: this version (epoch `fence`, `seq`) already published another body:
    /// other bytes (`recorded_sha256`), or a removal (`recorded_sha256` null).
    Conflict {
        fence: i64,
        seq: i64,
        recorded_sha256: Option<String>,
    },
    /// write, remove: `claim` never issued this epoch (`issued`: the highest it did;
    /// `seq`: the request's).
    Unissued { issued: Option<i64>, seq: i64 },
    /// write --owner, remove --owner: the epoch was issued to another owner (`seq`: the
    /// request's).
    IssuedToAnother { issued_to: String, seq: i64 },
}

impl RefusalDetail {
    /// The kind of refusal, which sets the exit code and the outcome word.
    #[must_use]
    pub fn kind(&self) -> RefusalKind {
        match self {
            RefusalDetail::Held { .. } => RefusalKind::Held,
            RefusalDetail::Lost { .. } | RefusalDetail::LostWhileRunning { .. } => {
                RefusalKind::Lost
            }
            RefusalDetail::Stale { .. } => RefusalKind::Stale,
            RefusalDetail::Conflict { .. } => RefusalKind::Conflict,
            RefusalDetail::Unissued { .. } | RefusalDetail::IssuedToAnother { .. } => {
                RefusalKind::Unissued
            }
        }
    }

    /// Who or what refused the request, for the audit log: the holder (or the owner the
    /// epoch was issued to, or the lease's owner), and the fence (or the highest epoch
    /// issued, or the lease's epoch).
    #[must_use]
    pub fn previous(&self) -> (Option<&str>, Option<i64>) {
        match self {
            RefusalDetail::Held { holder, lease, .. } => {
                (Some(holder.as_str()), lease.as_ref().map(|l| l.epoch))
            }
            RefusalDetail::Lost { lease, .. } | RefusalDetail::LostWhileRunning { lease } => (
                lease.as_ref().map(|l| l.owner.as_str()),
                lease.as_ref().map(|l| l.epoch),
            ),
            RefusalDetail::Stale { fence, .. } | RefusalDetail::Conflict { fence, .. } => {
                (None, Some(*fence))
            }
            RefusalDetail::Unissued { issued, .. } => (None, *issued),
            RefusalDetail::IssuedToAnother { issued_to, .. } => (Some(issued_to.as_str()), None),
        }
    }
}
