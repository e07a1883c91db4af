//! `remove`: a resource's last version is its removal. The sink decides it as one more
//! version at `(epoch, seq)` (`Body::Removal`), and records a tombstone: the fence stays,
//! so a late writer with an older epoch stays `stale` and cannot bring the document back.
//!
//! On a local root, under the lock: recover, decide, rename the document to its `-gone`
//! link (`atomic::Removal`), fsync the folder, record the tombstone (naming the removed
//! file), COMMIT, then unlink the `-gone` file. A crash before the COMMIT leaves the
//! `-gone` file, which recovery puts back (`sink::recovery`); after it, recovery removes
//! it. A removal that fails (an error, not a crash) puts the document back itself before
//! it exits, as a failed write does. With a shared store the tombstone is the store's record, and mirrors remove their
//! copy when they apply it.

use super::{Decided, WriteRequest, decide_locked, refusal, refuse_early};

use crate::atomic::Removal;
use crate::audit::{Event, EventKind};
use crate::error::{Error, Result};
use crate::failpoints::failpoint;
use crate::outcome::{Outcome, Removed};
use crate::resource::{DocPath, Resource};
use crate::session::Ctx;
use crate::sink::{Body, Content, Recorded, WriteDecision, fence_after_write};
use crate::store::{Txn, WriteRecord};

/// Removes `args.resource`'s document under `args`'s version (`from`, `allow_empty` and
/// `unfenced` are not asked): `Outcome::Removed` or `Outcome::RemoveReplay`, or a refusal.
pub fn remove(ctx: &Ctx, args: &WriteRequest<'_>) -> Result<Outcome> {
    let resource = super::check_request(ctx, args)?;
    if args.unfenced {
        return Err(Error::usage("a removal is always fenced"));
    }
    let mut store = ctx.store()?;
    refuse_early(
        ctx,
        &*store.snapshot()?,
        &resource,
        args,
        super::Publishes::Removal,
    )?;
    // No folder is made for a removal: a document whose folder is missing is not there.
    let doc = if ctx.remote.is_some() {
        None
    } else {
        let doc = crate::resource::locate(&ctx.root, &resource, false)?;
        if let Some(doc) = &doc {
            crate::session::refuse_state_file(ctx, doc, &resource)?;
        }
        doc
    };
    failpoint!("remove.before_lock");
    let tx = ctx.begin(&mut *store, &resource)?;
    let decided = decide_locked(ctx, &*tx, &resource, args, Body::Removal, 0)?;
    match decided.decision {
        WriteDecision::Write => {
            let target = Target {
                ctx,
                resource: &resource,
                args,
            };
            target.take(tx, doc.as_ref(), decided)
        }
        WriteDecision::Replay => {
            let event = Event::new(decided.now, resource.as_str(), EventKind::Replay)
                .owner(decided.written.owner.as_deref())
                .epoch(Some(args.epoch))
                .seq(args.seq)
                .detail("removal");
            ctx.log(&*tx, &event)?;
            tx.commit()?;
            Ok(Outcome::RemoveReplay(Removed {
                replay: true,
                ..answer(decided, false)
            }))
        }
        refused => Err(refusal(
            &resource,
            args,
            decided.written.owner.as_deref(),
            refused,
        )),
    }
}

/// The removal being made.
#[derive(Clone, Copy)]
struct Target<'a> {
    ctx: &'a Ctx,
    resource: &'a Resource,
    args: &'a WriteRequest<'a>,
}

impl Target<'_> {
    /// The part under the lock once the removal is accepted: take the document away
    /// (local root), record the tombstone, COMMIT, then drop the `-gone` file. On any
    /// failure before the COMMIT the document is put back.
    fn take(
        self,
        tx: Box<dyn Txn + '_>,
        doc: Option<&DocPath>,
        decided: Decided,
    ) -> Result<Outcome> {
        let Target { ctx, resource, .. } = self;
        let recorded_before = decided
            .record
            .as_ref()
            .and_then(|r| r.content.as_ref())
            .and_then(Recorded::of);
        if let Some(doc) = doc {
            doc.check_unmoved(&ctx.root, resource)?;
        }
        let removal = match doc {
            Some(doc) => Removal::take(doc, was_tree(&decided))?,
            None => None,
        };
        let recorded = removal
            .as_ref()
            .map_or(Ok(()), Removal::sync)
            .and_then(|()| self.record(&*tx, &decided, removal.as_ref()));
        if let Err(e) = recorded {
            // Still under the lock, and the transaction will roll back: put the document
            // back.
            if let (Some(doc), Some(removal)) = (doc, &removal) {
                crate::recovery::undo(doc, recorded_before, &removal.links())?;
            }
            return Err(e);
        }
        if let Err(e) = tx.commit() {
            // The lock went with the transaction: recovery, in a transaction of its own,
            // puts the document back or, if the COMMIT happened after all, drops the
            // `-gone` file (as a write's failed COMMIT, `super::after_failed_commit`).
            let event = Event::new(decided.now, resource.as_str(), EventKind::CommitFailed)
                .owner(decided.written.owner.as_deref())
                .epoch(Some(self.args.epoch))
                .seq(self.args.seq)
                .detail(format!("removal: {e}"));
            super::recover_after_failed_commit(ctx, resource, &event)?;
            return Err(e);
        }
        let hook = (|| -> Result<()> {
            failpoint!("remove.before_cleanup");
            Ok(())
        })();
        let had_document = removal.is_some();
        if let Some(removal) = removal {
            removal.drop_links();
        }
        hook?;
        Ok(Outcome::Removed(answer(decided, had_document)))
    }

    /// Records the tombstone (the fence, the removal's version and the removed file) and
    /// logs it, in `tx`.
    fn record(self, tx: &dyn Txn, decided: &Decided, removal: Option<&Removal<'_>>) -> Result<()> {
        let Target {
            ctx,
            resource,
            args,
        } = self;
        let content = Content {
            epoch: args.epoch,
            seq: args.seq,
            removed: true,
            // A removal keeps the resource's kind.
            tree: was_tree(decided),
            sha256: String::new(),
            size: 0,
            written_at: decided.now,
            file: removal.map(|r| r.id),
        };
        let owner = decided.written.owner.as_deref();
        tx.record_write(
            resource,
            &WriteRecord {
                fence: fence_after_write(decided.record.as_ref(), args.epoch, false),
                content: &content,
                owner,
                blob: None,
                unfenced: false,
                manifest: None,
            },
        )?;
        let mut event = Event::new(decided.now, resource.as_str(), EventKind::Remove)
            .owner(owner)
            .epoch(Some(args.epoch))
            .seq(args.seq)
            .previous(None, decided.record.as_ref().map(|r| r.fence));
        if removal.is_none() && ctx.remote.is_none() {
            event = event.detail("no document was there: a tombstone only");
        }
        ctx.log(tx, &event)?;
        failpoint!("remove.before_commit");
        Ok(())
    }
}

/// Whether the resource the removal retires is a tree.
fn was_tree(decided: &Decided) -> bool {
    decided
        .record
        .as_ref()
        .and_then(|r| r.content.as_ref())
        .is_some_and(|c| c.tree)
}

/// The answer of an accepted removal.
fn answer(decided: Decided, had_document: bool) -> Removed {
    let written = decided.written;
    Removed {
        resource: written.resource,
        epoch: written.epoch,
        seq: written.seq,
        owner: written.owner,
        previous_fence: written.previous_fence,
        had_document,
        removed: true,
        replay: false,
    }
}
