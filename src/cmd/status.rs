//! `fencepost status`: the lease table and the sink side by side, plus the document on
//! disk, so "the dashboard says B but the file says A" is visible at a glance.

use std::ffi::OsString;
use std::fmt::Write as _;

use clap::Args;

use super::Report;
use crate::atomic;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::outcome::{DocumentView, LeaseView, Outcome, SinkView, Status, StatusRow};
use crate::resource::{Resource, locate};
use crate::session::Ctx;
use crate::session::Opened;
use crate::sink::{Recovery, SinkRecord};

/// Show leases, the sink's records and whether each document still matches them.
///
/// DOCUMENT says how the file on disk compares with the sink's record:
///   matches      its SHA-256 is the one recorded
///   drifted      it was changed behind the tool's back
///   missing      the recorded file is gone
///   untracked    a file exists but no write was recorded
///   absent       no file and no record
///   ahead        (a mirror root) it holds a version the store does not know: the
///                store lost history (see "Several hosts" in the README)
///   interrupted  a crashed write awaits recovery (any change or `fencepost recover`)
///   not-a-file   a symlink, folder or special file stands at the document's path
///   unreachable  a folder on its path is a file, a symlink leading outside the root,
///                or another publish root (it has .fencepost/)
///   state-file   the path is the state file itself (--db inside the root)
///   unreadable   this user may not read the document or search a folder on its path
///   invalid      the name the state file holds no longer passes the name rules or the
///                length limits (why is listed under the table)
///   error        the document could not be checked (why is listed under the table)
/// With --store, WRITTEN says `unfenced` after the epoch of a version written with
/// --unfenced (`sink.unfenced` in --json): no fence kept older epochs out of it.
/// Exit 2 when there is no state file, or the resource named was never claimed or written.
/// Read-only: it changes nothing. Wall-clock deadlines show in UTC; --json gives them
/// as milliseconds since the Unix epoch.
///
/// Example:
///   fencepost status --json | jq '.resources[] | select(.document.state != "matches")'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct StatusArgs {
    /// Only this resource (default: all).
    pub resource: Option<OsString>,
}

/// One resource's row.
struct Row {
    /// The name as the state file stores it.
    resource: String,
    lease: Option<Lease>,
    sink: Option<SinkRecord>,
    doc: DocState,
    /// The store publishes its content as written with `--unfenced`.
    unfenced: bool,
}

/// The document on disk as `status` shows it.
type DocState = DocumentView;

impl DocumentView {
    fn of(state: &'static str) -> DocState {
        DocState {
            state,
            sha256: None,
            size: None,
            problem: None,
        }
    }

    fn problem(state: &'static str, why: &Error) -> DocState {
        DocState {
            problem: Some(why.to_string()),
            ..DocState::of(state)
        }
    }
}

pub(crate) fn run(ctx: &Ctx, args: &StatusArgs) -> Result<Report> {
    // A resource whose path cannot be resolved (a symlink leading out of the root) is
    // still answered for, by its spelling: status always reports, here `unreachable`.
    let only = match args.resource.as_deref() {
        Some(raw) => {
            if ctx.remote.is_some() {
                // The store's names are never resolved through this host's symlinks.
                Some(ctx.resource(raw)?)
            } else {
                let spelled = ctx.spelled(raw)?;
                Some(crate::resource::canonical(&ctx.root, &spelled).unwrap_or(spelled))
            }
        }
        None => None,
    };
    let store = ctx.read_store("nothing to show")?;
    let now = ctx.now();
    let rows = collect(ctx, store, only.as_ref())?;
    // The `--json` contract's `epoch`: the highest epoch claimed (null if never).
    let epoch = only
        .as_ref()
        .and(rows.first())
        .and_then(|r| r.lease.as_ref())
        .map(|l| l.epoch);
    let plain = table(&rows, now, ctx.clock.kind());
    let status = Status {
        now,
        resources: rows.into_iter().map(|r| row_view(r, now)).collect(),
        resource: only.map(|r| r.to_string()),
        epoch,
    };
    Ok(Report::new(plain, Outcome::Status(status)))
}

/// Every row of the state file (or the one asked for). A row whose stored name no longer
/// passes the name rules, or whose document cannot be checked, is shown with its problem;
/// it never hides the others.
fn collect(ctx: &Ctx, mut store: Opened<'_>, only: Option<&Resource>) -> Result<Vec<Row>> {
    let tx = store.snapshot()?;
    tx.check_clock(ctx.clock.kind())?;
    ctx.check_root(&*tx)?;
    let names = match only {
        Some(r) => {
            ctx.refuse_unseen(&*tx, r, "nothing to show")?;
            vec![r.to_string()]
        }
        None => tx.resources()?,
    };
    // A mirror root's own records, to tell a mirror that is behind from one that drifted.
    let held = if ctx.remote.as_ref().is_some_and(|r| r.mirror) && ctx.db.exists() {
        Some(crate::mirror::records(ctx)?)
    } else {
        None
    };
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        let (lease, sink) = (tx.lease_named(&name)?, tx.sink_named(&name)?);
        let unfenced = tx.published(&name)?.is_some_and(|p| p.unfenced);
        let doc = match ctx.stored(&name) {
            Err(e) => DocState::problem("invalid", &e),
            Ok(resource) => document(ctx, &resource, sink.as_ref())
                .map(|doc| behind(doc, held.as_deref(), &name, sink.as_ref()))
                .unwrap_or_else(|e| DocState::problem("error", &e)),
        };
        rows.push(Row {
            resource: name,
            lease,
            sink,
            doc,
            unfenced,
        });
    }
    Ok(rows)
}

/// On a mirror root (`held`: its records), a document that differs from the store's
/// version because the mirror has not applied it yet is `behind`, not `drifted`.
fn behind(
    doc: DocState,
    held: Option<&[(String, crate::sink::Content)]>,
    name: &str,
    sink: Option<&SinkRecord>,
) -> DocState {
    let Some(held) = held else {
        return doc;
    };
    let published = sink.and_then(|s| s.content.as_ref());
    let mirrored = held.iter().find(|(n, _)| n == name).map(|(_, c)| c);
    let standing = match (published, mirrored) {
        (Some(p), m) => crate::mirror::standing(
            m.map(|m| (m.epoch, m.sha256.as_str())),
            (p.epoch, &p.sha256),
            false,
        ),
        (None, _) => crate::mirror::Standing::Current,
    };
    let state = match standing {
        crate::mirror::Standing::Current => return doc,
        // A version the store does not know: the store lost history.
        crate::mirror::Standing::Ahead => "ahead",
        crate::mirror::Standing::Behind => "behind",
    };
    if !matches!(doc.state, "drifted" | "missing" | "absent") {
        return doc;
    }
    DocState { state, ..doc }
}

/// How the document compares with the sink's record. A document this user may not read
/// (or whose folder it may not search) is `unreadable`: status reports every other one.
fn document(ctx: &Ctx, resource: &Resource, sink: Option<&SinkRecord>) -> Result<DocState> {
    match compare(ctx, resource, sink) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::PermissionDenied => {
            Ok(DocState::of("unreadable"))
        }
        other => other,
    }
}

fn compare(ctx: &Ctx, resource: &Resource, sink: Option<&SinkRecord>) -> Result<DocState> {
    let recorded = sink.and_then(|s| s.content.as_ref());
    let none = DocState::of;
    // A shared store keeps the contents itself; with no mirror root on this host there
    // is no document here to compare.
    if ctx.remote.as_ref().is_some_and(|r| !r.mirror) {
        return Ok(none(if recorded.is_some() {
            "stored"
        } else {
            "absent"
        }));
    }
    let doc = match locate(&ctx.root, resource, false) {
        Ok(Some(doc)) => doc,
        Ok(None) => {
            return Ok(none(if recorded.is_some() {
                "missing"
            } else {
                "absent"
            }));
        }
        // A folder on the way was replaced by a file or by a symlink leading outside the
        // root: report it; status must not fail for every resource because of one.
        Err(Error::Usage { .. }) => return Ok(none("unreachable")),
        Err(e) => return Err(e),
    };
    if crate::session::is_state_file(ctx, &doc)? {
        return Ok(none("state-file"));
    }
    let Ok(meta) = atomic::inspect_document(&doc) else {
        return Ok(none("not-a-file"));
    };
    let Some(_) = meta else {
        return Ok(none(if recorded.is_some() {
            "missing"
        } else {
            "absent"
        }));
    };
    let (sha256, size) = atomic::hash_document(&doc)?;
    let pending = if ctx.remote.is_some() {
        // A mirror's crashed applies are its own state file's business (`recover`).
        crate::recovery::Pending {
            action: Recovery::Nothing,
            in_progress: false,
        }
    } else {
        crate::recovery::pending(&doc, recorded.and_then(|c| c.file))?
    };
    let state = if matches!(pending.action, Recovery::RestorePre | Recovery::RemoveDoc) {
        "interrupted"
    } else if pending.in_progress {
        "in-progress"
    } else {
        match recorded {
            Some(c) if c.sha256 == sha256 => "matches",
            Some(_) => "drifted",
            None => "untracked",
        }
    };
    Ok(DocState {
        sha256: Some(sha256),
        size: Some(size),
        ..DocState::of(state)
    })
}

fn row_view(row: Row, now: i64) -> StatusRow {
    let sink = row.sink.map(|s| {
        let c = s.content;
        SinkView {
            fence: s.fence,
            content_epoch: c.as_ref().map(|c| c.epoch),
            size: c.as_ref().map(|c| c.size),
            written_at: c.as_ref().map(|c| c.written_at),
            sha256: c.map(|c| c.sha256),
            unfenced: row.unfenced,
        }
    });
    StatusRow {
        lease: LeaseView::at(row.lease.as_ref(), now),
        resource: row.resource,
        sink,
        document: row.doc,
    }
}

fn table(rows: &[Row], now: i64, clock: crate::clock::ClockKind) -> String {
    if rows.is_empty() {
        return "no resources".to_string();
    }
    let dash = || "-".to_string();
    let mut cells = vec![
        [
            "RESOURCE", "LEASE", "OWNER", "EPOCH", "DEADLINE", "FENCE", "WRITTEN", "DOCUMENT",
        ]
        .map(String::from),
    ];
    for row in rows {
        let lease = row.lease.as_ref();
        let content = row.sink.as_ref().and_then(|s| s.content.as_ref());
        cells.push([
            printable(&row.resource),
            lease.map_or_else(|| "none".into(), |l| l.view(now).into()),
            lease.map_or_else(dash, |l| l.owner.clone()),
            lease.map_or_else(dash, |l| l.epoch.to_string()),
            lease.map_or_else(dash, |l| crate::clock::show(clock, l.deadline)),
            row.sink.as_ref().map_or_else(dash, |s| s.fence.to_string()),
            content.map_or_else(dash, |c| {
                let mark = if row.unfenced { " unfenced" } else { "" };
                format!("epoch {}{mark}", c.epoch)
            }),
            row.doc.state.to_string(),
        ]);
    }
    let mut text = crate::audit::align(&cells);
    for row in rows {
        if let Some(problem) = &row.doc.problem {
            let _ = write!(
                text,
                "\n{}: {}: {problem}",
                printable(&row.resource),
                row.doc.state
            );
        }
    }
    text
}

/// A stored name as one line of a table (see `resource::display_name`), shortened when
/// very long.
pub(crate) fn printable(name: &str) -> String {
    crate::text::shown(&crate::text::display_name(name))
}
