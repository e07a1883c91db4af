//! `fencepost complete`: record the result and finish the lease (compare-and-set).

use clap::Args;

use super::{Ctx, HolderArgs, Report, change_held};
use crate::error::Result;
use crate::outcome::{Completed, Outcome};
use crate::store::HolderChange;

/// Record the job's result and finish the lease; the next claim gets epoch + 1.
///
/// A compare-and-set: owner and epoch must match a live lease (`now < deadline`).
/// Otherwise nothing changes and it exits 4 (lost), even if the work was done: a holder
/// that was taken over cannot complete.
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
    let (resource, _) = change_held(ctx, &args.holder, change)?;
    let changed = args.holder.changed(&resource, "completed");
    let completed = Completed {
        resource: resource.to_string(),
        epoch: args.holder.epoch,
        owner: args.holder.owner.clone(),
        result: args.result.clone(),
        exit: None,
    };
    Ok(Report::new("completed", Outcome::Completed(completed)).changed(changed))
}
