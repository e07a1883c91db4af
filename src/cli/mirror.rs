//! `fencepost mirror`: bring this host's mirror root up to the shared store.

use std::ffi::OsString;
use std::io::Write as _;

use clap::Args;

use super::Report;
use crate::cli::durations::{Zero, parse_duration};
use fencepost::clock::ClockKind;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Mirrored, Outcome};
use fencepost::session::Ctx;

/// Copy the documents the shared store (--store) publishes into this host's root.
///
/// Each version newer than the root holds is applied through the same fenced, atomic
/// write a local publish uses, under the epoch the store gave it: epochs only rise on
/// every host, so a version that arrives late or twice never replaces a newer one. The
/// root becomes a mirror with its first document and then takes no claim or write of its
/// own. Prints one line per document applied (or `up to date`).
///
/// With --follow it keeps running: it wakes on each publish (the store notifies), checks
/// everything every --rescan, and reconnects with back-off when the connection drops. Its
/// passes know a document they hold by inode and size; a plain `mirror` hashes each one
/// and repairs one edited in place. A document this host cannot hold (its path is a file
/// here, or reaches through a symlink) is listed as failed, and the others are copied;
/// so is a version whose bytes in the store no longer match their record (--follow
/// retries it with back-off). A document the mirror holds a newer version of than the
/// store publishes (the store lost history) is listed as ahead and left as it is (exit 9).
/// --follow started before the store's first claim waits for it.
///
/// Example:
///   fencepost mirror --store postgresql:///fencepost?host=/run/postgresql --root /srv/reports --follow
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct MirrorArgs {
    /// Only this document (a path under the root).
    #[arg(env = "FENCEPOST_RESOURCE")]
    pub resource: Option<OsString>,

    /// Keep running: apply each version as it is published.
    #[arg(short, long)]
    pub follow: bool,

    /// With --follow, the longest time between two full checks: seconds or with units.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub rescan: String,
}

pub(crate) fn run(ctx: &Ctx, args: &MirrorArgs, json: bool) -> Result<Report> {
    let Some(remote) = &ctx.remote else {
        return Err(Error::usage_hint(
            "mirror copies from a shared store: pass --store URL (FENCEPOST_STORE)",
            "without --store, the root's own state file is the authority: there is nothing to mirror",
        ));
    };
    if !remote.mirror {
        return Err(Error::usage_hint(
            "mirror needs a root to copy into",
            "pass --root DIR (FENCEPOST_ROOT), or run it inside a mirror root",
        ));
    }
    let rescan = parse_duration(&args.rescan, ClockKind::Wall, "--rescan", Zero::Refused)?;
    let only = args
        .resource
        .as_deref()
        .map(|raw| ctx.resource(raw))
        .transpose()?;
    if args.follow {
        if only.is_some() {
            return Err(Error::usage(
                "--follow mirrors every document: drop RESOURCE",
            ));
        }
        let rescan = std::time::Duration::from_millis(rescan.unsigned_abs());
        fencepost::mirror::follow(ctx, rescan, |pass| print_pass(pass, json))?;
        return Err(Error::Internal("mirror --follow stopped following"));
    }
    let mut store = ctx.shared_store("nothing was ever claimed here")?;
    let done = fencepost::mirror::sync(
        ctx,
        &mut *store,
        only.as_ref().map(|r| r.as_str()),
        fencepost::mirror::Look::Hash,
    )?;
    let plain = plain(&done);
    let failed: Vec<_> = done
        .applied
        .iter()
        .filter(|a| a.outcome == "failed")
        .collect();
    let ahead = done.applied.iter().filter(|a| a.outcome == "ahead").count();
    if let Some(first) = failed.first() {
        // The others were copied; say which were not, and exit with the first's code.
        return Err(Error::Partial {
            code: first.code,
            message: format!(
                "{} of {} document(s) not mirrored; first: {}: {}",
                failed.len(),
                done.applied.len(),
                first.resource,
                first.error.as_deref().unwrap_or("")
            ),
            report: plain,
            done: Box::new(Outcome::Mirrored(done)),
        });
    }
    if ahead > 0 {
        // Not an error of this host's: the store went back. Exit 9, as `verify` does.
        return Err(Error::Partial {
            code: 9,
            message: format!(
                "{ahead} of {} document(s) ahead of the store: it lost history the mirror holds",
                done.applied.len()
            ),
            report: plain,
            done: Box::new(Outcome::Mirrored(done)),
        });
    }
    Ok(Report::new(plain, Outcome::Mirrored(done)))
}

/// The plain answer: one line per document applied or found stale, else `up to date`.
fn plain(done: &Mirrored) -> String {
    let lines: Vec<String> = done
        .applied
        .iter()
        .filter(|a| a.outcome != "current")
        .map(|a| match &a.error {
            Some(why) => format!("{} {} (epoch {}): {why}", a.outcome, a.resource, a.epoch),
            None => format!("{} {} (epoch {})", a.outcome, a.resource, a.epoch),
        })
        .collect();
    if lines.is_empty() {
        format!("up to date ({} documents)", done.applied.len())
    } else {
        lines.join("\n")
    }
}

/// With --follow: each pass that applied something, as it happens (a JSON object per
/// line with --json, with the keys of a single pass's answer, `resource` and `epoch`
/// null as there).
fn print_pass(done: &Mirrored, json: bool) {
    if done.applied.iter().all(|a| a.outcome == "current") {
        return;
    }
    let text = if json {
        serde_json::json!({"outcome": "mirrored", "resource": null, "epoch": null,
                           "root": done.root, "store": done.store, "applied": done.applied})
        .to_string()
    } else {
        plain(done)
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}
