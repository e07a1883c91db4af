//! `status`: every resource's lease, the sink's record and its document on disk, so "the
//! dashboard says B but the file says A" is visible at a glance.

use std::ffi::OsStr;

use crate::document::{self, DocState, Examine, Look};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::outcome::{DocumentView, LeaseView, MirrorEpochs, SinkView, Status, StatusRow};
use crate::resource::Resource;
use crate::session::{Ctx, Opened};
use crate::sink::{Content, SinkRecord};

/// One resource's row.
struct Row {
    /// The name as the state file stores it.
    resource: String,
    lease: Option<Lease>,
    sink: Option<SinkRecord>,
    doc: Doc,
    /// The store publishes its content as written with `--unfenced`.
    unfenced: bool,
    /// On a mirror root: the epoch the mirror holds (`None`: nothing yet).
    mirrored: Option<Option<i64>>,
}

/// The document on disk as `status` shows it.
struct Doc {
    state: DocState,
    hashed: Option<(String, u64)>,
    /// Why it could not be looked at (`invalid`, `error`).
    problem: Option<String>,
}

impl Doc {
    fn of(state: DocState) -> Doc {
        Doc {
            state,
            hashed: None,
            problem: None,
        }
    }

    fn problem(state: DocState, why: &Error) -> Doc {
        Doc {
            problem: Some(why.to_string()),
            ..Doc::of(state)
        }
    }
}

/// Every resource of the state file (or `only`), with its lease, its sink record and how
/// its document compares with that record. Bad input (`Error::Usage`) when there is no
/// state file, or `only` was never claimed or written.
pub fn status(ctx: &Ctx, only: Option<&OsStr>) -> Result<Status> {
    // A resource whose path cannot be resolved (a symlink leading out of the root) is
    // still answered for, by its spelling: status always reports, here `unreachable`.
    let only = match only {
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
    Ok(Status {
        now,
        resources: rows.into_iter().map(|r| row_view(r, now)).collect(),
        resource: only.map(|r| r.to_string()),
        epoch,
    })
}

/// Every row of the state file (or the one asked for). A row whose stored name no longer
/// passes the name rules, or whose document cannot be checked, is shown with its problem;
/// it never hides the others.
fn collect(ctx: &Ctx, mut store: Opened<'_>, only: Option<&Resource>) -> Result<Vec<Row>> {
    let tx = store.snapshot()?;
    crate::session::refuse_unbound_read(ctx, &*tx)?;
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
            Err(e) => Doc::problem(DocState::Invalid, &e),
            Ok(resource) => {
                let doc = compare(ctx, &resource, sink.as_ref());
                behind(doc, held.as_deref(), &name, sink.as_ref())
            }
        };
        rows.push(Row {
            mirrored: held
                .as_ref()
                .map(|h| h.iter().find(|(n, _)| *n == name).map(|(_, c)| c.epoch)),
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
    doc: Doc,
    held: Option<&[(String, Content)]>,
    name: &str,
    sink: Option<&SinkRecord>,
) -> Doc {
    let Some(held) = held else {
        return doc;
    };
    let published = sink.and_then(|s| s.content.as_ref());
    let mirrored = held.iter().find(|(n, _)| n == name).map(|(_, c)| c);
    let standing = match (published, mirrored) {
        (Some(p), m) => crate::mirror::standing(
            m.map(crate::mirror::version_of),
            crate::mirror::version_of(p),
            false,
        ),
        (None, _) => crate::mirror::Standing::Current,
    };
    let state = match standing {
        crate::mirror::Standing::Current => return doc,
        // A version the store does not know: the store lost history.
        crate::mirror::Standing::Ahead => DocState::Ahead,
        crate::mirror::Standing::Behind => DocState::Behind,
    };
    if !matches!(
        doc.state,
        DocState::Drifted | DocState::Missing | DocState::Absent
    ) {
        return doc;
    }
    Doc { state, ..doc }
}

/// How the document compares with the sink's record. A document this user may not read
/// (or whose folder it may not search) is `unreadable`: status reports every other one.
fn compare(ctx: &Ctx, resource: &Resource, sink: Option<&SinkRecord>) -> Doc {
    let recorded = sink.and_then(|s| s.content.as_ref());
    // A shared store keeps the contents itself; with no mirror root on this host there
    // is no document here to compare.
    if ctx.remote.as_ref().is_some_and(|r| !r.mirror) {
        return Doc::of(match recorded {
            Some(c) if c.removed => DocState::Removed,
            Some(_) => DocState::Stored,
            None => DocState::Absent,
        });
    }
    let found = document::examine(&Examine {
        root: &ctx.root,
        resource,
        recorded,
        look: Look::HashAny,
        // A mirror's crashed applies are its own state file's business (`recover`).
        recovery: ctx.remote.is_none(),
        debris: false,
        is_state_file: &|doc| crate::session::is_state_file(ctx, doc),
    });
    let problem = match (found.state, &found.why) {
        (DocState::CheckFailed, Some(why)) => Some(why.to_string()),
        _ => None,
    };
    Doc {
        state: found.state,
        hashed: found.hashed,
        problem,
    }
}

fn row_view(row: Row, now: i64) -> StatusRow {
    let sink = row.sink.map(|s| {
        let c = s.content;
        SinkView {
            fence: s.fence,
            content_epoch: c.as_ref().map(|c| c.epoch),
            seq: c.as_ref().map(|c| c.seq),
            removed: c.as_ref().is_some_and(|c| c.removed),
            size: c.as_ref().map(|c| c.size),
            written_at: c.as_ref().map(|c| c.written_at),
            tree_sha256: c.as_ref().filter(|c| c.tree).map(|c| c.sha256.clone()),
            sha256: c.filter(|c| !c.tree).map(|c| c.sha256),
            unfenced: row.unfenced,
        }
    });
    let (sha256, size) = row
        .doc
        .hashed
        .map_or((None, None), |(s, n)| (Some(s), Some(n)));
    let mirror = row.mirrored.map(|mirror_epoch| MirrorEpochs {
        mirror_epoch,
        store_epoch: sink.as_ref().and_then(|s| s.content_epoch),
    });
    StatusRow {
        mirror,
        lease: LeaseView::at(row.lease.as_ref(), now),
        resource: row.resource,
        sink,
        document: DocumentView {
            state: row.doc.state.word(),
            sha256,
            size,
            problem: row.doc.problem,
        },
    }
}
