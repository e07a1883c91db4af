//! `fencepost recover`: run the crash recovery of `recovery.rs` on every resource (or
//! one) and report what it did; also rebinds a moved root.

use std::ffi::OsString;

use clap::Args;

use super::Report;
use crate::error::{Error, Result};
use crate::outcome::{Outcome, RecoverLine, Recovered};
use crate::recovery::{self, Done};
use crate::session::Ctx;
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

    /// With --store: remove contents uploaded by writes that never published them once
    /// they are older than this (seconds or with units): a write still uploading is
    /// younger.
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub grace: String,
}

pub(crate) fn run(ctx: &Ctx, args: &RecoverArgs) -> Result<Report> {
    if let Some(remote) = &ctx.remote {
        return run_remote(ctx, remote, args);
    }
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
            done: Box::new(Outcome::Recovered(Recovered {
                resources: actions,
                blobs_removed: None,
            })),
        });
    }
    let plain = if lines.is_empty() {
        "nothing to recover".to_string()
    } else {
        lines.join("\n")
    };
    Ok(Report::new(
        plain,
        Outcome::Recovered(Recovered {
            resources: actions,
            blobs_removed: None,
        }),
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

/// `recover` with a shared store: removes orphan blobs older than `--grace`, then, with a
/// mirror root, recovers the mirror's documents as a local root's and removes downloads
/// its dead processes left.
fn run_remote(ctx: &Ctx, remote: &crate::session::Remote, args: &RecoverArgs) -> Result<Report> {
    let grace = crate::cmd::durations::parse_duration(
        &args.grace,
        crate::clock::ClockKind::Wall,
        "--grace",
        crate::cmd::durations::Zero::Allowed,
    )?;
    if args.root_moved {
        return Err(Error::usage(
            "--root-moved is for a local root's state file; a mirror root is bound to its store",
        ));
    }
    let only = ctx.resource_opt(args.resource.as_deref())?;
    let mut store = ctx.store()?;
    let removed = store
        .blobs()
        .ok_or(Error::Internal(
            "a shared store without a place for contents",
        ))?
        .collect(std::time::Duration::from_millis(grace.unsigned_abs()))?;
    let mut lines = vec![format!(
        "{removed} orphan blob(s) removed from {}",
        remote.url.shown
    )];
    let mut resources = Vec::new();
    if remote.mirror && ctx.db.exists() {
        // A crashed apply of the version the store publishes is rolled forward first
        // (kept and recorded): every version a mirror applies was committed in the store,
        // and a reader may have seen it.
        let local = crate::session::local(ctx);
        let published = {
            let tx = store.snapshot()?;
            match &only {
                Some(r) => tx.published(r.as_str())?.into_iter().collect(),
                None => tx.all_published()?,
            }
        };
        for version in &published {
            let Ok(resource) = local.stored(&version.resource) else {
                continue;
            };
            if let Some(epoch) = crate::mirror::roll_forward(&local, &resource, version)? {
                lines.push(format!(
                    "{}: rolled forward a crashed apply of epoch {epoch} (the store's committed version kept)",
                    version.resource
                ));
                resources.push(RecoverLine::Done {
                    resource: version.resource.clone(),
                    action: "rolled forward",
                    temps_removed: 0,
                });
            }
        }
    }
    drop(store);
    if remote.mirror && ctx.db.exists() {
        let stale = crate::mirror::remove_dead_downloads(ctx)?;
        if stale > 0 {
            lines.push(format!("{stale} unfinished download(s) removed"));
        }
        let local = crate::session::local(ctx);
        let local_args = RecoverArgs {
            resource: only.map(|r| r.to_string().into()),
            root_moved: false,
            grace: args.grace.clone(),
        };
        let report = run(&local, &local_args)?;
        if report.plain != "nothing to recover" {
            lines.push(report.plain);
        }
        if let Outcome::Recovered(done) = report.outcome {
            resources.extend(done.resources);
        }
    }
    Ok(Report::new(
        lines.join("\n"),
        Outcome::Recovered(Recovered {
            resources,
            blobs_removed: Some(removed),
        }),
    ))
}
