//! Helpers shared by the test modules that crash, pause and race real `fencepost`
//! processes (`crash`, `acknowledged`, `walls`, `strace`, `torture`, `documents`): the
//! documents they write, what they read back, the processes they drive, the
//! PostgreSQL servers the store tests run against (`pg`), and the fixture that runs one
//! test body against both stores (`backend`). The builder every test uses is `harness`.

mod backend;
mod content;
pub(crate) mod needs;
pub(crate) mod netns;
pub(crate) mod pg;
mod process;
mod state;

pub(crate) use backend::{Backend, both_stores};
pub(crate) use content::*;
pub(crate) use process::*;
pub(crate) use state::*;
