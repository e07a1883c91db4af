//! `write --tree` to a shared store (`--store`): a tree is its manifest, a blob the sink
//! points at (its SHA-256 is the tree hash), and its files' blobs, which the manifest
//! names by SHA-256. Files the store holds already (the same bytes in any earlier
//! version, of any resource) are not uploaded again; the others are uploaded first, with
//! no lock held. Then one transaction decides as any write does, puts the manifest in,
//! links it to its contents (`fencepost_tree_blob`, which keeps them while the manifest
//! is kept) and points the resource at it: the same one-transaction flip as a document.
//! Mirrors apply it with the swap of a local root (`mirror.rs`).

use std::io::Read;

use sha2::{Digest, Sha256};

use super::tree::{TreeRequest, open_source, refuse_kind};
use super::{WriteRequest, answer_unwritten, decide_locked, refuse_early};

use crate::audit::{Event, EventKind};
use crate::error::{Error, Result};
use crate::failpoints::failpoint;
use crate::folder::{Child, Folder};
use crate::outcome::Outcome;
use crate::resource::Resource;
use crate::session::Ctx;
use crate::sink::{Body, Content, WriteDecision, fence_after_write};
use crate::store::{SMALL_BLOB, SharedStore, WriteRecord};
use crate::tree::{self, ItemKind, Manifest};

/// Publishes the folder `tree.src` as `resource`'s tree in the shared store.
pub(super) fn write_tree(
    ctx: &Ctx,
    args: &WriteRequest<'_>,
    resource: &Resource,
    request: &TreeRequest<'_>,
) -> Result<Outcome> {
    let src = open_source(request.src)?;
    let mut store = ctx.shared_store("nothing was ever claimed here")?;
    {
        let snapshot = store.snapshot()?;
        refuse_early(ctx, &*snapshot, resource, args, super::Publishes::Tree)?;
    }
    tree::survey(&src, request.allow_symlinks, &request.limits)?;
    let manifest = tree::read_manifest(&src)?;
    failpoint!("tree.before_upload");
    let contents = upload_missing(&mut *store, &src, &manifest)?;
    let bytes = manifest.to_bytes();
    if bytes.len() > SMALL_BLOB {
        return Err(Error::usage_hint(
            format!(
                "the tree's manifest is {} bytes, more than a store takes in one \
                 transaction ({SMALL_BLOB})",
                bytes.len()
            ),
            "publish fewer entries per tree (--max-entries)",
        ));
    }
    failpoint!("tree.before_lock");
    publish(
        ctx,
        &mut *store,
        resource,
        args,
        &manifest,
        &bytes,
        &contents,
    )
    .map_err(|e| e.retry_tells(super::store::RETRY))
}

/// Uploads every content of `manifest` the store does not hold yet (a file's bytes, a
/// symlink's target), read again from `src`; returns the distinct SHA-256s of all its
/// contents. A file that changed since it was hashed is refused: the manifest would
/// not describe what was uploaded.
fn upload_missing(
    store: &mut dyn SharedStore,
    src: &Folder,
    manifest: &Manifest,
) -> Result<Vec<String>> {
    let mut contents: Vec<String> = Vec::new();
    for item in &manifest.items {
        if item.kind == ItemKind::Folder || contents.contains(&item.sha256) {
            continue;
        }
        if !store.has(&item.sha256)? {
            let (parent, name) = walk_to(src, &item.path)?;
            let blob = match item.kind {
                ItemKind::Symlink => {
                    let target = parent
                        .read_link(&name)
                        .map_err(Error::io("cannot read the symlink", parent.join(&name)))?;
                    store.upload(&mut std::io::Cursor::new(
                        std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec(),
                    ))?
                }
                _ => {
                    let mut file = parent
                        .open_file(&name)
                        .map_err(Error::io("cannot read", parent.join(&name)))?;
                    store.upload(&mut file as &mut dyn Read)?
                }
            };
            if blob.sha256 != item.sha256 {
                store.discard(blob.id);
                return Err(Error::usage(format!(
                    "{} changed while it was being published: nothing was published",
                    parent.join(&name).display()
                )));
            }
        }
        contents.push(item.sha256.clone());
    }
    Ok(contents)
}

/// The folder holding `path` (relative to `src`) and its last component.
fn walk_to(src: &Folder, path: &[u8]) -> Result<(Folder, std::ffi::OsString)> {
    use std::os::unix::ffi::OsStrExt;
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    let (last, folders) = parts
        .split_last()
        .ok_or(Error::Internal("an empty path in a tree"))?;
    let mut at = Folder::open(src.path())?;
    for part in folders {
        at = match at.child(std::ffi::OsStr::from_bytes(part))? {
            Child::Folder(f) => f,
            _ => {
                return Err(Error::usage(format!(
                    "{} changed while it was being published: nothing was published",
                    src.path().display()
                )));
            }
        };
    }
    Ok((at, std::ffi::OsStr::from_bytes(last).to_os_string()))
}

/// Decides and publishes the tree under the resource's lock, in one transaction.
fn publish(
    ctx: &Ctx,
    store: &mut dyn SharedStore,
    resource: &Resource,
    args: &WriteRequest<'_>,
    manifest: &Manifest,
    bytes: &[u8],
    contents: &[String],
) -> Result<Outcome> {
    let tx = ctx.begin(&mut *store, resource)?;
    refuse_kind(&*tx, resource)?;
    let sha256 = crate::text::hex(&Sha256::digest(bytes));
    let size = manifest.size();
    let mut decided = decide_locked(ctx, &*tx, resource, args, Body::Bytes(&sha256), size)?;
    decided.written.tree = true;
    if decided.decision != WriteDecision::Write {
        return answer_unwritten(ctx, tx, resource, args, decided);
    }
    let manifest_blob = tx.put_small_blob(bytes, &sha256)?;
    tx.link_tree(manifest_blob, contents)?;
    let owner = decided.written.owner.clone();
    let content = Content {
        epoch: args.epoch,
        seq: args.seq,
        removed: false,
        tree: true,
        sha256: sha256.clone(),
        size,
        written_at: decided.now,
        file: None,
    };
    tx.record_write(
        resource,
        &WriteRecord {
            fence: fence_after_write(decided.record.as_ref(), args.epoch, false),
            content: &content,
            owner: owner.as_deref(),
            blob: Some(manifest_blob),
            unfenced: false,
            manifest: None,
        },
    )?;
    let event = Event::new(decided.now, resource.as_str(), EventKind::Write)
        .owner(owner.as_deref())
        .epoch(Some(args.epoch))
        .seq(args.seq)
        .previous(None, decided.record.as_ref().map(|r| r.fence))
        .sha256(Some(&sha256))
        .detail("tree");
    ctx.log(&*tx, &event)?;
    tx.commit()?;
    Ok(Outcome::Written(decided.written))
}
