//! fencepost: publish a document safely when a job can be taken over.
//!
//! Worker A claims a report and pauses past its lease; worker B takes the lease over and
//! publishes; A resumes and writes what it had prepared. Its write is refused:
//!
//! ```
//! use std::time::Duration;
//! use fencepost::{Client, Clock, Content, Error, Options, RefusalKind};
//!
//! let dir = tempfile::tempdir()?;
//! let ticks = Options::default().clock(Clock::Logical(0)); // a duration's ms are ticks
//! let mut a = Client::open_with(dir.path(), &ticks)?;
//! let mut b = Client::open_with(dir.path(), &ticks)?;
//! let lease = a.claim("reports/daily.md", "worker-a", Duration::from_millis(10))?; // epoch 1
//! b.set_now(10)?; // A's lease has ended: B takes over and publishes
//! let taken = b.claim("reports/daily.md", "worker-b", Duration::from_millis(10))?; // epoch 2
//! b.write("reports/daily.md", taken.epoch, Content::Bytes(b"report by B\n"))?;
//! a.set_now(11)?; // A resumes: its late write is refused, B's report stands
//! let late = a.write("reports/daily.md", lease.epoch, Content::Bytes(b"report by A\n"));
//! assert!(matches!(late, Err(Error::Refused(r)) if r.kind() == RefusalKind::Stale));
//! assert_eq!(std::fs::read(dir.path().join("reports/daily.md"))?, b"report by B\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A worker claims a resource and gets an *epoch*; the sink (`write`) replaces the
//! document only while that epoch is still the newest, checking it in the same
//! transaction as the rename. A paused or late worker whose lease was taken over is
//! refused (`stale`) instead of overwriting the new holder's document.
//!
//! A program uses the library through a [`Client`], which keeps one connection to the
//! state open across its calls, and a [`LeaseKeeper`] to keep a lease alive while it
//! works; the calls answer with the typed values of [`outcome`] (what `--json` prints)
//! and refuse with [`Error::Refused`]. The `fencepost` binary is a thin shell over
//! [`run`]: parsing, dispatch and error printing live here so they can be tested
//! in-process. Besides the API and [`run`], every module is private but three:
//! [`outcome`], the answers; [`sink`] and [`lease`], the protocol's rules as pure
//! functions over plain values (when is a write stale, what does recovery undo, who may
//! claim or renew), public so a model checker in the test suite can explore them
//! without a database or a file. The modules, as layers, are described in
//! `docs/architecture.md`.

mod api;
mod atomic;
mod audit;
mod clock;
mod cmd;
mod document;
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
mod reports;
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
