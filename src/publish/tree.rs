//! `write --tree`: a folder published as one version under the same fence as a
//! document. The tree is staged beside the resource (`.<name>.fencepost-tmp-R/`, a copy
//! of the source through folder handles, flushed), then under the lock: recovery,
//! decision, a marker naming the staged folder (`.<name>.fencepost-tree-<T>`, `T` its
//! inode), the swap in one step (`renameat2` with `RENAME_EXCHANGE`; a plain rename for a
//! first publish), the parent folder's fsync, the record (the tree hash, its manifest and
//! `T`), COMMIT. Then the old tree, now at the staged name, is retired: renamed to
//! `.<name>.fencepost-old-<T>-<deadline>` and kept until its deadline (`--keep-old`), so a
//! reader that opened the resource before the swap finishes its walk in it; a later
//! write or `recover` removes it after. A crash before the COMMIT is undone by recovery
//! (`sink::tree_recovery`), one after it kept.

use std::ffi::OsString;
use std::path::Path;

use super::{WriteRequest, answer_unwritten, decide_locked, refuse_early};

use crate::audit::{Event, EventKind};
use crate::error::{Error, Result};
use crate::failpoints::failpoint;
use crate::folder::{Folder, Kind};
use crate::outcome::{Outcome, Written};
use crate::resource::{DocPath, Resource};
use crate::session::Ctx;
use crate::sink::{Body, Content, FileId, Recorded, WriteDecision, fence_after_write};
use crate::store::{ReadTxn, Txn, WriteRecord};
use crate::tree::{self, Copying, Limits, Manifest};

/// What `write --tree` takes besides the request: the source folder, whether symlinks
/// are copied, how long the old tree is kept (in the state file's clock's units) and the
/// limits.
#[derive(Debug, Clone, Copy)]
pub struct TreeRequest<'a> {
    pub src: &'a Path,
    pub allow_symlinks: bool,
    pub keep_old: i64,
    pub limits: Limits,
}

/// Publishes the folder `tree.src` as `args.resource`'s tree under `args`'s version:
/// `Outcome::Written` or `Outcome::Replay`, or a refusal.
pub fn write_tree(ctx: &Ctx, args: &WriteRequest<'_>, tree: &TreeRequest<'_>) -> Result<Outcome> {
    let resource = super::check_request(ctx, args)?;
    if args.unfenced {
        return Err(Error::usage(
            "--unfenced is for documents: a tree is always fenced",
        ));
    }
    if ctx.remote.is_some() {
        return super::store_tree::write_tree(ctx, args, &resource, tree);
    }
    let src = open_source(tree.src)?;
    let mut store = ctx.store()?;
    {
        let snapshot = store.snapshot()?;
        refuse_early(ctx, &*snapshot, &resource, args, super::Publishes::Tree)?;
    }
    let mut doc = crate::resource::locate(&ctx.root, &resource, true)?
        .ok_or_else(|| Error::usage(format!("cannot place {resource}")))?;
    let published = (|| {
        crate::session::refuse_state_file(ctx, &doc, &resource)?;
        refuse_not_a_folder(&doc)?;
        refuse_inside(&doc.folder, &src, tree.src)?;
        let survey = tree::survey(&src, tree.allow_symlinks, &tree.limits)?;
        crate::atomic::ensure_space(doc.folder.path(), survey.bytes)?;
        failpoint!("tree.before_stage");
        let staged = stage(&doc, &src, tree)?;
        let target = Target {
            ctx,
            doc: &doc,
            resource: &resource,
            args,
            keep_old: tree.keep_old,
        };
        target.publish(&mut *store, staged)
    })();
    if published.is_err() {
        doc.remove_made_folders();
    }
    published
}

/// Opens the source folder, or says why it cannot be one (bad input).
pub(super) fn open_source(src: &Path) -> Result<Folder> {
    let meta = std::fs::metadata(src)
        .map_err(|e| Error::usage(format!("cannot read --tree {}: {e}", src.display())))?;
    if !meta.is_dir() {
        return Err(Error::usage(format!(
            "--tree {} is not a folder (a document is published without --tree)",
            src.display()
        )));
    }
    Folder::open(src)
        .map_err(|e| Error::usage(format!("cannot read --tree {}: {e}", src.display())))
}

/// A resource is a document or a tree for its whole life: a tree is refused where the
/// sink recorded a document.
pub(super) fn refuse_kind(tx: &dyn ReadTxn, resource: &Resource) -> Result<()> {
    match tx.sink(resource)?.and_then(|r| r.content) {
        Some(c) if !c.tree => Err(document_name_taken(resource)),
        _ => Ok(()),
    }
}

/// The refusal of a tree where a document was published.
pub(super) fn document_name_taken(resource: &Resource) -> Error {
    Error::usage_hint(
        format!("{resource} is a document: a tree cannot be published there"),
        "a resource is a document or a tree for its whole life; pick another name",
    )
}

/// Refuses a tree where a file, symlink or special file stands at the resource's name.
fn refuse_not_a_folder(doc: &DocPath) -> Result<()> {
    match doc.folder.stat(&doc.name)? {
        None => Ok(()),
        Some(e) if e.kind == Kind::Folder => Ok(()),
        Some(_) => Err(Error::usage_hint(
            format!(
                "{} is not a folder: a tree cannot be published there",
                doc.path().display()
            ),
            "a resource is a document or a tree for its whole life; pick another name",
        )),
    }
}

/// Refuses a source that holds the resource's folder (the copy would copy itself).
fn refuse_inside(parent: &Folder, src: &Folder, shown: &Path) -> Result<()> {
    let src_id = src.id()?;
    let mut at = rustix::fs::openat(
        parent,
        ".",
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::io("cannot open folder", parent.path())(e.into()))?;
    loop {
        let st = rustix::fs::fstat(&at)
            .map_err(|e| Error::io("cannot inspect", parent.path())(e.into()))?;
        if (st.st_dev, st.st_ino) == src_id {
            return Err(Error::usage(format!(
                "--tree {} holds the folder the tree is published in: it would copy itself",
                shown.display()
            )));
        }
        let up = rustix::fs::openat(
            &at,
            "..",
            rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| Error::io("cannot open folder", parent.path())(e.into()))?;
        let above = rustix::fs::fstat(&up)
            .map_err(|e| Error::io("cannot inspect", parent.path())(e.into()))?;
        if (above.st_dev, above.st_ino) == (st.st_dev, st.st_ino) {
            return Ok(());
        }
        at = up;
    }
}

/// A tree staged beside the resource: its folder (held open and locked: a writer that
/// is alive keeps it from recovery's sweep), its name, its inode and its manifest. Removed
/// when dropped unless it was swapped in.
struct StagedTree<'d> {
    doc: &'d DocPath,
    name: OsString,
    /// The random part of the name, which the marker names.
    random: String,
    dir: Folder,
    ino: u64,
    manifest: Manifest,
    sha256: String,
    placed: bool,
}

impl Drop for StagedTree<'_> {
    fn drop(&mut self) {
        if !self.placed {
            let _ = tree::remove_tree(&self.doc.folder, &self.name);
        }
    }
}

/// Stages a copy of `src` beside the resource and flushes it.
fn stage<'d>(doc: &'d DocPath, src: &Folder, tree: &TreeRequest<'_>) -> Result<StagedTree<'d>> {
    let prefix = doc.sibling_name(crate::atomic::TEMP);
    let (name, random, dir) = loop {
        let random = crate::atomic::random_chars(crate::atomic::TEMP_RANDOM);
        let mut name = prefix.clone();
        name.push(&random);
        if !doc.folder.make_child(&name)? {
            continue;
        }
        let crate::folder::Child::Folder(dir) = doc.folder.child(&name)? else {
            continue;
        };
        rustix::fs::flock(&dir, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::io("cannot lock", dir.path())(e.into()))?;
        break (name, random, dir);
    };
    let ino = dir.id()?.1;
    let mut staged = StagedTree {
        doc,
        name,
        random,
        dir,
        ino,
        manifest: Manifest::default(),
        sha256: String::new(),
        placed: false,
    };
    let copying = Copying {
        allow_symlinks: tree.allow_symlinks,
        // Best effort: root keeps every owner, another user those it may give.
        keep_owners: true,
        limits: tree.limits,
        // A big file's hash on a second thread only while a CPU is free for it.
        overlap: super::cpu_to_spare(),
    };
    staged.manifest = tree::copy(src, &staged.dir, &copying)?;
    failpoint!("tree.after_copy");
    tree::sync_staged(&staged.dir)?;
    failpoint!("tree.after_sync");
    staged.sha256 = staged.manifest.sha256();
    Ok(staged)
}

/// The tree publish being made.
#[derive(Clone, Copy)]
struct Target<'a> {
    ctx: &'a Ctx,
    doc: &'a DocPath,
    resource: &'a Resource,
    args: &'a WriteRequest<'a>,
    keep_old: i64,
}

impl Target<'_> {
    /// Decides under the lock, then swaps the staged tree in and commits.
    fn publish(
        self,
        store: &mut dyn crate::store::Store,
        mut staged: StagedTree<'_>,
    ) -> Result<Outcome> {
        let Target {
            ctx,
            doc,
            resource,
            args,
            ..
        } = self;
        failpoint!("tree.before_lock");
        let tx = ctx.begin(store, resource)?;
        refuse_kind(&*tx, resource)?;
        let size = staged.manifest.size();
        let mut decided =
            decide_locked(ctx, &*tx, resource, args, Body::Bytes(&staged.sha256), size)?;
        decided.written.tree = true;
        // A replay is a no-op only while the tree still is the one recorded.
        let republish = decided.decision == WriteDecision::Replay && !on_disk(doc, &staged.sha256)?;
        if decided.decision != WriteDecision::Write && !republish {
            return answer_unwritten(ctx, tx, resource, args, decided);
        }
        let recorded_before = decided
            .record
            .as_ref()
            .and_then(|r| r.content.as_ref())
            .and_then(Recorded::of);
        doc.check_unmoved(&ctx.root, resource)?;
        refuse_not_a_folder(doc)?;
        let existed = doc.folder.stat(&doc.name)?.is_some();
        let marker = tree::sibling(doc, "tree", &staged.ino.to_string());
        let placed = self.swap_in(&mut staged, &marker, existed).and_then(|()| {
            let content = Content {
                epoch: args.epoch,
                seq: args.seq,
                removed: false,
                tree: true,
                sha256: staged.sha256.clone(),
                size,
                written_at: decided.now,
                file: Some(FileId {
                    ino: staged.ino,
                    size: 0,
                }),
            };
            self.record(&*tx, &content, &staged.manifest, &decided, republish)
        });
        if let Err(e) = placed {
            // Still under the lock: undo this publish as recovery would.
            let deadline = ctx.now().saturating_add(self.keep_old);
            crate::recovery::undo_tree(doc, recorded_before, &marker, deadline)?;
            staged.placed = true;
            return Err(e);
        }
        if let Err(e) = tx.commit() {
            // The lock went with the transaction: recovery, in a transaction of its own,
            // swaps the old tree back or, if the COMMIT happened after all, retires it
            // (as a document write's failed COMMIT, `super::after_failed_commit`).
            let event = Event::new(decided.now, resource.as_str(), EventKind::CommitFailed)
                .owner(decided.written.owner.as_deref())
                .epoch(Some(args.epoch))
                .seq(args.seq)
                .sha256(Some(&staged.sha256))
                .detail(format!("tree: {e}"));
            // This writer's lock on its staged folder goes first: recovery leaves the
            // marker of a writer that still holds it.
            drop(staged);
            super::recover_after_failed_commit(ctx, resource, &event)?;
            return Err(e);
        }
        let hook = (|| -> Result<()> {
            failpoint!("tree.before_cleanup");
            Ok(())
        })();
        let now = ctx.now();
        if existed {
            let _ = tree::retire(
                doc,
                &staged.name,
                staged.ino,
                now.saturating_add(self.keep_old),
            );
        }
        let _ = doc.folder.remove(&marker);
        let _ = crate::recovery::remove_expired_trees(doc, now);
        hook?;
        Ok(Outcome::Written(decided.written))
    }

    /// Marks the publish for recovery and swaps the staged tree in (a rename for a first
    /// publish), then fsyncs the parent folder: the new name is durable before COMMIT.
    fn swap_in(self, staged: &mut StagedTree<'_>, marker: &OsString, existed: bool) -> Result<()> {
        let doc = self.doc;
        doc.folder.remove_if_present(marker)?;
        let target = format!("{}:{}", staged.random, &staged.sha256[..32]);
        doc.folder
            .symlink(std::ffi::OsStr::new(&target), marker)
            .map_err(Error::io(
                "cannot mark the tree publish in",
                doc.folder.join(marker),
            ))?;
        // From here the staged folder is recovery's (the marker names it).
        staged.placed = true;
        failpoint!("tree.after_marker");
        // The marker is durable before the swap: a filesystem that keeps any subset of
        // the changes since the last fsync could otherwise keep the swap without it, and
        // recovery would not know the tree at the resource's name is uncommitted.
        doc.folder.sync()?;
        if existed {
            tree::exchange(&doc.folder, &staged.name, &doc.name)?;
        } else {
            doc.folder
                .rename(&staged.name, &doc.name)
                .map_err(Error::io("cannot rename into", doc.path()))?;
        }
        failpoint!("tree.after_swap");
        doc.folder.sync()?;
        failpoint!("tree.after_dir_fsync");
        Ok(())
    }

    /// Records the tree (its fence, version, hash, manifest and folder) and logs it.
    fn record(
        self,
        tx: &dyn Txn,
        content: &Content,
        manifest: &Manifest,
        decided: &super::Decided,
        republish: bool,
    ) -> Result<()> {
        let Target {
            ctx,
            resource,
            args,
            ..
        } = self;
        let owner = decided.written.owner.as_deref();
        let manifest = manifest.to_bytes();
        tx.record_write(
            resource,
            &WriteRecord {
                fence: fence_after_write(decided.record.as_ref(), args.epoch, false),
                content,
                owner,
                blob: None,
                unfenced: false,
                manifest: Some(&manifest),
            },
        )?;
        let event = Event::new(decided.now, resource.as_str(), EventKind::Write)
            .owner(owner)
            .epoch(Some(args.epoch))
            .seq(args.seq)
            .previous(None, decided.record.as_ref().map(|r| r.fence))
            .sha256(Some(&content.sha256))
            .detail(if republish {
                "tree; republished: the tree had gone missing or drifted"
            } else {
                "tree"
            });
        ctx.log(tx, &event)
    }
}

/// Whether the tree at the resource's name is the one hashed to `sha256`.
fn on_disk(doc: &DocPath, sha256: &str) -> Result<bool> {
    match doc.folder.child(&doc.name)? {
        // A tree that cannot be read back (a FIFO put in it by hand, which no tree holds)
        // is not the recorded one either: the replay puts that one back.
        crate::folder::Child::Folder(dir) => {
            Ok(tree::read_manifest(&dir).is_ok_and(|m| m.sha256() == sha256))
        }
        _ => Ok(false),
    }
}

impl Written {
    /// Whether this answer is a tree's (for the plain report).
    #[must_use]
    pub fn is_tree(&self) -> bool {
        self.tree
    }
}
