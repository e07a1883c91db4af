//! The read-only reports: `status` (the lease table, the sink's records and each document
//! side by side) and `verify` (the problems found among them). Each returns its typed
//! answer; how it is shown, and whether a problem found makes a failure, is the caller's.

mod status;
mod verify;

pub use status::status;
pub use verify::verify;
