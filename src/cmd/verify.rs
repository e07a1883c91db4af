//! `fencepost verify`: a cron-friendly check that the lease table, the sink's records and
//! the documents on disk all tell the same story.

use std::ffi::OsString;

use clap::Args;

use super::Report;
use super::status::printable;
use crate::atomic;
use crate::error::{Error, Result};
use crate::lease::{Lease, LeaseState};
use crate::outcome::{Outcome, Problem, Verified};
use crate::resource::{Resource, locate};
use crate::session::Ctx;
use crate::sink::{Content, Recovery};

/// Check every resource (or one) and exit 9 if any is inconsistent; 0 when all is well.
///
/// Finds: a document whose bytes differ from the recorded SHA-256 (changed behind the
/// tool's back), that is missing, that its path no longer reaches, or that this user may
/// not read; a lease completed by epoch E while the document holds content from an
/// older epoch; a completed lease with no write at all ("completed but never
/// published"); a crashed write awaiting recovery, or the recovery links a finished one
/// left; temp files of dead writers; a name in the state file that no longer passes the
/// name rules or the length limits, or a document that could not be checked; with
/// --store, a published version written with --unfenced.
/// Exit 2 when there is no state file, or the resource named was never claimed or written.
/// Read-only, but for one report: with --store and a mirror root, a mirror that holds a
/// version the store does not know (`ahead`: the store lost history) tells the store the
/// epoch it holds. Prints one line per problem (or one JSON object with --json).
///
/// Example (cron):
///   fencepost --root /srv/publish verify || mail -s "fencepost: divergence" ops < /dev/null
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct VerifyArgs {
    /// Only this resource (default: every resource in the state file).
    pub resource: Option<OsString>,
}

pub(crate) fn run(ctx: &Ctx, args: &VerifyArgs) -> Result<Report> {
    if ctx.remote.is_some() {
        return run_remote(ctx, args);
    }
    let only = ctx.resource_opt(args.resource.as_deref())?;
    let resource = only.as_ref().map(ToString::to_string);
    // No state file is not "all is well": `verify || alert` must alert.
    let mut store = ctx.read_store("nothing to verify")?;
    let tx = store.snapshot()?;
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
        match check(ctx, &resource, lease.as_ref(), content.as_ref(), &mut found) {
            Ok(()) => {}
            Err(e @ Error::Io { .. }) if permission_denied(&e) => {
                found("unreadable", e.to_string());
            }
            Err(e @ Error::Database { .. }) => return Err(e),
            Err(e) => found("error", e.to_string()),
        }
    }
    conclude(resource, names.len(), problems)
}

/// The answer: `ok`, or exit 9 listing every problem.
fn conclude(resource: Option<String>, checked: usize, problems: Vec<Problem>) -> Result<Report> {
    if problems.is_empty() {
        let verified = Verified {
            resource,
            checked,
            problems,
        };
        return Ok(Report::new(
            format!("ok: {checked} resource(s) consistent"),
            Outcome::Ok(verified),
        ));
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}: {}", printable(&p.resource), p.problem, p.message))
        .collect();
    Err(Error::Diverged {
        message: format!(
            "{} inconsistenc{} in {checked} resource(s) checked",
            problems.len(),
            if problems.len() == 1 { "y" } else { "ies" },
        ),
        report: lines.join("\n"),
        found: Verified {
            resource,
            checked,
            problems,
        },
    })
}

/// Finds the problems of one resource, given its lease and the content the sink recorded.
fn check(
    ctx: &Ctx,
    resource: &Resource,
    lease: Option<&Lease>,
    content: Option<&Content>,
    found: &mut impl FnMut(&'static str, String),
) -> Result<()> {
    check_lease(lease, content, found);
    check_document(ctx, resource, content, found)
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
    found: &mut impl FnMut(&'static str, String),
) -> Result<()> {
    let doc = match locate(&ctx.root, resource, false) {
        Ok(Some(doc)) => doc,
        Ok(None) => {
            if content.is_some() {
                found("missing", "the recorded document is missing".into());
            }
            return Ok(());
        }
        // The path no longer leads to a document of this root (a folder on it became
        // a file, a symlink out of the root, or another publish root): say why.
        Err(Error::Usage { message, .. }) => {
            if content.is_some() {
                found("unreachable", message);
            }
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    if crate::session::is_state_file(ctx, &doc)? {
        return Ok(()); // never a document: write refuses it, and it must not be hashed
    }
    let pending = crate::recovery::pending(&doc, content.and_then(|c| c.file))?;
    match pending.action {
        Recovery::RestorePre | Recovery::RemoveDoc | Recovery::KeepApplied => found(
            "interrupted",
            "a crashed write awaits recovery (run `fencepost recover`)".into(),
        ),
        Recovery::DropLinks => found(
            "leftover-links",
            "recovery links of a finished or abandoned write remain (run `fencepost recover`)"
                .into(),
        ),
        Recovery::Nothing => {}
    }
    let abandoned = atomic::abandoned_temps(&doc)?;
    if abandoned > 0 {
        found(
            "leftover-temp",
            format!("{abandoned} temp file(s) of dead writers (run `fencepost recover`)"),
        );
    }
    match (atomic::inspect_document(&doc), content) {
        (Err(_), _) => found("not-a-file", "the document is not a regular file".into()),
        (Ok(None), Some(_)) => found("missing", "the recorded document is missing".into()),
        (Ok(Some(_)), Some(c))
            if !matches!(pending.action, Recovery::RestorePre | Recovery::RemoveDoc) =>
        {
            let (sha, _) = atomic::hash_document(&doc)?;
            // A writer between its rename and its clean-up: the document may already hold
            // its bytes before (or just after) their COMMIT. In progress, not drift.
            if sha != c.sha256 && !pending.in_progress {
                found(
                    "drifted",
                    format!(
                        "the document's SHA-256 {} differs from the one recorded at epoch {} ({})",
                        short(&sha),
                        c.epoch,
                        short(&c.sha256)
                    ),
                );
            }
        }
        _ => {}
    }
    Ok(())
}

/// True for an I/O error that says this user may not read or search something.
fn permission_denied(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// `verify` with a shared store: the lease rules and every published blob against its
/// recorded size and SHA-256 (read in full); with a mirror root, also the mirror: a
/// version it does not hold yet (`behind`), one the store does not know (`ahead`, told to
/// the store), and its own documents as a local root's (`drifted`, `missing`, crashed
/// applies...).
fn run_remote(ctx: &Ctx, args: &VerifyArgs) -> Result<Report> {
    let only = ctx.resource_opt(args.resource.as_deref())?;
    let resource = only.as_ref().map(ToString::to_string);
    let mut store = ctx.read_store("nothing to verify")?;
    let (names, rows) = {
        let tx = store.snapshot()?;
        let names = match &only {
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
            rows.push((name.clone(), lease, content, tx.published(name)?));
        }
        (names, rows)
    };
    let mut problems = Vec::new();
    let mut ahead = Vec::new();
    let published_names: Vec<String> = rows
        .iter()
        .filter(|(_, _, _, p)| p.is_some())
        .map(|(n, _, _, _)| n.clone())
        .collect();
    let mirror = ctx.remote.as_ref().is_some_and(|r| r.mirror) && ctx.db.exists();
    let mirrored = if mirror {
        crate::mirror::records(ctx)?
    } else {
        Vec::new()
    };
    for (name, lease, content, published) in rows {
        let mut found = |kind, message: String| {
            problems.push(Problem {
                resource: name.clone(),
                problem: kind,
                message,
            });
        };
        check_lease(lease.as_ref(), content.as_ref(), &mut found);
        let Some(published) = published else {
            continue;
        };
        check_unfenced(&published, &mut found);
        let blobs = store.blobs().ok_or(Error::Internal(
            "a shared store without a place for contents",
        ))?;
        if let Err(e) = blobs.read(&published, &mut std::io::sink()) {
            found("damaged", e.to_string());
        }
        if mirror {
            let held = mirrored.iter().find(|(n, _)| *n == name).map(|(_, c)| c);
            if let Some(epoch) = check_behind(held, &published, &mut found) {
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
    conclude(resource, names.len(), problems)
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

/// A mirror that does not hold the version the store publishes (`held`: what it holds):
/// `behind`, or `ahead` when it holds a version the store does not know (then returns
/// the epoch it holds, to tell the store).
fn check_behind(
    held: Option<&Content>,
    published: &crate::store::Published,
    found: &mut impl FnMut(&'static str, String),
) -> Option<i64> {
    use crate::mirror::{Standing, standing};
    let epoch = published.epoch;
    let pair = (epoch, published.sha256.as_str());
    match (
        held,
        standing(
            held.map(|c| (c.epoch, c.sha256.as_str())),
            pair,
            published.unfenced,
        ),
    ) {
        (_, Standing::Current) => None,
        (Some(c), Standing::Ahead) => {
            found(
                "ahead",
                format!(
                    "{} (see \"Several hosts\" in the README to bring the store forward)",
                    crate::mirror::ahead_message(c, Some(pair))
                ),
            );
            Some(c.epoch)
        }
        (Some(c), _) => {
            found(
                "behind",
                format!(
                    "the mirror holds epoch {}, the store publishes epoch {epoch} (run `fencepost mirror`)",
                    c.epoch
                ),
            );
            None
        }
        (None, _) => {
            found(
                "behind",
                format!("the mirror does not hold epoch {epoch} yet (run `fencepost mirror`)"),
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
    let local_args = VerifyArgs {
        resource: only.map(|r| r.to_string().into()),
    };
    let mut problems = match run(&local, &local_args) {
        Ok(_) => Vec::new(),
        Err(Error::Diverged { found, .. }) => found.problems,
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
            });
        };
        match check_document(&local, &resource, None, &mut found) {
            Ok(()) => {}
            Err(e @ Error::Io { .. }) if permission_denied(&e) => {
                found("unreadable", e.to_string());
            }
            Err(e) => found("error", e.to_string()),
        }
    }
    Ok(problems)
}
