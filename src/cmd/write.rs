//! `fencepost write`: the sink. Replace a document only if its epoch is still current.
//!
//! Order (each step's crash outcome is in the README's design section):
//! stage the bytes in a temp file and fsync it, with no lock held; then in one
//! `BEGIN IMMEDIATE` transaction: recover, check the epoch, link `-pre`/`-new`, rename,
//! fsync the folder, record the epoch and hash, COMMIT; then the writer drops its own
//! links.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::path::PathBuf;

use clap::Args;
use nix::fcntl::{FcntlArg, fcntl};
use serde_json::json;

use super::{Ctx, Report, check_epoch, check_owner};
use crate::atomic::{self, Source, Staged};
use crate::audit::Event;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::lease::Lease;
use crate::resource::{DocPath, Resource};
use crate::sink::{Content, SinkRecord, WriteDecision, decide, fence_after_write};
use crate::store::Txn;

/// Replace RESOURCE's document with stdin (or --from FILE) if EPOCH is still current.
///
/// Prints `written`, or `replay` when this epoch already wrote these exact bytes (exit 0,
/// file untouched). Refusals change nothing: `stale` (exit 5) when a newer epoch was
/// accepted or registered by a takeover claim, `conflict` (6) for different bytes under
/// the same epoch, `unissued` (8) for an epoch `claim` never gave out for this resource.
/// The new content is written and fsynced before the state file is locked; then it
/// replaces the document by an atomic rename. A new document gets the usual mode under
/// your umask; a rewrite keeps the document's mode.
///
/// With stdin, whatever arrives before end-of-file is published: render to a file and
/// use --from when the producer can fail half-way.
///
/// Example:
///   render-report > out.tmp && fencepost write reports/daily.md --epoch "$epoch" --from out.tmp
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct WriteArgs {
    /// The document's path relative to --root, e.g. reports/daily.md.
    #[arg(env = "FENCEPOST_RESOURCE")]
    pub resource: OsString,

    /// The epoch `claim` printed for this resource.
    #[arg(long, env = "FENCEPOST_EPOCH", allow_negative_numbers = true)]
    pub epoch: i64,

    /// The writer's owner name; if given, the epoch must have been issued to it.
    #[arg(long, env = "FENCEPOST_OWNER")]
    pub owner: Option<String>,

    /// Read the content from FILE instead of stdin.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,

    /// DANGER, for reproducing the bug only: accept any epoch, as a sink without fencing
    /// would. A paused old worker can then overwrite a newer document.
    #[arg(long)]
    pub unfenced: bool,
}

pub fn run(ctx: &Ctx, args: &WriteArgs) -> Result<Report> {
    let resource = ctx.resource(&args.resource)?;
    check_epoch(args.epoch)?;
    if let Some(owner) = &args.owner {
        check_owner(owner)?;
    }
    let mut source = match &args.from {
        Some(path) => Source::File(open_source(path)?),
        None => {
            let stdin = io::stdin();
            if stdin.is_terminal() {
                return Err(Error::usage_hint(
                    "write reads the document from stdin, which is a terminal",
                    "pipe the content in (`render | fencepost write ...`) or pass --from FILE",
                ));
            }
            Source::Stream(Box::new(Piped {
                stdin: stdin.lock(),
                read: 0,
                widened: false,
            }))
        }
    };
    let mut store = ctx.store()?;

    // Early answer for requests that cannot succeed, before reading a byte or creating a
    // folder. Advisory only: the decision that counts is taken again under the lock.
    {
        let tx = store.snapshot()?;
        tx.check_clock(ctx.clock.kind())?;
        ctx.check_root(&tx)?;
        let (lease, record) = (tx.lease(&resource)?, tx.sink(&resource)?);
        check_issued_owner(&resource, args, lease.as_ref())?;
        if let d @ (WriteDecision::Stale { .. } | WriteDecision::Unissued { .. }) = decide(
            record.as_ref(),
            lease.map(|l| l.epoch),
            args.epoch,
            "",
            args.unfenced,
        ) {
            let owner = writer(&tx, &resource, args)?;
            return Err(refusal(&resource, args, owner.as_deref(), d));
        }
    }

    let mut doc = crate::resource::locate(&ctx.root, &resource, true)?
        .ok_or_else(|| Error::usage(format!("cannot place {resource}")))?;
    let written = stage_and_publish(ctx, &mut store, &doc, &resource, args, &mut source);
    if written.is_err() {
        // Nothing was published: folders made for this write go again.
        doc.remove_made_folders();
    }
    let (outcome, sha256, size, record, owner) = written?;
    Ok(Report::new(
        outcome,
        json!({
            "outcome": outcome,
            "resource": resource.as_str(),
            "epoch": args.epoch,
            "owner": owner,
            "sha256": sha256,
            "size": size,
            "unfenced": args.unfenced,
            "previous_fence": record.map(|r| r.fence),
        }),
    ))
}

/// What an accepted write reports: its outcome word, the bytes' hash and size, the
/// record before it, and the writer's name.
type Written = (
    &'static str,
    String,
    u64,
    Option<SinkRecord>,
    Option<String>,
);

/// Stages the content beside the document, then decides and publishes under the lock.
fn stage_and_publish(
    ctx: &Ctx,
    store: &mut crate::store::Store,
    doc: &DocPath,
    resource: &Resource,
    args: &WriteArgs,
    source: &mut Source,
) -> Result<Written> {
    super::refuse_state_file(ctx, doc, resource)?;
    let existing = atomic::inspect_document(doc)?;
    // The WAL's name is durable already: opening the store fsynced its folder if the WAL
    // was new (`Store::open`), and this open connection keeps it from being deleted.
    if let Some(path) = &args.from
        && let Ok(meta) = std::fs::metadata(path)
    {
        atomic::ensure_space(doc.folder.path(), meta.len())?;
    }
    crate::failpoint!("write.before_stage");
    let mut staged = atomic::stage(doc, source, existing.as_ref())?;

    crate::failpoint!("write.before_lock");
    let now = ctx.clock.now();
    let tx = ctx.begin(store, resource)?;
    let lease = tx.lease(resource)?;
    check_issued_owner(resource, args, lease.as_ref())?;
    let record = tx.sink(resource)?;
    let owner = writer(&tx, resource, args)?;
    let decision = decide(
        record.as_ref(),
        lease.map(|l| l.epoch),
        args.epoch,
        &staged.sha256,
        args.unfenced,
    );
    // A replay is a no-op only while the document still holds those bytes; if it went
    // missing or was changed by hand, publishing the epoch's value again restores it.
    let republish = decision == WriteDecision::Replay && !on_disk(doc, &staged.sha256)?;
    let decision = if republish {
        WriteDecision::Write
    } else {
        decision
    };
    let (sha256, size) = (staged.sha256.clone(), staged.size);
    let outcome = match decision {
        WriteDecision::Write => {
            let how = Publish {
                owner: owner.as_deref(),
                now,
                republish,
            };
            publish(
                ctx,
                tx,
                doc,
                resource,
                args,
                record.as_ref(),
                &mut staged,
                how,
            )?;
            "written"
        }
        WriteDecision::Replay => {
            let event = Event::new(now, resource.as_str(), "replay")
                .owner(owner.as_deref())
                .epoch(Some(args.epoch))
                .sha256(Some(&sha256));
            ctx.log(&tx, &event)?;
            tx.commit()?;
            "replay"
        }
        refused => return Err(refusal(resource, args, owner.as_deref(), refused)),
    };
    Ok((outcome, sha256, size, record, owner))
}

/// The part under the lock once the write is accepted: links, rename, folder fsync,
/// record, COMMIT, then this writer's own links go. On any failure before the COMMIT the
/// document is put back as it was.
#[allow(clippy::too_many_arguments)]
fn publish(
    ctx: &Ctx,
    tx: Txn<'_>,
    doc: &DocPath,
    resource: &Resource,
    args: &WriteArgs,
    record: Option<&SinkRecord>,
    staged: &mut Staged<'_>,
    how: Publish<'_>,
) -> Result<()> {
    let Publish {
        owner,
        now,
        republish,
    } = how;
    let content = Content {
        epoch: args.epoch,
        sha256: staged.sha256.clone(),
        size: staged.size,
        written_at: now,
        file: Some(staged.id),
    };
    let recorded_before = record.and_then(|r| r.content.as_ref()).and_then(|c| c.file);
    // Checked before the recovery links are made (so none lands in a folder moved out of
    // the root), and again just before the rename.
    doc.check_unmoved(&ctx.root, resource)?;
    let exists = atomic::inspect_document(doc)?.is_some();
    let staged_change = staged
        .link_for_recovery(exists)
        .and_then(|()| doc.check_unmoved(&ctx.root, resource))
        .and_then(|()| staged.rename_into_place())
        .and_then(|()| {
            let fence = fence_after_write(record, args.epoch, args.unfenced);
            tx.record_write(resource, fence, &content, owner)?;
            let mut event = Event::new(now, resource.as_str(), "write")
                .owner(owner)
                .epoch(Some(args.epoch))
                .previous(None, record.map(|r| r.fence))
                .sha256(Some(&content.sha256));
            if args.unfenced {
                event = event.detail("unfenced");
            } else if republish {
                event = event.detail("republished: the document had gone missing or drifted");
            }
            ctx.log(&tx, &event)
        });
    if let Err(e) = staged_change {
        // Still under the lock, and the transaction will roll back: undo this write's
        // rename against the record as it was before it.
        super::recover::undo(doc, recorded_before, &staged.links())?;
        return Err(e);
    }
    if let Err(e) = tx.commit() {
        // The lock is gone with the failed commit; recover against whatever the state
        // file now says, in a transaction of its own. That transaction must write: a
        // COMMIT whose WAL fsync failed can leave its frames in the WAL past the last
        // valid commit, and a later WAL recovery (after another connection dies without
        // closing) would bring the write back over the rolled-back document. Committing
        // an event overwrites those frames.
        let mut store = ctx.store()?;
        let _ = ctx.begin(&mut store, resource).and_then(|tx| {
            let event = Event::new(now, resource.as_str(), "commit-failed")
                .owner(owner)
                .epoch(Some(args.epoch))
                .sha256(Some(&content.sha256))
                .detail(e.to_string());
            ctx.log(&tx, &event)?;
            tx.commit()
        });
        return Err(e);
    }
    crate::failpoint!("write.before_cleanup");
    staged.drop_links();
    Ok(())
}

/// Who and when, for the record of an accepted write.
#[derive(Debug, Clone, Copy)]
struct Publish<'a> {
    owner: Option<&'a str>,
    now: i64,
    /// Same epoch and bytes as recorded, but the document on disk no longer held them.
    republish: bool,
}

/// Whether the document on disk holds exactly the bytes hashed to `sha256`.
fn on_disk(doc: &DocPath, sha256: &str) -> Result<bool> {
    if atomic::inspect_document(doc)?.is_none() {
        return Ok(false);
    }
    let (on_disk, _) = atomic::hash_document(doc)?;
    Ok(on_disk == sha256)
}

/// The writer's name for the record and the log: `--owner`, or else the owner `claim`
/// issued this epoch to.
fn writer(tx: &Txn<'_>, resource: &Resource, args: &WriteArgs) -> Result<Option<String>> {
    match &args.owner {
        Some(owner) => Ok(Some(owner.clone())),
        None => tx.issued_to(resource, args.epoch),
    }
}

/// With `--owner`, the epoch must have been issued to that owner (when the lease still
/// carries it; older epochs are decided by the fence).
fn check_issued_owner(resource: &Resource, args: &WriteArgs, lease: Option<&Lease>) -> Result<()> {
    match (args.owner.as_deref(), lease) {
        (Some(owner), Some(lease)) if lease.epoch == args.epoch && lease.owner != owner => {
            Err(Error::Refused(Refusal::new(
                RefusalKind::Unissued,
                format!(
                    "epoch {} of {resource} was issued to {}, not {owner}",
                    args.epoch, lease.owner
                ),
                json!({
                    "resource": resource.as_str(),
                    "epoch": args.epoch,
                    "owner": owner,
                    "issued_to": lease.owner,
                }),
            )))
        }
        _ => Ok(()),
    }
}

fn refusal(
    resource: &Resource,
    args: &WriteArgs,
    owner: Option<&str>,
    decision: WriteDecision,
) -> Error {
    let epoch = args.epoch;
    let (kind, message, extra) = match decision {
        WriteDecision::Stale { fence } => (
            RefusalKind::Stale,
            format!("epoch {epoch} is older than epoch {fence} already accepted for {resource}"),
            json!({ "fence": fence }),
        ),
        WriteDecision::Conflict { recorded_sha256 } => (
            RefusalKind::Conflict,
            format!("epoch {epoch} already wrote different content to {resource}"),
            json!({ "fence": epoch, "recorded_sha256": recorded_sha256 }),
        ),
        WriteDecision::Unissued { issued } => (
            RefusalKind::Unissued,
            match issued {
                Some(max) => {
                    format!("epoch {epoch} was never issued for {resource} (highest issued: {max})")
                }
                None => format!("no epoch was ever issued for {resource}: claim it first"),
            },
            json!({ "issued": issued }),
        ),
        WriteDecision::Write | WriteDecision::Replay => {
            return Error::usage("internal: accepted write reported as refusal");
        }
    };
    let mut fields = json!({ "resource": resource.as_str(), "epoch": epoch, "owner": owner });
    if let (Some(map), serde_json::Value::Object(more)) = (fields.as_object_mut(), extra) {
        map.extend(more);
    }
    Error::Refused(Refusal::new(kind, message, fields))
}

/// Stdin, whose pipe is widened (`widen_pipe`) once the content has proved big.
struct Piped {
    stdin: io::StdinLock<'static>,
    read: u64,
    widened: bool,
}

/// Content read from stdin before its pipe is widened. Small documents, the common case
/// and often many at once, keep the default pipe: a wider one counts against the user's
/// pipe budget (`/proc/sys/fs/pipe-user-pages-soft`), shared with all their programs.
const WIDEN_AFTER: u64 = 1 << 20;

impl Read for Piped {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stdin.read(buf)?;
        self.read += n as u64;
        if !self.widened && self.read >= WIDEN_AFTER {
            self.widened = true;
            widen_pipe(&io::stdin());
        }
        Ok(n)
    }
}

/// Piped content arrives at most 64 KiB per read by default (the pipe's capacity), so
/// the producer and the copy take turns many times per megabyte. Ask the kernel for a
/// 1 MiB pipe (the unprivileged limit by default); if it says no, or stdin is not a
/// pipe, the copy is only slower. Never shrinks a pipe that is already larger.
fn widen_pipe(stdin: &io::Stdin) {
    const WANT: i32 = 1 << 20;
    if fcntl(stdin, FcntlArg::F_GETPIPE_SZ).is_ok_and(|size| size < WANT) {
        let _ = fcntl(stdin, FcntlArg::F_SETPIPE_SZ(WANT));
    }
}

fn open_source(path: &PathBuf) -> Result<File> {
    let file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => {
            Error::usage(format!("cannot read --from {}: {e}", path.display()))
        }
        _ => Error::io("cannot open", path)(e),
    })?;
    match file.metadata() {
        Ok(meta) if meta.is_dir() => Err(Error::usage(format!(
            "cannot read --from {}: it is a folder",
            path.display()
        ))),
        _ => Ok(file),
    }
}
