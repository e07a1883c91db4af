//! Upkeep of a root or a shared store, below the commands: recovering every resource at
//! once after a crash (and collecting a store's unpublished contents), and reading and
//! pruning the audit log. Each takes typed values (durations resolved, times as integers
//! on a clock) and answers with the types of `outcome.rs`; the command line parses its
//! text into them and renders the answers.

mod log;
mod recover;

pub(crate) use log::{Since, log, prune};
pub(crate) use recover::recover;
