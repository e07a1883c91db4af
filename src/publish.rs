//! The sink: publish a document only if its epoch is still current. One decision path
//! for both stores: under the resource's lock, the lease and the sink's record decide
//! (`sink::decide`); a local root then renames the staged file into place, a shared store
//! points the resource at the uploaded blob (`store.rs`). `mirror.rs` applies a shared
//! store's versions to a mirror root through the same path.
//!
//! Order (each step's crash outcome is in docs/crash-safety.md):
//! stage the bytes in a temp file and fsync it, with no lock held; then in one
//! `BEGIN IMMEDIATE` transaction: recover, check the epoch, link `-pre`/`-new`, rename,
//! fsync the folder, record the epoch and hash, COMMIT; then the writer drops its own
//! links.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::atomic::{self, Source, Staged, Unsynced};
use crate::audit::{Event, EventKind};
use crate::error::{Error, Refusal, Result};
use crate::failpoints::failpoint;
use crate::lease::Lease;
use crate::outcome::{Outcome, RefusalDetail, Written};
use crate::resource::{DocPath, Resource};
use crate::session::{Ctx, check_epoch, check_owner};
use crate::sink::{
    Body, Content, Offer, Recorded, SinkRecord, WriteDecision, decide, fence_after_write,
};
use crate::store::{ReadTxn, Txn, WriteRecord};

mod remove;
mod store;
mod store_tree;
mod tree;

pub use remove::remove;
pub use tree::{TreeRequest, write_tree};

/// A write as the sink takes it: the resource as named, the writer's epoch and owner, and
/// how to treat the content.
#[derive(Debug, Clone, Copy)]
pub struct WriteRequest<'a> {
    /// The resource, as the caller names it (see `Ctx::resource`).
    pub resource: &'a OsStr,
    /// The epoch `claim` gave the writer.
    pub epoch: i64,
    /// The version's place within the epoch (`--seq`; 0 without): a retry of one version
    /// keeps its seq, the next version of the same lease passes a higher one.
    pub seq: i64,
    /// The writer's owner name; if given, the epoch must have been issued to it.
    pub owner: Option<&'a str>,
    /// Where the content comes from, when it is a file (named in messages, and its size
    /// checked against the free space first); `None`: a stream.
    pub from: Option<&'a Path>,
    /// Publish empty content, which is refused without it.
    pub allow_empty: bool,
    /// Accept any epoch, as a sink without fencing would (the reproduction only).
    pub unfenced: bool,
    /// A version the shared store published, applied to a mirror root: the store issued
    /// the epoch, so no local lease is asked for.
    pub applied: bool,
}

/// Publishes the content `source` gives under `args`'s epoch: `Outcome::Written` or
/// `Outcome::Replay`, or a refusal. The request is checked before `source` is asked
/// for its content (a bad epoch never opens a file or reads stdin).
pub fn write<'s>(
    ctx: &Ctx,
    args: &WriteRequest<'_>,
    source: impl FnOnce() -> Result<Source<'s>>,
) -> Result<Outcome> {
    let resource = check_request(ctx, args)?;
    let source = source()?;
    if ctx.remote.is_some() {
        return store::write(ctx, args, &resource, source);
    }
    let source = match overlappable(ctx, &resource, args, source) {
        Ok((file, doc)) => return run_overlapped(ctx, args, &resource, file, &doc),
        Err(source) => source,
    };
    let mut store = ctx.store()?;
    refuse_early(
        ctx,
        &*store.snapshot()?,
        &resource,
        args,
        Publishes::Document,
    )?;
    // Before any folder is created for the document: empty content is refused.
    let mut source = refuse_empty(source, ctx, &resource, args)?;

    let mut doc = crate::resource::locate(&ctx.root, &resource, true)?
        .ok_or_else(|| Error::usage(format!("cannot place {resource}")))?;
    let target = Target {
        ctx,
        doc: &doc,
        resource: &resource,
        args,
    };
    let written = stage_and_publish(&target, &mut *store, &mut source);
    if written.is_err() {
        // Nothing was published: folders made for this write go again.
        doc.remove_made_folders();
    }
    written
}

/// The request's own checks, before anything is opened or read: its name (on a mirror
/// root, not reached through a symlink), its epoch, seq and owner. Returns the resource.
fn check_request(ctx: &Ctx, args: &WriteRequest<'_>) -> Result<Resource> {
    let resource = ctx.resource(args.resource)?;
    if args.applied {
        refuse_resolved(ctx, args, &resource)?;
    }
    check_epoch(args.epoch)?;
    check_seq(args.seq)?;
    if let Some(owner) = args.owner {
        check_owner(owner)?;
    }
    Ok(resource)
}

/// Refuses a negative seq (0 is a version without one).
fn check_seq(seq: i64) -> Result<()> {
    if seq < 0 {
        return Err(Error::usage(format!(
            "a seq is a whole number from 1 (0 for none), not {seq}"
        )));
    }
    Ok(())
}

/// A mirror holds the store's names as real paths: a name that reaches its document
/// through a symlink on this host would be another resource here than on other hosts.
fn refuse_resolved(ctx: &Ctx, args: &WriteRequest<'_>, resource: &Resource) -> Result<()> {
    let spelled = ctx.spelled(args.resource)?;
    if spelled == *resource {
        return Ok(());
    }
    Err(Error::usage_hint(
        format!(
            "{spelled} reaches through a symlink in the mirror root {} (to {resource}): \
             not applied",
            ctx.root.display()
        ),
        "a mirror root holds the store's names as real paths: remove the symlink",
    ))
}

/// The early answer for requests that cannot succeed (a stale or unissued epoch, an
/// owner the epoch was not issued to), read from a snapshot before a byte is read or a
/// folder made. Advisory only: the decision that counts is taken again under the lock.
fn refuse_early(
    ctx: &Ctx,
    tx: &dyn ReadTxn,
    resource: &Resource,
    args: &WriteRequest<'_>,
    publishes: Publishes,
) -> Result<()> {
    if !ctx.applying && ctx.remote.is_none() {
        crate::session::refuse_local_change(ctx, tx)?;
    }
    tx.check_clock(ctx.clock.kind())?;
    ctx.check_root(tx)?;
    let (lease, record) = (issuing_lease(tx, resource, args)?, tx.sink(resource)?);
    check_kind(resource, record.as_ref(), publishes)?;
    check_issued_owner(resource, args, lease.as_ref())?;
    if let d @ (WriteDecision::Stale { .. } | WriteDecision::Unissued { .. }) = decide(
        record.as_ref(),
        issued(lease.as_ref(), args),
        &offer(args, Body::Bytes("")),
        args.unfenced,
    ) {
        let owner = writer(tx, resource, args)?;
        return Err(refusal(resource, args, owner.as_deref(), d));
    }
    Ok(())
}

/// What a request publishes, for the kind check of [`refuse_early`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publishes {
    Document,
    Tree,
    /// A removal, of either.
    Removal,
}

/// A resource is a document or a tree for its whole life (a removal keeps its kind): a
/// document is refused where the sink recorded a tree, and the reverse. Bad input, said
/// before the fence is asked.
fn check_kind(
    resource: &Resource,
    record: Option<&SinkRecord>,
    publishes: Publishes,
) -> Result<()> {
    let Some(content) = record.and_then(|r| r.content.as_ref()) else {
        return Ok(());
    };
    match publishes {
        Publishes::Document if content.tree => Err(tree_name_taken(resource)),
        Publishes::Tree if !content.tree => Err(tree::document_name_taken(resource)),
        _ => Ok(()),
    }
}

/// The refusal of a document where a tree was published.
fn tree_name_taken(resource: &Resource) -> Error {
    Error::usage_hint(
        format!("{resource} is a tree: a document cannot be published there"),
        "publish the folder with --tree DIR, or pick another name",
    )
}

/// The write being made: the document it replaces, its resource and the request.
#[derive(Debug, Clone, Copy)]
struct Target<'a> {
    ctx: &'a Ctx,
    doc: &'a DocPath,
    resource: &'a Resource,
    args: &'a WriteRequest<'a>,
}

/// Stages the content beside the document, then decides and publishes under the lock.
fn stage_and_publish(
    target: &Target<'_>,
    store: &mut dyn crate::store::Store,
    source: &mut Source<'_>,
) -> Result<Outcome> {
    let (ctx, doc) = (target.ctx, target.doc);
    crate::session::refuse_state_file(ctx, doc, target.resource)?;
    let size = target
        .args
        .from
        .and_then(|path| std::fs::metadata(path).ok());
    let mut staged = stage(doc, source, size.map(|m| m.len()))?;
    publish_staged(target, store, &mut staged)
}

/// Stages the content beside the document (after checking there is room for `size`
/// bytes, when known): the temp file, written and fsynced, with no lock held.
fn stage<'d>(doc: &'d DocPath, source: &mut Source<'_>, size: Option<u64>) -> Result<Staged<'d>> {
    let unsynced = stage_unsynced(doc, source, size)?;
    unsynced.sync()?;
    unsynced.synced()
}

/// [`stage`] but for its fsync, which the caller makes (`Unsynced::sync`, then
/// `Unsynced::synced`).
fn stage_unsynced<'d>(
    doc: &'d DocPath,
    source: &mut Source<'_>,
    size: Option<u64>,
) -> Result<Unsynced<'d>> {
    let existing = atomic::inspect_document(doc)?;
    // The WAL's name is durable before anything commits into it: opening the store (before
    // or, for `run_overlapped`, alongside the staged file's fsync) fsyncs its folder if the
    // WAL was new (`Store::open`), and the open connection keeps it from being deleted.
    if let Some(size) = size {
        atomic::ensure_space(doc.folder.path(), size)?;
    }
    failpoint!("write.before_stage");
    atomic::stage_unsynced(doc, source, existing.as_ref())
}

/// Largest `--from` file whose fsync overlaps the state file's open (see `overlappable`).
const OVERLAP_MAX: u64 = 1 << 20;

/// A small write can stage its content before the state file is opened and the early
/// refusals are read, rather than after: the temp file's fsync (most of a small write's
/// wait) then overlaps the state file's open, on a second thread. Only for what staging
/// early cannot harm: a regular `--from` file of at most [`OVERLAP_MAX`] bytes (a
/// refused writer reads at most that much, and never waits on a producer, as it would
/// on stdin) whose folder exists (no folder is made for a write that is refused), and
/// not the state file; and only when a CPU is free to run the second thread
/// ([`cpu_to_spare`]). Anything else, or any error on the way, gives the source back
/// for the usual order, which reports errors in their usual precedence.
fn overlappable<'s>(
    ctx: &Ctx,
    resource: &Resource,
    args: &WriteRequest<'_>,
    source: Source<'s>,
) -> std::result::Result<(File, DocPath), Source<'s>> {
    let Source::File(file) = source else {
        return Err(source);
    };
    let small = file
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() > 0 && m.len() <= OVERLAP_MAX);
    let doc = (small && !args.applied && cpu_to_spare())
        .then(|| {
            crate::resource::locate(&ctx.root, resource, false)
                .ok()
                .flatten()
        })
        .flatten()
        .filter(|doc| crate::session::refuse_state_file(ctx, doc, resource).is_ok());
    match doc {
        Some(doc) => Ok((file, doc)),
        None => Err(Source::File(file)),
    }
}

/// Whether a CPU is free at this moment to run a second thread: no more runnable tasks
/// on the machine (this one among them, from `/proc/loadavg`) than CPUs this process may
/// use. A new thread on a busy machine waits behind the running tasks for its first turn.
/// Measured side by side on 2 CPUs (bench/notes.md): on a quiet machine the overlapped
/// write took 17% less time than the plain one, with one busy loop 3-7% less, and with
/// two it was the slowest in every loop measured (7-41% slower). The count includes this
/// process, and on a quiet machine often one more task (the parent that has just spawned
/// it is still on its way to waiting): hence "no more than", not "fewer". The runnable
/// count is the whole machine's, also in a container, and a CPU quota is not looked at: a
/// wrong guess costs speed, never anything else. In a build with failpoints (the tests),
/// `FENCEPOST_TEST_OVERLAP=always` or `never` decides instead.
fn cpu_to_spare() -> bool {
    #[cfg(feature = "failpoints")]
    if let Some(forced) = std::env::var_os("FENCEPOST_TEST_OVERLAP") {
        return forced == "always";
    }
    let cpus = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).map_or(1, |set| {
        (0..nix::sched::CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .count()
    });
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| runnable(&text))
        .is_some_and(|running| spare(running, cpus))
}

/// The rule of [`cpu_to_spare`]: `running` runnable tasks, this one counted, on `cpus`.
/// One CPU has none to spare.
fn spare(running: usize, cpus: usize) -> bool {
    cpus >= 2 && running <= cpus
}

/// The runnable tasks now, from `/proc/loadavg` ("0.52 0.58 0.59 2/345 6789": the
/// fourth field is runnable/total).
fn runnable(loadavg: &str) -> Option<usize> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .0
        .parse()
        .ok()
}

/// The write of `overlappable`: this thread stages `file` beside `doc`, then a second
/// thread waits in the staged file's fsync (most of the staging's time) while this one
/// opens the state file and reads the early refusals. A refusal (or a failure to open the
/// state file) wins over whatever staging did, and removes the temp file.
///
/// The second thread only syncs: it starts 0.2 ms or so after its spawn (an idle CPU has
/// to be woken), which the opening outlasts, so it is done when this thread joins it and
/// neither waits to be woken (bench/notes.md).
fn run_overlapped(
    ctx: &Ctx,
    args: &WriteRequest<'_>,
    resource: &Resource,
    file: File,
    doc: &DocPath,
) -> Result<Outcome> {
    let target = Target {
        ctx,
        doc,
        resource,
        args,
    };
    let size = file.metadata().ok().map(|m| m.len());
    let unsynced = stage_unsynced(doc, &mut Source::File(file), size);
    let (opened, synced) = std::thread::scope(|scope| {
        let syncing = unsynced.as_ref().ok().map(|unsynced| {
            std::thread::Builder::new()
                .spawn_scoped(scope, move || unsynced.sync())
                .map_err(|_| unsynced)
        });
        let opened = ctx.store().and_then(|mut store| {
            refuse_early(
                ctx,
                &*store.snapshot()?,
                resource,
                args,
                Publishes::Document,
            )?;
            Ok(store)
        });
        let synced = syncing.map(|thread| match thread {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // No thread to be had (a process limit): this one syncs, after the opening,
            // as the plain path would.
            Err(unsynced) => unsynced.sync(),
        });
        (opened, synced)
    });
    let mut store = opened?;
    let unsynced = unsynced?;
    synced.transpose()?;
    publish_staged(&target, &mut *store, &mut unsynced.synced()?)
}

/// Decides and publishes a staged write under the lock.
fn publish_staged(
    target: &Target<'_>,
    store: &mut dyn crate::store::Store,
    staged: &mut Staged<'_>,
) -> Result<Outcome> {
    let Target {
        ctx,
        doc,
        resource,
        args,
    } = *target;
    failpoint!("write.before_lock");
    let tx = ctx.begin(store, resource)?;
    let body = Body::Bytes(&staged.sha256);
    let mut decided = decide_locked(ctx, &*tx, resource, args, body, staged.size)?;
    // A replay is a no-op only while the document still holds those bytes; if it went
    // missing or was changed by hand, publishing the epoch's value again restores it.
    let republish = decided.decision == WriteDecision::Replay && !on_disk(doc, &staged.sha256)?;
    if republish {
        decided.decision = WriteDecision::Write;
    }
    match decided.decision {
        WriteDecision::Write => {
            let how = Publish {
                owner: decided.written.owner.as_deref(),
                now: decided.now,
                republish,
                record: decided.record.as_ref(),
            };
            publish(target, tx, staged, how)?;
            Ok(Outcome::Written(decided.written))
        }
        _ => answer_unwritten(ctx, tx, resource, args, decided),
    }
}

/// What the sink decided for a write, under the resource's lock: the decision, when
/// (the session's clock once the lock was granted), the record it was decided against,
/// and the write's answer should it be published.
#[derive(Debug)]
struct Decided {
    decision: WriteDecision,
    now: i64,
    record: Option<SinkRecord>,
    written: Written,
}

/// The one decision of a write, for both stores, inside `tx` (which holds the lock):
/// the epoch must have been issued (to `--owner`, if given), and `sink::decide` weighs
/// it against the recorded fence and content (`sha256`).
fn decide_locked(
    ctx: &Ctx,
    tx: &dyn ReadTxn,
    resource: &Resource,
    args: &WriteRequest<'_>,
    body: Body<'_>,
    size: u64,
) -> Result<Decided> {
    let now = ctx.now();
    let lease = issuing_lease(tx, resource, args)?;
    check_issued_owner(resource, args, lease.as_ref())?;
    let record = tx.sink(resource)?;
    // The lease read above names the owner of its own epoch: no second look.
    let owner = match (args.owner, lease.as_ref()) {
        (None, Some(l)) if l.epoch == args.epoch => Some(l.owner.clone()),
        _ => writer(tx, resource, args)?,
    };
    let decision = decide(
        record.as_ref(),
        issued(lease.as_ref(), args),
        &offer(args, body),
        args.unfenced,
    );
    let written = Written {
        resource: resource.to_string(),
        epoch: args.epoch,
        seq: args.seq,
        owner,
        sha256: match body {
            Body::Bytes(sha256) => sha256.to_string(),
            Body::Removal => String::new(),
        },
        size,
        unfenced: args.unfenced,
        previous_fence: record.as_ref().map(|r| r.fence),
        tree: false,
        replay: false,
    };
    Ok(Decided {
        decision,
        now,
        record,
        written,
    })
}

/// The version `args` offers, of `body`.
fn offer<'b>(args: &WriteRequest<'_>, body: Body<'b>) -> Offer<'b> {
    Offer {
        epoch: args.epoch,
        seq: args.seq,
        body,
    }
}

/// The answer of a write that publishes nothing: a replay (logged, committed) or a
/// refusal (the transaction rolls back).
fn answer_unwritten(
    ctx: &Ctx,
    tx: Box<dyn Txn + '_>,
    resource: &Resource,
    args: &WriteRequest<'_>,
    decided: Decided,
) -> Result<Outcome> {
    let written = decided.written;
    match decided.decision {
        WriteDecision::Replay => {
            let event = Event::new(decided.now, resource.as_str(), EventKind::Replay)
                .owner(written.owner.as_deref())
                .epoch(Some(args.epoch))
                .seq(args.seq)
                .sha256(Some(&written.sha256));
            ctx.log(&*tx, &event)?;
            tx.commit()?;
            Ok(Outcome::Replay(Written {
                replay: true,
                ..written
            }))
        }
        refused => Err(refusal(resource, args, written.owner.as_deref(), refused)),
    }
}

/// The part under the lock once the write is accepted: links, rename, folder fsync,
/// record, COMMIT, then this writer's own links go. On any failure before the COMMIT the
/// document is put back as it was.
fn publish(
    target: &Target<'_>,
    tx: Box<dyn Txn + '_>,
    staged: &mut Staged<'_>,
    how: Publish<'_>,
) -> Result<()> {
    let (ctx, doc, resource) = (target.ctx, target.doc, target.resource);
    let content = Content {
        epoch: target.args.epoch,
        seq: target.args.seq,
        removed: false,
        tree: false,
        sha256: staged.sha256.clone(),
        size: staged.size,
        written_at: how.now,
        file: Some(staged.id),
    };
    let recorded_before = how
        .record
        .and_then(|r| r.content.as_ref())
        .and_then(Recorded::of);
    // Checked before the recovery links are made (so none lands in a folder moved out of
    // the root), and again just before the rename.
    doc.check_unmoved(&ctx.root, resource)?;
    let exists = atomic::inspect_document(doc)?.is_some();
    // The point of no return: from the first recovery link on, the staged file is this
    // decision's (and recovery's), no longer this writer's to remove on a signal.
    staged.commit_to();
    let staged_change = staged
        .link_for_recovery(exists)
        .and_then(|()| doc.check_unmoved(&ctx.root, resource))
        .and_then(|()| staged.rename_into_place())
        .and_then(|()| record(target, &*tx, &content, how));
    if let Err(e) = staged_change {
        // Still under the lock, and the transaction will roll back: undo this write's
        // rename against the record as it was before it.
        crate::recovery::undo(doc, recorded_before, &staged.links())?;
        return Err(e);
    }
    if let Err(e) = tx.commit() {
        after_failed_commit(target, &content, how, &e)?;
        return Err(e);
    }
    // The write committed: its links go whatever the failpoint says (a crash there
    // leaves them for recovery, an injected error still removes them).
    let hook = (|| -> Result<()> {
        failpoint!("write.before_cleanup");
        Ok(())
    })();
    staged.drop_links();
    hook
}

/// Records the accepted write (the new fence and content) and logs it, in `tx`.
fn record(target: &Target<'_>, tx: &dyn Txn, content: &Content, how: Publish<'_>) -> Result<()> {
    let Target {
        ctx,
        resource,
        args,
        ..
    } = *target;
    let fence = fence_after_write(how.record, args.epoch, args.unfenced);
    let write = WriteRecord {
        fence,
        content,
        owner: how.owner,
        blob: None,
        unfenced: args.unfenced,
        manifest: None,
    };
    tx.record_write(resource, &write)?;
    let mut event = Event::new(how.now, resource.as_str(), EventKind::Write)
        .owner(how.owner)
        .epoch(Some(args.epoch))
        .seq(args.seq)
        .previous(None, how.record.map(|r| r.fence))
        .sha256(Some(&content.sha256));
    if args.unfenced {
        event = event.detail("unfenced");
    } else if how.republish {
        event = event.detail("republished: the document had gone missing or drifted");
    }
    ctx.log(tx, &event)
}

/// The COMMIT of an accepted write failed (`e`), and with it the lock is gone: recover
/// against whatever the state file now says, in a transaction of its own. That
/// transaction must write: a COMMIT whose WAL fsync failed can leave its frames in the WAL
/// past the last valid commit, and a later WAL recovery (after another connection dies
/// without closing) would bring the write back over the rolled-back document. Committing
/// an event overwrites those frames. Past opening the state file, best effort: the
/// write's own error is the answer.
fn after_failed_commit(
    target: &Target<'_>,
    content: &Content,
    how: Publish<'_>,
    e: &Error,
) -> Result<()> {
    let Target {
        ctx,
        resource,
        args,
        ..
    } = *target;
    let event = Event::new(how.now, resource.as_str(), EventKind::CommitFailed)
        .owner(how.owner)
        .epoch(Some(args.epoch))
        .seq(args.seq)
        .sha256(Some(&content.sha256))
        .detail(e.to_string());
    recover_after_failed_commit(ctx, resource, &event)
}

/// After a failed COMMIT (a write's or a removal's): recovers `resource` in a new
/// transaction that also commits `event` (see [`after_failed_commit`]). Past opening
/// the state file, best effort.
fn recover_after_failed_commit(ctx: &Ctx, resource: &Resource, event: &Event) -> Result<()> {
    let mut store = ctx.store()?;
    let _ = ctx.begin(&mut *store, resource).and_then(|tx| {
        ctx.log(&*tx, event)?;
        tx.commit()
    });
    Ok(())
}

/// Who and when, for the record of an accepted write, and the record it replaces.
#[derive(Debug, Clone, Copy)]
struct Publish<'a> {
    owner: Option<&'a str>,
    now: i64,
    /// Same epoch and bytes as recorded, but the document on disk no longer held them.
    republish: bool,
    /// The sink's record before this write.
    record: Option<&'a SinkRecord>,
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
fn writer(
    tx: &dyn ReadTxn,
    resource: &Resource,
    args: &WriteRequest<'_>,
) -> Result<Option<String>> {
    match args.owner {
        Some(owner) => Ok(Some(owner.to_string())),
        None => tx.issued_to(resource, args.epoch),
    }
}

/// The lease whose epoch says what was issued: the resource's own; none for a version
/// applied to a mirror root, whose epoch the store issued.
fn issuing_lease(
    tx: &dyn ReadTxn,
    resource: &Resource,
    args: &WriteRequest<'_>,
) -> Result<Option<Lease>> {
    if args.applied {
        return Ok(None);
    }
    tx.lease(resource)
}

/// The highest epoch issued for the resource, as the fencing rule takes it.
fn issued(lease: Option<&Lease>, args: &WriteRequest<'_>) -> Option<i64> {
    if args.applied {
        return Some(args.epoch);
    }
    lease.map(|l| l.epoch)
}

/// With `--owner`, the epoch must have been issued to that owner (when the lease still
/// carries it; older epochs are decided by the fence).
fn check_issued_owner(
    resource: &Resource,
    args: &WriteRequest<'_>,
    lease: Option<&Lease>,
) -> Result<()> {
    match (args.owner, lease) {
        (Some(owner), Some(lease)) if lease.epoch == args.epoch && lease.owner != owner => {
            Err(Error::refused(Refusal::new(
                format!(
                    "epoch {} of {resource} was issued to {}, not {owner}",
                    args.epoch, lease.owner
                ),
                resource.as_str(),
                Some(args.epoch),
                Some(owner),
                RefusalDetail::IssuedToAnother {
                    issued_to: lease.owner.clone(),
                    seq: args.seq,
                },
            )))
        }
        _ => Ok(()),
    }
}

fn refusal(
    resource: &Resource,
    args: &WriteRequest<'_>,
    owner: Option<&str>,
    decision: WriteDecision,
) -> Error {
    let epoch = args.epoch;
    let (message, detail) = match decision {
        WriteDecision::Stale { fence, seq } if fence == epoch => (
            format!(
                "epoch {epoch} seq {} of {resource} is superseded by epoch {fence} seq {seq}",
                args.seq
            ),
            RefusalDetail::Stale { fence, seq },
        ),
        WriteDecision::Stale { fence, seq } => (
            format!("epoch {epoch} is older than epoch {fence} already accepted for {resource}"),
            RefusalDetail::Stale { fence, seq },
        ),
        WriteDecision::Conflict { recorded_sha256 } => (
            format!(
                "{} already {} {resource}",
                version_words(epoch, args.seq),
                if recorded_sha256.is_some() {
                    "wrote different content to"
                } else {
                    "removed"
                }
            ),
            RefusalDetail::Conflict {
                fence: epoch,
                seq: args.seq,
                recorded_sha256,
            },
        ),
        WriteDecision::Unissued { issued } => (
            match issued {
                Some(max) => {
                    format!("epoch {epoch} was never issued for {resource} (highest issued: {max})")
                }
                None => format!("no epoch was ever issued for {resource}: claim it first"),
            },
            RefusalDetail::Unissued {
                issued,
                seq: args.seq,
            },
        ),
        WriteDecision::Write | WriteDecision::Replay => {
            return Error::Internal("an accepted write was reported as a refusal");
        }
    };
    let mut refusal = Refusal::new(message, resource.as_str(), Some(epoch), owner, detail);
    refusal.seq = args.seq;
    Error::refused(refusal)
}

/// "epoch E", or "epoch E seq N" for a version with a seq.
fn version_words(epoch: i64, seq: i64) -> String {
    if seq == 0 {
        format!("epoch {epoch}")
    } else {
        format!("epoch {epoch} seq {seq}")
    }
}

/// Refuses empty content unless `--allow-empty`: under cron stdin is /dev/null, and a
/// script that forgot `--from` would publish nothing over the document. Reads the first
/// bytes to know, and hands them on to the copy in front of the rest; content that has
/// ended is not read again.
fn refuse_empty<'s>(
    source: Source<'s>,
    ctx: &Ctx,
    resource: &Resource,
    args: &WriteRequest<'_>,
) -> Result<Source<'s>> {
    let mut source: Box<dyn Read + 's> = match source {
        // A regular file that says it has bytes is copied as it is (in the kernel); one
        // that says it has none (or a FIFO, a device) is read to find out.
        Source::File(file) if file.metadata().is_ok_and(|m| m.is_file() && m.len() > 0) => {
            return Ok(Source::File(file));
        }
        Source::File(file) => Box::new(file),
        Source::Stream(stream) => stream,
    };
    let mut head = vec![0u8; 64 * 1024];
    let n = loop {
        match source.read(&mut head) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            read => break read,
        }
    }
    .map_err(Error::io(
        "cannot read the content for",
        ctx.root.join(resource.as_str()),
    ))?;
    if n > 0 {
        head.truncate(n);
        return Ok(Source::Stream(Box::new(
            io::Cursor::new(head).chain(source),
        )));
    }
    if args.allow_empty {
        return Ok(Source::Stream(Box::new(io::empty())));
    }
    let (from, hint) = match args.from {
        Some(path) => (
            format!("--from {} is empty", path.display()),
            "pass --allow-empty to publish an empty document",
        ),
        None => (
            "stdin gave no bytes".to_string(),
            "pass --allow-empty to publish an empty document; under cron stdin is /dev/null \
             (did the script forget --from?)",
        ),
    };
    Err(Error::usage_hint(
        format!("refusing to publish empty content to {resource}: {from}"),
        hint,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_the_fourth_field_of_loadavg() {
        assert_eq!(runnable("0.52 0.58 0.59 2/345 6789\n"), Some(2));
        assert_eq!(runnable("1.00 1.00 1.00 17/1024 1"), Some(17));
        assert_eq!(runnable("0.52 0.58 0.59"), None);
        assert_eq!(runnable("0.52 0.58 0.59 x/345 6789"), None);
    }

    #[test]
    fn a_cpu_is_to_spare_while_no_more_tasks_run_than_there_are_cpus_and_two_at_least() {
        assert!(spare(1, 2));
        assert!(spare(2, 2));
        assert!(!spare(3, 2));
        assert!(spare(4, 4));
        assert!(!spare(1, 1));
        assert!(!spare(2, 1));
    }

    #[test]
    fn an_accepted_write_taken_for_a_refusal_is_an_internal_error_not_bad_input() {
        let resource = Resource::parse(std::ffi::OsStr::new("doc.md")).expect("a good name");
        let args = WriteRequest {
            resource: std::ffi::OsStr::new("doc.md"),
            epoch: 1,
            seq: 0,
            owner: None,
            from: None,
            allow_empty: false,
            unfenced: false,
            applied: false,
        };
        for accepted in [WriteDecision::Write, WriteDecision::Replay] {
            let err = refusal(&resource, &args, None, accepted);
            assert!(matches!(err, Error::Internal(_)), "{err:?}");
            assert_eq!(err.exit_code(), 1);
            assert_eq!(err.outcome(), "error");
        }
    }
}
