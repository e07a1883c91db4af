//! `fencepost remove`: retire a resource under its lease. Hands the request to
//! `publish::remove` and says what it did.

use std::ffi::OsString;

use clap::Args;

use super::Report;
use fencepost::error::{Error, Result};
use fencepost::outcome::Outcome;
use fencepost::publish::{self, WriteRequest};
use fencepost::session::{Ctx, Kept};

/// Remove RESOURCE's document if EPOCH (and --seq) is still current, keeping its fence.
///
/// A removal is one more version of the resource, decided as a write is: `stale` (exit 5)
/// when a newer epoch, or a higher seq of this epoch, was accepted; `unissued` (8) for an
/// epoch `claim` never gave out; `conflict` (6) when this epoch and seq published bytes
/// (a lease that wrote and then removes passes a higher --seq); the same removal repeated
/// is a `replay` (exit 0, nothing changed). A later version (a higher seq of this epoch,
/// or a later epoch) may write the document again.
///
/// Prints `removed`. The sink keeps a tombstone: a late writer with an older epoch is
/// stale and cannot bring the document back, and the next claim continues from the fence.
/// `status` shows the resource as removed (the full list only with --all), `cat` refuses
/// it, and `verify` alerts only if a file reappears there without a write. A resource with
/// no document gets its tombstone all the same. With --store, mirrors remove their copy.
///
/// The document is renamed aside and the folder fsynced under the state file's lock, then
/// the tombstone is committed: a crash before the commit puts the document back (the next
/// command's recovery), never half-removed.
///
/// Example:
///   fencepost remove reports/2025-q3.md --epoch "$epoch" --seq 2
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct RemoveArgs {
    /// The document's path under the root, e.g. reports/daily.md.
    #[arg(env = "FENCEPOST_RESOURCE")]
    pub resource: OsString,

    /// The epoch `claim` printed for this resource.
    #[arg(short, long, env = "FENCEPOST_EPOCH", allow_negative_numbers = true)]
    pub epoch: i64,

    /// The remover's owner name; if given, the epoch must have been issued to it.
    #[arg(short, long, env = "FENCEPOST_OWNER")]
    pub owner: Option<String>,

    /// This version's number within the epoch (see `write --seq`): a whole number from
    /// 1. Without it the removal is seq 0, the epoch's one version.
    #[arg(long, env = "FENCEPOST_SEQ", value_parser = super::parse_seq)]
    pub seq: Option<i64>,
}

pub(crate) fn run(ctx: &Ctx, args: &RemoveArgs) -> Result<Report> {
    // The store the removal opens serves the mirror's update after it too.
    let ctx = &Ctx {
        kept: Kept::on(),
        ..ctx.clone()
    };
    let request = WriteRequest {
        resource: &args.resource,
        epoch: args.epoch,
        seq: args.seq.unwrap_or(0),
        owner: args.owner.as_deref(),
        from: None,
        allow_empty: false,
        unfenced: false,
        applied: false,
    };
    let outcome = publish::remove(ctx, &request)?;
    let removed = match &outcome {
        Outcome::Removed(r) | Outcome::RemoveReplay(r) => r,
        _ => {
            return Err(Error::Internal(
                "a removal answered neither removed nor replay",
            ));
        }
    };
    let resource = ctx.stored(&removed.resource)?;
    if ctx.remote.as_ref().is_some_and(|r| r.mirror) {
        // Published: a mirror root on this host is brought up to it at once.
        fencepost::mirror::apply_after_write(
            ctx,
            &mut *ctx.shared_store("nothing was ever claimed here")?,
            &resource,
        );
    }
    let (plain, changed) = match &outcome {
        Outcome::Removed(r) => (
            "removed",
            format!(
                "{resource} was removed under epoch {}{}",
                r.epoch,
                if r.seq == 0 {
                    String::new()
                } else {
                    format!(" seq {}", r.seq)
                }
            ),
        ),
        _ => ("replay", "nothing was changed (a replay)".to_string()),
    };
    Ok(Report::new(plain, outcome).changed(changed))
}
