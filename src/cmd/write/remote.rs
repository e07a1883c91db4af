//! `fencepost write` against a shared store (`--store`): the content goes into the store
//! as a blob, uploaded with no lock held, and one short transaction decides by the same
//! rules as a local write and points the resource at it. That COMMIT is the publish; a
//! mirror root on this host (`--root`) is then brought up to it.

use std::io::Read;

use super::{WriteArgs, check_issued_owner, refusal, refuse_early, refuse_empty, writer};

use crate::atomic::Source;
use crate::audit::{Event, EventKind};
use crate::cmd::Report;
use crate::error::{Error, Result};
use crate::failpoints::failpoint;
use crate::outcome::{Outcome, Written};
use crate::resource::Resource;
use crate::session::Ctx;
use crate::sink::{Content, WriteDecision, decide, fence_after_write};
use crate::store::{Blob, Store, WriteRecord};

/// What `write` tells when its COMMIT's answer is lost.
const RETRY: &str = "running the same command again is safe: a replay if it was made, else \
                     decided afresh (`stale` if a newer epoch took over meanwhile)";

/// Publishes `source` to `resource` in the shared store under `args.epoch`.
pub(super) fn run(
    ctx: &Ctx,
    args: &WriteArgs,
    resource: &Resource,
    source: Source,
) -> Result<Report> {
    let mut store = ctx.store()?;
    if args.unfenced {
        refuse_unfenced(ctx, &*store.snapshot()?)?;
    }
    refuse_early(ctx, &*store.snapshot()?, resource, args)?;
    let source = refuse_empty(source, ctx, resource, args)?;
    let mut reader: Box<dyn Read> = match source {
        Source::File(file) => Box::new(file),
        Source::Stream(stream) => stream,
    };
    failpoint!("write.before_stage");
    let blob = blobs(&mut *store)?.upload(&mut reader)?;
    failpoint!("write.before_lock");
    let published = publish(ctx, &mut *store, resource, args, &blob);
    // A refused, replayed or failed write leaves its blob unused, and so does a write
    // that found the same bytes already stored.
    if !matches!(&published, Ok((Outcome::Written(_), used)) if *used == blob.id) {
        blobs(&mut *store)?.discard(blob.id);
    }
    let (outcome, _) = published.map_err(|e| e.retry_tells(RETRY))?;
    let (plain, changed) = match outcome {
        Outcome::Written(_) => (
            "written",
            format!("{resource} was written under epoch {}", args.epoch),
        ),
        _ => ("replay", "nothing was changed (a replay)".to_string()),
    };
    if ctx.remote.as_ref().is_some_and(|r| r.mirror) {
        crate::mirror::apply_after_write(ctx, &mut *store, resource);
    }
    Ok(Report::new(plain, outcome).changed(changed))
}

/// Refuses `--unfenced` on a shared store not made for the reproduction: there it would
/// let any epoch, an old one or one never claimed, make its bytes current for every host
/// (see `postgres::REPRODUCTION_KEY`).
fn refuse_unfenced(ctx: &Ctx, tx: &dyn crate::store::Txn) -> Result<()> {
    if tx
        .meta_bytes(crate::store::postgres::REPRODUCTION_KEY)?
        .is_some()
    {
        return Ok(());
    }
    let shown = ctx.remote.as_ref().map_or("", |r| r.url.shown.as_str());
    Err(Error::usage_hint(
        format!(
            "write --unfenced is refused by the store {shown}: without the fence, any epoch \
             would make its bytes current for every host"
        ),
        "drop --unfenced and write with the epoch `claim` printed; --unfenced is for the \
         local state file, or a store that fixtures/reproduce.sh --store made",
    ))
}

fn blobs(store: &mut dyn Store) -> Result<&mut dyn crate::store::Blobs> {
    store.blobs().ok_or(Error::Internal(
        "a shared store without a place for contents",
    ))
}

/// Decides and publishes under the resource's lock; returns the outcome and the blob the
/// resource now points at.
fn publish(
    ctx: &Ctx,
    store: &mut dyn Store,
    resource: &Resource,
    args: &WriteArgs,
    blob: &Blob,
) -> Result<(Outcome, i64)> {
    let tx = ctx.begin(store, resource)?;
    let now = ctx.now();
    let lease = tx.lease(resource)?;
    check_issued_owner(resource, args, lease.as_ref())?;
    let record = tx.sink(resource)?;
    let owner = writer(&*tx, resource, args)?;
    let decision = decide(
        record.as_ref(),
        lease.map(|l| l.epoch),
        args.epoch,
        &blob.sha256,
        args.unfenced,
    );
    let written = Written {
        resource: resource.to_string(),
        epoch: args.epoch,
        owner: owner.clone(),
        sha256: blob.sha256.clone(),
        size: blob.size,
        unfenced: args.unfenced,
        previous_fence: record.as_ref().map(|r| r.fence),
    };
    match decision {
        WriteDecision::Write => {
            let used = tx.reuse_blob(blob)?;
            let content = Content {
                epoch: args.epoch,
                sha256: blob.sha256.clone(),
                size: blob.size,
                written_at: now,
                file: None,
            };
            tx.record_write(
                resource,
                &WriteRecord {
                    fence: fence_after_write(record.as_ref(), args.epoch, args.unfenced),
                    content: &content,
                    owner: owner.as_deref(),
                    blob: Some(used),
                    unfenced: args.unfenced,
                },
            )?;
            let mut event = Event::new(now, resource.as_str(), EventKind::Write)
                .owner(owner.as_deref())
                .epoch(Some(args.epoch))
                .previous(None, record.as_ref().map(|r| r.fence))
                .sha256(Some(&blob.sha256));
            if args.unfenced {
                event = event.detail("unfenced");
            }
            ctx.log(&*tx, &event)?;
            tx.commit()?;
            Ok((Outcome::Written(written), used))
        }
        WriteDecision::Replay => {
            let event = Event::new(now, resource.as_str(), EventKind::Replay)
                .owner(owner.as_deref())
                .epoch(Some(args.epoch))
                .sha256(Some(&written.sha256));
            ctx.log(&*tx, &event)?;
            tx.commit()?;
            Ok((Outcome::Replay(written), 0))
        }
        refused => Err(refusal(resource, args, owner.as_deref(), refused)),
    }
}
