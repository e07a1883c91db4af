//! A write to a shared store (`--store`): the content goes into the store as a blob,
//! uploaded with no lock held, and one short transaction decides on the same path as a
//! local write (`decide_locked`) and points the resource at it. That COMMIT is the
//! publish; a mirror root on this host is brought up to it by the caller.

use std::io::Read;

use super::{Decided, WriteRequest, answer_unwritten, decide_locked, refuse_early, refuse_empty};

use crate::atomic::Source;
use crate::audit::{Event, EventKind};
use crate::error::{Error, Result};
use crate::failpoints::failpoint;
use crate::outcome::Outcome;
use crate::resource::Resource;
use crate::session::Ctx;
use crate::sink::{Content, WriteDecision, fence_after_write};
use crate::store::{Blob, Store, WriteRecord};

/// What `write` tells when its COMMIT's answer is lost.
const RETRY: &str = "running the same command again is safe: a replay if it was made, else \
                     decided afresh (`stale` if a newer epoch took over meanwhile)";

/// Publishes `source` to `resource` in the shared store under `args.epoch`.
pub(super) fn write(
    ctx: &Ctx,
    args: &WriteRequest<'_>,
    resource: &Resource,
    source: Source<'_>,
) -> Result<Outcome> {
    let mut store = ctx.shared_store("nothing was ever claimed here")?;
    if args.unfenced {
        refuse_unfenced(ctx, &*store.snapshot()?)?;
    }
    refuse_early(ctx, &*store.snapshot()?, resource, args)?;
    let source = refuse_empty(source, ctx, resource, args)?;
    let mut reader: Box<dyn Read + '_> = match source {
        Source::File(file) => Box::new(file),
        Source::Stream(stream) => stream,
    };
    failpoint!("write.before_stage");
    let blob = store.upload(&mut reader)?;
    failpoint!("write.before_lock");
    let published = publish(ctx, &mut *store, resource, args, &blob);
    // A refused, replayed or failed write leaves its blob unused, and so does a write
    // that found the same bytes already stored.
    if !matches!(&published, Ok((Outcome::Written(_), used)) if *used == blob.id) {
        store.discard(blob.id);
    }
    published
        .map(|(outcome, _)| outcome)
        .map_err(|e| e.retry_tells(RETRY))
}

/// Refuses `--unfenced` on a shared store not made for the reproduction: there it would
/// let any epoch, an old one or one never claimed, make its bytes current for every host
/// (see `postgres::REPRODUCTION_KEY`).
fn refuse_unfenced(ctx: &Ctx, tx: &dyn crate::store::ReadTxn) -> Result<()> {
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

/// Decides and publishes under the resource's lock; returns the outcome and the blob the
/// resource now points at.
fn publish(
    ctx: &Ctx,
    store: &mut dyn Store,
    resource: &Resource,
    args: &WriteRequest<'_>,
    blob: &Blob,
) -> Result<(Outcome, i64)> {
    let tx = ctx.begin(store, resource)?;
    let decided = decide_locked(ctx, &*tx, resource, args, &blob.sha256, blob.size)?;
    if decided.decision != WriteDecision::Write {
        return answer_unwritten(ctx, tx, resource, args, decided).map(|outcome| (outcome, 0));
    }
    let Decided {
        now,
        record,
        written,
        ..
    } = decided;
    let owner = written.owner.clone();
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
