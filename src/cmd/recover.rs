//! `fencepost recover`, and the crash recovery every state change runs first.
//!
//! A write that died between its rename and its COMMIT leaves the new bytes in place
//! and the old record. Recovery (under the state file's write lock) undoes exactly that
//! case and nothing else; the rule is `sink::recovery`.

use std::ffi::OsString;

use clap::Args;

use super::{Ctx, Report};
use crate::atomic::{self, LinkSet};
use crate::error::{Error, Result};
use crate::outcome::{Outcome, RecoverLine, Recovered as RecoveredAll};
use crate::resource::{DocPath, Resource, locate};
use crate::sink::{FileId, Recovery, recovery};
use crate::store::{Store, Txn};

/// Finish or undo writes that crashed, and remove temp files of dead writers.
///
/// Every command that changes a resource already does this for that resource first;
/// run `recover` after a crash to tidy all resources at once (e.g. from a boot script).
/// Temp files of writers that are still running (or paused) are left alone. A resource
/// that cannot be recovered (its stored name no longer passes the name rules, its folder
/// is unreachable, ...) is listed with why, the others are still recovered, and the exit
/// code is that of the first failure. Exit 2 when there is no state file.
///
/// Example:
///   fencepost recover
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RecoverArgs {
    /// Only this resource (default: every resource in the state file).
    pub resource: Option<OsString>,

    /// The publish root moved (or was renamed) with its documents: record --root as
    /// the state file's root. A state file refuses every other root.
    #[arg(long)]
    pub root_moved: bool,
}

pub fn run(ctx: &Ctx, args: &RecoverArgs) -> Result<Report> {
    // Bad input changes nothing, not even the root's record.
    let only = ctx.resource_opt(args.resource.as_deref())?;
    // No state file: no write was ever made here to finish or undo, and the likely cause
    // is a wrong root or --db, which must not read as success. Never create one.
    let Some(mut store) = Store::open(&ctx.db, ctx.busy, false)? else {
        return Err(ctx.no_state_file("nothing to recover"));
    };
    let mut lines = Vec::new();
    let pin = ctx.root_pin();
    if args.root_moved {
        let tx = store.immediate()?;
        tx.bind_clock(ctx.clock.kind())?;
        ctx.rebind_root(&tx, &pin)?;
        tx.commit()?;
        lines.push(format!("state file now belongs to {}", ctx.root.display()));
    }
    // Another root's state file: say so once, not once per resource.
    ctx.check_root(&store.snapshot()?)?;
    let single = only.is_some();
    let names = match only {
        Some(resource) => vec![resource.to_string()],
        None => store.snapshot()?.resources()?,
    };
    let mut actions = Vec::new();
    let mut failed = Vec::new();
    for name in &names {
        // A name that no longer passes the rules, or one unreachable or broken resource,
        // must not stop the others from being tidied.
        let one = ctx.stored(name).and_then(|resource| {
            let tx = store.immediate()?;
            ctx.bind(&tx, &pin)?;
            let done = recover_in(&tx, &ctx.root, &resource)?;
            tx.commit()?;
            Ok(done)
        });
        let Recovered {
            action: done,
            temps,
        } = match one {
            Ok(done) => done,
            Err(e) => {
                lines.push(format!(
                    "{}: not recovered: {e}",
                    super::status::printable(name)
                ));
                actions.push(RecoverLine::Failed {
                    resource: name.clone(),
                    error: e.to_string(),
                });
                failed.push(e);
                continue;
            }
        };
        let what = describe(done);
        if done != Recovery::Nothing || temps > 0 {
            lines.push(format!("{name}: {what}, {temps} temp file(s) removed"));
        }
        actions.push(RecoverLine::Done {
            resource: name.clone(),
            action: what,
            temps_removed: temps,
        });
    }
    if single && let Some(e) = failed.pop() {
        return Err(e);
    }
    if let Some(first) = failed.first() {
        // The others were recovered; say what was and was not, and fail with the first
        // failure's exit code.
        return Err(Error::Partial {
            code: first.exit_code(),
            message: format!(
                "{} of {} resource(s) not recovered; first: {first}",
                failed.len(),
                names.len()
            ),
            report: lines.join("\n"),
            done: RecoveredAll { resources: actions },
        });
    }
    let plain = if lines.is_empty() {
        "nothing to recover".to_string()
    } else {
        lines.join("\n")
    };
    Ok(Report::new(
        plain,
        Outcome::Recovered(RecoveredAll { resources: actions }),
    ))
}

/// What recovery did for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub action: Recovery,
    /// Temp files of dead writers removed.
    pub temps: usize,
}

/// Recovers one resource inside the caller's IMMEDIATE transaction: undoes a crashed
/// write's rename (or drops the links of writes that committed or never renamed) and
/// removes temp files of dead writers.
pub fn recover_in(tx: &Txn<'_>, root: &std::path::Path, resource: &Resource) -> Result<Recovered> {
    let Some(doc) = locate(root, resource, false)? else {
        return Ok(Recovered {
            action: Recovery::Nothing,
            temps: 0,
        });
    };
    let sets = atomic::link_sets(&doc)?;
    let action = if sets.is_empty() {
        Recovery::Nothing
    } else {
        let recorded = tx
            .sink(resource)?
            .and_then(|r| r.content)
            .and_then(|c| c.file);
        crate::failpoints::failpoint!("recover.before_apply");
        let mut plan = Vec::new();
        for set in sets {
            let action = decide(&doc, recorded, &set)?;
            plan.push((set, action));
        }
        apply_all(&doc, plan)?
    };
    let temps = atomic::remove_abandoned_temps(&doc)?;
    Ok(Recovered { action, temps })
}

/// Undoes this writer's own uncommitted rename (its link set `own`) against the record as
/// it was before the write. Under the lock, after the write failed.
pub fn undo(doc: &DocPath, recorded: Option<FileId>, own: &LinkSet) -> Result<Recovery> {
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
pub fn pending(doc: &DocPath, recorded: Option<FileId>) -> Result<Pending> {
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
fn decide(doc: &DocPath, recorded: Option<FileId>, set: &LinkSet) -> Result<Recovery> {
    let action = recovery(recorded, atomic::leftovers(doc, set)?);
    if !matches!(action, Recovery::RestorePre | Recovery::RemoveDoc) {
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
            Recovery::DropLinks => atomic::drop_set(doc, set),
            Recovery::RestorePre => atomic::restore_pre(doc, set)?,
            Recovery::RemoveDoc => atomic::remove_uncommitted(doc, set)?,
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
        Recovery::RestorePre | Recovery::RemoveDoc => 2,
    }
}

fn describe(action: Recovery) -> &'static str {
    match action {
        Recovery::Nothing => "nothing to do",
        Recovery::DropLinks => "removed leftover recovery links",
        Recovery::RestorePre => "rolled back an uncommitted write (previous document restored)",
        Recovery::RemoveDoc => "rolled back an uncommitted first write (document removed)",
    }
}
