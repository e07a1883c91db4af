//! Upkeep of a root or a shared store, below the commands: recovering every resource at
//! once after a crash (and collecting a store's unpublished contents), reading and pruning
//! the audit log, and streaming a store's document. Each takes typed values (durations
//! resolved, times as integers on a clock) and answers with the types of `outcome.rs`;
//! the command line parses its text into them and renders the answers.

mod cat;
mod log;
mod recover;

pub use cat::cat;
pub use log::{Since, log, prune};
pub use recover::recover;
