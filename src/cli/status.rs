//! `fencepost status`: the lease table and the sink side by side, plus the document on
//! disk, so "the dashboard says B but the file says A" is visible at a glance.

use std::ffi::OsString;
use std::fmt::Write as _;

use clap::Args;

use super::Report;
use fencepost::clock::ClockKind;
use fencepost::error::Result;
use fencepost::outcome::{Outcome, Status};
use fencepost::session::Ctx;

/// Show leases, the sink's records and whether each document still matches them.
///
/// DOCUMENT says how the file on disk compares with the sink's record:
///   matches      its SHA-256 is the one recorded
///   drifted      it was changed behind the tool's back
///   missing      the recorded file is gone
///   removed      the resource was removed (`fencepost remove`) and no file is there;
///                the full list shows removed resources only with --all
///   reappeared   the resource was removed, and a file is there again with no write
///   untracked    a file exists but no write was recorded
///   absent       no file and no record
///   stored       (--store, no mirror root) the store keeps the content; this host
///                has no copy to compare (`fencepost cat` prints it)
///   ahead        (a mirror root) it holds a version the store does not know: the
///                store lost history (see "Several hosts" in the README)
///   behind       (a mirror root) it has not applied the version the store publishes
///                yet (`fencepost mirror` applies it)
///   interrupted  a crashed write awaits recovery (any change or `fencepost recover`)
///   in-progress  a writer is between its rename and its clean-up
///   not-a-file   a symlink, folder or special file stands at the document's path
///   unreachable  a folder on its path is a file, a symlink leading outside the root,
///                or another publish root (it has .fencepost/)
///   state-file   the path is the state file itself (--db inside the root)
///   unreadable   this user may not read the document or search a folder on its path
///   invalid      the name the state file holds no longer passes the name rules or the
///                length limits (why is listed under the table)
///   error        the document could not be checked (why is listed under the table)
/// WRITTEN is the version the sink holds: `epoch 3`, `epoch 3 seq 2` (`write --seq`),
/// then `tree` for a tree (`write --tree`; --json gives its hash as `sink.tree_sha256`)
/// and `removed` for a removal.
/// With --store, WRITTEN says `unfenced` after the epoch of a version written with
/// --unfenced (`sink.unfenced` in --json): no fence kept older epochs out of it.
/// On a mirror root, without --store, it reads the store the root is bound to; --json
/// then gives each document's `mirror_epoch` (the epoch the mirror holds) and
/// `store_epoch` (the one the store publishes), null where there is none.
/// Exit 2 when there is no state file, or the resource named was never claimed or written.
/// Read-only: it changes nothing. Wall-clock deadlines show in UTC; --json gives them
/// as milliseconds since the Unix epoch.
///
/// Example:
///   fencepost status --json | jq '.resources[] | select(.document.state != "matches")'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct StatusArgs {
    /// Only this resource (default: all but the removed ones).
    pub resource: Option<OsString>,

    /// List removed resources too (a resource named is always shown).
    #[arg(long)]
    pub all: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &StatusArgs) -> Result<Report> {
    let mut status = fencepost::reports::status(ctx, args.resource.as_deref())?;
    let listed = status.resources.len();
    if args.resource.is_none() && !args.all {
        status
            .resources
            .retain(|row| !row.sink.as_ref().is_some_and(|s| s.removed));
    }
    let mut plain = table(&status, ctx.clock.kind());
    let hidden = listed - status.resources.len();
    if hidden > 0 {
        let _ = write!(
            plain,
            "\n({} not shown: --all lists them)",
            fencepost::text::count(hidden, "removed resource", "removed resources")
        );
    }
    Ok(Report::new(plain, Outcome::Status(status)))
}

/// The plain answer: one aligned row per resource, then the problems of those that
/// could not be looked at.
fn table(status: &Status, clock: ClockKind) -> String {
    if status.resources.is_empty() {
        return "no resources".to_string();
    }
    let dash = || "-".to_string();
    let mut cells = vec![
        [
            "RESOURCE", "LEASE", "OWNER", "EPOCH", "DEADLINE", "FENCE", "WRITTEN", "DOCUMENT",
        ]
        .map(String::from),
    ];
    for row in &status.resources {
        let lease = row.lease.as_ref();
        let sink = row.sink.as_ref();
        cells.push([
            printable(&row.resource),
            lease.map_or_else(|| "none".into(), |l| l.state.into()),
            lease.map_or_else(dash, |l| l.owner.clone()),
            lease.map_or_else(dash, |l| l.epoch.to_string()),
            lease.map_or_else(dash, |l| fencepost::clock::show(clock, l.deadline)),
            sink.map_or_else(dash, |s| s.fence.to_string()),
            sink.and_then(|s| s.content_epoch.map(|e| (e, s)))
                .map_or_else(dash, |(epoch, s)| {
                    let seq = match s.seq {
                        Some(seq) if seq != 0 => format!(" seq {seq}"),
                        _ => String::new(),
                    };
                    let removed = if s.removed { " removed" } else { "" };
                    let removed = if s.tree_sha256.is_some() {
                        format!(" tree{removed}")
                    } else {
                        removed.to_string()
                    };
                    let mark = if s.unfenced { " unfenced" } else { "" };
                    format!("epoch {epoch}{seq}{removed}{mark}")
                }),
            row.document.state.to_string(),
        ]);
    }
    let mut text = fencepost::audit::align(&cells);
    for row in &status.resources {
        if let Some(problem) = &row.document.problem {
            let _ = write!(
                text,
                "\n{}: {}: {problem}",
                printable(&row.resource),
                row.document.state
            );
        }
    }
    text
}

/// A stored name as one line of a table (see `resource::display_name`), shortened when
/// very long.
pub(crate) fn printable(name: &str) -> String {
    fencepost::text::shown(&fencepost::text::display_name(name))
}
