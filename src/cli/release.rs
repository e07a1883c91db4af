//! `fencepost release`: give a live lease up at once.

use clap::Args;

use super::{HolderArgs, Report};
use fencepost::error::Result;
use fencepost::outcome::{Outcome, Released};
use fencepost::session::Ctx;
use fencepost::store::HolderChange;

/// Give up a live lease now, so the next worker need not wait for the deadline.
///
/// Owner and epoch must match a live lease; otherwise it exits 4 (lost). The epoch is
/// not reused: the next claim gets epoch + 1. Run again after it was made, it answers
/// `released` as a replay and changes nothing.
///
/// Example:
///   fencepost release reports/daily.md --owner worker-b --epoch "$epoch"
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub holder: HolderArgs,
}

pub(crate) fn run(ctx: &Ctx, args: &ReleaseArgs) -> Result<Report> {
    let (done, changed) =
        args.holder
            .finish(ctx, HolderChange::Release, ("released", "release"))?;
    let released = Released {
        resource: done.resource.to_string(),
        epoch: args.holder.epoch,
        owner: args.holder.owner.clone(),
        replay: done.replay,
    };
    Ok(Report::new("released", Outcome::Released(released)).changed(changed))
}
