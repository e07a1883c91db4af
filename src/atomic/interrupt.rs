//! Staged files that a signal may still remove. A `write` stopped by SIGTERM, SIGINT or
//! SIGHUP removes its staged `.fencepost-tmp-*` file before it ends, rather than leave
//! it to the next write or `recover` (`verify` would report `leftover-temp` meanwhile).
//!
//! A staged file is registered here from its creation until its write commits to it
//! ([`Registration::commit`]). That point of no return is in the publish, under the
//! state file's lock, once the sink has accepted the write and just before the first
//! recovery link (`-pre-<ino>`, `-new-<ino>`) is made. Before it nothing durable has
//! changed: the temp file is this writer's alone, and a process that removes it and dies
//! leaves what a writer that never staged leaves (an open transaction rolls back with
//! the process). From it on, the file is part of the write's decision (as `-new-<ino>`,
//! then as the document) and, should the process die, of recovery's: a signal then waits
//! for the write to end (committed, or undone) before the process dies.
//!
//! The library installs no signal handler. The command line watches the signals on a
//! thread of its own, calls [`stop`] and then ends the process by the signal; a thread
//! that reaches the registry after [`stop`] waits for that end, so nothing new is staged
//! or committed to once a stop has begun.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::Result;

/// A staged file not yet committed to, as a signal would remove it.
#[derive(Debug)]
struct Entry {
    id: u64,
    folder: Arc<OwnedFd>,
    name: OsString,
}

/// The process's staged files and its writes past their point of no return.
#[derive(Debug)]
struct Registry {
    next: u64,
    staged: Vec<Entry>,
    committing: usize,
    stopped: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    staged: Vec::new(),
    committing: 0,
    stopped: false,
});

/// Notified when a write past its point of no return ends.
static ENDED: Condvar = Condvar::new();

/// The registry, locked. A panic while it was held leaves it consistent (every change
/// is one push, removal or count), so a poisoned lock is taken as it is.
fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The process is ending by a signal ([`stop`] has begun): this thread lets the lock go
/// and waits for that end.
fn await_the_end(registry: MutexGuard<'static, Registry>) -> ! {
    drop(registry);
    loop {
        std::thread::park();
    }
}

/// Where a staged file stands in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Registered: a signal removes it.
    Staged,
    /// Past the point of no return: a signal waits for the write to end.
    Committing,
    /// Out of the registry.
    Done,
}

/// A staged file's place in the registry, from its creation to the end of its write.
/// Dropped while still registered, it removes the file (unless a signal did); dropped
/// once committed to, it tells a waiting signal that the write has ended.
#[derive(Debug)]
#[must_use]
pub struct Registration {
    id: u64,
    stage: Stage,
}

/// Creates a staged file with `create` and registers it as `name` in `folder`, both with
/// the registry locked: a signal finds the file registered or not yet created, never
/// created and unregistered. `Ok(None)` when `create` found the name taken.
pub fn create<T>(
    folder: Arc<OwnedFd>,
    name: &OsStr,
    create: impl FnOnce() -> Result<Option<T>>,
) -> Result<Option<(T, Registration)>> {
    let mut registry = registry();
    if registry.stopped {
        await_the_end(registry);
    }
    let Some(created) = create()? else {
        return Ok(None);
    };
    let id = registry.next;
    registry.next += 1;
    registry.staged.push(Entry {
        id,
        folder,
        name: name.to_os_string(),
    });
    Ok(Some((
        created,
        Registration {
            id,
            stage: Stage::Staged,
        },
    )))
}

impl Registration {
    /// The point of no return: the write is about to make its first recovery link. From
    /// here a signal no longer removes the file; it waits for the write to end. If a
    /// signal has removed the file already, this thread waits for the process to end.
    pub fn commit(&mut self) {
        let mut registry = registry();
        if registry.stopped {
            await_the_end(registry);
        }
        if self.stage == Stage::Staged {
            registry.staged.retain(|e| e.id != self.id);
            registry.committing += 1;
            self.stage = Stage::Committing;
        }
    }

    /// Takes the file out of the registry without removing it (it was not ours after
    /// all: a cleaner removed it before it was locked).
    pub fn forget(mut self) {
        if self.stage == Stage::Staged {
            registry().staged.retain(|e| e.id != self.id);
        }
        self.stage = Stage::Done;
    }

    /// Whether the file is still registered: then dropping this removes it.
    #[must_use]
    pub fn is_staged(&self) -> bool {
        self.stage == Stage::Staged
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        let mut registry = registry();
        match stage {
            Stage::Staged => {
                // Not in the registry any more: a signal has removed it.
                if let Some(at) = registry.staged.iter().position(|e| e.id == self.id) {
                    let entry = registry.staged.swap_remove(at);
                    let _ = rustix::fs::unlinkat(
                        &entry.folder,
                        &entry.name,
                        rustix::fs::AtFlags::empty(),
                    );
                }
            }
            Stage::Committing => {
                registry.committing -= 1;
                ENDED.notify_all();
                if registry.stopped {
                    await_the_end(registry);
                }
            }
            Stage::Done => {}
        }
    }
}

/// Removes every staged file not yet committed to, then waits for the writes past their
/// point of no return to end. Returns how many files it removed. The caller must end the
/// process next (by the signal it got): from here on, a thread that stages or commits
/// waits for that end instead.
pub fn stop() -> usize {
    let mut registry = registry();
    registry.stopped = true;
    let removed = std::mem::take(&mut registry.staged)
        .into_iter()
        .filter(|entry| {
            rustix::fs::unlinkat(&entry.folder, &entry.name, rustix::fs::AtFlags::empty()).is_ok()
        })
        .count();
    while registry.committing > 0 {
        registry = ENDED.wait(registry).unwrap_or_else(PoisonError::into_inner);
    }
    removed
}
