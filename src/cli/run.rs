//! `fencepost run`: claim, run a command under the lease, keep renewing it, and finish.
//!
//! The kill on a lost lease only stops wasted work: what keeps the document safe is the
//! sink's fence, which refuses the old epoch whether or not the child is still alive.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::Args;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::claim::{self, LeaseRequest};
use super::{HolderArgs, Report};
use crate::cli::durations::{Zero, parse_duration};
use fencepost::clock::Clock;
use fencepost::error::{Error, Refusal, Result};
use fencepost::outcome::{Completed, Exit, LeaseView, Outcome, RefusalDetail, RunFailed};
use fencepost::refusal::RefusalKind;
use fencepost::session::Ctx;
use fencepost::store::HolderChange;
use job::{Foreground, JOB_CONTROL_POLL, stopped};

mod job;

/// Claim RESOURCE, run CMD while renewing the lease, then complete (or release) it.
///
/// CMD runs in its own process group with FENCEPOST_RESOURCE, FENCEPOST_EPOCH,
/// FENCEPOST_OWNER, FENCEPOST_ROOT and FENCEPOST_DB (with --store: FENCEPOST_STORE, and
/// FENCEPOST_ROOT for a mirror root) set, so inside it a plain
/// `fencepost write "$FENCEPOST_RESOURCE" < file` carries the right epoch; with -q it
/// also gets FENCEPOST_QUIET=1, so that write is as quiet as run. The lease is
/// renewed every TTL/3. If a renewal is refused (taken over) or cannot be made before
/// the deadline, CMD's group gets SIGTERM (and SIGCONT), then SIGKILL after --grace, and
/// run exits 4. The deadline is counted from before the last renewal was sent, and no
/// wait on the network holds it up: CMD gets SIGTERM by the lease's deadline at the
/// latest, and SIGKILL by the deadline plus --grace; the loss is logged after.
/// The sink's fence, not this kill, is what keeps the document safe.
/// When CMD exits 0 the lease is completed (result: --result, or "exit 0"); when it
/// fails the lease is released (the log records CMD's exit code or signal) and run
/// exits with CMD's code (128+N for signal N). Held and lost exit 3 and 4, or the
/// codes given with --held-exit-code and --lost-exit-code, so that they cannot be
/// mistaken for CMD's own; --json says which side an exit came from (`exit_from`:
/// "command", "fencepost", or "signal" for a signal run got).
/// CMD does not outlive run: should run itself be killed (SIGKILL), a small guard
/// process stops CMD's group as a lost lease would.
/// SIGINT, SIGTERM and SIGHUP sent to run are forwarded to CMD's group, followed by
/// SIGCONT so a stopped CMD still acts on them, and SIGKILL after --grace if CMD has
/// not exited by then. CMD was stopped, whatever its exit: the lease is released (never
/// completed), the log notes how CMD ended, and run then dies by the signal it got, as
/// timeout(1) does (a shell sees 128+N; --json gives that code with `exit_from`
/// "signal"). Under systemd a main process ended by SIGTERM is a clean stop, but for
/// Type=oneshot only with SuccessExitStatus=SIGTERM. Needs the wall clock: with --now,
/// time would not pass, so run refuses it.
///
/// When run is in the foreground of the terminal on its stdin, CMD's group is made the
/// foreground while it runs (so CMD can read the terminal and Ctrl-C reaches it), and run
/// takes the terminal back when CMD exits. Otherwise the terminal is left alone. Ctrl-Z
/// stops CMD and then run's job, handing the terminal back to the shell; `fg` resumes
/// both. No renewal is made while they are stopped, so a stop of more than about 2/3 of
/// the TTL loses the lease (exit 4) when resumed.
///
/// CMD's stdout and stderr pass through untouched. With --json, run's own report is one
/// JSON object on a line of its own, printed after CMD has exited: the last line of
/// stdout (CMD's stdout then passes through run, which ends it with a newline if CMD
/// did not).
///
/// CMD is the first word after RESOURCE that is not one of run's options, as with
/// flock(1): `fencepost run r.md -o a -t 5s echo hi`; everything after it is CMD's, its
/// options included. Or put it after `--`, needed when CMD's first word starts with `-`:
/// `fencepost run r.md -o a -t 5s -- echo hi`.
///
/// Examples:
///   fencepost run reports/daily.md --owner "$(hostname)-$$" --ttl 30s \
///     sh -c 'render-report > out.tmp && fencepost write "$FENCEPOST_RESOURCE" --from out.tmp'
///   fencepost run reports/daily.md -o "$(hostname)-$$" -t 30s -- ./render-and-write
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub request: LeaseRequest,

    /// After SIGTERM on a lost lease (or a signal run got and passed on), how long CMD
    /// gets before SIGKILL: seconds or with units, 0 for at once.
    #[arg(
        long,
        env = "FENCEPOST_GRACE",
        default_value = "10s",
        value_name = "DURATION",
        allow_negative_numbers = true
    )]
    pub grace: String,

    /// Result to record on success (default: "exit 0").
    #[arg(long)]
    pub result: Option<String>,

    /// Exit with N instead of 3 when another worker holds the lease, so that a command
    /// which itself exits 3 is not taken for it (as `flock -E`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8))]
    pub held_exit_code: Option<u8>,

    /// Exit with N instead of 4 when the lease is lost while the command runs, so that a
    /// command which itself exits 4 is not taken for it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8))]
    pub lost_exit_code: Option<u8>,

    /// The command and its arguments: the first word that is not one of run's options
    /// starts it (everything after it is the command's), or after `--`.
    #[arg(
        trailing_var_arg = true,
        required = true,
        num_args = 1..,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// run's exit code for `err`: the command's own when it failed, the chosen held and
    /// lost codes, else the table's.
    pub(crate) fn exit_code(&self, err: &Error) -> i32 {
        let chosen = match err {
            Error::Refused(r) if r.kind() == RefusalKind::Held => self.held_exit_code,
            Error::Refused(r) if r.kind() == RefusalKind::Lost => self.lost_exit_code,
            _ => None,
        };
        chosen.map_or_else(|| err.exit_code(), i32::from)
    }
}

/// The global options that shape what run's command gets: `--json` (its stdout is
/// relayed) and `-q` (passed on as `FENCEPOST_QUIET=1`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown {
    pub json: bool,
    pub quiet: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &RunArgs, shown: Shown) -> Result<Report> {
    // Checked now, not when the command has done its work and the lease is completed.
    fencepost::session::check_result(args.result.as_deref())?;
    if matches!(ctx.clock, Clock::Logical(_)) {
        return Err(Error::usage_hint(
            "run renews its lease in real time and cannot use --now (logical time does not pass)",
            "use claim, write and complete with --now, or drop --now",
        ));
    }
    let ttl_ms =
        parse_duration(&args.request.ttl, ctx.clock.kind(), "--ttl", Zero::Refused)?.unsigned_abs();
    let grace = Duration::from_millis(
        parse_duration(&args.grace, ctx.clock.kind(), "--grace", Zero::Allowed)?.unsigned_abs(),
    );
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::usage("no CMD given"))?;
    let (resource, ttl, wait) = claim::check_request(ctx, &args.request)?;
    let (claimed, asked) =
        fencepost::leases::take(ctx, &args.request.resolved(&resource, ttl, wait, false))?;
    let lease = Held {
        resource: claimed.resource,
        holder: HolderArgs {
            resource: args.request.resource.clone(),
            owner: claimed.owner,
            epoch: claimed.epoch,
        },
        ttl: Duration::from_millis(ttl_ms),
        grace,
        asked,
    };
    let running = start(ctx, &lease, program, rest, shown)?;
    let ended = supervise(ctx, &lease, &running);
    running.wind_down();
    match ended? {
        Ended::Exited { status, stopping } => {
            finish(ctx, args, &lease, program, status, stopping.as_ref())
        }
        Ended::Lost(lost) => Err(lost),
    }
}

/// The command running under the lease, and what run keeps around it until it ends.
struct Running {
    /// The command's process group (its pid).
    group: Pid,
    /// The command's exit status, once it has exited, and renewals' answers.
    events: mpsc::Receiver<Event>,
    /// Where a renewal's thread sends its answer.
    send: mpsc::Sender<Event>,
    /// Stops the thread that forwards signals to the group.
    signals: signal_hook::iterator::Handle,
    guard: Option<Guard>,
    relay: Option<Relay>,
    /// Taken back when dropped: on every way out, before anything is printed.
    terminal: Option<Foreground>,
}

/// What the supervisor waits for.
enum Event {
    /// The command exited (or could not be waited for).
    Exited(std::io::Result<ExitStatus>),
    /// A renewal sent at `sent` was answered.
    Renewed { sent: Instant, result: Result<()> },
    /// run got this signal, and passed it on to the command's group.
    Signalled(Signal),
}

/// How the command's run under the lease ended.
#[derive(Debug)]
enum Ended {
    /// The command exited (or was killed), on its own or after run passed on a signal
    /// it got (`stopping`).
    Exited {
        status: ExitStatus,
        stopping: Option<Stopping>,
    },
    /// The lease was lost: the loss is logged and the command's group stopped; this is
    /// the `lost` refusal.
    Lost(Error),
}

/// Starts the command under the lease: signals are watched before it exists and the
/// guard started, then the command is spawned in a process group of its own, its output
/// relayed (with `--json`) and the terminal lent to it. A command that cannot be started
/// releases the lease and fails with the shell's 127.
fn start(
    ctx: &Ctx,
    lease: &Held,
    program: &OsString,
    rest: &[OsString],
    shown: Shown,
) -> Result<Running> {
    // Watch signals before the child exists: one arriving in between is held and then
    // forwarded, instead of killing run and orphaning an unwatched child.
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(Error::io("cannot watch", "signals"))?;
    let handle = signals.handle();
    // Started before the command, so that run dying at any later moment stops it.
    let guard = Guard::start(lease.grace);
    let mut child = match spawn(ctx, lease, program, rest, shown) {
        Ok(child) => child,
        Err(e) => {
            drop(guard);
            let why = format!("cannot run {}: {e}", program.to_string_lossy());
            let _ = fencepost::leases::change_held_noting(
                ctx,
                &lease.holder.holder(),
                HolderChange::Release,
                Some(&why),
            );
            // The shell's code for a command that cannot be found or started.
            return Err(lease.child_failed(127, format!("{why}; {}", lease.released())));
        }
    };
    let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let guard = guard.map(|g| g.watch(group));
    let relay = child.stdout.take().and_then(Relay::start);
    let terminal = Foreground::hand_to(group);

    // Forward the signals a user or supervisor sends us to the child's group, and wake
    // it in case it is stopped, so it can act on them; the supervisor hears of each, to
    // escalate to SIGKILL after the grace period.
    let (send, events) = mpsc::channel::<Event>();
    let signalled = send.clone();
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if let Ok(sig) = Signal::try_from(sig) {
                // The supervisor hears of the signal before the command can die of it: it
                // reads its events in order, so it never takes that death for the
                // command's own.
                let _ = signalled.send(Event::Signalled(sig));
                let _ = killpg(group, sig);
                let _ = killpg(group, Signal::SIGCONT);
                // A slow forwarder, for the test of that order.
                #[cfg(feature = "failpoints")]
                let _ = fencepost::failpoints::hit("run.after_forward");
            }
        }
    });
    let exited = send.clone();
    std::thread::spawn(move || {
        let _ = exited.send(Event::Exited(child.wait()));
    });
    Ok(Running {
        group,
        events,
        send,
        signals: handle,
        guard,
        relay,
        terminal,
    })
}

impl Running {
    /// The command has exited (or was stopped): stop forwarding signals, take the
    /// terminal back, dismiss the guard (nothing is left for it to do) and pass on the
    /// last of the command's output.
    fn wind_down(self) {
        self.signals.close();
        drop(self.terminal);
        if let Some(guard) = self.guard {
            guard.dismiss();
        }
        if let Some(relay) = self.relay {
            relay.finish();
        }
    }
}

/// The lease `run` holds for its command.
struct Held {
    /// The resource's name as claimed.
    resource: String,
    /// Owner and epoch, as renew, complete and release take them.
    holder: HolderArgs,
    ttl: Duration,
    /// After SIGTERM on a lost lease, how long the command gets before SIGKILL.
    grace: Duration,
    /// When the claim that granted the lease was sent: it runs at least until `asked + ttl`.
    asked: Instant,
}

impl Held {
    fn released(&self) -> String {
        format!(
            "lease on {} (epoch {}) released",
            self.resource, self.holder.epoch
        )
    }

    /// run got `signal` and passed it on: the lease was released, and run dies by the
    /// signal (128 + N for a shell).
    fn stopped_by(&self, signal: Signal, message: String) -> Error {
        self.ended(128 + signal as i32, EXIT_FROM_SIGNAL, message)
    }

    /// The command failed with `code`: run exits with it.
    fn child_failed(&self, code: i32, message: String) -> Error {
        self.ended(code, "command", message)
    }

    /// run's answer when the command ended with `code`, which `exit_from` explains.
    fn ended(&self, code: i32, exit_from: &'static str, message: String) -> Error {
        Error::Child {
            code,
            message,
            ran: RunFailed {
                resource: self.resource.clone(),
                epoch: self.holder.epoch,
                owner: self.holder.owner.clone(),
                exit: Exit {
                    exit_code: code,
                    exit_from,
                },
            },
        }
    }
}

/// Starts the command in a process group of its own, with the lease in its environment.
/// With `--json` its stdout is a pipe that [`Relay`] passes on; with `-q` it gets
/// `FENCEPOST_QUIET=1`, so a `fencepost write` inside it is as quiet as run.
fn spawn(
    ctx: &Ctx,
    lease: &Held,
    program: &OsString,
    rest: &[OsString],
    shown: Shown,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("FENCEPOST_RESOURCE", &lease.resource)
        .env("FENCEPOST_EPOCH", lease.holder.epoch.to_string())
        .env("FENCEPOST_OWNER", &lease.holder.owner)
        .process_group(0);
    match &ctx.remote {
        Some(remote) => {
            command
                .env("FENCEPOST_STORE", &remote.url.url)
                .env_remove("FENCEPOST_DB");
            if remote.mirror {
                command.env("FENCEPOST_ROOT", &ctx.root);
            } else {
                command.env_remove("FENCEPOST_ROOT");
            }
        }
        None => {
            command
                .env("FENCEPOST_ROOT", &ctx.root)
                // Absolute, so a child that changes folder still finds the state file.
                .env(
                    "FENCEPOST_DB",
                    std::path::absolute(&ctx.db).unwrap_or_else(|_| ctx.db.clone()),
                );
        }
    }
    if shown.quiet {
        command.env("FENCEPOST_QUIET", "1");
    }
    if shown.json {
        command.stdout(Stdio::piped());
    }
    command.spawn()
}

/// Waits for the command, renewing the lease every TTL/3. If the lease is lost (a renewal
/// refused, or none made in time), the command's group is stopped at once (SIGTERM,
/// then SIGKILL after the grace period), the loss logged after, and it ends as
/// [`Ended::Lost`].
///
/// The local deadline is counted from the moment the last renewal that succeeded was
/// sent: the server set its own deadline later than that, so the command stops no later
/// than the lease ends wherever its time is read. Each renewal runs on a thread of its
/// own that the supervisor never waits for: a renewal stuck on a cut network (a reply
/// that never comes) cannot hold the command past the deadline.
fn supervise(ctx: &Ctx, lease: &Held, job: &Running) -> Result<Ended> {
    let (group, terminal) = (job.group, job.terminal.as_ref());
    let mut beat = Heartbeat::new(lease);
    // Once run has passed on a signal it got: which, and when SIGKILL follows.
    let mut stopping: Option<Stopping> = None;
    loop {
        let mut wake = beat.wake();
        // With the terminal lent, look in often enough to notice a Ctrl-Z.
        if terminal.is_some() {
            wake = wake.min(Instant::now() + JOB_CONTROL_POLL);
        }
        if let Some(at) = stopping.as_ref().and_then(|s| s.kill_at) {
            wake = wake.min(at);
        }
        match job
            .events
            .recv_timeout(wake.saturating_duration_since(Instant::now()))
        {
            Ok(Event::Exited(status)) => {
                let status = status.map_err(Error::io("cannot wait for", "the command"))?;
                // Seen only once the lease had run out (run was stopped, say): too late
                // to complete it, and the same story as when the deadline is seen first.
                if stopping.is_none()
                    && let Some(why) = beat.ran_out()
                {
                    return Ok(lost_after_exit(ctx, lease, &why, status));
                }
                return Ok(Ended::Exited { status, stopping });
            }
            Ok(Event::Renewed { sent, result }) => {
                if let Some(why) = beat.answered(lease, sent, result) {
                    return Ok(lost_while_running(ctx, lease, &why, job));
                }
            }
            Ok(Event::Signalled(signal)) => {
                stopping.get_or_insert_with(|| Stopping::new(signal, lease.grace));
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Internal("lost track of the command"));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(stopping) = &mut stopping {
            stopping.escalate(group);
        }
        if let Some(lent) = terminal
            && stopped(group)
        {
            lent.suspend();
        }
        if let Some(why) = beat.ran_out() {
            return Ok(lost_while_running(ctx, lease, &why, job));
        }
        beat.renew_if_due(ctx, lease, &job.send);
    }
}

/// The lease's renewals as the supervisor keeps them: when it runs out here, when the
/// next renewal is due, and the one on its way.
struct Heartbeat {
    /// Counted from before the last renewal that succeeded was sent.
    deadline: Instant,
    interval: Duration,
    next_renew: Instant,
    /// A renewal on its way (sent at this instant), whose answer comes as an event.
    in_flight: Option<Instant>,
}

impl Heartbeat {
    fn new(lease: &Held) -> Heartbeat {
        let interval = (lease.ttl / 3).max(Duration::from_millis(1));
        Heartbeat {
            deadline: lease.asked + lease.ttl,
            interval,
            next_renew: lease.asked + interval,
            in_flight: None,
        }
    }

    /// When the supervisor must look next: the deadline, or the next renewal.
    fn wake(&self) -> Instant {
        match self.in_flight {
            Some(_) => self.deadline,
            None => self.deadline.min(self.next_renew),
        }
    }

    /// A renewal sent at `sent` was answered: returns why the lease is lost, if it is.
    fn answered(&mut self, lease: &Held, sent: Instant, result: Result<()>) -> Option<String> {
        self.in_flight = None;
        match result {
            Ok(()) => {
                self.deadline = self.deadline.max(sent + lease.ttl);
                self.next_renew = sent + self.interval;
                None
            }
            Err(Error::Refused(r)) => Some(lost_reason(&r)),
            // A transient failure (busy, I/O): try again soon, while the lease still
            // runs; the deadline decides when it is too late.
            Err(e) => {
                self.next_renew =
                    Instant::now() + (self.interval / 4).max(Duration::from_millis(1));
                (Instant::now() >= self.deadline).then(|| format!("{OUT_OF_TIME}: {e}"))
            }
        }
    }

    /// Why the lease is lost, if its deadline has passed unrenewed.
    fn ran_out(&self) -> Option<String> {
        let now = Instant::now();
        if now < self.deadline {
            return None;
        }
        Some(match self.in_flight {
            Some(sent) => format!(
                "{OUT_OF_TIME}: the renewal sent {:.1}s before had no answer",
                now.saturating_duration_since(sent).as_secs_f64()
            ),
            None => format!("{OUT_OF_TIME}: deadline passed"),
        })
    }

    /// Sends the next renewal if it is due and none is on its way.
    fn renew_if_due(&mut self, ctx: &Ctx, lease: &Held, send: &mpsc::Sender<Event>) {
        if self.in_flight.is_none() && Instant::now() >= self.next_renew {
            self.in_flight = Some(renew(ctx, lease, self.deadline, send.clone()));
        }
    }
}

/// run got a signal (SIGINT, SIGTERM, SIGHUP) and passed it on to the command's group:
/// the command gets `--grace` to act on it, then SIGKILL, as on a lost lease. However the
/// command then ends, the lease is released, never completed, and run dies by the
/// signal it got.
#[derive(Debug)]
struct Stopping {
    signal: Signal,
    /// When SIGKILL follows, until it is sent.
    kill_at: Option<Instant>,
    /// The grace period, and whether it ran out (SIGKILL was sent).
    grace: Duration,
    killed: bool,
}

impl Stopping {
    fn new(signal: Signal, grace: Duration) -> Stopping {
        Stopping {
            signal,
            kill_at: Some(Instant::now() + grace),
            grace,
            killed: false,
        }
    }

    /// SIGKILL to the group once the grace period is over.
    fn escalate(&mut self, group: Pid) {
        if self.kill_at.is_some_and(|at| Instant::now() >= at) {
            self.kill_at = None;
            self.killed = true;
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Sends a renewal on a thread of its own, every wait of it on the store's network (or a
/// busy state file) bounded by the time left until `deadline`; its answer comes as
/// [`Event::Renewed`]. Returns when it was sent.
fn renew(ctx: &Ctx, lease: &Held, deadline: Instant, send: mpsc::Sender<Event>) -> Instant {
    let sent = Instant::now();
    let left = deadline.saturating_duration_since(sent);
    let renew_ctx = Ctx {
        busy: ctx.busy.min(left),
        deadline: Some(deadline),
        ..ctx.clone()
    };
    let holder = HolderArgs {
        resource: lease.holder.resource.clone(),
        owner: lease.holder.owner.clone(),
        epoch: lease.holder.epoch,
    };
    let ttl_ms = i64::try_from(lease.ttl.as_millis()).unwrap_or(i64::MAX);
    std::thread::spawn(move || {
        let result = fencepost::leases::change_held(
            &renew_ctx,
            &holder.holder(),
            HolderChange::Renew { ttl: ttl_ms },
        );
        // The supervisor may have stopped listening (the lease ran out meanwhile).
        let _ = send.send(Event::Renewed {
            sent,
            result: result.map(|_| ()),
        });
    });
    sent
}

/// Why a lease that ran out unrenewed was lost.
const OUT_OF_TIME: &str = "it ran out before it could be renewed";

/// How long run waits, once the command is stopped, to log a lost lease: the store may
/// be out of reach (that may be why the lease was lost).
const LOSS_LOG_WAIT: Duration = Duration::from_secs(2);

/// The lease was lost while the command ran (`why`): stop the command's group first,
/// then log the loss (best effort, waiting at most [`LOSS_LOG_WAIT`]), and return the
/// `lost` refusal.
fn lost_while_running(ctx: &Ctx, lease: &Held, why: &str, job: &Running) -> Ended {
    if let Some(status) = exited_already(job) {
        return lost_after_exit(ctx, lease, why, status);
    }
    let message = format!(
        "the lease on {} (epoch {}) was lost while the command ran ({why}); \
         the command is stopped",
        lease.resource, lease.holder.epoch
    );
    stop_group(job.group, lease.grace, &job.events);
    Ended::Lost(Error::refused(log_loss(ctx, lease, message)))
}

/// The command's exit status if it has exited already, unseen (run was stopped while it
/// exited, say): the thread that waits for it has reaped it or is about to, and its
/// event is then waited for. None while it runs.
fn exited_already(job: &Running) -> Option<ExitStatus> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(job.group), flags) {
        Ok(WaitStatus::StillAlive) => return None,
        // Exited and not yet reaped, or reaped (ECHILD) by the waiting thread.
        Ok(_) | Err(nix::errno::Errno::ECHILD) => {}
        Err(_) => return None,
    }
    loop {
        match job.events.recv().ok()? {
            Event::Exited(status) => return status.ok(),
            Event::Renewed { .. } | Event::Signalled(_) => {}
        }
    }
}

/// The lease was lost (`why`) but the command had exited before run saw the loss: it is
/// not stopped (nothing is left to stop), and the loss says how the command ended.
fn lost_after_exit(ctx: &Ctx, lease: &Held, why: &str, status: ExitStatus) -> Ended {
    let how = match killed_by(status) {
        Some(signal) => format!("been killed by {signal}"),
        None => format!("exited with code {}", exit_code(status)),
    };
    let message = format!(
        "the lease on {} (epoch {}) was lost ({why}); the command had {how} \
         before the loss was seen",
        lease.resource, lease.holder.epoch
    );
    Ended::Lost(Error::refused(log_loss(ctx, lease, message)))
}

/// The `lost` refusal of run (`message`, then who took the lease over when known),
/// logged. On a thread of its own, waiting for it at most [`LOSS_LOG_WAIT`] in all, the
/// lease is read once (the new holder's, if another epoch has it) and the loss logged
/// with it; a thread still waiting on the network then is left behind (run exits soon
/// after), and the refusal goes without the holder. Logged here or never: not tried
/// again on the way out.
fn log_loss(ctx: &Ctx, lease: &Held, message: String) -> Refusal {
    let until = Instant::now() + LOSS_LOG_WAIT;
    let log_ctx = Ctx {
        busy: ctx.busy.min(LOSS_LOG_WAIT),
        deadline: Some(until),
        ..ctx.clone()
    };
    let (resource, epoch, owner) = (
        lease.resource.clone(),
        lease.holder.epoch,
        lease.holder.owner.clone(),
    );
    let lost = move |taken: Option<LeaseView>| {
        let message = match &taken {
            Some(now) if now.state == "held" => {
                format!("{message}; now held by {} (epoch {})", now.owner, now.epoch)
            }
            Some(now) => format!(
                "{message}; taken over by {} (epoch {}), now {}",
                now.owner, now.epoch, now.state
            ),
            None => message.clone(),
        };
        let mut refusal = Refusal::new(
            message,
            &resource,
            Some(epoch),
            Some(&owner),
            RefusalDetail::LostWhileRunning { lease: taken },
        );
        refusal.logged = true;
        refusal
    };
    let (done, logged) = mpsc::channel();
    let lost_on_thread = lost.clone();
    let (name, ours) = (lease.resource.clone(), lease.holder.epoch);
    std::thread::spawn(move || {
        let refusal = lost_on_thread(taken_over(&log_ctx, &name, ours));
        fencepost::session::log_refusal(&log_ctx, &refusal);
        let _ = done.send(refusal);
    });
    logged.recv_timeout(LOSS_LOG_WAIT).unwrap_or_else(|_| {
        let _ = writeln!(
            std::io::stderr(),
            "fencepost: warning: refusal not logged: the store did not answer within {}s",
            LOSS_LOG_WAIT.as_secs()
        );
        lost(None)
    })
}

/// The lease of `resource` as it is now, if another epoch than `ours` has it: whoever
/// took it over. None if the store cannot tell.
fn taken_over(ctx: &Ctx, resource: &str, ours: i64) -> Option<LeaseView> {
    let resource = ctx.stored(resource).ok()?;
    let mut store = ctx.read_store("no lease to read").ok()?;
    let now = ctx.now();
    let lease = store.snapshot().ok()?.lease(&resource).ok()??;
    LeaseView::at(Some(&lease), now).filter(|view| view.epoch != ours)
}

/// Why a renewal was refused, in words that fit inside run's own `lost` line: the
/// reason and the lease as it now is, without the refusal's own `lost:` framing.
fn lost_reason(refusal: &Refusal) -> String {
    match &refusal.detail {
        RefusalDetail::Lost {
            reason,
            lease: Some(lease),
        } => format!(
            "{reason}; current: owner {} epoch {}, {}",
            lease.owner, lease.epoch, lease.state
        ),
        RefusalDetail::Lost {
            reason,
            lease: None,
        } => (*reason).to_string(),
        _ => refusal.message.clone(),
    }
}

/// The command has exited: complete the lease on exit 0, else release it and record
/// how the command ended, in the log and in run's own exit. A command that run passed a
/// signal on to (`stopping`) was stopped, whatever its exit: the lease is released, and
/// run's answer is the signal, by which it then dies.
fn finish(
    ctx: &Ctx,
    args: &RunArgs,
    lease: &Held,
    program: &OsString,
    status: ExitStatus,
    stopping: Option<&Stopping>,
) -> Result<Report> {
    let code = exit_code(status);
    let (resource, epoch) = (&lease.resource, lease.holder.epoch);
    if code == 0 && stopping.is_none() {
        let result = args.result.clone().unwrap_or_else(|| "exit 0".into());
        fencepost::leases::change_held(
            ctx,
            &lease.holder.holder(),
            HolderChange::Complete {
                result: Some(&result),
            },
        )?;
        let completed = Completed {
            resource: resource.clone(),
            epoch,
            owner: lease.holder.owner.clone(),
            result: Some(result),
            exit: Some(Exit {
                exit_code: 0,
                exit_from: "command",
            }),
            replay: false,
        };
        return Ok(
            Report::new(String::new(), Outcome::Completed(completed)).changed(format!(
                "the command exited 0 and the lease on {resource} (epoch {epoch}) was completed"
            )),
        );
    }
    let program = program.to_string_lossy();
    let mut how = match killed_by(status) {
        Some(signal) => format!("{program} was killed by {signal} (exit {code})"),
        None => format!("{program} exited with code {code}"),
    };
    if let Some(stopping) = stopping {
        how = format!("run got {}: {how}", stopping.signal.as_str());
        if stopping.killed {
            how.push_str(&format!(
                " after ignoring it for --grace {:.1}s",
                stopping.grace.as_secs_f64()
            ));
        }
    }
    let _ = fencepost::leases::change_held_noting(
        ctx,
        &lease.holder.holder(),
        HolderChange::Release,
        Some(&how),
    );
    let message = format!("{how}; {}", lease.released());
    Err(match stopping {
        Some(stopping) => lease.stopped_by(stopping.signal, message),
        None => lease.child_failed(code, message),
    })
}

/// How run's answer says it was stopped by a signal it got (`exit_from` in `--json`):
/// once the answer is printed, run dies by that signal ([`die_by`]).
pub(crate) const EXIT_FROM_SIGNAL: &str = "signal";

/// Dies by signal `code - 128`, as run does when a signal it got stopped its command:
/// so a supervisor sees the signal it sent (systemd counts a main process ended by
/// SIGTERM, SIGINT or SIGHUP as a clean stop), as timeout(1) does. Returns `code` if the
/// signal did not end the process.
pub(crate) fn die_by(code: i32) -> i32 {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let _ = signal_hook::low_level::emulate_default_handler(code - 128);
    code
}

/// A process that outlives run to stop the command's group if run dies without
/// dismissing it (SIGKILL, a crash): the command must not outlive run.
///
/// A small `sh` in a process group of its own (so the terminal's signals do not reach
/// it) reads a pipe whose write end only run holds (close-on-exec, so the command does
/// not inherit it). Run writes the command's group, and later `done`; if the pipe ends
/// before `done`, run has died: the guard sends the group SIGTERM and SIGCONT, then
/// SIGKILL after the grace period, as run does for a lost lease. Best effort: if `sh`
/// cannot be started, run goes on without it.
struct Guard {
    pipe: std::fs::File,
    process: std::process::Child,
}

/// The guard's program: `$1` is the grace period in seconds.
const GUARD_SCRIPT: &str = r#"IFS= read -r group || exit 0
IFS= read -r done && exit 0
kill -TERM -"$group" 2>/dev/null
kill -CONT -"$group" 2>/dev/null
sleep "$1"
kill -KILL -"$group" 2>/dev/null
exit 0"#;

impl Guard {
    fn start(grace: Duration) -> Option<Guard> {
        use std::os::unix::process::CommandExt;
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).ok()?;
        let process = Command::new("/bin/sh")
            .arg("-c")
            .arg(GUARD_SCRIPT)
            .arg("fencepost-run-guard")
            .arg(format!("{:.3}", grace.as_secs_f64()))
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok()?;
        Some(Guard {
            pipe: std::fs::File::from(write),
            process,
        })
    }

    /// Tells the guard which group to stop should run die.
    fn watch(mut self, group: Pid) -> Guard {
        use std::io::Write as _;
        let _ = writeln!(self.pipe, "{group}");
        self
    }

    /// The command is done with: the guard leaves without stopping anything.
    fn dismiss(mut self) {
        use std::io::Write as _;
        let _ = writeln!(self.pipe, "done");
        drop(self.pipe);
        let _ = self.process.wait();
    }
}

/// With `--json`, the command's stdout passes through run on its way out, so that run's
/// JSON line can start a line of its own even when the command's output does not end
/// with a newline. The bytes are passed on as they come, unchanged.
struct Relay {
    /// Closed to tell the relay the command has exited: pass on what is left, then stop.
    stop: std::fs::File,
    thread: std::thread::JoinHandle<Option<u8>>,
}

impl Relay {
    fn start(from: std::process::ChildStdout) -> Option<Relay> {
        let (stop_read, stop) = nix::unistd::pipe2(OFlag::O_CLOEXEC).ok()?;
        let thread = std::thread::spawn(move || relay(from, &stop_read));
        Some(Relay {
            stop: std::fs::File::from(stop),
            thread,
        })
    }

    /// Waits for the rest of the command's output and ends it with a newline if it did
    /// not end with one. Output that a process the command left behind writes later is
    /// not waited for.
    fn finish(self) {
        use std::io::Write as _;
        drop(self.stop);
        if let Ok(Some(last)) = self.thread.join()
            && last != b'\n'
        {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n").and_then(|()| out.flush());
        }
    }
}

/// Copies `from` to stdout until it ends, or until `stop` is closed and what `from`
/// holds has been copied. Returns the last byte copied. If stdout fails, stops reading,
/// so the command meets the same closed pipe it would have met itself.
fn relay(mut from: std::process::ChildStdout, stop: &OwnedFd) -> Option<u8> {
    use std::io::{Read as _, Write as _};
    let mut buf = vec![0u8; 64 * 1024];
    let mut last = None;
    let mut stopping = false;
    loop {
        if !stopping {
            let mut fds = [
                PollFd::new(from.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return last,
            }
            let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
            if !ready(&fds[0]) {
                // Only the stop: from now on, read what is there without waiting.
                stopping = true;
                let flags = fcntl(&from, FcntlArg::F_GETFL).unwrap_or(0);
                let nonblocking = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
                if fcntl(&from, FcntlArg::F_SETFL(nonblocking)).is_err() {
                    return last;
                }
            }
        }
        let n = match from.read(&mut buf) {
            Ok(0) => return last,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return last,
        };
        let mut out = std::io::stdout().lock();
        if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
            return last;
        }
        last = buf.get(n - 1).copied();
    }
}

/// SIGTERM to the group (and SIGCONT, in case it is stopped), SIGKILL after `grace` if
/// the child has not exited. A renewal's late answer is no longer of interest.
fn stop_group(group: Pid, grace: Duration, events: &mpsc::Receiver<Event>) {
    let _ = killpg(group, Signal::SIGTERM);
    let _ = killpg(group, Signal::SIGCONT);
    let until = Instant::now() + grace;
    let exited = |wait: &dyn Fn() -> Option<Event>| loop {
        match wait() {
            Some(Event::Exited(_)) => return true,
            Some(Event::Renewed { .. } | Event::Signalled(_)) => {}
            None => return false,
        }
    };
    let in_grace = || {
        events
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .ok()
    };
    if !exited(&in_grace) {
        let _ = killpg(group, Signal::SIGKILL);
        exited(&|| events.recv().ok());
    }
}

/// The shell's convention: the exit code, or 128 + N when killed by signal N.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The name of the signal that killed the command ("SIGKILL"), if one did.
fn killed_by(status: ExitStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    let n = status.signal()?;
    Some(Signal::try_from(n).map_or_else(|_| format!("signal {n}"), |s| s.as_str().to_string()))
}
