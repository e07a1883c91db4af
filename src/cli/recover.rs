//! `fencepost recover`: run the crash recovery of every resource (or one) and report what
//! it did; also rebinds a moved root. The engine is `upkeep::recover`.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;

use super::Report;
use super::durations::{Zero, parse_duration};
use fencepost::clock::ClockKind;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Outcome, RecoverLine, Recovered};
use fencepost::session::Ctx;
use fencepost::sink::Recovery;
use fencepost::text::count;

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
    #[arg(
        long,
        default_value = "1h",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub grace: String,
}

pub(crate) fn run(ctx: &Ctx, args: &RecoverArgs) -> Result<Report> {
    // Only a shared store keeps contents to collect: a local root never reads --grace.
    let grace = match &ctx.remote {
        Some(_) => {
            let ms = parse_duration(&args.grace, ClockKind::Wall, "--grace", Zero::Allowed)?;
            Duration::from_millis(ms.unsigned_abs())
        }
        None => Duration::ZERO,
    };
    let done = fencepost::upkeep::recover(ctx, args.resource.as_deref(), args.root_moved, grace)?;
    let plain = plain(ctx, args, &done);
    let failed: Vec<(&str, i32)> = done
        .resources
        .iter()
        .filter_map(|line| match line {
            RecoverLine::Failed { error, code, .. } => Some((error.as_str(), *code)),
            _ => None,
        })
        .collect();
    if let Some(&(first, code)) = failed.first() {
        // The others were recovered; say what was and was not, and fail with the first
        // failure's exit code.
        let recovered = done
            .resources
            .iter()
            .filter(|line| !matches!(line, RecoverLine::RolledForward { .. }))
            .count();
        return Err(Error::Partial {
            code,
            message: format!(
                "{} of {} not recovered; first: {first}",
                failed.len(),
                count(recovered, "resource", "resources"),
            ),
            report: plain,
            done: Box::new(Outcome::Recovered(done)),
        });
    }
    Ok(Report::new(plain, Outcome::Recovered(done)))
}

/// The plain answer: one line for each thing done or not done, else `nothing to recover`.
fn plain(ctx: &Ctx, args: &RecoverArgs, done: &Recovered) -> String {
    let mut lines = Vec::new();
    if let (Some(removed), Some(remote)) = (done.blobs_removed, &ctx.remote) {
        lines.push(format!(
            "{} removed from {}",
            count(removed, "orphan blob", "orphan blobs"),
            remote.url.shown
        ));
    }
    for line in &done.resources {
        if let RecoverLine::RolledForward {
            resource, epoch, ..
        } = line
        {
            lines.push(format!(
                "{resource}: rolled forward a crashed apply of epoch {epoch} (the store's committed version kept)"
            ));
        }
    }
    if done.downloads_removed > 0 {
        lines.push(format!(
            "{} removed",
            count(
                done.downloads_removed,
                "unfinished download",
                "unfinished downloads"
            )
        ));
    }
    if args.root_moved {
        lines.push(format!("state file now belongs to {}", ctx.root.display()));
    }
    for line in &done.resources {
        match line {
            RecoverLine::Done {
                resource,
                action,
                temps_removed,
                recovery,
            } if *recovery != Recovery::Nothing || *temps_removed > 0 => {
                lines.push(format!(
                    "{resource}: {action}, {} removed",
                    count(*temps_removed, "temp file", "temp files")
                ));
            }
            RecoverLine::Failed {
                resource, error, ..
            } => lines.push(format!(
                "{}: not recovered: {error}",
                fencepost::text::shown(&fencepost::text::display_name(resource))
            )),
            _ => {}
        }
    }
    if lines.is_empty() {
        "nothing to recover".to_string()
    } else {
        lines.join("\n")
    }
}
