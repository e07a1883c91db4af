//! `fencepost release`: give a live lease up at once.

use clap::Args;

use super::{Ctx, HolderArgs, Report, change_held};
use crate::error::Result;
use crate::outcome::{Outcome, Released};
use crate::store::HolderChange;

/// Give up a live lease now, so the next worker need not wait for the deadline.
///
/// Owner and epoch must match a live lease; otherwise it exits 4 (lost). The epoch is
/// not reused: the next claim gets epoch + 1.
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
    let (resource, _) = change_held(ctx, &args.holder, HolderChange::Release)?;
    let changed = args.holder.changed(&resource, "released");
    let released = Released {
        resource: resource.to_string(),
        epoch: args.holder.epoch,
        owner: args.holder.owner.clone(),
    };
    Ok(Report::new("released", Outcome::Released(released)).changed(changed))
}
