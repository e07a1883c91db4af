//! `fencepost recover`: run the crash recovery of `recovery.rs` on every resource (or
//! one) and report what it did; also rebinds a moved root.

use std::ffi::OsString;

use clap::Args;

use super::{Ctx, Report};
use crate::error::{Error, Result};
use crate::outcome::{Outcome, RecoverLine, Recovered};
use crate::recovery::{self, Done};
use crate::sink::Recovery;
use crate::store::Store;

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
pub(crate) struct RecoverArgs {
    /// Only this resource (default: every resource in the state file).
    pub resource: Option<OsString>,

    /// The publish root moved (or was renamed) with its documents: record --root as
    /// the state file's root. A state file refuses every other root.
    #[arg(long)]
    pub root_moved: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &RecoverArgs) -> Result<Report> {
    // Bad input changes nothing, not even the root's record.
    let only = ctx.resource_opt(args.resource.as_deref())?;
    // No state file: no write was ever made here to finish or undo, and the likely cause
    // is a wrong root or --db, which must not read as success. Never create one.
    let Some(mut store) = crate::store::open(&ctx.db, ctx.busy, false)? else {
        return Err(ctx.no_state_file("nothing to recover"));
    };
    let mut lines = Vec::new();
    let pin = ctx.root_pin();
    if args.root_moved {
        let tx = store.immediate()?;
        tx.bind_clock(ctx.clock.kind())?;
        ctx.rebind_root(&*tx, &pin)?;
        tx.commit()?;
        lines.push(format!("state file now belongs to {}", ctx.root.display()));
    }
    // Another root's state file: say so once, not once per resource.
    ctx.check_root(&*store.snapshot()?)?;
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
        match recover_one(ctx, &mut *store, name, &pin) {
            Ok(Done { action, temps }) => {
                let what = recovery::describe(action);
                if action != Recovery::Nothing || temps > 0 {
                    lines.push(format!("{name}: {what}, {temps} temp file(s) removed"));
                }
                actions.push(RecoverLine::Done {
                    resource: name.clone(),
                    action: what,
                    temps_removed: temps,
                });
            }
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
            }
        }
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
            done: Recovered { resources: actions },
        });
    }
    let plain = if lines.is_empty() {
        "nothing to recover".to_string()
    } else {
        lines.join("\n")
    };
    Ok(Report::new(
        plain,
        Outcome::Recovered(Recovered { resources: actions }),
    ))
}

/// Recovers the resource stored as `name` in a transaction of its own, binding the
/// state file to this root (`pin`) and clock.
fn recover_one(ctx: &Ctx, store: &mut dyn Store, name: &str, pin: &[u8]) -> Result<Done> {
    let resource = ctx.stored(name)?;
    let tx = store.immediate()?;
    ctx.bind(&*tx, pin)?;
    let done = ctx.recover(&*tx, &resource)?;
    tx.commit()?;
    Ok(done)
}
