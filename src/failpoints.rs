//! Crash-test hooks: the `failpoint!` macro every step of a write, a claim, the commit
//! and the immutable read names its points with. Without the `failpoints` feature the
//! macro expands to nothing, so a release build carries no trace of them.
//!
//! With the feature, each named point in `write`, `claim`, the commit and the immutable
//! read (`read.frozen`) is driven by the `FAILPOINTS` variable of the `fail` crate
//! (`FAILPOINTS='write.after_rename=return(abort)'`). Actions of `return(ARG)`:
//! - `abort`: kill the process on the spot (a real crash: no destructors, no cleanup);
//! - `wait:PATH`: write this pid to the FIFO `PATH.ready`, then block until `PATH.resume`
//!   is written and closed, then go on (a worker paused at an exact step);
//! - anything else: fail the command with an error (exit 1).
//!
//! `panic`, `sleep(ms)` and the other `fail` actions work as the crate documents. A new
//! point is one `failpoint!("area.step")` line in a function returning
//! [`crate::error::Result`]; the crash tests then drive it by that name.

/// Fires the failpoint `$name`, returning its injected error from the enclosing
/// function (a no-op unless built with the `failpoints` feature).
#[cfg(feature = "failpoints")]
macro_rules! failpoint {
    ($name:literal) => {
        $crate::failpoints::hit($name)?;
    };
}

/// Fires the failpoint `$name`: a no-op, since this build has no `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
macro_rules! failpoint {
    ($name:literal) => {};
}

pub(crate) use failpoint;

/// Arms the failpoints from `FAILPOINTS` for the life of the returned value (the whole
/// command).
#[cfg(feature = "failpoints")]
#[must_use]
pub fn setup() -> fail::FailScenario<'static> {
    fail::FailScenario::setup()
}

/// Nothing to arm without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
pub fn setup() -> Unarmed {
    Unarmed
}

/// What [`setup`] returns in a build without failpoints.
#[cfg(not(feature = "failpoints"))]
#[derive(Debug)]
pub struct Unarmed;

/// Evaluates the failpoint `name`.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> crate::error::Result<()> {
    use crate::error::Error;
    let Some(arg) = fail::eval(name, |arg| arg) else {
        return Ok(());
    };
    match arg.as_deref() {
        Some("abort") => std::process::abort(),
        Some(action) if action.starts_with("wait:") => {
            let base = &action["wait:".len()..];
            let io = |what| move |e| Error::io(what, base.to_string())(e);
            std::fs::write(format!("{base}.ready"), format!("{}\n", std::process::id()))
                .map_err(io("failpoint cannot signal"))?;
            std::fs::read(format!("{base}.resume")).map_err(io("failpoint cannot wait on"))?;
            Ok(())
        }
        _ => Err(Error::Injected(name.to_string())),
    }
}
