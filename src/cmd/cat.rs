//! `fencepost cat`: print a document's current content from the shared store.

use std::ffi::OsString;
use std::io::{Seek, Write as _};

use clap::Args;

use super::Report;
use crate::error::{Error, Result};
use crate::outcome::{Outcome, Printed};
use crate::session::Ctx;

/// Print RESOURCE's current content from the shared store (--store).
///
/// For readers on a host without a mirror root. The bytes are checked against the
/// SHA-256 the store recorded before any is printed (they are gathered in an unnamed
/// temporary file first, so memory stays flat): a damaged copy prints nothing and exits 1.
///
/// Example:
///   fencepost cat reports/daily.md --store "$FENCEPOST_STORE" > daily.md
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct CatArgs {
    /// The document's name in the store, e.g. reports/daily.md.
    #[arg(env = "FENCEPOST_RESOURCE")]
    pub resource: OsString,
}

pub(crate) fn run(ctx: &Ctx, args: &CatArgs, json: bool) -> Result<Report> {
    if ctx.remote.is_none() {
        return Err(Error::usage_hint(
            "cat reads from a shared store: pass --store URL (FENCEPOST_STORE)",
            "a local root's documents are plain files: read them directly",
        ));
    }
    if json {
        return Err(Error::usage(
            "cat prints the document's bytes; --json is for status and log",
        ));
    }
    let resource = ctx.resource(&args.resource)?;
    let mut store = ctx.read_store("nothing to print")?;
    let published = {
        let tx = store.snapshot()?;
        match tx.published(resource.as_str())? {
            Some(p) => p,
            None => {
                ctx.refuse_unseen(&*tx, &resource, "nothing to print")?;
                return Err(Error::usage(format!(
                    "nothing has been published to {resource} yet"
                )));
            }
        }
    };
    let mut held = tempfile::tempfile().map_err(Error::io("cannot create", "a temporary file"))?;
    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, &mut held);
    store
        .blobs()
        .ok_or(Error::Internal(
            "a shared store without a place for contents",
        ))?
        .read(&published, &mut buffered)?;
    buffered
        .flush()
        .map_err(Error::io("cannot write", "a temporary file"))?;
    drop(buffered);
    // What was checked is what is printed: the whole of it reached the temporary file.
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
    let mut out = std::io::stdout().lock();
    match std::io::copy(&mut held, &mut out).and_then(|_| out.flush()) {
        // A reader that stopped reading (`| head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        done => {
            done.map_err(Error::io("cannot write", "stdout"))?;
        }
    }
    let printed = Printed {
        resource: resource.to_string(),
        epoch: published.epoch,
        sha256: published.sha256,
        size: published.size,
    };
    Ok(Report::new("", Outcome::Printed(printed)))
}
