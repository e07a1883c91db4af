//! A write to a shared store (`--store`): the content goes into the store as a blob, and
//! one short transaction decides on the same path as a local write (`decide_locked`) and
//! points the resource at it. That COMMIT is the publish; a mirror root on this host is
//! brought up to it by the caller. A small document (one chunk, [`SMALL_BLOB`]) goes in
//! with that transaction, one transaction in all; a larger one is uploaded first, with no
//! lock held, once a first look has found that the write is not refused already.

use std::io::Read;

use sha2::{Digest, Sha256};

use super::{Decided, WriteRequest, answer_unwritten, decide_locked, refuse_early, refuse_empty};

use crate::atomic::Source;
use crate::audit::{Event, EventKind};
use crate::error::{Error, Result};
use crate::failpoints::failpoint;
use crate::outcome::Outcome;
use crate::resource::Resource;
use crate::session::Ctx;
use crate::sink::{Body, Content, WriteDecision, fence_after_write};
use crate::store::{Blob, SMALL_BLOB, Store, WriteRecord};

/// What `write` tells when its COMMIT's answer is lost.
pub(super) const RETRY: &str = "running the same command again is safe: a replay if it was made, else \
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
    let reader = match small(source, ctx, resource)? {
        // Nothing to publish: a write refused for its epoch says so first, as a larger
        // one does.
        Sized::Small(bytes) if bytes.is_empty() && !args.allow_empty => {
            refuse_early(
                ctx,
                &*store.snapshot()?,
                resource,
                args,
                super::Publishes::Document,
            )?;
            refuse_empty(
                Source::Stream(Box::new(std::io::empty())),
                ctx,
                resource,
                args,
            )?;
            return Err(Error::Internal("empty content was not refused"));
        }
        // The bytes go in with the publish: one transaction, which decides as any write
        // does (a refusal changes nothing).
        Sized::Small(bytes) => {
            failpoint!("write.before_lock");
            let sha256 = crate::text::hex(&Sha256::digest(&bytes));
            let content = Bytes::Small {
                bytes: &bytes,
                sha256,
            };
            return publish(ctx, &mut *store, resource, args, &content)
                .map(|(outcome, _)| outcome)
                .map_err(|e| e.retry_tells(RETRY));
        }
        Sized::Large(reader) => reader,
    };
    // Refused before the upload where the answer is known already: a stale or unissued
    // write does not send its bytes.
    refuse_early(
        ctx,
        &*store.snapshot()?,
        resource,
        args,
        super::Publishes::Document,
    )?;
    let mut reader = reader;
    failpoint!("write.before_stage");
    let blob = store.upload(&mut reader)?;
    failpoint!("write.before_lock");
    let published = publish(ctx, &mut *store, resource, args, &Bytes::Uploaded(&blob));
    // A refused, replayed or failed write leaves its blob unused, and so does a write
    // that found the same bytes already stored.
    if !matches!(&published, Ok((Outcome::Written(_), used)) if *used == blob.id) {
        store.discard(blob.id);
    }
    published
        .map(|(outcome, _)| outcome)
        .map_err(|e| e.retry_tells(RETRY))
}

/// A document's bytes, by size: up to [`SMALL_BLOB`] in memory, or a reader of more.
enum Sized<'s> {
    Small(Vec<u8>),
    Large(Box<dyn Read + 's>),
}

/// Reads `source` into memory if it holds at most [`SMALL_BLOB`] bytes; otherwise gives
/// back a reader of all of it (what was read first, then the rest). A regular file that
/// says it is larger is not read here.
fn small<'s>(source: Source<'s>, ctx: &Ctx, resource: &Resource) -> Result<Sized<'s>> {
    let reader: Box<dyn Read + 's> = match source {
        Source::File(file)
            if file
                .metadata()
                .is_ok_and(|m| m.is_file() && m.len() > SMALL_BLOB as u64) =>
        {
            return Ok(Sized::Large(Box::new(file)));
        }
        Source::File(file) => Box::new(file),
        Source::Stream(stream) => stream,
    };
    let mut head = Vec::new();
    let limit = u64::try_from(SMALL_BLOB).unwrap_or(u64::MAX) + 1;
    let mut reader = reader;
    (&mut reader)
        .take(limit)
        .read_to_end(&mut head)
        .map_err(Error::io(
            "cannot read the content for",
            ctx.root.join(resource.as_str()),
        ))?;
    if head.len() <= SMALL_BLOB {
        return Ok(Sized::Small(head));
    }
    Ok(Sized::Large(Box::new(
        std::io::Cursor::new(head).chain(reader),
    )))
}

/// The bytes a publish points the resource at.
enum Bytes<'a> {
    /// Uploaded already, as this blob.
    Uploaded(&'a Blob),
    /// A small document's, put in by the publishing transaction.
    Small { bytes: &'a [u8], sha256: String },
}

impl Bytes<'_> {
    fn sha256(&self) -> &str {
        match self {
            Bytes::Uploaded(blob) => &blob.sha256,
            Bytes::Small { sha256, .. } => sha256,
        }
    }

    fn size(&self) -> u64 {
        match self {
            Bytes::Uploaded(blob) => blob.size,
            Bytes::Small { bytes, .. } => bytes.len() as u64,
        }
    }
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
    bytes: &Bytes<'_>,
) -> Result<(Outcome, i64)> {
    let tx = ctx.begin(store, resource)?;
    let (sha256, size) = (bytes.sha256(), bytes.size());
    // A tree's name takes no document: read from the record the decision reads, no
    // statement more.
    let decided = decide_locked(ctx, &*tx, resource, args, Body::Bytes(sha256), size)?;
    if decided
        .record
        .as_ref()
        .and_then(|r| r.content.as_ref())
        .is_some_and(|c| c.tree)
    {
        return Err(super::tree_name_taken(resource));
    }
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
    let used = match bytes {
        Bytes::Uploaded(blob) => tx.reuse_blob(blob)?,
        Bytes::Small { bytes, sha256 } => tx.put_small_blob(bytes, sha256)?,
    };
    let content = Content {
        epoch: args.epoch,
        seq: args.seq,
        removed: false,
        tree: false,
        sha256: sha256.to_string(),
        size,
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
            manifest: None,
        },
    )?;
    let mut event = Event::new(now, resource.as_str(), EventKind::Write)
        .owner(owner.as_deref())
        .epoch(Some(args.epoch))
        .seq(args.seq)
        .previous(None, record.as_ref().map(|r| r.fence))
        .sha256(Some(sha256));
    if args.unfenced {
        event = event.detail("unfenced");
    }
    ctx.log(&*tx, &event)?;
    tx.commit()?;
    Ok((Outcome::Written(written), used))
}
