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
//! and refuse with [`Error::Refused`]. Besides the API, three modules are documented:
//! [`outcome`], the answers; [`sink`] and [`lease`], the protocol's rules as pure
//! functions over plain values (when is a write stale, what does recovery undo, who may
//! claim or renew), which a model checker in the test suite explores without a database
//! or a file.
//!
//! The `fencepost` binary (`src/main.rs`, `src/cli/`, built with the default feature
//! `cli`) is the library's other user. The modules it calls are public for it but
//! hidden from these docs: they are the command line's, not a stable API. The modules,
//! as layers, are described in `docs/architecture.md`.

mod api;
#[doc(hidden)]
pub mod atomic;
#[doc(hidden)]
pub mod audit;
#[doc(hidden)]
pub mod clock;
#[doc(hidden)]
pub mod document;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod failpoints;
#[doc(hidden)]
pub mod folder;
pub mod lease;
#[doc(hidden)]
pub mod leases;
#[doc(hidden)]
pub mod mirror;
pub mod outcome;
#[doc(hidden)]
pub mod publish;
#[doc(hidden)]
pub mod recovery;
#[doc(hidden)]
pub mod refusal;
#[doc(hidden)]
pub mod reports;
#[doc(hidden)]
pub mod resource;
#[doc(hidden)]
pub mod root;
#[doc(hidden)]
pub mod session;
pub mod sink;
#[doc(hidden)]
pub mod store;
#[doc(hidden)]
pub mod text;
#[doc(hidden)]
pub mod tree;
#[doc(hidden)]
pub mod upkeep;

pub use api::{
    ClaimOptions, Client, Content, Keeping, LeaseId, LeaseKeeper, Options, WriteOptions,
};
pub use audit::{Event, EventKind};
pub use clock::Clock;
pub use error::{Error, Refusal, Result};
pub use refusal::RefusalKind;
