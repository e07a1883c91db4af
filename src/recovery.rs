//! Crash recovery of a document: the layer every state change runs first, under the
//! state store's write lock, and that `status` and `verify` consult without acting.
//!
//! A write that died between its rename and its COMMIT leaves the new bytes in place and
//! the old record. Recovery undoes exactly that case (on a mirror root it keeps the
//! bytes instead: an apply is of a version the store committed) and nothing else: the rule is
//! `sink::recovery` (pure), the file operations are `atomic.rs`'s, and this module joins
//! them for one document: find the link sets writers left, decide each, apply the
//! decisions, sweep dead writers' temp files.

use std::path::Path;

use crate::atomic::{self, LinkSet};
use crate::error::Result;
use crate::failpoints::failpoint;
use crate::resource::{DocPath, Resource, locate};
use crate::sink::{Recorded, Recovery, recovery};

/// What recovery did for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub action: Recovery,
    /// Temp files of dead writers removed.
    pub temps: usize,
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
) -> Result<Done> {
    let Some(doc) = locate(root, resource, false)? else {
        return Ok(Done {
            action: Recovery::Nothing,
            temps: 0,
        });
    };
    let sets = atomic::link_sets(&doc)?;
    let action = if sets.is_empty() {
        Recovery::Nothing
    } else {
        let recorded = recorded()?;
        failpoint!("recover.before_apply");
        let mut plan = Vec::new();
        for set in sets {
            let action = decide(&doc, recorded, &set)?;
            plan.push((set, action));
        }
        let rollback = plan.iter().any(|(_, a)| is_rollback(*a));
        if rollback && mirror()? {
            for (_, action) in &mut plan {
                *action = crate::sink::on_mirror(*action);
            }
        }
        apply_all(&doc, plan)?
    };
    let temps = atomic::remove_abandoned_temps(&doc)?;
    Ok(Done { action, temps })
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
