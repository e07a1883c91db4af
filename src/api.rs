//! The Rust API: what the command line does, for a program that keeps a [`Client`] open
//! instead of starting a process per call.
//!
//! A [`Client`] is a session on one place where leases live: a publish root and its
//! state file ([`Client::open`], [`Client::discover`]), or a PostgreSQL store shared by
//! several hosts, with an optional mirror root on this one ([`Client::connect`]). It
//! keeps one connection to its state, opened by its first call. Its calls answer with
//! the same typed values `--json` prints ([`crate::outcome`]), and refuse with
//! [`Error::Refused`], whose [`Refusal::kind`] says which refusal (held, lost, stale,
//! conflict, unissued) and whose `detail` carries its facts.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::atomic::Source;
use crate::clock::Clock;
use crate::error::{Error, Refusal, Result};
use crate::leases::{self, ClaimRequest, Holder};
use crate::outcome::{
    Claimed, Completed, Mirrored, Outcome, Recovered, Released, Removed, Renewed, Status, Verified,
    Written,
};
use crate::publish::{self, WriteRequest};
use crate::refusal::RefusalKind;
use crate::session::{Ctx, Kept, MirrorRoot, Settings, Warn};
use crate::store::HolderChange;

/// How a [`Client`] works on its state; [`Options::default`] is what the command line
/// does without options.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// The state file, when not the one the root names (`--db`).
    pub state_file: Option<PathBuf>,
    /// The clock deadlines are measured on: the wall clock, or a logical tick
    /// (`--now`); on a logical clock a [`Duration`]'s milliseconds count as ticks.
    pub clock: Clock,
    /// How long to wait for another process's lock before [`Error::Busy`].
    pub busy_timeout: Duration,
    /// With a shared store: how long a change waits for the store to confirm its COMMIT.
    pub commit_timeout: Duration,
    /// How many audit-log events to keep.
    pub log_keep: i64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            state_file: None,
            clock: Clock::Wall,
            busy_timeout: Duration::from_secs(10),
            commit_timeout: Duration::from_secs(30),
            log_keep: crate::store::DEFAULT_LOG_KEEP,
        }
    }
}

impl Options {
    /// With the state file at `path` instead of the one the root names.
    #[must_use]
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Options {
        self.state_file = Some(path.into());
        self
    }

    /// On `clock` (a logical one makes a deterministic session: see [`Client::set_now`]).
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Options {
        self.clock = clock;
        self
    }

    /// Waiting up to `timeout` for another process's lock.
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Options {
        self.busy_timeout = timeout;
        self
    }

    /// Waiting up to `timeout` for a shared store to confirm a COMMIT.
    #[must_use]
    pub fn commit_timeout(mut self, timeout: Duration) -> Options {
        self.commit_timeout = timeout;
        self
    }

    /// Keeping about the newest `events` audit-log events.
    #[must_use]
    pub fn log_keep(mut self, events: i64) -> Options {
        self.log_keep = events;
        self
    }
}

/// A lease as its holder names it to renew, complete or release it: what
/// [`Client::claim`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseId {
    pub resource: String,
    pub owner: String,
    pub epoch: i64,
}

impl From<&Claimed> for LeaseId {
    fn from(claimed: &Claimed) -> LeaseId {
        LeaseId {
            resource: claimed.resource.clone(),
            owner: claimed.owner.clone(),
            epoch: claimed.epoch,
        }
    }
}

/// How a claim waits and fences.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ClaimOptions {
    /// If the lease is held, wait up to this long for it (wall clock only).
    pub wait: Option<Duration>,
    /// Leave the sink's fence where it is: old holders' writes are refused only after
    /// this holder's first write.
    pub lazy_fence: bool,
}

impl ClaimOptions {
    /// Waiting up to `wait` for a held lease.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> ClaimOptions {
        self.wait = Some(wait);
        self
    }

    /// Without raising the sink's fence.
    #[must_use]
    pub fn lazy_fence(mut self, lazy: bool) -> ClaimOptions {
        self.lazy_fence = lazy;
        self
    }
}

/// The content of a write.
pub enum Content<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// The file at this path, copied in the kernel where it can be.
    File(&'a Path),
    /// Whatever this reader gives until its end.
    Reader(Box<dyn Read + 'a>),
}

impl std::fmt::Debug for Content<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Bytes(bytes) => write!(f, "Content::Bytes({} bytes)", bytes.len()),
            Content::File(path) => write!(f, "Content::File({})", path.display()),
            Content::Reader(_) => f.write_str("Content::Reader(..)"),
        }
    }
}

/// How a write is checked.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WriteOptions {
    /// The writer's owner name: the epoch must have been issued to it.
    pub owner: Option<String>,
    /// Publish empty content, which is refused without it.
    pub allow_empty: bool,
    /// The version's place within the epoch (0: the epoch's only version): a lease that
    /// publishes several versions gives each a higher seq, and a retry the same one.
    pub seq: i64,
}

impl WriteOptions {
    /// As version `seq` of the epoch (at least 1; 0 is the epoch's only version).
    #[must_use]
    pub fn seq(mut self, seq: i64) -> WriteOptions {
        self.seq = seq;
        self
    }

    /// As `owner`, to whom the epoch must have been issued.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> WriteOptions {
        self.owner = Some(owner.into());
        self
    }

    /// Publishing empty content too.
    #[must_use]
    pub fn allow_empty(mut self, allow: bool) -> WriteOptions {
        self.allow_empty = allow;
        self
    }
}

/// A session on a publish root or a shared store. One connection to the state per
/// client, opened by its first call and kept; a client serves one thread at a time
/// (move it to the thread that uses it; give each thread its own).
#[derive(Debug)]
pub struct Client {
    ctx: Ctx,
}

impl Client {
    /// A client on the publish root `root` (made a root by its first claim).
    ///
    /// # Errors
    ///
    /// Bad input (`Error::Usage`) for a root that is not a usable folder or lies inside
    /// another root's state; nothing is opened yet, so a missing state file is not an error
    /// here.
    pub fn open(root: impl AsRef<Path>) -> Result<Client> {
        Client::open_with(root, &Options::default())
    }

    /// [`Client::open`] with options.
    ///
    /// # Errors
    ///
    /// As [`Client::open`], and `Error::Usage` for options out of range.
    pub fn open_with(root: impl AsRef<Path>, options: &Options) -> Result<Client> {
        Client::new(
            Some(root.as_ref()),
            None,
            MirrorRoot::IfGivenOrFound,
            options,
        )
    }

    /// A client on the nearest publish root at or above the current folder, else on
    /// the current folder, as the command line finds it. Names stay relative to the
    /// root.
    ///
    /// # Errors
    ///
    /// As [`Client::open`]; `Error::Usage` when the current folder is not usable.
    pub fn discover(options: &Options) -> Result<Client> {
        let mut client = Client::new(None, None, MirrorRoot::IfGivenOrFound, options)?;
        client.ctx.here = None;
        Ok(client)
    }

    /// A client on the shared store at `url` (`postgresql://...`), with `mirror_root`,
    /// if given, as this host's mirror of its documents.
    ///
    /// # Errors
    ///
    /// `Error::Usage` for a URL that is not a PostgreSQL URL, or a mirror root that is not
    /// usable; the store is reached with the first call.
    pub fn connect(url: &str, mirror_root: Option<&Path>, options: &Options) -> Result<Client> {
        let how = match mirror_root {
            Some(_) => MirrorRoot::IfGivenOrFound,
            None => MirrorRoot::None,
        };
        Client::new(mirror_root, Some(url), how, options)
    }

    fn new(
        root: Option<&Path>,
        store: Option<&str>,
        mirror: MirrorRoot,
        options: &Options,
    ) -> Result<Client> {
        if options.log_keep < 1 {
            return Err(Error::usage(format!(
                "log_keep must be at least 1, got {}",
                options.log_keep
            )));
        }
        let mut ctx = Ctx::open(&Settings {
            root,
            db: options.state_file.as_deref(),
            store,
            mirror,
            clock: options.clock,
            busy: options.busy_timeout,
            commit_timeout: options.commit_timeout,
            log_keep: options.log_keep,
        })?;
        ctx.kept = Kept::on();
        Ok(Client { ctx })
    }

    /// The publish root (a shared store's mirror root, if it has one).
    pub fn root(&self) -> &Path {
        &self.ctx.root
    }

    /// Sets the logical tick calls are made at (a client on a logical clock only: its
    /// time does not pass by itself).
    ///
    /// # Errors
    ///
    /// `Error::Usage` on the wall clock, or for a negative tick.
    pub fn set_now(&mut self, tick: i64) -> Result<()> {
        match self.ctx.clock {
            Clock::Logical(_) if tick >= 0 => {
                self.ctx.clock = Clock::Logical(tick);
                Ok(())
            }
            Clock::Logical(_) => Err(Error::usage(format!(
                "a tick must be zero or positive, got {tick}"
            ))),
            Clock::Wall => Err(Error::usage(
                "set_now is for a client on a logical clock: this one is on the wall clock",
            )),
        }
    }

    /// Passes warnings (what went wrong beside an answer that stands: a refusal that
    /// could not be logged, a mirror not updated after a publish) to `warn`; by
    /// default they are dropped.
    pub fn on_warning(&mut self, warn: impl Fn(&str) + Send + Sync + 'static) {
        self.ctx.warn = Warn(Arc::new(warn));
    }

    /// Claims `resource` for `owner` for `ttl` and gets a new epoch; `Refused` with
    /// [`RefusalKind::Held`] while someone else holds a live lease. The owner of the
    /// live lease claiming again before writing gets its lease back (`replay`).
    ///
    /// # Errors
    ///
    /// `Error::Refused` ([`RefusalKind::Held`]) while another owner holds a live lease;
    /// `Error::Usage` for a bad name or TTL; `Error::Busy` when the state stays locked past
    /// the busy timeout; store and I/O errors as they come. A claim whose COMMIT's answer
    /// was lost is `Error::OutcomeUnknown`: claiming again tells.
    pub fn claim(&self, resource: &str, owner: &str, ttl: Duration) -> Result<Claimed> {
        self.claim_with(resource, owner, ttl, &ClaimOptions::default())
    }

    /// [`Client::claim`] with options.
    ///
    /// # Errors
    ///
    /// As [`Client::claim`]; a wait that runs out is `Held`.
    pub fn claim_with(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        options: &ClaimOptions,
    ) -> Result<Claimed> {
        if options.wait.is_some() && matches!(self.ctx.clock, Clock::Logical(_)) {
            return Err(Error::usage(
                "a claim can wait only on the wall clock: on a logical one, time does not pass",
            ));
        }
        let ttl = ticks(ttl)?;
        self.answer(|ctx| {
            let resource = leases::claimable(ctx, OsStr::new(resource))?;
            leases::claim(
                ctx,
                &ClaimRequest {
                    resource: &resource,
                    owner,
                    ttl,
                    wait: options.wait,
                    lazy_fence: options.lazy_fence,
                },
            )
        })
    }

    /// Renews a live lease for `ttl` from now; `Refused` with [`RefusalKind::Lost`] once
    /// it is not the holder's any more.
    ///
    /// # Errors
    ///
    /// `Error::Refused` ([`RefusalKind::Lost`]) once the lease is not the holder's any more
    /// (expired, taken over, finished); `Error::Busy`, store and I/O errors as they come.
    pub fn renew(&self, lease: &LeaseId, ttl: Duration) -> Result<Renewed> {
        let ttl = ticks(ttl)?;
        self.answer(|ctx| {
            let (resource, now) =
                leases::change_held(ctx, &holder(lease), HolderChange::Renew { ttl })?;
            Ok(Renewed {
                resource: resource.to_string(),
                epoch: lease.epoch,
                owner: lease.owner.clone(),
                deadline: now.saturating_add(ttl),
            })
        })
    }

    /// Completes a live lease with an optional result; a retry of a completion made
    /// before answers `replay`.
    ///
    /// # Errors
    ///
    /// As [`Client::renew`]; a completion recorded with another result is `Lost`.
    pub fn complete(&self, lease: &LeaseId, result: Option<&str>) -> Result<Completed> {
        self.answer(|ctx| {
            let done = leases::change_held_or_replay(
                ctx,
                &holder(lease),
                HolderChange::Complete { result },
                None,
            )?;
            Ok(Completed {
                resource: done.resource.to_string(),
                epoch: lease.epoch,
                owner: lease.owner.clone(),
                result: result.map(str::to_string),
                exit: None,
                replay: done.replay,
            })
        })
    }

    /// Releases a live lease without a result.
    ///
    /// # Errors
    ///
    /// As [`Client::renew`].
    pub fn release(&self, lease: &LeaseId) -> Result<Released> {
        self.answer(|ctx| {
            let done =
                leases::change_held_or_replay(ctx, &holder(lease), HolderChange::Release, None)?;
            Ok(Released {
                resource: done.resource.to_string(),
                epoch: lease.epoch,
                owner: lease.owner.clone(),
                replay: done.replay,
            })
        })
    }

    /// Publishes `content` as `resource`'s document under `epoch`, if that epoch is
    /// still current: `Refused` with [`RefusalKind::Stale`] once a newer epoch was
    /// claimed or written, [`RefusalKind::Conflict`] for other bytes under the same
    /// epoch, [`RefusalKind::Unissued`] for an epoch never claimed. The same bytes again
    /// under the same epoch are a replay (`Written::replay`), the document untouched.
    ///
    /// # Errors
    ///
    /// `Error::Refused` with [`RefusalKind::Stale`], [`RefusalKind::Conflict`] or
    /// [`RefusalKind::Unissued`] as above; `Error::Usage` for a bad name or empty content;
    /// `Error::Busy`, store and I/O errors as they come (the document is then as it was).
    /// With a shared store, `Error::OutcomeUnknown` when the COMMIT's answer was lost:
    /// writing the same bytes again is a replay if it was made.
    pub fn write(&self, resource: &str, epoch: i64, content: Content<'_>) -> Result<Written> {
        self.write_with(resource, epoch, content, &WriteOptions::default())
    }

    /// [`Client::write`] with options.
    ///
    /// # Errors
    ///
    /// As [`Client::write`]; `Refused` when the epoch was issued to another owner.
    pub fn write_with(
        &self,
        resource: &str,
        epoch: i64,
        content: Content<'_>,
        options: &WriteOptions,
    ) -> Result<Written> {
        let from = match &content {
            Content::File(path) => Some(*path),
            _ => None,
        };
        let request = WriteRequest {
            resource: OsStr::new(resource),
            epoch,
            seq: options.seq,
            owner: options.owner.as_deref(),
            from,
            allow_empty: options.allow_empty,
            unfenced: false,
            applied: false,
        };
        self.answer(|ctx| {
            let outcome = publish::write(ctx, &request, || source(content))?;
            let (mut written, replay) = match outcome {
                Outcome::Written(written) => (written, false),
                Outcome::Replay(written) => (written, true),
                _ => {
                    return Err(Error::Internal(
                        "a write answered neither written nor replay",
                    ));
                }
            };
            written.replay = replay;
            if ctx.remote.as_ref().is_some_and(|r| r.mirror) {
                let resource = ctx.stored(&written.resource)?;
                crate::mirror::apply_after_write(
                    ctx,
                    &mut *ctx.shared_store("nothing was ever claimed here")?,
                    &resource,
                );
            }
            Ok(written)
        })
    }

    /// Removes `resource`'s document under `epoch` (and `options.seq`), as one more
    /// version decided like a write, and keeps a tombstone: the fence stays, so a late
    /// writer with an older epoch is refused and cannot bring the document back. The same
    /// removal again is a replay (`Removed::replay`); a removal at a version that wrote
    /// bytes is a [`RefusalKind::Conflict`] (pass a higher seq).
    ///
    /// # Errors
    ///
    /// As [`Client::write`] (no content is read).
    pub fn remove(&self, resource: &str, epoch: i64, options: &WriteOptions) -> Result<Removed> {
        let request = WriteRequest {
            resource: OsStr::new(resource),
            epoch,
            seq: options.seq,
            owner: options.owner.as_deref(),
            from: None,
            allow_empty: false,
            unfenced: false,
            applied: false,
        };
        self.answer(|ctx| {
            let removed = match publish::remove(ctx, &request)? {
                Outcome::Removed(removed) | Outcome::RemoveReplay(removed) => removed,
                _ => {
                    return Err(Error::Internal(
                        "a removal answered neither removed nor replay",
                    ));
                }
            };
            if ctx.remote.as_ref().is_some_and(|r| r.mirror) {
                let resource = ctx.stored(&removed.resource)?;
                crate::mirror::apply_after_write(
                    ctx,
                    &mut *ctx.shared_store("nothing was ever claimed here")?,
                    &resource,
                );
            }
            Ok(removed)
        })
    }

    /// Every resource's lease, sink record and document side by side (`resource`: only
    /// that one, refused as bad input if the state has never seen it).
    ///
    /// # Errors
    ///
    /// `Error::Usage` for a resource the state has never seen, or no state yet;
    /// `Error::Busy`, store and I/O errors as they come.
    pub fn status(&self, resource: Option<&str>) -> Result<Status> {
        self.answer(|ctx| crate::reports::status(ctx, resource.map(OsStr::new)))
    }

    /// Checks every resource (or one) for a document, record or lease out of step, and
    /// lists what it found in [`Verified::problems`] (empty: all consistent). With a
    /// shared store, every published blob is read in full against its record.
    ///
    /// # Errors
    ///
    /// As [`Client::status`]. Problems found are the answer, not an error.
    pub fn verify(&self, resource: Option<&str>) -> Result<Verified> {
        self.answer(|ctx| crate::reports::verify(ctx, resource.map(OsStr::new)))
    }

    /// Recovers every resource's document (or one's) from crashed writes, as a write
    /// would before it starts. With a shared store, its unused blobs older than `grace`
    /// are removed too.
    ///
    /// # Errors
    ///
    /// As [`Client::status`]; a resource that cannot be recovered is the error when one is
    /// asked for, and a failed line of the answer otherwise.
    pub fn recover(&self, resource: Option<&str>, grace: Duration) -> Result<Recovered> {
        self.answer(|ctx| crate::upkeep::recover(ctx, resource.map(OsStr::new), false, grace))
    }

    /// Brings this host's mirror root up to the shared store (a client opened with
    /// [`Client::connect`] and a mirror root): every published document, or one.
    ///
    /// # Errors
    ///
    /// `Error::Usage` for a client without a mirror root; store and I/O errors as they come
    /// (a document this host cannot hold is a failed line of the answer).
    pub fn mirror(&self, resource: Option<&str>) -> Result<Mirrored> {
        self.answer(|ctx| {
            if !ctx.remote.as_ref().is_some_and(|r| r.mirror) {
                return Err(Error::usage(
                    "mirror is for a client on a shared store with a mirror root",
                ));
            }
            let only = resource
                .map(|raw| ctx.resource(OsStr::new(raw)))
                .transpose()?;
            let mut store = ctx.shared_store("nothing was ever claimed here")?;
            crate::mirror::sync(
                ctx,
                &mut *store,
                only.as_ref().map(super::resource::Resource::as_str),
                crate::document::Look::Hash,
            )
        })
    }

    /// Keeps `lease` renewed for `ttl` every `ttl / 3` on a thread of its own (with
    /// connections of its own), until the keeper is stopped or the lease is lost.
    ///
    /// # Errors
    ///
    /// `Error::Usage` on a logical clock or for a zero TTL; an I/O error when no thread can
    /// be started.
    pub fn keep(&self, lease: &LeaseId, ttl: Duration) -> Result<LeaseKeeper> {
        LeaseKeeper::start(&self.ctx, lease.clone(), ttl)
    }

    /// Runs a call; a failure that may have broken the kept connection closes it, so the
    /// next call opens a new one.
    fn answer<T>(&self, call: impl FnOnce(&Ctx) -> Result<T>) -> Result<T> {
        let answer = call(&self.ctx);
        if let Err(e) = &answer
            && !matches!(e, Error::Refused(_) | Error::Usage { .. })
        {
            self.ctx.forget_store();
        }
        answer
    }
}

/// A duration as the session's clock counts it: milliseconds (and a logical clock's
/// ticks as milliseconds); zero is no lease at all.
fn ticks(ttl: Duration) -> Result<i64> {
    let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    if ms <= 0 {
        return Err(Error::usage(format!(
            "a lease must last at least 1 ms, got {ttl:?}"
        )));
    }
    Ok(ms)
}

fn holder(lease: &LeaseId) -> Holder<'_> {
    Holder {
        resource: OsStr::new(&lease.resource),
        owner: &lease.owner,
        epoch: lease.epoch,
    }
}

/// The engine's source for a write's content, streamed as it is read.
fn source(content: Content<'_>) -> Result<Source<'_>> {
    match content {
        Content::File(path) => {
            std::fs::File::open(path)
                .map(Source::File)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                        Error::usage(format!("cannot read {}: {e}", path.display()))
                    }
                    _ => Error::io("cannot open", path)(e),
                })
        }
        Content::Bytes(bytes) => Ok(Source::Stream(Box::new(bytes))),
        Content::Reader(reader) => Ok(Source::Stream(reader)),
    }
}

/// What a [`LeaseKeeper`] knows of its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Keeping {
    /// Renewed: held until this deadline (on the session's clock).
    Held { deadline: i64 },
    /// Lost: the store refused a renewal (another holder took over, or it expired), or
    /// no renewal was answered before the deadline. Writes under its epoch will be
    /// refused; stop the work it guarded.
    Lost { why: String },
    /// Stopped by its owner; the lease is left as it was (release it, or let it expire).
    Stopped,
}

/// A thread that keeps a lease renewed, what a long-lived worker uses instead of `run`:
/// it renews every TTL/3, and once a renewal is refused or the deadline passes without
/// one, it stops and says the lease is lost ([`LeaseKeeper::state`],
/// [`LeaseKeeper::wait_lost`]).
#[derive(Debug)]
pub struct LeaseKeeper {
    shared: Arc<(Mutex<Keeping>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl LeaseKeeper {
    fn start(ctx: &Ctx, lease: LeaseId, ttl: Duration) -> Result<LeaseKeeper> {
        if matches!(ctx.clock, Clock::Logical(_)) {
            return Err(Error::usage(
                "a lease keeper renews in real time: it needs the wall clock",
            ));
        }
        let ttl_ms = ticks(ttl)?;
        // A session of its own (cloned, it shares no connection with the client's): each
        // renewal opens its connection with waits bounded by the lease's deadline.
        let own = ctx.clone();
        let first = Instant::now();
        let shared = Arc::new((
            Mutex::new(Keeping::Held {
                deadline: own.now().saturating_add(ttl_ms),
            }),
            Condvar::new(),
        ));
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fencepost-keeper".into())
            .spawn(move || keep(&own, &lease, ttl, first, &state))
            .map_err(|e| Error::io("cannot start the lease keeper for", PathBuf::new())(e))?;
        Ok(LeaseKeeper {
            shared,
            thread: Some(thread),
        })
    }

    /// What the keeper knows of the lease now.
    #[must_use]
    pub fn state(&self) -> Keeping {
        match self.shared.0.lock() {
            Ok(state) => state.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Waits up to `timeout` for the lease to be lost; returns its state then.
    pub fn wait_lost(&self, timeout: Duration) -> Keeping {
        let (lock, changed) = &*self.shared;
        let guard = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (state, _) = changed
            .wait_timeout_while(guard, timeout, |s| matches!(s, Keeping::Held { .. }))
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.clone()
    }

    /// Stops renewing (the lease is left as it is) and returns the last state.
    #[must_use]
    pub fn stop(mut self) -> Keeping {
        self.halt()
    }

    fn halt(&mut self) -> Keeping {
        let (lock, changed) = &*self.shared;
        {
            let mut state = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if matches!(*state, Keeping::Held { .. }) {
                *state = Keeping::Stopped;
            }
            changed.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.state()
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The keeper's loop: renew every `ttl / 3` until stopped, lost, or out of time.
fn keep(
    ctx: &Ctx,
    lease: &LeaseId,
    ttl: Duration,
    mut renewed_at: Instant,
    shared: &(Mutex<Keeping>, Condvar),
) {
    let (lock, changed) = shared;
    let every = ttl / 3;
    loop {
        let next = renewed_at + every;
        let guard = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (guard, _) = changed
            .wait_timeout_while(guard, next.saturating_duration_since(Instant::now()), |s| {
                matches!(s, Keeping::Held { .. }) && Instant::now() < next
            })
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !matches!(*guard, Keeping::Held { .. }) {
            return;
        }
        drop(guard);
        // Every wait of the renewal on the network or a lock ends by the lease's deadline.
        let deadline = renewed_at + ttl;
        let mut attempt = ctx.clone();
        attempt.deadline = Some(deadline);
        attempt.busy = ctx
            .busy
            .min(deadline.saturating_duration_since(Instant::now()));
        let sent = Instant::now();
        let answer = Client { ctx: attempt }.renew(lease, ttl);
        let mut state = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !matches!(*state, Keeping::Held { .. }) {
            return;
        }
        match answer {
            Ok(renewed) => {
                renewed_at = sent;
                *state = Keeping::Held {
                    deadline: renewed.deadline,
                };
            }
            Err(Error::Refused(refusal)) if refusal.kind() == RefusalKind::Lost => {
                *state = Keeping::Lost {
                    why: refusal.to_string(),
                };
            }
            // Not answered (busy, out of reach): tried again soon, until the deadline.
            Err(_) if Instant::now() + every / 4 < deadline => {
                drop(state);
                std::thread::sleep(every / 4);
                continue;
            }
            Err(e) => {
                *state = Keeping::Lost {
                    why: format!("no renewal was answered before the deadline: {e}"),
                };
            }
        }
        changed.notify_all();
        if !matches!(*state, Keeping::Held { .. }) {
            return;
        }
    }
}

/// Refusals a caller may want to match on by name.
impl Refusal {
    /// True for a write refused because a newer epoch was accepted (or claimed).
    #[must_use]
    pub fn is_stale(&self) -> bool {
        self.kind() == RefusalKind::Stale
    }
}
