//! Crash recovery of a document: the layer every state change runs first, under the
//! state store's write lock, and that `status` and `verify` consult without acting.
//!
//! A write that died between its rename and its COMMIT leaves the new bytes in place and
//! the old record. Recovery undoes exactly that case (on a mirror root it keeps the
//! bytes instead: an apply is of a version the store committed) and nothing else: the rule is
//! `sink::recovery` (pure), the file operations are `atomic.rs`'s, and this module joins
//! them for one document: find the link sets writers left, decide each, apply the
//! decisions, sweep dead writers' temp files.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::atomic::{self, LinkSet};
use crate::error::Result;
use crate::failpoints::failpoint;
use crate::resource::{DocPath, Resource, locate};
use crate::sink::{Recorded, Recovery, TreeLeftovers, TreeRecovery, recovery, tree_recovery};

/// What recovery did for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub action: Recovery,
    /// Temp files of dead writers removed.
    pub temps: usize,
    /// What it did for a crashed tree publish, if one was found.
    pub tree: Option<TreeRecovery>,
}

/// How long recovery keeps a tree it takes away, on the state file's `clock`: 60 s (60
/// ticks on the logical clock), `write --tree`'s default `--keep-old`.
#[must_use]
pub fn keep_old(clock: crate::clock::ClockKind) -> i64 {
    match clock {
        crate::clock::ClockKind::Logical => 60,
        crate::clock::ClockKind::Wall => 60_000,
    }
}

/// Recovers one resource's document under the caller's write lock on the state store:
/// undoes a crashed write's rename (or drops the links of writes that committed or never
/// renamed) and removes temp files of dead writers. `recorded` reads the identity of the
/// file the sink's record names; it is asked only when a write left links.
/// `mirror` says whether the state file is a mirror root's; it is asked only when a
/// rollback is decided, which on a mirror becomes [`Recovery::KeepApplied`].
pub fn recover(
    root: &Path,
    resource: &Resource,
    recorded: impl FnOnce() -> Result<Option<Recorded>>,
    mirror: impl FnOnce() -> Result<bool>,
    (now, keep_old): (i64, i64),
) -> Result<Done> {
    let Some(doc) = locate(root, resource, false)? else {
        return Ok(Done {
            action: Recovery::Nothing,
            temps: 0,
            tree: None,
        });
    };
    // Each asked at most once, and only when something was found.
    let (mut recorded, mut mirror) = (Lazy::new(recorded), Lazy::new(mirror));
    // One listing of the folder, under the lock, for the links, the markers and the old
    // trees: what recovery's own steps rename or remove does not change what is due.
    let names = doc.folder.names()?;
    let sets = atomic::link_sets_in(&doc, &names);
    let action = if sets.is_empty() {
        Recovery::Nothing
    } else {
        let recorded = recorded.get()?;
        failpoint!("recover.before_apply");
        let mut plan = Vec::new();
        for set in sets {
            let action = decide(&doc, recorded, &set)?;
            plan.push((set, action));
        }
        let rollback = plan.iter().any(|(_, a)| is_rollback(*a));
        if rollback && mirror.get()? {
            for (_, action) in &mut plan {
                *action = crate::sink::on_mirror(*action);
            }
        }
        apply_all(&doc, plan)?
    };
    let mut tree = None;
    let mut writing = false;
    for marker in tree_markers_in(&doc, &names) {
        // A marker whose writer still runs is that writer's to clear: recovery runs under
        // the lock the writer held until its COMMIT, so it is between its COMMIT and its
        // clean-up, which keeps the old tree for the --keep-old it was asked for.
        if tree_writer_alive(&doc, &marker) {
            writing = true;
            continue;
        }
        let mut action = decide_tree(&doc, recorded.get()?, &marker)?;
        if matches!(action, TreeRecovery::SwapBack | TreeRecovery::RemoveNew) && mirror.get()? {
            // A mirror applies only versions its store committed: rolled forward.
            action = TreeRecovery::Retire;
        }
        apply_tree(&doc, &marker, action, now.saturating_add(keep_old))?;
        tree = Some(action);
    }
    remove_expired_in(&doc, &names, now)?;
    // Meanwhile the folder at that writer's staged name is the tree it replaced, not a
    // dead writer's staged tree: the sweep waits for a recovery with no writer running.
    let temps = if writing {
        0
    } else {
        atomic::remove_abandoned_temps(&doc)?
    };
    Ok(Done {
        action,
        temps,
        tree,
    })
}

/// A value computed by `compute` the first time it is asked for.
struct Lazy<T, F> {
    compute: Option<F>,
    value: Option<T>,
}

impl<T: Copy, F: FnOnce() -> Result<T>> Lazy<T, F> {
    fn new(compute: F) -> Self {
        Lazy {
            compute: Some(compute),
            value: None,
        }
    }

    fn get(&mut self) -> Result<T> {
        if let Some(value) = self.value {
            return Ok(value);
        }
        let compute = self
            .compute
            .take()
            .ok_or(crate::error::Error::Internal("a lazy value failed before"))?;
        let value = compute()?;
        self.value = Some(value);
        Ok(value)
    }
}

/// A tree publish's marker, as found: its name, the staged folder's inode, the staged
/// name it points at, and the start of the staged tree's hash.
#[derive(Debug, Clone)]
pub struct TreeMarker {
    name: OsString,
    staged: u64,
    staged_name: OsString,
    sha_prefix: String,
}

/// The markers of tree publishes beside the document (`.<name>.fencepost-tree-<T>`).
fn tree_markers(doc: &DocPath) -> Result<Vec<TreeMarker>> {
    Ok(tree_markers_in(doc, &doc.folder.names()?))
}

/// [`tree_markers`] among `names`, the folder's names as listed.
fn tree_markers_in(doc: &DocPath, names: &[OsString]) -> Vec<TreeMarker> {
    let prefix = doc.sibling_name("tree-");
    let mut found = Vec::new();
    for name in names {
        let Some(token) = name.as_bytes().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let Some(staged) = std::str::from_utf8(token).ok().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let Ok(target) = doc.folder.read_link(name) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        let (random, sha_prefix) = target.split_once(':').unwrap_or((&target, ""));
        let mut staged_name = doc.sibling_name(atomic::TEMP);
        staged_name.push(random);
        found.push(TreeMarker {
            name: name.clone(),
            staged,
            staged_name,
            sha_prefix: sha_prefix.to_string(),
        });
    }
    found
}

/// Whether a tree publish's marker stands beside the document (one that crashed, or one
/// in progress): a resource with no record yet is then a tree being published.
pub fn tree_marked(doc: &DocPath) -> Result<bool> {
    Ok(!tree_markers(doc)?.is_empty())
}

/// What recovery would do for the tree publishes marked beside the document, if any (see
/// [`Pending`]), in the terms of a document's ([`as_document`]). A publish whose writer
/// still holds the staged folder's lock (at the resource's name after the swap, at the
/// staged name before) is in progress, not a crash.
pub fn pending_tree(doc: &DocPath, recorded: Option<Recorded>) -> Result<Option<Pending>> {
    let markers = tree_markers(doc)?;
    if markers.is_empty() {
        return Ok(None);
    }
    let mut found = Pending {
        action: Recovery::Nothing,
        in_progress: false,
    };
    for marker in markers {
        if tree_writer_alive(doc, &marker) {
            found.in_progress = true;
            continue;
        }
        let action = as_document(decide_tree(doc, recorded, &marker)?);
        if weight(action) > weight(found.action) {
            found.action = action;
        }
    }
    Ok(Some(found))
}

/// A tree recovery in the terms of a document's: undoing a swap (or a first publish) is a
/// rollback, as putting a write's pre-image back (or removing a first document) is;
/// retiring a committed publish's old tree or dropping a tree that never swapped in only
/// tidies, as dropping a finished write's links does.
#[must_use]
pub fn as_document(action: TreeRecovery) -> Recovery {
    match action {
        TreeRecovery::SwapBack => Recovery::RestorePre,
        TreeRecovery::RemoveNew => Recovery::RemoveDoc,
        TreeRecovery::Retire | TreeRecovery::DropStaged => Recovery::DropLinks,
    }
}

/// Whether the writer of a tree publish still runs: it holds its staged folder's lock
/// (the folder is at the resource's name after the swap, at the staged name before).
fn tree_writer_alive(doc: &DocPath, marker: &TreeMarker) -> bool {
    [&doc.name, &marker.staged_name]
        .into_iter()
        .any(|name| match doc.folder.child(name) {
            Ok(crate::folder::Child::Folder(dir)) => {
                dir.id().is_ok_and(|(_, ino)| ino == marker.staged)
                    && matches!(
                        rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockShared),
                        Err(rustix::io::Errno::WOULDBLOCK)
                    )
            }
            _ => false,
        })
}

/// The rule of `sink::tree_recovery` for one marker, plus one check on disk: a tree to
/// be rolled back that no longer holds the staged tree was edited by hand since the
/// crash; it is kept (only the marker goes), for `verify` to report.
fn decide_tree(
    doc: &DocPath,
    recorded: Option<Recorded>,
    marker: &TreeMarker,
) -> Result<TreeRecovery> {
    let folder_ino = |name: &OsString| -> Result<Option<u64>> {
        Ok(doc
            .folder
            .stat(name)?
            .filter(|e| e.kind == crate::folder::Kind::Folder)
            .map(|e| e.ino))
    };
    let found = TreeLeftovers {
        staged: marker.staged,
        current: folder_ino(&doc.name)?,
        other: folder_ino(&marker.staged_name)?.is_some(),
    };
    let action = tree_recovery(recorded, found);
    if matches!(action, TreeRecovery::SwapBack | TreeRecovery::RemoveNew)
        && let crate::folder::Child::Folder(dir) = doc.folder.child(&doc.name)?
        && !crate::tree::read_manifest(&dir)?
            .sha256()
            .starts_with(&marker.sha_prefix)
    {
        return Ok(TreeRecovery::Retire);
    }
    Ok(action)
}

/// Carries out a tree recovery for `marker`, then removes the marker. A tree it takes
/// away (the old one of a committed publish, an uncommitted one swapped back or taken off
/// the resource's name, a staged one) is retired, never removed at once: a reader may
/// have opened it at the resource's name and be walking it (see `tests/model_tree.rs`).
/// `deadline`: until when retired trees are kept.
fn apply_tree(
    doc: &DocPath,
    marker: &TreeMarker,
    action: TreeRecovery,
    deadline: i64,
) -> Result<()> {
    let folder = &doc.folder;
    let retire = |name: &OsString| -> Result<()> {
        if folder.stat(name)?.is_some() {
            crate::tree::retire(doc, name, marker.staged, deadline)?;
        }
        Ok(())
    };
    match action {
        TreeRecovery::Retire => retire(&marker.staged_name)?,
        TreeRecovery::SwapBack => {
            crate::tree::exchange(folder, &marker.staged_name, &doc.name)?;
            folder.sync()?;
            retire(&marker.staged_name)?;
        }
        TreeRecovery::RemoveNew => {
            retire(&doc.name)?;
        }
        TreeRecovery::DropStaged => retire(&marker.staged_name)?,
    }
    if action != TreeRecovery::Retire {
        // The undoing is durable before the marker that calls for it goes: a filesystem
        // that keeps any subset of the changes since the last fsync could otherwise keep
        // the marker's removal and lose the undoing.
        folder.sync()?;
    }
    folder.remove_if_present(&marker.name)?;
    Ok(())
}

/// Undoes this writer's own uncommitted tree publish (its marker `marker`) against the
/// record as it was before it. Under the lock, after the publish failed.
pub fn undo_tree(
    doc: &DocPath,
    recorded: Option<Recorded>,
    marker: &OsString,
    deadline: i64,
) -> Result<()> {
    for found in tree_markers(doc)? {
        if &found.name == marker {
            let action = decide_tree(doc, recorded, &found)?;
            apply_tree(doc, &found, action, deadline)?;
        }
    }
    Ok(())
}

/// Removes the old trees beside the document whose deadline has passed
/// (`.<name>.fencepost-old-<token>-<deadline>`); returns how many.
pub fn remove_expired_trees(doc: &DocPath, now: i64) -> Result<usize> {
    remove_expired_in(doc, &doc.folder.names()?, now)
}

/// [`remove_expired_trees`] among `names`, the folder's names as listed.
fn remove_expired_in(doc: &DocPath, names: &[OsString], now: i64) -> Result<usize> {
    let prefix = doc.sibling_name("old-");
    let mut removed = 0;
    for name in names {
        let Some(rest) = name.as_bytes().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let deadline = std::str::from_utf8(rest)
            .ok()
            .and_then(|r| r.rsplit_once('-'))
            .and_then(|(_, d)| d.parse::<i64>().ok());
        if deadline.is_some_and(|d| now >= d) {
            crate::tree::remove_tree(&doc.folder, name)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Undoes this writer's own uncommitted rename (its link set `own`) against the record as
/// it was before the write. Under the lock, after the write failed.
pub fn undo(doc: &DocPath, recorded: Option<Recorded>, own: &LinkSet) -> Result<Recovery> {
    let action = decide(doc, recorded, own)?;
    apply_all(doc, vec![(own.clone(), action)])
}

/// What recovery would do for this document, without doing it (`status`, `verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// The most significant action for link sets whose writer is gone.
    pub action: Recovery,
    /// A writer is still running (or paused) between its links and its clean-up: a write
    /// in progress, not a crash.
    pub in_progress: bool,
}

/// What recovery would do for this document (see [`Pending`]).
pub fn pending(doc: &DocPath, recorded: Option<Recorded>) -> Result<Pending> {
    let mut found = Pending {
        action: Recovery::Nothing,
        in_progress: false,
    };
    for set in atomic::link_sets(doc)? {
        if atomic::writer_alive(doc, &set) {
            found.in_progress = true;
            continue;
        }
        let action = decide(doc, recorded, &set)?;
        if weight(action) > weight(found.action) {
            found.action = action;
        }
    }
    Ok(found)
}

/// The rule of `sink::recovery` for one link set, plus one check on disk: an
/// uncommitted document that was edited in place since the crash no longer holds the
/// staged bytes (its hash differs from the `-sum` link); it is someone's edit, kept and
/// reported as drifted.
fn decide(doc: &DocPath, recorded: Option<Recorded>, set: &LinkSet) -> Result<Recovery> {
    let action = recovery(recorded, atomic::leftovers(doc, set)?);
    if !matches!(action, Recovery::RestorePre | Recovery::RemoveDoc) {
        // A removal's rollback puts back the file it took away, which nobody can have
        // edited under its `-gone` name but by hand.
        return Ok(action);
    }
    let (sha256, _) = atomic::hash_document(doc)?;
    Ok(if atomic::still_staged(doc, set, &sha256) {
        action
    } else {
        Recovery::DropLinks
    })
}

/// Applies the actions decided for each link set (all decided against the document as
/// it was found): links are dropped first, then the one rollback, if any. Returns the
/// most significant action.
fn apply_all(doc: &DocPath, mut plan: Vec<(LinkSet, Recovery)>) -> Result<Recovery> {
    plan.sort_by_key(|(_, action)| weight(*action));
    let mut done = Recovery::Nothing;
    for (set, action) in &plan {
        match action {
            Recovery::Nothing => {}
            Recovery::DropLinks | Recovery::KeepApplied => atomic::drop_set(doc, set),
            Recovery::RestorePre => atomic::restore_pre(doc, set)?,
            Recovery::RemoveDoc => atomic::remove_uncommitted(doc, set)?,
            Recovery::RestoreRemoved => atomic::restore_removed(doc, set)?,
        }
        done = *action;
    }
    Ok(done)
}

/// How much an action changes: nothing < links dropped < a rollback.
fn weight(action: Recovery) -> u8 {
    match action {
        Recovery::Nothing => 0,
        Recovery::DropLinks => 1,
        Recovery::RestorePre
        | Recovery::RemoveDoc
        | Recovery::RestoreRemoved
        | Recovery::KeepApplied => 2,
    }
}

/// Whether an action rolls an uncommitted change back.
fn is_rollback(action: Recovery) -> bool {
    matches!(
        action,
        Recovery::RestorePre | Recovery::RemoveDoc | Recovery::RestoreRemoved
    )
}

/// What a tree recovery did, in words (`recover`'s report).
#[must_use]
pub fn describe_tree(action: TreeRecovery) -> &'static str {
    match action {
        TreeRecovery::Retire => {
            "finished a committed tree publish (its old tree kept until its deadline)"
        }
        TreeRecovery::SwapBack => {
            "rolled back an uncommitted tree publish (previous tree restored)"
        }
        TreeRecovery::RemoveNew => {
            "rolled back an uncommitted first tree publish (the tree taken off its name, kept until its deadline)"
        }
        TreeRecovery::DropStaged => {
            "undid a tree publish that never swapped in (its staged tree kept until its deadline)"
        }
    }
}

/// What an action did, in words (`recover`'s report).
#[must_use]
pub fn describe(action: Recovery) -> &'static str {
    match action {
        Recovery::Nothing => "nothing to do",
        Recovery::DropLinks => "removed leftover recovery links",
        Recovery::RestorePre => "rolled back an uncommitted write (previous document restored)",
        Recovery::RemoveDoc => "rolled back an uncommitted first write (document removed)",
        Recovery::RestoreRemoved => "rolled back an uncommitted removal (document restored)",
        Recovery::KeepApplied => {
            "rolled forward a crashed apply (the store's committed version kept; the next \
             `mirror` records it)"
        }
    }
}
