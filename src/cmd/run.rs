//! `fencepost run`: claim, run a command under the lease, keep renewing it, and finish.
//!
//! The kill on a lost lease only stops wasted work: what keeps the document safe is the
//! sink's fence, which refuses the old epoch whether or not the child is still alive.

use std::cell::Cell;
use std::ffi::OsString;
use std::process::{Command, ExitStatus};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg};
use nix::unistd::{Pid, getpgrp, isatty, tcgetpgrp, tcsetpgrp};
use serde_json::json;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::claim::{self, ClaimArgs, LeaseRequest};
use super::{Ctx, HolderArgs, Report, change_held};
use crate::clock::{Clock, Zero, parse_duration};
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::store::HolderChange;

/// Claim RESOURCE, run CMD while renewing the lease, then complete (or release) it.
///
/// CMD runs in its own process group with FENCEPOST_RESOURCE, FENCEPOST_EPOCH,
/// FENCEPOST_OWNER, FENCEPOST_ROOT and FENCEPOST_DB set, so inside it a plain
/// `fencepost write "$FENCEPOST_RESOURCE" < file` carries the right epoch. The lease is
/// renewed every TTL/3. If a renewal is refused (taken over) or cannot be made before
/// the deadline, CMD's group gets SIGTERM (and SIGCONT), then SIGKILL after --grace, and
/// run exits 4.
/// The sink's fence, not this kill, is what keeps the document safe.
/// When CMD exits 0 the lease is completed (result: --result, or "exit 0"); when it
/// fails the lease is released and run exits with CMD's code (128+N for signal N).
/// SIGINT, SIGTERM and SIGHUP sent to run are forwarded to CMD's group, followed by
/// SIGCONT so a stopped CMD still acts on them. Needs the wall clock: with --now, time
/// would not pass, so run refuses it.
///
/// When run is in the foreground of the terminal on its stdin, CMD's group is made the
/// foreground while it runs (so CMD can read the terminal and Ctrl-C reaches it), and run
/// takes the terminal back when CMD exits. Otherwise the terminal is left alone. Ctrl-Z
/// stops CMD and then run's job, handing the terminal back to the shell; `fg` resumes
/// both. No renewal is made while they are stopped, so a stop of more than about 2/3 of
/// the TTL loses the lease (exit 4) when resumed.
///
/// CMD's stdout and stderr pass through untouched. With --json, run's own report is one
/// JSON object on one line, printed after CMD has exited: the last line of stdout when
/// CMD's own output ends with a newline.
///
/// Example:
///   fencepost run reports/daily.md --owner "$(hostname)-$$" --ttl 30s -- \
///     sh -c 'render-report > out.tmp && fencepost write "$FENCEPOST_RESOURCE" --from out.tmp'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    #[command(flatten)]
    pub request: LeaseRequest,

    /// After SIGTERM on a lost lease, how long CMD gets before SIGKILL: seconds or with
    /// units, 0 for at once.
    #[arg(
        long,
        env = "FENCEPOST_GRACE",
        default_value = "10s",
        value_name = "DURATION"
    )]
    pub grace: String,

    /// Result to record on success (default: "exit 0").
    #[arg(long)]
    pub result: Option<String>,

    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> Result<Report> {
    // Checked now, not when the command has done its work and the lease is completed.
    super::check_result(args.result.as_deref())?;
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
    let claimed = claim::run(
        ctx,
        &ClaimArgs {
            request: args.request.clone(),
            lazy_fence: false,
        },
    )?;
    let epoch = claimed.json["epoch"].as_i64().unwrap_or(0);
    let resource = claimed.json["resource"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut deadline = Instant::now() + Duration::from_millis(ttl_ms);
    let holder = HolderArgs {
        resource: args.request.resource.clone(),
        owner: args.request.owner.clone(),
        epoch,
    };

    // Watch signals before the child exists: one arriving in between is held and then
    // forwarded, instead of killing run and orphaning an unwatched child.
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(Error::io("cannot watch", "signals"))?;
    let signal_handle = signals.handle();
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::usage("no CMD given"))?;
    let spawned = {
        use std::os::unix::process::CommandExt;
        Command::new(program)
            .args(rest)
            .env("FENCEPOST_RESOURCE", &resource)
            .env("FENCEPOST_EPOCH", epoch.to_string())
            .env("FENCEPOST_OWNER", &args.request.owner)
            .env("FENCEPOST_ROOT", &ctx.root)
            // Absolute, so a child that changes folder still finds the state file.
            .env(
                "FENCEPOST_DB",
                std::path::absolute(&ctx.db).unwrap_or_else(|_| ctx.db.clone()),
            )
            .process_group(0)
            .spawn()
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = change_held(ctx, &holder, HolderChange::Release);
            // The shell's code for a command that cannot be found or started.
            return Err(Error::Child {
                code: 127,
                message: format!(
                    "cannot run {}: {e}; lease on {resource} (epoch {epoch}) released",
                    program.to_string_lossy()
                ),
                fields: json!({
                    "resource": resource,
                    "epoch": epoch,
                    "owner": args.request.owner,
                    "exit_code": 127,
                }),
            });
        }
    };
    let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    // Taken back when dropped: on every way out below, before anything is printed.
    let terminal = Foreground::hand_to(group);

    // Forward the signals a user or supervisor sends us to the child's group, and wake
    // it in case it is stopped, so it can act on them.
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if let Ok(sig) = Signal::try_from(sig) {
                let _ = killpg(group, sig);
                let _ = killpg(group, Signal::SIGCONT);
            }
        }
    });
    let (tx, rx) = mpsc::channel::<std::io::Result<ExitStatus>>();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });

    let interval = Duration::from_millis((ttl_ms / 3).max(1));
    let mut next_renew = Instant::now() + interval;
    let status = loop {
        // With the terminal lent, look in often enough to notice a Ctrl-Z.
        let mut wake = next_renew;
        if terminal.is_some() {
            wake = wake.min(Instant::now() + JOB_CONTROL_POLL);
        }
        match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(status) => break status.map_err(Error::io("cannot wait for", "the command"))?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::usage("internal: lost track of the command"));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(lent) = &terminal
            && stopped(group)
        {
            lent.suspend();
        }
        if Instant::now() < next_renew {
            continue;
        }
        // Renew, never waiting on a busy state file past our own deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        let renew_ctx = Ctx {
            busy: ctx.busy.min(left),
            ..ctx.clone()
        };
        let renewed = if left.is_zero() {
            Err(Error::usage("deadline passed"))
        } else {
            change_held(
                &renew_ctx,
                &holder,
                HolderChange::Renew {
                    deadline: crate::clock::wall_millis().saturating_add(ttl_ms as i64),
                },
            )
        };
        match renewed {
            Ok(_) => {
                deadline = Instant::now() + Duration::from_millis(ttl_ms);
                next_renew = Instant::now() + interval;
            }
            Err(e) if matches!(e, Error::Refused(_)) || Instant::now() >= deadline => {
                stop_group(group, grace, &rx);
                signal_handle.close();
                return Err(Error::Refused(Refusal::new(
                    RefusalKind::Lost,
                    format!(
                        "lease on {resource} (epoch {epoch}) was lost while the command ran ({e}); the command was stopped"
                    ),
                    json!({ "resource": resource, "epoch": epoch, "owner": args.request.owner }),
                )));
            }
            // A transient failure (busy, I/O): try again soon, while the lease still runs.
            Err(_) => next_renew = Instant::now() + (interval / 4).max(Duration::from_millis(1)),
        }
    };
    signal_handle.close();
    drop(terminal);
    let code = exit_code(status);
    if code == 0 {
        let result = args.result.clone().unwrap_or_else(|| "exit 0".into());
        change_held(
            ctx,
            &holder,
            HolderChange::Complete {
                result: Some(&result),
            },
        )?;
        return Ok(Report::new(
            String::new(),
            json!({
                "outcome": "completed",
                "resource": resource,
                "epoch": epoch,
                "owner": args.request.owner,
                "exit_code": 0,
                "result": result,
            }),
        ));
    }
    let _ = change_held(ctx, &holder, HolderChange::Release);
    let program = program.to_string_lossy();
    let how = match killed_by(status) {
        Some(signal) => format!("{program} was killed by {signal} (exit {code})"),
        None => format!("{program} exited with code {code}"),
    };
    Err(Error::Child {
        code,
        message: format!("{how}; lease on {resource} (epoch {epoch}) released"),
        fields: json!({ "resource": resource, "epoch": epoch, "owner": args.request.owner, "exit_code": code }),
    })
}

/// SIGTERM to the group (and SIGCONT, in case it is stopped), SIGKILL after `grace` if
/// the child has not exited.
fn stop_group(group: Pid, grace: Duration, rx: &mpsc::Receiver<std::io::Result<ExitStatus>>) {
    let _ = killpg(group, Signal::SIGTERM);
    let _ = killpg(group, Signal::SIGCONT);
    if rx.recv_timeout(grace).is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = rx.recv();
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

/// The terminal on run's stdin, lent to the child's process group while it runs.
///
/// The child runs in a group of its own, so without this a child reading the terminal is
/// stopped by SIGTTIN (and Ctrl-C reaches run, not the child). Dropping the value gives
/// the terminal back to run's own group.
struct Foreground {
    /// run's own process group.
    own: Pid,
    /// The command's process group.
    group: Pid,
    /// Whether the command has the terminal now (not after a Ctrl-Z and `bg`).
    lent: Cell<bool>,
}

impl Foreground {
    /// Makes `group` the terminal's foreground process group, if stdin is a terminal
    /// whose foreground group is run's own; otherwise leaves the terminal alone.
    fn hand_to(group: Pid) -> Option<Foreground> {
        let stdin = std::io::stdin();
        if !isatty(&stdin).unwrap_or(false) {
            return None;
        }
        let own = getpgrp();
        if tcgetpgrp(&stdin).ok()? != own {
            return None;
        }
        set_foreground(group).ok()?;
        // The child may have read the terminal before it was its own, and been stopped
        // by SIGTTIN for it: let it go on.
        let _ = killpg(group, Signal::SIGCONT);
        Some(Foreground {
            own,
            group,
            lent: Cell::new(true),
        })
    }

    /// Gives the terminal back to run's group if the command still has it; never takes
    /// it from anyone else (the shell, after `bg`).
    fn take_back(&self) {
        let stdin = std::io::stdin();
        if self.lent.replace(false) && tcgetpgrp(&stdin).is_ok_and(|fg| fg == self.group) {
            let _ = set_foreground(self.own);
        }
    }
}

impl Foreground {
    /// The command was stopped (Ctrl-Z, or reading the terminal from the background):
    /// do what a job's leader does. Take the terminal back if the command has it, and
    /// stop run's whole job (run and whatever shares its group, e.g. a `| tee`), so the
    /// shell regains the terminal and sees a stopped job. When resumed (`fg` or `bg`),
    /// lend the terminal again if run is in the foreground, and continue the command.
    fn suspend(&self) {
        self.take_back();
        let _ = killpg(self.own, Signal::SIGTSTP);
        // Here once a SIGCONT has resumed run.
        let stdin = std::io::stdin();
        if tcgetpgrp(&stdin).is_ok_and(|fg| fg == self.own) && set_foreground(self.group).is_ok() {
            self.lent.set(true);
        }
        let _ = killpg(self.group, Signal::SIGCONT);
    }
}

/// How often run checks whether the command it lent the terminal to was stopped.
const JOB_CONTROL_POLL: Duration = Duration::from_millis(100);

/// True if the command's job is stopped: its leader is, or the leader waits in the kernel
/// for a child that a stop signal caught between vfork and exec.
///
/// A shell that runs a program through `vfork` waits in state `D` (never `T`) until the
/// child execs, and a Ctrl-Z can stop that child before it does: the whole job is then
/// stopped, though the leader never shows it. Only such a child counts (same group, still
/// marked forked-but-not-exec'd), so a leader that is merely busy on a disk next to some
/// other stopped child is not taken for a stopped job.
fn stopped(group: Pid) -> bool {
    let leader = group.as_raw();
    match proc_stat(leader) {
        Some(stat) if stat.state == 'T' => true,
        Some(stat) if stat.state == 'D' => children(leader).into_iter().any(|child| {
            proc_stat(child).is_some_and(|c| {
                c.state == 'T' && c.group == leader && c.flags & PF_FORKNOEXEC != 0
            })
        }),
        _ => false,
    }
}

/// The kernel's task flag for a process that has forked but not yet exec'd.
const PF_FORKNOEXEC: u64 = 0x40;

/// What `stopped` needs from `/proc/PID/stat`.
struct ProcStat {
    state: char,
    parent: i32,
    group: i32,
    flags: u64,
}

/// Reads `/proc/PID/stat`; its fields follow the parenthesised command name: state,
/// parent, group, session, terminal, terminal's group, flags.
fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').take(7).collect();
    let [state, parent, group, _, _, _, flags] = fields.as_slice() else {
        return None;
    };
    Some(ProcStat {
        state: state.chars().next()?,
        parent: parent.parse().ok()?,
        group: group.parse().ok()?,
        flags: flags.parse().ok()?,
    })
}

/// The children of `pid`, from `/proc/PID/task/TID/children`; on a kernel built without
/// those files, found by their parent pid among all processes.
fn children(pid: i32) -> Vec<i32> {
    let listed: Option<Vec<i32>> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()
        .and_then(|tasks| {
            tasks
                .flatten()
                .map(|task| std::fs::read_to_string(task.path().join("children")).ok())
                .collect::<Option<Vec<String>>>()
        })
        .map(|lists| {
            lists
                .iter()
                .flat_map(|list| list.split_whitespace().filter_map(|c| c.parse().ok()))
                .collect()
        });
    if let Some(children) = listed {
        return children;
    }
    let Ok(all) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|&child| proc_stat(child).is_some_and(|c| c.parent == pid))
        .collect()
}

impl Drop for Foreground {
    fn drop(&mut self) {
        self.take_back();
    }
}

/// `tcsetpgrp` on stdin with SIGTTOU blocked in this thread only: from a background group
/// (run's own, once the child has the terminal) the call would otherwise stop run. Blocked
/// here and restored right after, so no child ever inherits the blocked signal.
fn set_foreground(group: Pid) -> nix::Result<()> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let before = ttou.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
    let set = tcsetpgrp(std::io::stdin(), group);
    before.thread_set_mask()?;
    set
}
