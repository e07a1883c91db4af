//! Recovery of every resource (or one) at once: what each change does first for its own
//! resource, for all of them after a crash; also rebinds a moved root. With a shared
//! store: contents no write published are collected, and a mirror root's documents are
//! recovered as a local root's.

use std::ffi::OsStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::outcome::{RecoverLine, Recovered};
use crate::recovery::{self, Done};
use crate::session::{self, Ctx, Remote};
use crate::store::Store;

/// Recovers the resource `only`, or every resource the state file (or the store) knows.
/// `root_moved`: the root moved with its documents, so the state file is bound to the
/// session's root first (a local root only). `grace`: with a shared store, how old
/// contents uploaded by writes that never published them must be to be removed (a write
/// still uploading is younger).
///
/// Working through every resource, one that cannot be recovered (its stored name no
/// longer passes the name rules, its folder is unreachable, ...) is a
/// [`RecoverLine::Failed`] of the answer and the others are still recovered; the one
/// resource asked for fails with its error.
pub fn recover(
    ctx: &Ctx,
    only: Option<&OsStr>,
    root_moved: bool,
    grace: Duration,
) -> Result<Recovered> {
    match &ctx.remote {
        Some(remote) => recover_remote(ctx, remote, only, root_moved, grace),
        None => recover_local(ctx, only, root_moved),
    }
}

/// [`recover`] on a local root's state file.
fn recover_local(ctx: &Ctx, only: Option<&OsStr>, root_moved: bool) -> Result<Recovered> {
    // Bad input changes nothing, not even the root's record.
    let only = ctx.resource_opt(only)?;
    // No state file: no write was ever made here to finish or undo, and the likely cause
    // is a wrong root or --db, which must not read as success. Never create one.
    let Some(mut store) = crate::store::open(&ctx.db, ctx.busy, false)? else {
        return Err(ctx.no_state_file("nothing to recover"));
    };
    let pin = ctx.root_pin();
    if root_moved {
        let tx = store.immediate()?;
        tx.bind_clock(ctx.clock.kind())?;
        ctx.rebind_root(&*tx, &pin)?;
        tx.commit()?;
    }
    // Another root's state file: say so once, not once per resource.
    ctx.check_root(&*store.snapshot()?)?;
    let names = match &only {
        Some(resource) => vec![resource.to_string()],
        None => store.snapshot()?.resources()?,
    };
    let mut resources = Vec::new();
    for name in names {
        // A name that no longer passes the rules, or one unreachable or broken resource,
        // must not stop the others from being tidied.
        match recover_one(ctx, &mut *store, &name, &pin) {
            Ok(Done {
                action,
                temps,
                tree,
            }) => resources.push(RecoverLine::Done {
                resource: name,
                action: tree.map_or_else(|| recovery::describe(action), recovery::describe_tree),
                temps_removed: temps,
                // A tree's recovery counts as the document's it stands for: `recover`
                // reports what it did (it said `nothing to recover`).
                recovery: tree.map_or(action, recovery::as_document),
            }),
            Err(e) if only.is_some() => return Err(e),
            Err(e) => resources.push(RecoverLine::Failed {
                resource: name,
                error: e.to_string(),
                code: e.exit_code(),
            }),
        }
    }
    Ok(Recovered {
        resources,
        blobs_removed: None,
        downloads_removed: 0,
    })
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

/// [`recover`] with a shared store: removes orphan blobs older than `grace`, then, with a
/// mirror root, recovers the mirror's documents as a local root's and removes downloads
/// its dead processes left.
fn recover_remote(
    ctx: &Ctx,
    remote: &Remote,
    only: Option<&OsStr>,
    root_moved: bool,
    grace: Duration,
) -> Result<Recovered> {
    if root_moved {
        return Err(Error::usage(
            "--root-moved is for a local root's state file; a mirror root is bound to its store",
        ));
    }
    let only = ctx.resource_opt(only)?;
    let mut store = ctx.shared_store("nothing was ever claimed here")?;
    let removed = store.collect(grace)?;
    let mut resources = Vec::new();
    if remote.mirror && ctx.db.exists() {
        // A crashed apply of the version the store publishes is rolled forward first
        // (kept and recorded): every version a mirror applies was committed in the store,
        // and a reader may have seen it.
        let local = session::local(ctx);
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
                resources.push(RecoverLine::RolledForward {
                    resource: version.resource.clone(),
                    action: "rolled forward",
                    temps_removed: 0,
                    epoch,
                });
            }
        }
    }
    drop(store);
    let mut downloads_removed = 0;
    if remote.mirror && ctx.db.exists() {
        downloads_removed = crate::mirror::remove_dead_downloads(ctx)?;
        let local = session::local(ctx);
        let name = only.as_ref().map(|r| OsStr::new(r.as_str()));
        resources.extend(recover_local(&local, name, false)?.resources);
    }
    Ok(Recovered {
        resources,
        blobs_removed: Some(removed),
        downloads_removed,
    })
}
