//! Crash-test hooks, compiled in only with the `failpoints` feature.
//!
//! Each named point in `write`, `claim`, the commit and the immutable read
//! (`read.frozen`) is driven by the `FAILPOINTS`
//! variable of the `fail` crate (`FAILPOINTS='write.after_rename=return(abort)'`).
//! Actions of `return(ARG)`:
//! - `abort`: kill the process on the spot (a real crash: no destructors, no cleanup);
//! - `wait:PATH`: write this pid to the FIFO `PATH.ready`, then block until `PATH.resume`
//!   is written and closed, then go on (a worker paused at an exact step);
//! - anything else: fail the command with an error (exit 1).
//!
//! `panic`, `sleep(ms)` and the other `fail` actions work as the crate documents.

use crate::error::{Error, Result};

/// Evaluates the failpoint `name`.
pub fn hit(name: &str) -> Result<()> {
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
