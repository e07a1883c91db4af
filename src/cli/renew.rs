//! `fencepost renew`: extend a live lease's deadline.

use clap::Args;

use super::durations::{Zero, parse_duration};
use super::{HolderArgs, Report};
use fencepost::error::Result;
use fencepost::outcome::{Outcome, Renewed};
use fencepost::session::Ctx;
use fencepost::store::HolderChange;

/// Extend a live lease to now + TTL and print the new deadline.
///
/// Succeeds only while owner and epoch match and `now < deadline`; at the deadline the
/// lease has expired and renew exits 4 (lost). Renewing before the deadline delays a
/// takeover.
///
/// The deadline printed is a number for scripts: milliseconds since the Unix epoch (with
/// --now, a tick), as --json's `deadline` is. The tables of status and log print it as a
/// UTC time (2026-11-30T05:58:10.000Z).
///
/// Example:
///   fencepost renew reports/daily.md --owner worker-b --epoch "$epoch" --ttl 30s
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct RenewArgs {
    #[command(flatten)]
    pub holder: HolderArgs,

    /// New lease length from now: seconds (30, 1.5) or with units (500ms, 2m30s, 1h, 1d);
    /// with --now, ticks.
    #[arg(
        short,
        long,
        env = "FENCEPOST_TTL",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub ttl: String,
}

pub(crate) fn run(ctx: &Ctx, args: &RenewArgs) -> Result<Report> {
    let ttl = parse_duration(&args.ttl, ctx.clock.kind(), "--ttl", Zero::Refused)?;
    let (resource, now) =
        fencepost::leases::change_held(ctx, &args.holder.holder(), HolderChange::Renew { ttl })?;
    let deadline = now.saturating_add(ttl);
    let renewed = Renewed {
        resource: resource.to_string(),
        epoch: args.holder.epoch,
        owner: args.holder.owner.clone(),
        deadline,
    };
    let until = fencepost::clock::show(ctx.clock.kind(), deadline);
    let changed = args
        .holder
        .changed(&resource, &format!("renewed until {until}"));
    Ok(Report::new(deadline.to_string(), Outcome::Renewed(renewed)).changed(changed))
}
