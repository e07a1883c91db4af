//! Job control for `run`: the terminal lent to the command's process group, and what
//! `/proc` says of that group (is the job stopped?), so that Ctrl-Z, `fg` and `bg` work on
//! `run` as on any job a shell starts.

use std::cell::Cell;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg};
use nix::unistd::{Pid, getpgrp, isatty, tcgetpgrp, tcsetpgrp};

/// The terminal on run's stdin, lent to the child's process group while it runs.
///
/// The child runs in a group of its own, so without this a child reading the terminal is
/// stopped by SIGTTIN (and Ctrl-C reaches run, not the child). Dropping the value gives
/// the terminal back to run's own group.
pub(super) struct Foreground {
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
    pub(super) fn hand_to(group: Pid) -> Option<Foreground> {
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
    pub(super) fn suspend(&self) {
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
pub(super) const JOB_CONTROL_POLL: Duration = Duration::from_millis(100);

/// True if the command's job is stopped: its leader is, or the leader waits in the kernel
/// for a child that a stop signal caught between vfork and exec.
///
/// A shell that runs a program through `vfork` waits in state `D` (never `T`) until the
/// child execs, and a Ctrl-Z can stop that child before it does: the whole job is then
/// stopped, though the leader never shows it. Only such a child counts (same group, still
/// marked forked-but-not-exec'd), so a leader that is merely busy on a disk next to some
/// other stopped child is not taken for a stopped job.
pub(super) fn stopped(group: Pid) -> bool {
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
