//! `fencepost cat`: print a document's current content from the shared store. The
//! engine is `upkeep::cat`, writing to stdout.

use std::ffi::OsString;
use std::io::{self, Write};

use clap::Args;

use super::Report;
use fencepost::error::{Error, Result};
use fencepost::outcome::Outcome;
use fencepost::session::Ctx;

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
    let mut out = Stdout {
        out: io::stdout().lock(),
        closed: false,
        failed: None,
    };
    let printed = fencepost::upkeep::cat(ctx, &args.resource, &mut out).map_err(|e| {
        match out.failed.take() {
            Some(failed) => Error::io("cannot write", "stdout")(failed),
            None => e,
        }
    })?;
    Ok(Report::new("", Outcome::Printed(printed)))
}

/// Stdout as `cat` writes it: a reader that stopped reading (`| head`) is not an error
/// (the rest is dropped), and any other failure is kept, to be reported as stdout's.
struct Stdout {
    out: io::StdoutLock<'static>,
    closed: bool,
    failed: Option<io::Error>,
}

impl Stdout {
    /// `result`, a broken pipe taken as the end of the reader's interest.
    fn judge<T>(&mut self, result: io::Result<T>, done: T) -> io::Result<T> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(done)
            }
            Err(e) => {
                let kind = e.kind();
                self.failed = Some(e);
                Err(kind.into())
            }
            ok => ok,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let result = self.out.write(buf);
        self.judge(result, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let result = self.out.flush();
        self.judge(result, ())
    }
}
