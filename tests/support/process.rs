//! Real processes for the crash and concurrency tests: `fencepost` paused at a failpoint
//! (and then killed or resumed), another process holding the state file open, signals.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::harness::{Env, bin};

/// A `fencepost` command for `env`, as the harness runs it, but not yet started.
pub(crate) fn command(env: &Env, args: &[&str], now: Option<i64>) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .current_dir(env.root())
        .arg("--root")
        .arg(env.root());
    if let Some(now) = now {
        cmd.arg("--now").arg(now.to_string());
    }
    cmd.args(args);
    cmd
}

/// Runs `mkfifo`.
pub(crate) fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Sends a signal with kill(1) (the tests use no libc).
pub(crate) fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A `fencepost` process blocked at a failpoint (`return(wait:PATH)`).
pub(crate) struct Paused {
    /// `None` once finished; a `Paused` dropped early (a failing test) SIGKILLs it.
    child: Option<Child>,
    pub pid: u32,
    point: String,
    resume: PathBuf,
    _fifos: TempDir,
}

/// Starts `fencepost ARGS` with `stdin` and waits until it is blocked at `point`.
pub(crate) fn spawn_paused(
    env: &Env,
    args: &[&str],
    now: Option<i64>,
    stdin: &[u8],
    point: &str,
) -> Paused {
    spawn_paused_via(&[], env, args, now, stdin, point)
}

/// The same, started through `wrapper` (e.g. setpriv, to run as another user), which
/// must exec fencepost in its own process.
pub(crate) fn spawn_paused_via(
    wrapper: &[&str],
    env: &Env,
    args: &[&str],
    now: Option<i64>,
    stdin: &[u8],
    point: &str,
) -> Paused {
    spawn_paused_also(wrapper, env, args, now, stdin, point, "")
}

/// [`spawn_paused_via`] with more failpoints set (`also`, in the `FAILPOINTS` syntax,
/// e.g. `write.after_rename=return(abort)`), to hit once the process is resumed.
pub(crate) fn spawn_paused_also(
    wrapper: &[&str],
    env: &Env,
    args: &[&str],
    now: Option<i64>,
    stdin: &[u8],
    point: &str,
    also: &str,
) -> Paused {
    let fifos = Fifos::new();
    let mut cmd = command(env, args, now);
    if let Some((program, rest)) = wrapper.split_first() {
        // Another user must be able to signal and wait through the FIFOs.
        let open = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        open(fifos.dir.path(), 0o777);
        open(&fifos.resume, 0o666);
        let inner = cmd;
        cmd = Command::new(program);
        cmd.args(rest)
            .arg(inner.get_program())
            .args(inner.get_args())
            .env_clear()
            .current_dir(env.root());
    }
    start_paused(cmd, fifos, stdin, point, also)
}

/// Starts `cmd`, a `fencepost` command the caller built (its environment, folder and
/// arguments), with `stdin`, and waits until it is blocked at `point`.
pub(crate) fn spawn_paused_command(cmd: Command, stdin: &[u8], point: &str) -> Paused {
    spawn_paused_command_also(cmd, stdin, point, "")
}

/// [`spawn_paused_command`] with more failpoints set (`also`, as in [`spawn_paused_also`]).
pub(crate) fn spawn_paused_command_also(
    cmd: Command,
    stdin: &[u8],
    point: &str,
    also: &str,
) -> Paused {
    start_paused(cmd, Fifos::new(), stdin, point, also)
}

/// The FIFOs a paused process signals and waits on (`BASE.ready`, `BASE.resume`).
struct Fifos {
    dir: TempDir,
    base: PathBuf,
    ready: PathBuf,
    resume: PathBuf,
}

impl Fifos {
    fn new() -> Fifos {
        let dir = tempfile::Builder::new()
            .prefix("fencepost-fifo-")
            .tempdir()
            .expect("fifo dir");
        let base = dir.path().join("fp");
        let ready = PathBuf::from(format!("{}.ready", base.display()));
        let resume = PathBuf::from(format!("{}.resume", base.display()));
        mkfifo(&resume);
        Fifos {
            dir,
            base,
            ready,
            resume,
        }
    }
}

/// Starts `cmd` with the failpoint `point` set to wait on `fifos` (and `also`), and waits
/// until it is blocked there.
fn start_paused(mut cmd: Command, fifos: Fifos, stdin: &[u8], point: &str, also: &str) -> Paused {
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut child = cmd
        .env(
            "FAILPOINTS",
            format!("{point}=return(wait:{});{also}", fifos.base.display()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencepost");
    {
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("write stdin");
    }
    let started = Instant::now();
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&fifos.ready)
            && let Some(line) = text.strip_suffix('\n')
        {
            break line.trim().parse::<u32>().expect("pid in the ready file");
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            let out = child.wait_with_output().expect("output");
            panic!(
                "fencepost {args:?} exited ({status}) before reaching {point}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "fencepost {args:?} never reached {point}"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(
        pid,
        child.id(),
        "the ready file names the process we started"
    );
    Paused {
        child: Some(child),
        pid,
        point: point.to_string(),
        resume: fifos.resume.clone(),
        _fifos: fifos.dir,
    }
}

impl Paused {
    /// SIGKILLs the process where it is blocked.
    pub(crate) fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert_eq!(
            status.signal(),
            Some(9),
            "killed at {}: {status}",
            self.point
        );
    }

    /// Lets it go on from the failpoint and waits for it to finish.
    pub(crate) fn resume(mut self) -> Output {
        self.open_resume();
        let child = self.child.take().expect("running");
        child.wait_with_output().expect("wait")
    }

    /// Opens (and closes) the resume FIFO, which lets the process go on. Opened without
    /// blocking and tried again while the process has not opened it yet: a process that
    /// died where it was blocked (a signal) never will, and the caller gets its end.
    fn open_resume(&mut self) {
        use std::os::unix::fs::OpenOptionsExt as _;
        let started = Instant::now();
        loop {
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(&self.resume);
            match opened {
                Ok(_) => return,
                // No reader yet (ENXIO), or none ever: it has ended.
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32) => {
                    let child = self.child.as_mut().expect("running");
                    if child.try_wait().expect("try_wait").is_some() {
                        return;
                    }
                }
                Err(e) => panic!("open the resume fifo: {e}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{} never opened the resume fifo at {}",
                self.pid,
                self.point
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Paused {
    /// Sends it `sig` (as kill(1) names it) where it is blocked, and waits for it to end
    /// without letting it go on from the failpoint.
    pub(crate) fn stop_by(mut self, sig: &str) -> Output {
        signal(self.pid, sig);
        let child = self.child.take().expect("running");
        child.wait_with_output().expect("wait")
    }

    /// Lets it go on from the failpoint without waiting for it: the process, to wait for
    /// (or kill) as the caller sees fit.
    pub(crate) fn let_go(mut self) -> Child {
        self.open_resume();
        self.child.take().expect("running")
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Another process (python3's sqlite3) with the state file open, having run `sql`
/// (e.g. `BEGIN IMMEDIATE` to hold the write lock), until [`DbHolder::finish`] or
/// [`DbHolder::kill`].
pub(crate) struct DbHolder {
    child: Child,
}

impl DbHolder {
    pub(crate) fn start(env: &Env, sql: &str) -> DbHolder {
        let script = "import sqlite3, sys\n\
                      c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)\n\
                      c.execute(sys.argv[2]).fetchall()\n\
                      print('ready', flush=True)\n\
                      sys.stdin.read()\n";
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(env.path(".fencepost/state.db"))
            .arg(sql)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed to hold the state file open");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line.trim(), "ready", "the python3 holder did not start");
        DbHolder { child }
    }

    /// Lets it close the connection and exit.
    pub(crate) fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().expect("wait").success());
    }

    /// SIGKILLs it: its connection is never closed.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }
}
