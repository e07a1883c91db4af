//! Upkeep of a root or a shared store, below the commands: recovering every resource at
//! once after a crash (and collecting a store's unpublished contents). It takes typed
//! values (durations resolved) and answers with the types of `outcome.rs`; the command
//! line parses its text into them and renders the answers.

mod recover;

pub(crate) use recover::recover;
