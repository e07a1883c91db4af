//! `fencepost complete`: record the result and finish the lease (compare-and-set).

use clap::Args;

use super::{HolderArgs, Report};
use fencepost::error::Result;
use fencepost::outcome::{Completed, Outcome};
use fencepost::session::Ctx;
use fencepost::store::HolderChange;

/// Record the job's result and finish the lease; the next claim gets epoch + 1.
///
/// A compare-and-set: owner and epoch must match a live lease (`now < deadline`).
/// Otherwise nothing changes and it exits 4 (lost), even if the work was done: a holder
/// that was taken over cannot complete. Run again after it was made (a retry after a
/// lost answer), with the same owner, epoch and result, it answers `completed` as a
/// replay and changes nothing; with another result it stays lost.
///
/// Example:
///   fencepost complete reports/daily.md --owner worker-b --epoch "$epoch" --result ok
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct CompleteArgs {
    #[command(flatten)]
    pub holder: HolderArgs,

    /// Free-text result to record with the lease.
    #[arg(long)]
    pub result: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, args: &CompleteArgs) -> Result<Report> {
    let change = HolderChange::Complete {
        result: args.result.as_deref(),
    };
    let (done, changed) = args
        .holder
        .finish(ctx, change, ("completed", "completion"))?;
    let completed = Completed {
        resource: done.resource.to_string(),
        epoch: args.holder.epoch,
        owner: args.holder.owner.clone(),
        result: args.result.clone(),
        exit: None,
        replay: done.replay,
    };
    Ok(Report::new("completed", Outcome::Completed(completed)).changed(changed))
}
