//! fencepost: publish a document safely when a job can be taken over.
//!
//! A worker claims a resource and gets an *epoch*; the sink (`write`) replaces the
//! document only while that epoch is still the newest, checking it in the same
//! transaction as the rename. A paused or late worker whose lease was taken over is
//! refused (`stale`) instead of overwriting the new holder's document.
//!
//! The binary is a thin shell over [`run`]: parsing, dispatch and error printing live
//! here so they can be tested in-process. [`run`] is all the binary needs; every other
//! module is private but two: [`sink`] and [`lease`], the protocol's rules as pure
//! functions over plain values (when is a write stale, what does recovery undo, who may
//! claim or renew), public so a model checker in the test suite can explore them
//! without a database or a file. The modules, as layers, are described in
//! `docs/architecture.md`.

mod api;
mod atomic;
mod audit;
mod clock;
mod cmd;
mod error;
mod failpoints;
mod folder;
pub mod lease;
mod leases;
mod mirror;
pub mod outcome;
mod publish;
mod recovery;
mod refusal;
mod resource;
mod root;
mod session;
pub mod sink;
mod store;
mod text;
mod upkeep;

pub use api::{
    ClaimOptions, Client, Content, Keeping, LeaseId, LeaseKeeper, Options, WriteOptions,
};
pub use audit::{Event, EventKind};
pub use clock::Clock;
pub use error::{Error, Refusal, Result};
pub use refusal::RefusalKind;

pub use cmd::cli::run;
