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
    let published = {
        let tx = store.snapshot()?;
        if let Some(p) = tx.published(resource.as_str())? {
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
        epoch: published.epoch,
        seq: published.seq,
        sha256: published.sha256,
        size: published.size,
    })
}
