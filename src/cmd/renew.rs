//! `fencepost renew`: extend a live lease's deadline.

use clap::Args;
use serde_json::json;

use super::{Ctx, HolderArgs, Report, change_held};
use crate::clock::parse_duration;
use crate::error::{Error, Result};
use crate::store::HolderChange;

/// Extend a live lease to now + TTL and print the new deadline.
///
/// Succeeds only while owner and epoch match and `now < deadline`; at the deadline the
/// lease has expired and renew exits 4 (lost). Renewing before the deadline delays a
/// takeover.
///
/// Example:
///   fencepost renew reports/daily.md --owner worker-b --epoch "$epoch" --ttl 30s
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RenewArgs {
    #[command(flatten)]
    pub holder: HolderArgs,

    /// New lease length from now: ticks, or with the wall clock 500ms, 30s, 2m, 1h.
    #[arg(long, env = "FENCEPOST_TTL")]
    pub ttl: String,
}

pub fn run(ctx: &Ctx, args: &RenewArgs) -> Result<Report> {
    let ttl = parse_duration(&args.ttl, ctx.clock.kind(), "--ttl")?;
    let now = ctx.clock.now();
    let deadline = now
        .checked_add(ttl)
        .ok_or_else(|| Error::usage(format!("--ttl {} overflows the clock", args.ttl)))?;
    let (resource, _) = change_held(ctx, &args.holder, HolderChange::Renew { deadline })?;
    Ok(Report::new(
        deadline.to_string(),
        json!({
            "outcome": "renewed",
            "resource": resource.as_str(),
            "epoch": args.holder.epoch,
            "owner": args.holder.owner,
            "deadline": deadline,
        }),
    ))
}
