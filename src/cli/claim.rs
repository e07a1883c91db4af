//! `fencepost claim`: take a resource's lease and get a new epoch.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;

use super::Report;
use crate::cli::durations::{Zero, parse_duration};
use fencepost::clock::Clock;
use fencepost::error::{Error, Result};
use fencepost::leases::{self, ClaimRequest};
use fencepost::outcome::Outcome;
use fencepost::resource::Resource;
use fencepost::session::{Ctx, check_owner};

/// Claim RESOURCE for OWNER and print the new epoch (and nothing else).
///
/// Succeeds when there is no lease, the lease was released or completed, or its deadline
/// has passed (`now >= deadline`). The epoch goes up by one on every successful claim,
/// even when the same owner claims again. A claim by the owner of the live lease (a
/// retry whose first answer was lost) is answered with that lease's epoch, unchanged,
/// marked as a replay in --json, while nothing was written under it; after a write it is
/// held. An owner name must name one worker. By default the
/// claim also registers the new epoch with the sink, so writes carrying an older epoch
/// are refused from this moment on.
///
/// Where there is no publish root (no .fencepost/ in the folder or above it), the first
/// claim makes the folder one and says so on stderr (`fencepost: made a new publish root:
/// DIR`, not with -q); --no-create (FENCEPOST_NO_CREATE=1) refuses instead (exit 2), and
/// `fencepost init` makes one on purpose.
///
/// Example:
///   epoch=$(fencepost claim reports/daily.md --owner worker-b --ttl 30s)
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ClaimArgs {
    #[command(flatten)]
    pub request: LeaseRequest,

    /// Do not register the new epoch with the sink; old holders' writes are refused
    /// only after this holder's first write (a sink that learns epochs from writes only).
    #[arg(long)]
    pub lazy_fence: bool,
}

/// What a claim asks for; shared by `claim` and `run`.
#[derive(Debug, Clone, Args)]
pub(crate) struct LeaseRequest {
    /// The document's path under the root, e.g. reports/daily.md (from the current folder
    /// when the root was found from it, without --root).
    pub resource: OsString,

    /// Who is claiming (free text: host, pid, job id).
    #[arg(short, long, env = "FENCEPOST_OWNER")]
    pub owner: String,

    /// Lease length: seconds (30, 1.5) or with units (500ms, 2m30s, 1h, 1d); with --now,
    /// ticks.
    #[arg(
        short,
        long,
        env = "FENCEPOST_TTL",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub ttl: String,

    /// If the lease is held, wait up to this long for it to become claimable: seconds or
    /// with units, 0 for not at all (wall clock only; polls with back-off, never spins).
    /// A resource locked by another session past --busy-timeout is waited through too.
    #[arg(
        short,
        long,
        env = "FENCEPOST_WAIT",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub wait: Option<String>,

    #[command(flatten)]
    pub create: super::CreateArgs,
}

pub(crate) fn run(ctx: &Ctx, claim: &ClaimArgs) -> Result<Report> {
    let (resource, ttl, wait) = check_request(ctx, &claim.request)?;
    let claimed = leases::claim(
        ctx,
        &claim
            .request
            .resolved(&resource, ttl, wait, claim.lazy_fence),
    )?;
    if claimed.replay {
        let plain = claimed.epoch.to_string();
        return Ok(Report::new(plain, Outcome::Claimed(claimed))
            .changed("nothing was changed (a replay of the claim that made the lease)"));
    }
    let changed = format!(
        "the lease on {} is held by {} as epoch {} until {}",
        claimed.resource,
        claimed.owner,
        claimed.epoch,
        fencepost::clock::show(ctx.clock.kind(), claimed.deadline),
    );
    Ok(Report::new(claimed.epoch.to_string(), Outcome::Claimed(claimed)).changed(changed))
}

impl LeaseRequest {
    /// The request as the engine takes it, once checked by [`check_request`].
    pub(crate) fn resolved<'a>(
        &'a self,
        resource: &'a Resource,
        ttl: i64,
        wait: Option<Duration>,
        lazy_fence: bool,
    ) -> ClaimRequest<'a> {
        ClaimRequest {
            resource,
            owner: &self.owner,
            ttl,
            wait,
            lazy_fence,
        }
    }
}

/// Checks a claim before the state file is opened (bad input never creates one): the
/// resource, the owner name, that the document could ever be written, and the
/// durations. Returns the resource, the TTL and how long `--wait` may wait.
pub(crate) fn check_request(
    ctx: &Ctx,
    args: &LeaseRequest,
) -> Result<(Resource, i64, Option<Duration>)> {
    let resource = leases::claimable(ctx, &args.resource)?;
    check_owner(&args.owner)?;
    let kind = ctx.clock.kind();
    let ttl = parse_duration(&args.ttl, kind, "--ttl", Zero::Refused)?;
    let wait = match &args.wait {
        None => None,
        Some(_) if matches!(ctx.clock, Clock::Logical(_)) => {
            return Err(Error::usage_hint(
                "--wait needs the wall clock: with --now, time does not pass",
                "drop --now, or retry the claim with a later --now",
            ));
        }
        Some(text) => Some(Duration::from_millis(
            parse_duration(text, kind, "--wait", Zero::Allowed)?.unsigned_abs(),
        )),
    };
    Ok((resource, ttl, wait))
}
