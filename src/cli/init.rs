//! `fencepost init`: make a publish root on purpose, for scripts that would rather not
//! have a first claim make one wherever it runs.

use std::path::PathBuf;

use clap::Args;

use super::Report;
use fencepost::error::Result;
use fencepost::outcome::{Outcome, RootState};
use fencepost::session::Ctx;

/// Make DIR (default: the current folder) a publish root, with its state file.
///
/// A first claim makes the folder it works in a root too, saying so on stderr; init
/// does it on purpose, claiming nothing, so that a job run with --no-create
/// (FENCEPOST_NO_CREATE=1) can never start a second root by running in the wrong
/// folder. DIR must exist and must not be inside another root (roots do not nest).
/// Prints `initialized DIR`; run again it changes nothing and prints `ready DIR`.
/// A shared store's tables come from `fencepost store init` instead.
///
/// Example:
///   fencepost init /srv/reports
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct InitArgs {
    /// The folder to make a root [default: --root, else the current folder].
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub(crate) fn run(ctx: &Ctx) -> Result<Report> {
    let made = ctx.create_root()?;
    let state = RootState {
        root: ctx.root.to_string_lossy().into_owned(),
        db: ctx.db.to_string_lossy().into_owned(),
    };
    let root = ctx.root.display();
    if made {
        let changed = format!("{root} was made a publish root");
        return Ok(Report::new(
            format!("initialized {root}"),
            Outcome::RootInitialized(state),
        )
        .changed(changed));
    }
    Ok(
        Report::new(format!("ready {root}"), Outcome::RootReady(state))
            .changed("nothing was changed (it was a publish root already)"),
    )
}
