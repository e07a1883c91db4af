//! The subcommands, one file each, and what they share: the value a command returns
//! ([`Report`]) and the holder's identity on the command line ([`HolderArgs`]). Each turns
//! its arguments into a request of the engine below and its answer into a `Report`.

use fencepost::outcome::Outcome;
use fencepost::resource::Resource;

pub(crate) mod app;
pub(crate) mod cat;
pub(crate) mod claim;
pub(crate) mod complete;
pub(crate) mod completions;
pub(crate) mod durations;
pub(crate) mod init;
pub(crate) mod log;
pub(crate) mod man;
pub(crate) mod mirror;
pub(crate) mod recover;
pub(crate) mod release;
pub(crate) mod remove;
pub(crate) mod renew;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod verify;
pub(crate) mod write;

/// What a successful command prints: a plain line for people and shell capture, and
/// its typed answer, from which `--json` is derived.
#[derive(Debug)]
pub(crate) struct Report {
    pub plain: String,
    pub outcome: Outcome,
    /// What the command changed, in words, for when its answer cannot be delivered (a
    /// full disk under stdout): `the lease on r.md is held by A as epoch 3 until ...`.
    pub changed: Option<String>,
}

impl Report {
    /// A report of `outcome`, shown to people as `plain`.
    pub(crate) fn new(plain: impl Into<String>, outcome: Outcome) -> Report {
        Report {
            plain: plain.into(),
            outcome,
            changed: None,
        }
    }

    /// Says what the command changed (see [`Report::changed`]).
    pub(crate) fn changed(mut self, what: impl Into<String>) -> Report {
        self.changed = Some(what.into());
        self
    }
}

/// Whether a command may make a new publish root: `claim`, `run` and `mirror` take it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CreateArgs {
    /// Make no new publish root (exit 2 instead). Without it, a first claim (or a
    /// mirror's first document) in a folder with no .fencepost/ there or above makes the
    /// folder a root and says so on stderr; `fencepost init` makes one on purpose. With
    /// --store, make no tables in the store either.
    #[arg(
        long,
        env = "FENCEPOST_NO_CREATE",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub no_create: bool,
}

/// The identity a holder presents to renew, complete or release its lease.
#[derive(Debug, clap::Args)]
pub(crate) struct HolderArgs {
    /// The document's path under the root, e.g. reports/daily.md (from the current folder
    /// when the root was found from it, without --root).
    pub resource: std::ffi::OsString,

    /// The owner name the lease was claimed under.
    #[arg(short, long, env = "FENCEPOST_OWNER")]
    pub owner: String,

    /// The epoch `claim` printed.
    #[arg(short, long, env = "FENCEPOST_EPOCH", allow_negative_numbers = true)]
    pub epoch: i64,
}

impl HolderArgs {
    /// The holder as the engine takes it.
    pub(crate) fn holder(&self) -> fencepost::leases::Holder<'_> {
        fencepost::leases::Holder {
            resource: &self.resource,
            owner: &self.owner,
            epoch: self.epoch,
        }
    }

    /// What the holder's change did, in words: `the lease on r.md (epoch 3) was released`.
    pub(crate) fn changed(&self, resource: &Resource, what: &str) -> String {
        format!("the lease on {resource} (epoch {}) was {what}", self.epoch)
    }

    /// Finishes the lease (`complete` or `release`: `change`), answering a retry of the
    /// same finish as a replay; returns what the engine did and, in words, what changed
    /// (`done`: "completed", `finish`: "completion").
    pub(crate) fn finish(
        &self,
        ctx: &fencepost::session::Ctx,
        change: fencepost::store::HolderChange<'_>,
        (done, finish): (&str, &str),
    ) -> fencepost::error::Result<(fencepost::leases::HeldChanged, String)> {
        let held = fencepost::leases::change_held_or_replay(ctx, &self.holder(), change, None)?;
        let changed = if held.replay {
            format!("nothing was changed (a replay of the {finish} made before)")
        } else {
            self.changed(&held.resource, done)
        };
        Ok((held, changed))
    }
}

/// `--seq`: a whole number from 1 (0 is what no `--seq` means, and is refused as one).
pub(crate) fn parse_seq(value: &str) -> std::result::Result<i64, String> {
    match value.parse::<i64>() {
        Ok(seq) if seq >= 1 => Ok(seq),
        Ok(_) => Err(format!(
            "a seq is a whole number from 1 (0 is what no --seq means), not {value}"
        )),
        Err(_) => Err(format!("a seq is a whole number from 1, not {value:?}")),
    }
}
