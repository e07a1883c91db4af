//! Helpers shared by the test modules that crash, pause and race real `fencepost`
//! processes (`crash`, `acknowledged`, `walls`, `strace`, `torture`, `documents`): the
//! documents they write, what they read back, and the processes they drive. The
//! builder every test uses is `harness`.

mod content;
mod process;
mod state;

pub(crate) use content::*;
pub(crate) use process::*;
pub(crate) use state::*;
