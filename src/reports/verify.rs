//! `verify`: the lease table, the sink's records and the documents on disk checked
//! against each other, every inconsistency listed as a [`Problem`]. Finding problems is
//! the answer, not a failure: what a caller does about them is its own decision.

use std::ffi::OsStr;

use crate::document::{self, DocState, Examine, Look};
use crate::error::{Error, Result};
use crate::lease::{Lease, LeaseState};
use crate::outcome::{Behind, Problem, Verified};
use crate::recovery::Pending;
use crate::resource::Resource;
use crate::session::Ctx;
use crate::sink::{Content, Recovery};
use crate::text::count;

/// Checks every resource of the state file (or `only`) and lists what is out of step.
/// Bad input (`Error::Usage`) when there is no state file, or `only` was never claimed
/// or written; problems found are the answer, never an error.
pub fn verify(ctx: &Ctx, only: Option<&OsStr>) -> Result<Verified> {
    if ctx.remote.is_some() {
        return verify_remote(ctx, only);
    }
    let only = ctx.resource_opt(only)?;
    let resource = only.as_ref().map(ToString::to_string);
    // No state file is not "all is well": `verify || alert` must alert.
    let mut store = ctx.read_store("nothing to verify")?;
    let tx = store.snapshot()?;
    crate::session::refuse_unbound_read(ctx, &*tx)?;
    ctx.check_root(&*tx)?;
    let names = match only {
        Some(r) => {
            ctx.refuse_unseen(&*tx, &r, "nothing to verify")?;
            vec![r.to_string()]
        }
        None => tx.resources()?,
    };
    let mut problems = Vec::new();
    for name in &names {
        let lease = tx.lease_named(name)?;
        let content = tx.sink_named(name)?.and_then(|s| s.content);
        let mut found = |kind, message: String| {
            problems.push(Problem {
                resource: name.clone(),
                problem: kind,
                message,
                behind: None,
            });
        };
        // A row that cannot be read back, or a document that cannot be checked, is a
        // problem of its own; it never hides the others' problems.
        let resource = match ctx.stored(name) {
            Ok(resource) => resource,
            Err(e) => {
                found("invalid", e.to_string());
                continue;
            }
        };
        check_lease(lease.as_ref(), content.as_ref(), &mut found);
        let manifest = match &content {
            Some(c) if c.tree => tx.manifest(&resource)?,
            _ => None,
        };
        check_document(
            ctx,
            &resource,
            content.as_ref(),
            manifest.as_deref(),
            &mut found,
        );
    }
    Ok(Verified {
        resource,
        checked: names.len(),
        problems,
        lagging: Vec::new(),
    })
}

/// A completed lease whose epoch never published, or published less than the content
/// recorded.
fn check_lease(
    lease: Option<&Lease>,
    content: Option<&Content>,
    found: &mut impl FnMut(&'static str, String),
) {
    if let Some(l) = lease
        && l.state == LeaseState::Completed
    {
        match content {
            None => found(
                "never-published",
                format!("epoch {} completed but never wrote the document", l.epoch),
            ),
            Some(c) if c.epoch < l.epoch => found(
                "older-content",
                format!(
                    "epoch {} completed but the document holds content from epoch {}",
                    l.epoch, c.epoch
                ),
            ),
            Some(_) => {}
        }
    }
}

/// The document on disk against the content the sink recorded.
fn check_document(
    ctx: &Ctx,
    resource: &Resource,
    content: Option<&Content>,
    manifest: Option<&[u8]>,
    found: &mut impl FnMut(&'static str, String),
) {
    let examined = document::examine(&Examine {
        root: &ctx.root,
        resource,
        recorded: content,
        look: Look::Hash,
        recovery: true,
        debris: true,
        is_state_file: &|doc| crate::session::is_state_file(ctx, doc),
    });
    if let Some(pending) = examined.pending {
        check_pending(pending, found);
    }
    if let Some(abandoned) = examined.temps.filter(|n| *n > 0) {
        found(
            "leftover-temp",
            format!(
                "{} of dead writers (run `fencepost recover`)",
                count(abandoned, "temp file", "temp files")
            ),
        );
    }
    let why = || {
        examined
            .why
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    match (examined.state, content) {
        // The path no longer leads to a document of this root (a folder on it became
        // a file, a symlink out of the root, or another publish root): say why.
        (DocState::Unreachable, Some(_)) => found("unreachable", why()),
        (DocState::Reappeared, Some(c)) => found(
            "reappeared",
            format!(
                "the resource was removed under {}, and a file is there again with no write",
                crate::mirror::place(c.version())
            ),
        ),
        (DocState::NotAFile, _) => {
            found("not-a-file", "the document is not a regular file".into());
        }
        (DocState::Missing, _) => found("missing", "the recorded document is missing".into()),
        (DocState::Drifted, Some(c)) if c.tree => {
            found(
                "drifted",
                tree_drift(c, manifest, examined.manifest.as_ref()),
            );
        }
        (DocState::Drifted, Some(c)) => {
            let sha = examined.hashed.as_ref().map_or("", |(sha, _)| sha.as_str());
            found(
                "drifted",
                format!(
                    "the document's SHA-256 {} differs from the one recorded at epoch {} ({})",
                    short(sha),
                    c.epoch,
                    short(&c.sha256)
                ),
            );
        }
        (DocState::Unreadable, _) => found("unreadable", why()),
        (DocState::CheckFailed, _) => found("error", why()),
        // The state file is never a document: write refuses it, and it is not hashed.
        _ => {}
    }
}

/// Most entries a tree's drift names one by one; the rest are counted.
const DRIFT_SHOWN: usize = 20;

/// What `verify` says of a tree that is not the one recorded: each entry added, removed
/// or changed, relative to the resource.
fn tree_drift(
    c: &Content,
    recorded: Option<&[u8]>,
    found: Option<&crate::tree::Manifest>,
) -> String {
    let head = format!(
        "the tree differs from the one recorded at {}",
        crate::mirror::place(c.version())
    );
    let (Some(recorded), Some(found)) = (
        recorded.and_then(|m| crate::tree::Manifest::parse(m).ok()),
        found,
    ) else {
        return head;
    };
    let differences = crate::tree::diff(&recorded, found);
    let mut parts: Vec<String> = differences
        .iter()
        .take(DRIFT_SHOWN)
        .map(|d| format!("{} {}", d.what, crate::text::display_name(&d.path)))
        .collect();
    if differences.len() > DRIFT_SHOWN {
        parts.push(format!("and {} more", differences.len() - DRIFT_SHOWN));
    }
    format!("{head}: {}", parts.join(", "))
}

/// A crashed write awaiting recovery, or the links a finished one left.
fn check_pending(pending: Pending, found: &mut impl FnMut(&'static str, String)) {
    match pending.action {
        Recovery::RestorePre
        | Recovery::RemoveDoc
        | Recovery::RestoreRemoved
        | Recovery::KeepApplied => found(
            "interrupted",
            "a crashed write or removal awaits recovery (run `fencepost recover`)".into(),
        ),
        Recovery::DropLinks => found(
            "leftover-links",
            "recovery links of a finished or abandoned write remain (run `fencepost recover`)"
                .into(),
        ),
        Recovery::Nothing => {}
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// `verify` with a shared store: the lease rules and every published blob against its
/// recorded size and SHA-256 (read in full); with a mirror root, also the mirror: a
/// version it does not hold yet (`behind`), one the store does not know (`ahead`, told to
/// the store), and its own documents as a local root's (`drifted`, `missing`, crashed
/// applies...).
fn verify_remote(ctx: &Ctx, only: Option<&OsStr>) -> Result<Verified> {
    let only = ctx.resource_opt(only)?;
    let resource = only.as_ref().map(ToString::to_string);
    let mut store = ctx.shared_store("nothing to verify")?;
    let mirror = ctx.remote.as_ref().is_some_and(|r| r.mirror) && ctx.db.exists();
    let mirrored = if mirror {
        crate::mirror::records(ctx)?
    } else {
        Vec::new()
    };
    let (names, rows) = read_rows(ctx, &mut *store, only.as_ref(), mirror, &mirrored)?;
    let mut problems = Vec::new();
    let mut ahead = Vec::new();
    let published_names: Vec<String> = rows
        .iter()
        .filter(|r| r.published.is_some())
        .map(|r| r.name.clone())
        .collect();
    for row in rows {
        let Row {
            name,
            lease,
            content,
            published,
            since,
        } = row;
        let mut found = |kind, message: String| {
            problems.push(Problem {
                resource: name.clone(),
                problem: kind,
                message,
                behind: None,
            });
        };
        check_lease(lease.as_ref(), content.as_ref(), &mut found);
        let Some(published) = published else {
            continue;
        };
        check_unfenced(&published, &mut found);
        if published.removed {
            // A tombstone has no bytes to check.
        } else if let Err(e) = store.read(&published, &mut std::io::sink()) {
            found("damaged", e.to_string());
        }
        if mirror {
            let held = mirrored.iter().find(|(n, _)| *n == name).map(|(_, c)| c);
            let clock = ctx.clock.kind();
            let found = |kind, message, behind| {
                problems.push(Problem {
                    resource: name.clone(),
                    problem: kind,
                    message,
                    behind,
                });
            };
            if let Some(epoch) = check_behind(held, &published, since, clock, found) {
                ahead.push((name.clone(), epoch, problems.len() - 1));
            }
        }
    }
    if mirror {
        let held = MirrorHeld {
            mirrored: &mirrored,
            published: &published_names,
        };
        check_lost(only.as_ref(), &held, &mut problems, &mut ahead);
        tell_store(ctx, &mut *store, ahead, &mut problems);
        problems.extend(verify_mirror_root(ctx, only.as_ref(), &published_names)?);
    }
    Ok(Verified {
        resource,
        checked: names.len(),
        problems,
        lagging: Vec::new(),
    })
}

/// The store's resources as `verify` checks them (only `only`, when given), read in one
/// snapshot; on a mirror root (`mirror`, holding `mirrored`), each with since when the
/// mirror is behind it.
fn read_rows(
    ctx: &Ctx,
    store: &mut dyn crate::store::SharedStore,
    only: Option<&Resource>,
    mirror: bool,
    mirrored: &[(String, Content)],
) -> Result<(Vec<String>, Vec<Row>)> {
    let tx = store.snapshot()?;
    let names = match only {
        Some(r) => {
            ctx.refuse_unseen(&*tx, r, "nothing to verify")?;
            vec![r.to_string()]
        }
        None => tx.resources()?,
    };
    let mut rows = Vec::new();
    for name in &names {
        let lease = tx.lease_named(name)?;
        let content = tx.sink_named(name)?.and_then(|s| s.content);
        let published = tx.published(name)?;
        let held = mirrored
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.version());
        let since = match (&published, &content) {
            (Some(p), Some(c)) if mirror && held.is_none_or(|h| h < (p.epoch, p.seq)) => {
                Some(behind_since(ctx, &*tx, name, held, c.written_at)?)
            }
            _ => None,
        };
        rows.push(Row {
            name: name.clone(),
            lease,
            content,
            published,
            since,
        });
    }
    Ok((names, rows))
}

/// A version the store publishes that `write --unfenced` wrote: no fence kept an older
/// epoch, or one never claimed, from making its bytes current. Only a store made for the
/// reproduction takes such a write now; anywhere else it came from an older fencepost,
/// which took one on any store, or from a hand edit.
fn check_unfenced(
    published: &crate::store::Published,
    found: &mut impl FnMut(&'static str, String),
) {
    if published.unfenced {
        found(
            "unfenced",
            format!(
                "the store publishes epoch {} written with --unfenced: no fence kept older \
                 epochs out, so these bytes may be older than ones already published",
                published.epoch
            ),
        );
    }
}

/// What a mirror root holds (its records) and the names the store publishes.
struct MirrorHeld<'a> {
    mirrored: &'a [(String, Content)],
    published: &'a [String],
}

/// What the mirror holds of a resource the store publishes nothing of: `ahead`, noted in
/// `ahead` (name, epoch held, index of its problem) for [`tell_store`].
fn check_lost(
    only: Option<&Resource>,
    held: &MirrorHeld<'_>,
    problems: &mut Vec<Problem>,
    ahead: &mut Vec<(String, i64, usize)>,
) {
    for (name, content) in held.mirrored {
        if only.is_some_and(|o| o.as_str() != name) || held.published.contains(name) {
            continue;
        }
        problems.push(Problem {
            resource: name.clone(),
            problem: "ahead",
            message: format!(
                "{} (see \"Several hosts\" in the README to bring the store forward)",
                crate::mirror::ahead_message(content, None)
            ),
            behind: None,
        });
        ahead.push((name.clone(), content.epoch, problems.len() - 1));
    }
}

/// Tells the store what the mirror holds where it is ahead, so that no claim issues it
/// again; a role that may not is said in the problem's message.
fn tell_store(
    ctx: &Ctx,
    store: &mut dyn crate::store::Store,
    ahead: Vec<(String, i64, usize)>,
    problems: &mut [Problem],
) {
    let mirror = crate::session::local(ctx);
    for (name, epoch, at) in ahead {
        if let Err(e) = crate::mirror::report_ahead(&mirror, store, &name, epoch) {
            problems[at]
                .message
                .push_str(&format!("; could not tell the store: {e}"));
        }
    }
}

/// One resource of the store as `verify` reads it: its lease, its sink's content, the
/// version it publishes, and (a mirror root behind it) since when the mirror is behind.
struct Row {
    name: String,
    lease: Option<crate::lease::Lease>,
    content: Option<Content>,
    published: Option<crate::store::Published>,
    since: Option<i64>,
}

/// Since when a mirror that holds `held` of `name` (`None`: nothing) is behind: when the
/// store's log says the first later epoch was written, else (the log pruned past it)
/// `current`, when the version the store publishes now was.
fn behind_since(
    ctx: &Ctx,
    tx: &dyn crate::store::ReadTxn,
    name: &str,
    held: Option<(i64, i64)>,
    current: i64,
) -> Result<i64> {
    let Ok(resource) = ctx.stored(name) else {
        return Ok(current);
    };
    let first = tx
        .events(Some(&resource), None)?
        .into_iter()
        .filter(|e| {
            matches!(
                e.kind,
                crate::audit::EventKind::Write | crate::audit::EventKind::Remove
            )
        })
        .filter(|e| {
            e.epoch
                .is_some_and(|epoch| held.is_none_or(|h| (epoch, e.seq.unwrap_or(0)) > h))
        })
        .map(|e| e.at)
        .min();
    Ok(first.map_or(current, |at| at.min(current)))
}

/// A mirror that does not hold the version the store publishes (`held`: what it holds;
/// `since`: since when, on the store's `clock`): `behind`, or `ahead` when it holds a
/// version the store does not know (then returns the epoch it holds, to tell the store).
fn check_behind(
    held: Option<&Content>,
    published: &crate::store::Published,
    since: Option<i64>,
    clock: crate::clock::ClockKind,
    mut found: impl FnMut(&'static str, String, Option<Behind>),
) -> Option<i64> {
    use crate::mirror::{Standing, place, standing, version_of};
    let epoch = published.epoch;
    let pair = published.version();
    let publishes = place(pair.0);
    let behind = |mirror_epoch| {
        since.map(|since| Behind {
            mirror_epoch,
            store_epoch: epoch,
            since,
        })
    };
    let when = since.map_or_else(String::new, |t| {
        format!(" since {}", crate::clock::show(clock, t))
    });
    match (
        held,
        standing(held.map(version_of), pair, published.unfenced),
    ) {
        (_, Standing::Current) => None,
        (Some(c), Standing::Ahead) => {
            found(
                "ahead",
                format!(
                    "{} (see \"Several hosts\" in the README to bring the store forward)",
                    crate::mirror::ahead_message(c, Some(pair))
                ),
                None,
            );
            Some(c.epoch)
        }
        (Some(c), _) => {
            found(
                "behind",
                format!(
                    "the mirror holds {}, the store publishes {publishes}{when} (run `fencepost mirror`)",
                    place(c.version())
                ),
                behind(Some(c.epoch)),
            );
            None
        }
        (None, _) => {
            found(
                "behind",
                format!(
                    "the mirror does not hold {publishes} yet, published{when} (run `fencepost mirror`)"
                ),
                behind(None),
            );
            None
        }
    }
}

/// The mirror root's own problems, as `verify` finds them on a local root; and, for
/// each document the store publishes that the mirror has no record of (`published`), a
/// crashed first apply or debris beside it.
fn verify_mirror_root(
    ctx: &Ctx,
    only: Option<&Resource>,
    published: &[String],
) -> Result<Vec<Problem>> {
    let local = crate::session::local(ctx);
    let mut problems = match verify(&local, only.map(|r| OsStr::new(r.as_str()))) {
        Ok(verified) => verified.problems,
        // A resource the mirror has not seen yet is `behind`, reported by the caller.
        Err(Error::Usage { .. }) if only.is_some() => Vec::new(),
        Err(e) => return Err(e),
    };
    let recorded = crate::mirror::records(ctx)?;
    for name in published {
        if recorded.iter().any(|(n, _)| n == name) {
            continue;
        }
        let Ok(resource) = local.stored(name) else {
            continue;
        };
        let mut found = |kind, message: String| {
            problems.push(Problem {
                resource: name.clone(),
                problem: kind,
                message,
                behind: None,
            });
        };
        check_document(&local, &resource, None, None, &mut found);
    }
    Ok(problems)
}
