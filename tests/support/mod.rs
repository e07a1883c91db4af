//! Helpers shared by the test modules that crash, pause and race real `fencepost`
//! processes (`crash`, `acknowledged`, `walls`, `strace`, `torture`, `documents`): the
//! documents they write, what they read back, the processes they drive, and the
//! PostgreSQL servers the store tests run against (`pg`). The builder every test uses
//! is `harness`.

mod backend;
mod content;
pub(crate) mod pg;
mod process;
mod state;

pub(crate) use backend::{Backend, both_stores};
pub(crate) use content::*;
pub(crate) use process::*;
pub(crate) use state::*;
