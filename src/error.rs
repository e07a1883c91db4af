//! The one error type of the library, and the only place that knows the exit codes.
//!
//! Refusals (held, lost, stale, conflict, unissued) are not crashes: they are
//! [`Refusal`] values that carry what a script needs to log why, and each has its own
//! exit code. [`Error::exit_code`] is the exit-code table of the README; keep the two
//! in step.

use std::io;
use std::path::PathBuf;

use serde::Serialize;

use crate::refusal::RefusalKind;

use crate::outcome::{RefusalDetail, RunFailed, Verified};

/// Everything that can stop a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A defined refusal of the protocol; prints its outcome and exits with its code.
    #[error("{0}")]
    Refused(Box<Refusal>),

    /// Bad usage or bad input: nothing was changed.
    #[error("{message}")]
    Usage {
        message: String,
        hint: Option<String>,
    },

    /// The state file stayed locked by another process past the busy timeout.
    #[error("state file {path} is locked by another process (waited {waited_ms} ms)")]
    Busy { path: PathBuf, waited_ms: u64 },

    /// An operating-system error on a file the tool was working with.
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// SQLite failed in a way that is neither busy nor a foreign file.
    #[error("{}", database_message(path, source))]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    /// A shared store (`--store`) could not be reached, or failed: nothing was changed
    /// unless the message says it may have been.
    #[error("{message}")]
    Remote {
        message: String,
        hint: Option<String>,
    },

    /// A change was sent to be committed and the answer never came back (the connection
    /// broke at COMMIT): it may or may not have been made (exit 1). `retry` says what
    /// running the same command again will answer; the command fills it in
    /// ([`Error::retry_tells`]), the store cannot know which command it is.
    #[error("{message}")]
    OutcomeUnknown {
        message: String,
        retry: Option<&'static str>,
    },

    /// A blob of the shared store whose bytes no longer match its record (hand-edited or
    /// damaged tables): that document's problem, not the store's, so a command working
    /// through many documents reports it for that one and goes on with the others.
    #[error("{message}")]
    Damaged {
        message: String,
        hint: Option<String>,
    },

    /// A resource of the shared store stayed locked by another session past the busy
    /// timeout.
    #[error("store {store}: the resource stayed locked by another session (waited {waited_ms} ms)")]
    RemoteBusy { store: String, waited_ms: u64 },

    /// `verify` found inconsistencies; `report` lists them, one per line.
    #[error("{message}")]
    Diverged {
        message: String,
        report: String,
        /// Boxed: every `Result` of the crate carries this error's size.
        found: Box<Verified>,
    },

    /// A command that works through every resource (`recover`, `mirror`) could not finish some:
    /// it went on with the others, `report` says what it did and did not do, one line
    /// each, and it exits with the first failure's code.
    #[error("{message}")]
    Partial {
        code: i32,
        message: String,
        report: String,
        /// What it did: the command's answer, whose `outcome` the error's replaces.
        done: Box<crate::outcome::Outcome>,
    },

    /// `run`: the command failed; run exits with the command's own code.
    #[error("{message}")]
    Child {
        code: i32,
        message: String,
        ran: RunFailed,
    },

    /// `status` or `verify` of a mirror root without a store: a mirror is read against the
    /// store it copies (`store`, a connection string to open; `shown`, as messages show
    /// it). The command line opens it and reads again.
    #[error("{} is a mirror of the store {shown}: read it with that store", root.display())]
    MirrorRoot {
        root: PathBuf,
        store: String,
        shown: String,
    },

    /// `mirror --follow`: another follower holds this mirror root's follower lock
    /// (`pid`: the process it names, when it could be read).
    #[error("{} is followed already{}: one `mirror --follow` per mirror root", root.display(), pid.map_or_else(String::new, |p| format!(" by pid {p}")))]
    Following { root: PathBuf, pid: Option<u32> },

    /// A failure injected by a failpoint (builds with the `failpoints` feature only).
    #[cfg(feature = "failpoints")]
    #[error("failpoint {0} fired")]
    Injected(String),

    /// Something the code holds cannot happen did: a bug, never bad input (exit 1).
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// A refusal: a one-line explanation and the facts behind it (its kind follows from
/// them). Serialized, it is the refusal's `--json` object but for `outcome` and `error`.
#[derive(Debug, Serialize)]
pub struct Refusal {
    #[serde(skip)]
    pub message: String,
    pub resource: String,
    /// The caller's epoch (null for a claim, which has none yet).
    pub epoch: Option<i64>,
    /// The caller's owner name (null for a write without `--owner` whose epoch's owner is
    /// forgotten).
    pub owner: Option<String>,
    #[serde(flatten)]
    pub detail: RefusalDetail,
    /// Already in the audit log (`run` logs a loss when it notices it).
    #[serde(skip)]
    pub logged: bool,
    /// The caller's seq (`write --seq`, `remove --seq`; 0 without), for the audit log.
    #[serde(skip)]
    pub seq: i64,
}

impl Refusal {
    /// A refusal of `resource` to the caller (`owner`, `epoch`), for what `detail` says.
    pub fn new(
        message: String,
        resource: &str,
        epoch: Option<i64>,
        owner: Option<&str>,
        detail: RefusalDetail,
    ) -> Refusal {
        Refusal {
            message,
            resource: resource.to_string(),
            epoch,
            owner: owner.map(str::to_string),
            detail,
            seq: 0,
            logged: false,
        }
    }

    /// Its kind: the exit code and outcome word.
    #[must_use]
    pub fn kind(&self) -> RefusalKind {
        self.detail.kind()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind().outcome(), self.message)
    }
}

impl Error {
    /// The process exit code: the README's table, in one exhaustive match.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Io { .. }
            | Error::Database { .. }
            | Error::Remote { .. }
            | Error::OutcomeUnknown { .. }
            | Error::Damaged { .. }
            | Error::Internal(_) => 1,
            #[cfg(feature = "failpoints")]
            Error::Injected(_) => 1,
            Error::Usage { .. } | Error::MirrorRoot { .. } => 2,
            Error::Following { .. } => 3,
            Error::Refused(r) => match r.kind() {
                RefusalKind::Held => 3,
                RefusalKind::Lost => 4,
                RefusalKind::Stale => 5,
                RefusalKind::Conflict => 6,
                RefusalKind::Unissued => 8,
            },
            Error::Busy { .. } | Error::RemoteBusy { .. } => 7,
            Error::Diverged { .. } => 9,
            Error::Child { code, .. } | Error::Partial { code, .. } => *code,
        }
    }

    /// The outcome word for `--json` error objects.
    #[must_use]
    pub fn outcome(&self) -> &'static str {
        match self {
            Error::Refused(r) => r.kind().outcome(),
            Error::Following { .. } => RefusalKind::Held.outcome(),
            Error::Usage { .. } | Error::MirrorRoot { .. } => "usage",
            Error::Busy { .. } | Error::RemoteBusy { .. } => "busy",
            Error::Diverged { .. } => "diverged",
            Error::Child { .. } => "failed",
            Error::Partial { .. } => "incomplete",
            Error::Io { .. }
            | Error::Database { .. }
            | Error::Remote { .. }
            | Error::Damaged { .. }
            | Error::Internal(_) => "error",
            Error::OutcomeUnknown { .. } => "unknown",
            #[cfg(feature = "failpoints")]
            Error::Injected(_) => "error",
        }
    }

    /// A line telling the user how to fix it, when there is one.
    pub fn hint(&self) -> Option<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        match self {
            Error::Usage { hint, .. } => hint.as_deref().map(Cow::Borrowed),
            Error::Following { .. } => Some(Cow::Borrowed(
                "stop that follower first (systemctl stop, or kill its pid); a single \
                 `fencepost mirror` pass may run beside it",
            )),
            Error::Busy { .. } => Some(Cow::Borrowed(
                "raise --busy-timeout (FENCEPOST_BUSY_TIMEOUT) or find the process holding it",
            )),
            Error::RemoteBusy { .. } => Some(Cow::Borrowed(
                "raise --busy-timeout (FENCEPOST_BUSY_TIMEOUT), or find the session holding it \
                 (pg_stat_activity)",
            )),
            Error::OutcomeUnknown { retry, .. } => Some(Cow::Owned(format!(
                "`fencepost status` (or `log`) tells whether it was made; {}",
                retry.unwrap_or("running the same command again decides it afresh")
            ))),
            Error::Remote { hint, .. } | Error::Damaged { hint, .. } => {
                hint.as_deref().map(Cow::Borrowed)
            }
            Error::Database { path, source } => database_hint(path, source).map(Cow::Owned),
            Error::Io {
                context: PRE_IMAGE_LINK,
                source,
                ..
            } if source.kind() == io::ErrorKind::PermissionDenied => Some(Cow::Borrowed(
                "the kernel refused to hard-link the document: it belongs to another user \
                 (fs.protected_hardlinks), or the filesystem has no hard links; run the \
                 writer as the document's owner",
            )),
            _ => None,
        }
    }

    /// Says, for an [`Error::OutcomeUnknown`], what running the same command again will
    /// answer (`retry`: "claim again: ..."); any other error is returned as it is.
    #[must_use]
    pub fn retry_tells(self, retry: &'static str) -> Error {
        match self {
            Error::OutcomeUnknown { message, .. } => Error::OutcomeUnknown {
                message,
                retry: Some(retry),
            },
            other => other,
        }
    }

    /// A refusal as the error a command returns.
    #[must_use]
    pub fn refused(refusal: Refusal) -> Error {
        Error::Refused(Box::new(refusal))
    }

    /// Shorthand for a usage error without a hint.
    pub fn usage(message: impl Into<String>) -> Error {
        Error::Usage {
            message: message.into(),
            hint: None,
        }
    }

    /// Shorthand for a usage error with a hint.
    pub fn usage_hint(message: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::Usage {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    /// Wraps an I/O error with what was being done and to which path.
    pub fn io(context: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            context,
            path,
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// SQLite's failures in plain words: its own text ("attempt to write a readonly
/// database", "disk I/O error") names neither the file nor what to do.
fn database_message(path: &std::path::Path, source: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode;
    let path = path.display();
    match source.sqlite_error_code() {
        Some(ErrorCode::ReadOnly) => {
            format!("this user may not change the state file {path} ({source})")
        }
        Some(ErrorCode::DiskFull) => {
            format!("the filesystem holding the state file {path} is full ({source})")
        }
        Some(ErrorCode::SystemIoFailure) => {
            format!("the filesystem failed to read or write the state file {path} ({source})")
        }
        Some(ErrorCode::CannotOpen) => format!("cannot open the state file {path} ({source})"),
        _ => format!("state file {path}: {source}"),
    }
}

/// What to do about a SQLite failure, when there is something.
fn database_hint(path: &std::path::Path, source: &rusqlite::Error) -> Option<String> {
    use rusqlite::ErrorCode;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
        .display();
    match source.sqlite_error_code()? {
        ErrorCode::ReadOnly | ErrorCode::CannotOpen => Some(format!(
            "changes need write access to the state file, to the -wal and -shm files beside \
             it and to its folder {dir}: run as their owner (status, verify and log only \
             read)"
        )),
        ErrorCode::DiskFull => Some(format!("free space where {dir} is (df -h {dir})")),
        ErrorCode::SystemIoFailure => Some(format!(
            "is the filesystem of {dir} full (df -h {dir}), read-only, or failing (dmesg)?"
        )),
        _ => None,
    }
}

/// What a write was doing when linking the current document as its pre-image failed.
pub const PRE_IMAGE_LINK: &str = "cannot link pre-image";
