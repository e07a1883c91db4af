//! A shared store's document, streamed to a writer: the bytes are checked against the
//! SHA-256 the store recorded before any reaches the writer.

use std::ffi::OsStr;
use std::io::{Seek, Write};

use crate::error::{Error, Result};
use crate::outcome::Printed;
use crate::session::Ctx;

/// Writes the current content of `resource` in the shared store to `out`, and answers
/// with the version written. The bytes are gathered in an unnamed temporary file while
/// they are checked (memory stays flat whatever the size): a damaged copy writes nothing.
pub fn cat(ctx: &Ctx, resource: &OsStr, out: &mut dyn Write) -> Result<Printed> {
    if ctx.remote.is_none() {
        return Err(Error::usage_hint(
            "cat reads from a shared store",
            "a local root's documents are plain files: read them directly",
        ));
    }
    let resource = ctx.resource(resource)?;
    let mut store = ctx.shared_store("nothing to print")?;
    if let Some(printed) = cat_in_tree(&mut *store, &resource, out)? {
        return Ok(printed);
    }
    let published = {
        let tx = store.snapshot()?;
        if let Some(p) = tx.published(resource.as_str())? {
            if p.tree {
                return Err(Error::usage_hint(
                    format!("{resource} is a tree: name a file in it"),
                    format!("fencepost cat {resource}/PATH"),
                ));
            }
            if p.removed {
                return Err(Error::usage(format!(
                    "{resource} was removed (under {}): nothing to print",
                    crate::mirror::place((p.epoch, p.seq))
                )));
            }
            p
        } else {
            ctx.refuse_unseen(&*tx, &resource, "nothing to print")?;
            return Err(Error::usage(format!(
                "nothing has been published to {resource} yet"
            )));
        }
    };
    let mut held = tempfile::tempfile().map_err(Error::io("cannot create", "a temporary file"))?;
    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, &mut held);
    store.read(&published, &mut buffered)?;
    buffered
        .flush()
        .map_err(Error::io("cannot write", "a temporary file"))?;
    drop(buffered);
    // What was checked is what is written: the whole of it reached the temporary file.
    let kept = held
        .stream_position()
        .map_err(Error::io("cannot read back", "a temporary file"))?;
    if kept != published.size {
        return Err(Error::Internal(
            "the temporary file lost bytes it was given",
        ));
    }
    held.rewind()
        .map_err(Error::io("cannot read back", "a temporary file"))?;
    std::io::copy(&mut held, out)
        .and_then(|_| out.flush())
        .map_err(Error::io("cannot write", "the output"))?;
    Ok(Printed {
        resource: resource.to_string(),
        path: None,
        epoch: published.epoch,
        seq: published.seq,
        sha256: published.sha256,
        size: published.size,
    })
}

/// `cat TREE/PATH`: when no resource is published under the whole name but a tree is
/// under a folder of it, the file at the rest of the path in that tree's current
/// version, checked against the SHA-256 its manifest names. `None`: no tree there.
fn cat_in_tree(
    store: &mut dyn crate::store::SharedStore,
    resource: &crate::resource::Resource,
    out: &mut dyn Write,
) -> Result<Option<Printed>> {
    let name = resource.as_str();
    let (published, path) = {
        let tx = store.snapshot()?;
        if tx.published(name)?.is_some() {
            return Ok(None);
        }
        let mut found = None;
        for (i, _) in name.match_indices('/') {
            if let Some(p) = tx.published(&name[..i])?.filter(|p| p.tree) {
                found = Some((p, name[i + 1..].to_string()));
            }
        }
        match found {
            Some(found) => found,
            None => return Ok(None),
        }
    };
    if published.removed {
        return Err(Error::usage(format!(
            "{} was removed (under {}): nothing to print",
            published.resource,
            crate::mirror::place((published.epoch, published.seq))
        )));
    }
    let mut bytes = Vec::new();
    store.read(&published, &mut bytes)?;
    let manifest = crate::tree::Manifest::parse(&bytes)?;
    let item = manifest
        .get(path.as_bytes())
        .filter(|i| i.kind == crate::tree::ItemKind::File)
        .ok_or_else(|| {
            Error::usage(format!(
                "the tree {} (under {}) has no file {path}",
                published.resource,
                crate::mirror::place((published.epoch, published.seq))
            ))
        })?;
    let mut held = tempfile::tempfile().map_err(Error::io("cannot create", "a temporary file"))?;
    let manifest_blob = published
        .blob
        .ok_or(Error::Internal("a published tree has no manifest"))?;
    store.read_blob(manifest_blob, &item.sha256, item.size, &mut held)?;
    held.rewind()
        .map_err(Error::io("cannot read back", "a temporary file"))?;
    std::io::copy(&mut held, out)
        .and_then(|_| out.flush())
        .map_err(Error::io("cannot write", "the output"))?;
    Ok(Some(Printed {
        resource: published.resource.clone(),
        path: Some(path),
        epoch: published.epoch,
        seq: published.seq,
        sha256: item.sha256.clone(),
        size: item.size,
    }))
}
