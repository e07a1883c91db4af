//! Operator tools: the `run` wrapper (complete, release, kill on a lost lease,
//! signal forwarding), the audit log and its timeline, `verify`, completions and man
//! page, `-q`, and the one-line error convention.
//!
//! `run` needs the wall clock, so its tests use real time: short TTLs, generous bounds,
//! and timings that are measured but never asserted tightly.

use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;

use crate::harness::{self, Done, Env, Run};

// ---------------------------------------------------------------------------------------
// Helpers

/// PATH for a child of `run`: the binary under test first, then the basic tools. (The
/// harness clears the environment.)
fn path_env() -> String {
    let dir = harness::bin()
        .parent()
        .expect("binary has a folder")
        .to_path_buf();
    format!("{}:/usr/bin:/bin", dir.display())
}

/// `fencepost run RES --owner O --ttl TTL [extra...] -- sh -c SCRIPT`, with PATH set.
fn run_sh(env: &Env, res: &str, owner: &str, ttl: &str, extra: &[&str], script: &str) -> Run {
    run_sh_with(env, &[], res, owner, ttl, extra, script)
}

/// The same with global options (`--json`, `-q`, `--db`) before `run`.
fn run_sh_with(
    env: &Env,
    globals: &[&str],
    res: &str,
    owner: &str,
    ttl: &str,
    extra: &[&str],
    script: &str,
) -> Run {
    let mut args = globals.to_vec();
    args.extend_from_slice(&["run", res, "--owner", owner, "--ttl", ttl]);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    env.fp(&args).env("PATH", &path_env())
}

/// `status RES --json` on the wall clock: the resource's row.
fn row(env: &Env, res: &str) -> Value {
    env.fp(&["--json", "status", res]).expect(0).json()["resources"][0].clone()
}

/// `log [args] --json`: the events.
fn events(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json", "log"];
    all.extend_from_slice(args);
    let j = env.fp(&all).expect(0).json();
    assert_eq!(j["outcome"], "log");
    j["events"].as_array().expect("events is an array").clone()
}

/// The default state file of an env.
fn db(env: &Env) -> PathBuf {
    env.path(".fencepost/state.db")
}

/// Runs SQL against the state file from another process (python3's sqlite3), as an
/// outside actor with its own clock would.
fn sql(db: &Path, script: &str) {
    let status = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n\
             c.executescript(sys.argv[2])\n\
             c.close()\n",
        )
        .arg(db)
        .arg(script)
        .status()
        .expect("run python3");
    assert!(status.success(), "python3 sqlite3 failed: {script}");
}

/// Holds the state file's write lock (`BEGIN IMMEDIATE`) from another process until the
/// returned child's stdin is closed. Returns once the lock is held.
fn hold_lock(db: &Path) -> Child {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n\
             c.execute('BEGIN IMMEDIATE')\n\
             print('locked', flush=True)\n\
             sys.stdin.read()\n\
             c.execute('ROLLBACK')\n\
             c.close()\n",
        )
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read from locker");
    assert_eq!(line.trim(), "locked", "the locker did not get the lock");
    child
}

/// Stops a process (SIGSTOP) at a moment it holds no write lock on the state file, so
/// the test can change the state while the process cannot observe the steps in between.
/// Resume it with SIGCONT.
fn stop_outside_transaction(pid: Pid, db: &Path) {
    let start = Instant::now();
    loop {
        kill(pid, Signal::SIGSTOP).expect("stop the process");
        wait_until_stopped(pid);
        let free = Command::new("python3")
            .arg("-c")
            .arg(
                "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n\
                 try:\n    c.execute('BEGIN IMMEDIATE')\nexcept sqlite3.OperationalError:\n    sys.exit(3)\n\
                 c.execute('ROLLBACK')\n",
            )
            .arg(db)
            .status()
            .expect("run python3");
        match free.code() {
            Some(0) => return,
            Some(3) => {}
            other => panic!("lock probe failed: {other:?}"),
        }
        // Stopped inside a transaction: let it finish and try again.
        kill(pid, Signal::SIGCONT).expect("resume the process");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the process never left its transaction"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until every thread of the process is in the stopped state (SIGSTOP is
/// delivered asynchronously).
fn wait_until_stopped(pid: Pid) {
    let start = Instant::now();
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    loop {
        let stopped = std::fs::read_dir(&tasks)
            .expect("list the process's threads")
            .all(|task| {
                let stat = std::fs::read_to_string(task.expect("thread").path().join("stat"))
                    .unwrap_or_default();
                // The state is the field after the parenthesised command name.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
            });
        if stopped {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "process {pid} did not stop"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for a file to exist and hold a full line; returns it trimmed.
fn wait_for_line(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn pid_in(path: &Path) -> Pid {
    Pid::from_raw(wait_for_line(path).parse().expect("a pid"))
}

/// True once no process is left in the group (polls: the orphans of a killed group are
/// reaped by init, not instantly).
fn group_gone(group: Pid, within: Duration) -> bool {
    let start = Instant::now();
    loop {
        if killpg(group, None) == Err(Errno::ESRCH) {
            return true;
        }
        if start.elapsed() > within {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a prepared process on a thread; the handle gives its result and how long it
/// took.
fn background(run: Run) -> thread::JoinHandle<(Done, Duration)> {
    thread::spawn(move || {
        let start = Instant::now();
        let done = run.output();
        (done, start.elapsed())
    })
}

/// Asserts the stderr convention on a finished process that failed.
fn assert_one_error_line(done: &Done) {
    let lines: Vec<&str> = done.stderr.lines().collect();
    let shaped = match lines.as_slice() {
        [first] => first.starts_with("fencepost: "),
        [first, hint] => first.starts_with("fencepost: ") && hint.starts_with("hint: "),
        _ => false,
    };
    assert!(shaped, "stderr: {:?}", done.stderr);
}

/// Joins a `background` run that must end within `within`. If it does not, kills
/// `group` (its command's) so that it can end, then fails the test instead of hanging.
fn join_within(handle: thread::JoinHandle<(Done, Duration)>, within: Duration, group: Pid) -> Done {
    let start = Instant::now();
    while !handle.is_finished() {
        if start.elapsed() > within {
            let _ = killpg(group, Signal::SIGKILL);
            let (done, took) = handle.join().expect("run thread");
            panic!(
                "run did not end within {within:?} (it ended after {took:?}, once its command \
                 was killed)\nstdout: {}\nstderr: {}",
                done.stdout, done.stderr
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    handle.join().expect("run thread").0
}

/// Drives `sh -c SCRIPT` as a session leader whose controlling terminal is a new
/// pseudo-terminal (python3's `pty`), as if typed at: each step's reply is typed once the
/// terminal's output holds its trigger ("" for at once). sh is killed if it runs past
/// 15 s. Returns sh's exit code (124 when killed) and everything the terminal showed.
/// The script finds the binary under test on PATH and `root` in `$ROOT`.
fn in_terminal(root: &Path, script: &str, steps: &[(&str, &str)]) -> (i32, String) {
    const DRIVER: &str = r#"
import os, pty, select, signal, sys, time
script, steps = sys.argv[1], sys.argv[2:]
steps = [(steps[i].encode(), steps[i + 1].encode()) for i in range(0, len(steps), 2)]
pid, fd = pty.fork()
if pid == 0:
    os.execv('/bin/sh', ['sh', '-c', script])
out, code, deadline = b'', None, time.monotonic() + 30
while True:
    while steps and steps[0][0] in out:
        os.write(fd, steps.pop(0)[1])
    if code is None:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
        elif time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = 124
    ready, _, _ = select.select([fd], [], [], 0.05)
    if ready:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b''
        out += data
        if data:
            continue
    if code is not None:
        break
sys.stdout.write(out.decode(errors='replace'))
sys.exit(code)
"#;
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(DRIVER).arg(script);
    for (trigger, reply) in steps {
        cmd.arg(trigger).arg(reply);
    }
    let out = cmd
        .env_clear()
        .env("PATH", path_env())
        .env("ROOT", root)
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .expect("run python3");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Kills the process group whose leader's pid is in `file`, if the file is there: the
/// command of a run that a failed test left behind.
fn kill_group_in(file: &Path) {
    if let Some(pid) = std::fs::read_to_string(file)
        .ok()
        .and_then(|t| t.trim().parse().ok())
    {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

// ---------------------------------------------------------------------------------------
// run: success

#[test]
fn run_success_writes_through_the_child_and_completes() {
    let env = Env::new();
    let done = run_sh(
        &env,
        "doc.md",
        "O",
        "2s",
        &[],
        r#"printf new | fencepost write "$FENCEPOST_RESOURCE""#,
    )
    .expect(0);
    // The child's own `write` confirmation; run itself adds nothing on success.
    assert_eq!(done.stdout.trim(), "written");
    assert_eq!(env.text("doc.md"), "new");
    let r = row(&env, "doc.md");
    assert_eq!(r["lease"]["state"], "completed");
    assert_eq!(r["lease"]["result"], "exit 0");
    assert_eq!(r["lease"]["owner"], "O");
    assert_eq!(r["lease"]["epoch"], 1);
    assert_eq!(r["sink"]["content_epoch"], 1);
    assert_eq!(r["document"]["state"], "matches");
    // The write inside run carried the owner: the log names it.
    let log = events(&env, &[]);
    let kinds: Vec<&str> = log.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["claim", "write", "complete"]);
    assert_eq!(log[1]["owner"], "O");
    assert_eq!(log[1]["epoch"], 1);
}

#[test]
fn run_takes_the_command_without_a_double_dash() {
    // As flock(1): the first word that is not one of run's options starts the command,
    // and every word after it is the command's, options of run's own name included.
    let env = Env::new();
    let script = r#"printf '%s' "$1" | fencepost write "$FENCEPOST_RESOURCE""#;
    env.fp(&[
        "run", "doc.md", "-o", "O", "-t", "5s", "sh", "-c", script, "sh", "--ttl",
    ])
    .env("PATH", &path_env())
    .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "--ttl");
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "completed");
    // `--` still works, and is how a command whose first word starts with `-` is given.
    env.fp(&[
        "run", "doc.md", "-o", "O", "-t", "5s", "--", "sh", "-c", script, "sh", "two",
    ])
    .env("PATH", &path_env())
    .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "two");
    // The help shows both forms.
    let help = env.fp(&["run", "--help"]).expect(0).stdout;
    assert!(
        help.contains("fencepost run r.md -o a -t 5s echo hi")
            && help.contains("fencepost run r.md -o a -t 5s -- echo hi"),
        "run --help: {help}"
    );
}

#[test]
fn run_result_option_sets_the_recorded_result() {
    let env = Env::new();
    let j = run_sh_with(
        &env,
        &["--json"],
        "doc.md",
        "O",
        "2s",
        &["--result", "rows=42"],
        r#"printf x | fencepost -q write "$FENCEPOST_RESOURCE""#,
    )
    .expect(0)
    .json_contract();
    assert_eq!(j["outcome"], "completed");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["exit_code"], 0);
    assert_eq!(j["result"], "rows=42");
    let r = row(&env, "doc.md");
    assert_eq!(r["lease"]["state"], "completed");
    assert_eq!(r["lease"]["result"], "rows=42");
}

#[test]
fn run_child_sees_the_lease_in_its_environment() {
    let env = Env::new();
    env.claim_wall("doc.md", "earlier");
    // Epoch 2 after a released first lease, so the epoch is not just "1".
    env.fp(&["release", "doc.md", "--owner", "earlier", "--epoch", "1"])
        .expect(0);
    run_sh(
        &env,
        "sub/doc.md",
        "worker-7",
        "2s",
        &[],
        "env | grep '^FENCEPOST_' | sort > \"$FENCEPOST_ROOT/seen.txt\"",
    )
    .expect(0);
    let seen = env.text("seen.txt");
    let root = std::fs::canonicalize(env.root()).expect("canonical root");
    let want = format!(
        "FENCEPOST_DB={}\nFENCEPOST_EPOCH=1\nFENCEPOST_OWNER=worker-7\n\
         FENCEPOST_RESOURCE=sub/doc.md\nFENCEPOST_ROOT={}\n",
        root.join(".fencepost/state.db").display(),
        root.display()
    );
    assert_eq!(seen, want);

    // And for a resource with history, the epoch is the one run claimed.
    run_sh(
        &env,
        "doc.md",
        "worker-8",
        "2s",
        &[],
        "printf %s \"$FENCEPOST_EPOCH\" > \"$FENCEPOST_ROOT/epoch.txt\"",
    )
    .expect(0);
    assert_eq!(env.text("epoch.txt"), "2");
}

#[test]
fn run_child_can_write_from_another_folder_with_a_relative_db() {
    // FENCEPOST_DB and FENCEPOST_ROOT must still find the state file and the root after
    // the child changes folder, even when run was given a relative --db.
    let env = Env::new();
    let done = env
        .fp(&[
            "--db",
            "state.db",
            "run",
            "doc.md",
            "--owner",
            "O",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            r#"mkdir -p elsewhere && cd elsewhere && printf moved | fencepost write "$FENCEPOST_RESOURCE""#,
        ])
        .env("PATH", &path_env())
        .expect(0);
    assert_eq!(done.stdout.trim(), "written");
    assert_eq!(env.text("doc.md"), "moved");
    assert!(
        !env.path("elsewhere/state.db").exists(),
        "the child opened a second state file"
    );
    let j = env
        .fp(&["--db", "state.db", "--json", "status", "doc.md"])
        .expect(0)
        .json();
    assert_eq!(j["resources"][0]["lease"]["state"], "completed");
}

#[test]
fn run_waits_for_a_held_lease_with_wait() {
    let env = Env::new();
    // P's TTL leaves room for a slow machine to start the next process before it ends.
    env.fp(&["claim", "doc.md", "--owner", "P", "--ttl", "1500ms"])
        .expect_stdout(0, "1");
    // Without --wait: held, and the command never runs.
    run_sh(&env, "doc.md", "O", "2s", &[], "touch ran").expect_stdout(3, "held");
    assert!(
        !env.path("ran").exists(),
        "the command ran without the lease"
    );
    // With --wait: it gets the lease once P's expires.
    run_sh(&env, "doc.md", "O", "2s", &["--wait", "10s"], "touch ran").expect(0);
    assert!(env.path("ran").exists());
    let r = row(&env, "doc.md");
    assert_eq!(r["lease"]["owner"], "O");
    assert_eq!(r["lease"]["epoch"], 2);
    assert_eq!(r["lease"]["state"], "completed");
}

// ---------------------------------------------------------------------------------------
// run: failure

#[test]
fn run_failure_releases_and_passes_the_exit_code_through() {
    let env = Env::new();
    let done = run_sh(&env, "doc.md", "O", "60s", &[], "exit 7").expect(7);
    assert!(
        done.stderr.contains("exited with code 7") && done.stderr.contains("released"),
        "stderr: {}",
        done.stderr
    );
    let r = row(&env, "doc.md");
    assert_eq!(r["lease"]["state"], "released");
    assert_eq!(r["lease"]["epoch"], 1);
    // The next worker need not wait out the 60 s TTL.
    let next = env
        .fp(&["claim", "doc.md", "--owner", "Q", "--ttl", "60s"])
        .expect(0);
    assert_eq!(next.stdout.trim(), "2");
    let kinds: Vec<String> = events(&env, &["doc.md"])
        .iter()
        .map(|e| e["event"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["claim", "release", "claim"]);
}

#[test]
fn run_failure_json_names_the_exit_code() {
    let env = Env::new();
    let done = run_sh_with(&env, &["--json"], "doc.md", "O", "60s", &[], "exit 42").expect(42);
    let j = done.json_contract();
    assert_eq!(j["outcome"], "failed");
    assert_eq!(j["exit_code"], 42);
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["resource"], "doc.md");
}

#[test]
fn run_json_report_is_the_last_line_after_the_childs_output() {
    let env = Env::new();
    let done = run_sh_with(
        &env,
        &["--json"],
        "doc.md",
        "O",
        "60s",
        &[],
        "echo one; echo two",
    )
    .expect(0);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "stdout: {:?}", done.stdout);
    assert_eq!(lines[..2], ["one", "two"]);
    let j: Value = serde_json::from_str(lines[2]).expect("the last line is JSON");
    assert_eq!(j["outcome"], "completed");
    assert_eq!(j["epoch"], 1);
}

#[test]
fn run_child_killed_by_a_signal_exits_128_plus_n_and_releases() {
    let env = Env::with_root();
    let done = run_sh(&env, "doc.md", "O", "60s", &[], "kill -KILL $$").expect(128 + 9);
    assert_eq!(
        done.stderr.trim(),
        "fencepost: sh was killed by SIGKILL (exit 137); lease on doc.md (epoch 1) released"
    );
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
    // A command that exits with a code above 128 by itself was not killed by anything.
    let done = run_sh(&env, "doc.md", "O", "60s", &[], "exit 143").expect(143);
    assert_eq!(
        done.stderr.trim(),
        "fencepost: sh exited with code 143; lease on doc.md (epoch 2) released"
    );
}

#[test]
fn run_of_a_missing_program_exits_127_and_releases() {
    let env = Env::new();
    env.fp(&[
        "run",
        "doc.md",
        "--owner",
        "O",
        "--ttl",
        "60s",
        "--",
        "/nonexistent/program",
    ])
    .expect(127);
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
    assert_eq!(env.claim_wall("doc.md", "Q"), 2);
}

#[test]
fn run_of_a_missing_program_reports_like_any_other_failure_in_json() {
    let env = Env::new();
    let done = env
        .fp(&[
            "--json",
            "run",
            "doc.md",
            "--owner",
            "O",
            "--ttl",
            "60s",
            "--",
            "/nonexistent/program",
        ])
        .expect(127);
    let j = done.json_contract();
    assert_eq!(j["outcome"], "failed");
    assert_eq!(j["resource"], "doc.md");
    assert_eq!(j["epoch"], 1);
    assert_eq!(j["owner"], "O");
    assert_eq!(j["exit_code"], 127);
    // The same keys as a command that started and failed.
    let started = run_sh_with(&env, &["--json"], "doc.md", "O", "60s", &[], "exit 5")
        .expect(5)
        .json_contract();
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&j), keys(&started), "{j} vs {started}");
}

#[test]
fn run_refuses_a_bad_result_before_running_the_command() {
    let env = Env::new();
    run_sh(
        &env,
        "doc.md",
        "O",
        "60s",
        &["--result", "a\nb"],
        "touch ran",
    )
    .expect(2);
    assert!(!env.path("ran").exists(), "the command ran");
    assert!(!db(&env).exists(), "a state file was made");
}

#[test]
fn run_refuses_the_logical_clock() {
    let env = Env::new();
    let done = run_sh(&env, "doc.md", "O", "10", &[], "touch ran")
        .now(5)
        .expect(2);
    assert!(done.stderr.contains("--now"), "stderr: {}", done.stderr);
    assert_eq!(done.stdout, "");
    assert!(!env.path("ran").exists(), "the command ran");
    // Nothing was claimed: not even a state file was made.
    assert!(!db(&env).exists());
    // Through the environment too.
    run_sh(&env, "doc.md", "O", "10", &[], "touch ran")
        .env("FENCEPOST_NOW", "5")
        .expect(2);
    assert!(!env.path("ran").exists(), "the command ran");
}

#[test]
fn run_without_a_command_is_bad_usage() {
    let env = Env::new();
    let done = env
        .fp(&["run", "doc.md", "--owner", "O", "--ttl", "2s"])
        .expect(2);
    assert_one_error_line(&done);
    assert!(!db(&env).exists() || events(&env, &[]).is_empty());
}

// ---------------------------------------------------------------------------------------
// run: a lost lease stops the command

/// Starts `run` on doc.md for O in the background, with a 600 ms TTL and a 500 ms
/// grace, its command running `prefix` and then sleeping; returns the join handle and the
/// command's process group once the command has started.
fn start_short_run(env: &Env, prefix: &str) -> (thread::JoinHandle<(Done, Duration)>, Pid) {
    let script = format!("{prefix}echo $$ > \"$FENCEPOST_ROOT/pid\"; sleep 30");
    let run = run_sh(env, "doc.md", "O", "600ms", &["--grace", "500ms"], &script);
    let handle = background(run);
    (handle, pid_in(&env.path("pid")))
}

/// Another actor, with a clock of its own, takes doc.md over behind run's back: a new
/// epoch for X, registered with the sink's fence, as a takeover claim does in one
/// transaction.
fn take_over_as_x(env: &Env) {
    sql(
        &db(env),
        "BEGIN IMMEDIATE;\n\
         UPDATE lease SET epoch = epoch + 1, owner = 'X', state = 'held',\n\
           deadline = 9000000000000 WHERE resource = 'doc.md';\n\
         UPDATE sink SET fence = fence + 1 WHERE resource = 'doc.md';\n\
         COMMIT;",
    );
}

#[test]
fn run_kills_the_child_group_when_the_lease_is_taken_over() {
    let env = Env::with_root();
    let (handle, group) = start_short_run(&env, "");
    take_over_as_x(&env);
    let (done, took) = handle.join().expect("run thread");
    assert_eq!(
        done.code, 4,
        "run exit (after {took:?})\nstdout: {}\nstderr: {}",
        done.stdout, done.stderr
    );
    assert!(took < Duration::from_secs(15), "run took {took:?}");
    assert_one_error_line(&done);
    assert!(done.stderr.contains("lost"), "stderr: {}", done.stderr);
    assert!(
        group_gone(group, Duration::from_secs(5)),
        "the child's process group survived"
    );
    // The kill only stops wasted work; the fence is what refuses the late write.
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .stdin("late")
        .expect_stdout(5, "stale");
    assert_eq!(env.read("doc.md"), None);
    // Run's loss is in the log.
    let log = events(&env, &["doc.md"]);
    assert!(
        log.iter()
            .any(|e| e["event"] == "lost" && e["owner"] == "O" && e["epoch"] == 1),
        "no lost event for O epoch 1: {log:?}"
    );
    // X's lease is untouched by run's exit (run does not release what it lost).
    let r = row(&env, "doc.md");
    assert_eq!(r["lease"]["owner"], "X");
    assert_eq!(r["lease"]["epoch"], 2);
    assert_eq!(r["lease"]["state"], "held");
}

#[test]
fn run_kills_the_child_when_the_state_file_stays_locked_past_the_deadline() {
    let env = Env::with_root();
    let start = Instant::now();
    let (handle, group) = start_short_run(&env, "");
    let mut locker = hold_lock(&db(&env));
    // No renewal can be made: the child must be stopped while the lock is still held.
    let gone = group_gone(group, Duration::from_secs(15));
    let killed_after = start.elapsed();
    drop(locker.stdin.take());
    locker.wait().expect("locker exits");
    assert!(gone, "the child outlived a lease it could not renew");
    let (done, took) = handle.join().expect("run thread");
    assert_eq!(
        done.code, 4,
        "run exit (after {took:?}, child gone after {killed_after:?})\nstdout: {}\nstderr: {}",
        done.stdout, done.stderr
    );
    assert!(took < Duration::from_secs(15), "run took {took:?}");
    // run logs its loss waiting at most 2 s for the state file, which this test holds
    // until the child is gone: on a loaded machine that wait can run out first, and run
    // then says so in a warning before its error line.
    let lines: Vec<&str> = done.stderr.lines().collect();
    let lost = match lines.as_slice() {
        [lost] => lost,
        [warning, lost] => {
            assert!(
                warning.starts_with("fencepost: warning: refusal not logged: "),
                "{warning}"
            );
            lost
        }
        _ => panic!("stderr: {:?}", done.stderr),
    };
    assert!(lost.starts_with("fencepost: lost: "), "{lost}");
    // The lease ran out on its deadline: anyone can take it over now, and the old epoch
    // is fenced off.
    assert_eq!(env.claim_wall("doc.md", "X"), 2);
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .stdin("late")
        .expect_stdout(5, "stale");
    assert_eq!(env.read("doc.md"), None);
}

#[test]
fn run_escalates_to_sigkill_after_the_grace_period() {
    let env = Env::new();
    // The child ignores SIGTERM (and so does its sleep, which inherits the setting).
    let (handle, group) = start_short_run(&env, "trap '' TERM; ");
    sql(
        &db(&env),
        "UPDATE lease SET deadline = 0 WHERE resource = 'doc.md';",
    );
    let (done, took) = handle.join().expect("run thread");
    assert_eq!(done.code, 4, "stderr: {}", done.stderr);
    assert!(took < Duration::from_secs(15), "run took {took:?}");
    assert!(
        group_gone(group, Duration::from_secs(5)),
        "a child ignoring SIGTERM survived"
    );
}

#[test]
fn a_stopped_childs_last_write_is_refused_by_the_fence() {
    let env = Env::new();
    // On SIGTERM the child still tries to publish what it has: the fence refuses it.
    let script = "trap 'printf late | fencepost write \"$FENCEPOST_RESOURCE\" \
                  > \"$FENCEPOST_ROOT/late.out\" 2>&1; echo $? > \"$FENCEPOST_ROOT/late.code\"; exit 0' TERM; \
                  echo $PPID > \"$FENCEPOST_ROOT/runpid\"; echo $$ > \"$FENCEPOST_ROOT/pid\"; \
                  sleep 30 & wait";
    // A TTL long enough that no renewal can run late on a loaded machine: the test, not
    // the clock, expires the lease.
    let run = run_sh(&env, "doc.md", "O", "5s", &["--grace", "10s"], script);
    let handle = background(run);
    let run_pid = pid_in(&env.path("runpid"));
    pid_in(&env.path("pid"));
    // A real takeover: expire O's lease (the other actor's clock is past it), then claim.
    // `run` is stopped meanwhile: were its heartbeat to see the expiry before X's claim,
    // the child would publish under a lease nobody had taken over yet, and rightly so.
    stop_outside_transaction(run_pid, &db(&env));
    sql(
        &db(&env),
        "UPDATE lease SET deadline = 0 WHERE resource = 'doc.md';",
    );
    let x = env.claim_wall("doc.md", "X");
    assert_eq!(x, 2);
    kill(run_pid, Signal::SIGCONT).expect("resume run");
    let (done, took) = handle.join().expect("run thread");
    assert_eq!(done.code, 4, "stderr: {}", done.stderr);
    assert!(took < Duration::from_secs(15), "run took {took:?}");
    assert_eq!(wait_for_line(&env.path("late.code")), "5");
    assert!(env.text("late.out").contains("stale"));
    assert_eq!(env.read("doc.md"), None);
    let log = events(&env, &["doc.md"]);
    assert!(
        log.iter().any(|e| e["event"] == "stale"
            && e["owner"] == "O"
            && e["epoch"] == 1
            && e["prev_epoch"] == 2),
        "no stale event for the late write: {log:?}"
    );
}

/// Waits until the process is a zombie: it has exited, and its parent has not reaped it.
fn wait_until_zombie(pid: Pid) {
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{pid} did not exit"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_run_stopped_while_its_command_exits_says_the_command_had_exited() {
    let env = Env::with_root();
    let go = env.path("go");
    nix::unistd::mkfifo(&go, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let script = "echo $PPID > \"$FENCEPOST_ROOT/runpid\"; echo $$ > \"$FENCEPOST_ROOT/pid\"; \
                  read x < \"$FENCEPOST_ROOT/go\"; exit 0";
    let handle = background(run_sh(&env, "doc.md", "O", "1s", &[], script));
    let run_pid = pid_in(&env.path("runpid"));
    let command = pid_in(&env.path("pid"));
    // run stops; its command then exits (unreaped: run cannot see it), and the lease's
    // deadline passes, as the store reads it (run's own deadline is no later).
    stop_outside_transaction(run_pid, &db(&env));
    std::fs::write(&go, "go\n").expect("let the command go");
    wait_until_zombie(command);
    loop {
        let j = env.fp(&["--json", "status", "doc.md"]).expect(0).json();
        if j["now"].as_i64() >= j["resources"][0]["lease"]["deadline"].as_i64() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    kill(run_pid, Signal::SIGCONT).expect("resume run");
    let done = join_within(handle, Duration::from_secs(15), command);
    assert_eq!(done.code, 4, "stderr: {}", done.stderr);
    assert_one_error_line(&done);
    assert!(
        done.stderr
            .contains("the command had exited with code 0 before the loss was seen"),
        "stderr: {}",
        done.stderr
    );
    assert!(
        !done.stderr.contains("is stopped"),
        "stderr: {}",
        done.stderr
    );
    let log = events(&env, &["doc.md"]);
    assert!(
        log.iter().any(|e| e["event"] == "lost" && e["epoch"] == 1),
        "no lost event: {log:?}"
    );
}

/// run stopped past its lease's deadline, while X took the lease over: once resumed, it
/// sees the loss and says who has the lease now, and the timeline's LOST entry names
/// the new holder.
#[test]
fn run_lost_past_its_deadline_says_who_took_over() {
    let env = Env::with_root();
    let script = "echo $PPID > \"$FENCEPOST_ROOT/runpid\"; echo $$ > \"$FENCEPOST_ROOT/pid\"; \
                  sleep 30";
    let run = run_sh(&env, "doc.md", "O", "1s", &["--grace", "500ms"], script);
    let handle = background(run);
    let run_pid = pid_in(&env.path("runpid"));
    let command = pid_in(&env.path("pid"));
    stop_outside_transaction(run_pid, &db(&env));
    // The deadline passes, as the store reads it (run's own is no later); X takes over.
    loop {
        let j = env.fp(&["--json", "status", "doc.md"]).expect(0).json();
        if j["now"].as_i64() >= j["resources"][0]["lease"]["deadline"].as_i64() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(env.claim_wall("doc.md", "X"), 2);
    kill(run_pid, Signal::SIGCONT).expect("resume run");
    let done = join_within(handle, Duration::from_secs(15), command);
    assert_eq!(done.code, 4, "stderr: {}", done.stderr);
    assert_one_error_line(&done);
    assert!(
        done.stderr
            .contains("the lease on doc.md (epoch 1) was lost")
            && done
                .stderr
                .trim_end()
                .ends_with("; now held by X (epoch 2)"),
        "stderr: {}",
        done.stderr
    );
    let log = events(&env, &["doc.md"]);
    assert!(
        log.iter().any(|e| e["event"] == "lost"
            && e["epoch"] == 1
            && e["prev_owner"] == "X"
            && e["prev_epoch"] == 2),
        "no lost event naming X epoch 2: {log:?}"
    );
    let text = env.fp(&["log", "--timeline"]).expect(0).stdout;
    assert!(text.contains("LOST e1 (holder X e2)"), "{text}");
}

// ---------------------------------------------------------------------------------------
// run: signals

/// run passes `signal` on to a command that acts on it and exits 0: the command was
/// stopped, so the lease is released, not completed, and run dies by the signal it got
/// (as timeout(1) does), once its line is printed.
fn forwards(signal: Signal, name: &str) {
    let env = Env::with_root();
    let script = format!(
        "trap 'kill $! 2>/dev/null; echo got-{name} > \"$FENCEPOST_ROOT/marker\"; exit 0' {name}; \
         echo $PPID > \"$FENCEPOST_ROOT/runpid\"; echo $$ > \"$FENCEPOST_ROOT/pid\"; \
         sleep 30 & wait"
    );
    let run = run_sh(&env, "doc.md", "O", "60s", &[], &script);
    let handle = background(run);
    let run_pid = pid_in(&env.path("runpid"));
    let group = pid_in(&env.path("pid"));
    kill(run_pid, signal).expect("signal run");
    let (done, took) = handle.join().expect("run thread");
    assert_eq!(
        (done.code, done.signal),
        (-1, Some(signal as i32)),
        "run exit after {took:?}\nstderr: {}",
        done.stderr
    );
    assert!(took < Duration::from_secs(15), "run took {took:?}");
    assert_one_error_line(&done);
    assert!(
        done.stderr
            .contains(&format!("run got SIG{name}: sh exited with code 0;")),
        "stderr: {}",
        done.stderr
    );
    assert_eq!(env.text("marker").trim(), format!("got-{name}"));
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
    assert!(group_gone(group, Duration::from_secs(5)));
}

#[test]
fn run_forwards_sigterm_to_the_child() {
    forwards(Signal::SIGTERM, "TERM");
}

#[test]
fn run_forwards_sigint_to_the_child() {
    forwards(Signal::SIGINT, "INT");
}

/// A command that dies of the signal run passed on, before run's forwarder has told the
/// supervisor it did (held there by a failpoint): still run's stop, never the command's
/// own death by SIGTERM (exit 143 and `completed` would be wrong).
#[cfg(feature = "failpoints")]
#[test]
fn run_knows_it_was_signalled_even_when_its_command_dies_first() {
    let env = Env::with_root();
    let script = "echo $PPID > \"$FENCEPOST_ROOT/runpid\"; exec sleep 60";
    let run = run_sh(&env, "doc.md", "O", "60s", &[], script)
        .env("FAILPOINTS", "run.after_forward=sleep(300)");
    let handle = background(run);
    let run_pid = pid_in(&env.path("runpid"));
    kill(run_pid, Signal::SIGTERM).expect("signal run");
    let (done, _) = handle.join().expect("run thread");
    assert_eq!(
        (done.code, done.signal),
        (-1, Some(Signal::SIGTERM as i32)),
        "stderr: {}",
        done.stderr
    );
    assert!(
        done.stderr.contains("run got SIGTERM: "),
        "stderr: {}",
        done.stderr
    );
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
}

#[test]
fn run_sigkills_a_command_that_ignores_a_forwarded_sigterm_after_the_grace_period() {
    let env = Env::new();
    // The command and its sleep ignore SIGTERM; were it not killed, the sleep would end
    // with exit 0 and the lease be completed.
    let script = "trap '' TERM; echo $PPID > \"$FENCEPOST_ROOT/runpid\"; \
                  echo $$ > \"$FENCEPOST_ROOT/pid\"; sleep 60";
    let run = run_sh_with(
        &env,
        &["--json"],
        "doc.md",
        "O",
        "60s",
        &["--grace", "500ms"],
        script,
    );
    let handle = background(run);
    let run_pid = pid_in(&env.path("runpid"));
    let group = pid_in(&env.path("pid"));
    kill(run_pid, Signal::SIGTERM).expect("signal run");
    let done = join_within(handle, Duration::from_secs(20), group);
    assert_eq!(
        (done.code, done.signal),
        (-1, Some(Signal::SIGTERM as i32)),
        "stderr: {}",
        done.stderr
    );
    let j = done.json_contract();
    assert_eq!(
        (&j["outcome"], &j["exit_code"], &j["exit_from"]),
        (&"failed".into(), &143.into(), &"signal".into())
    );
    assert!(group_gone(group, Duration::from_secs(5)));
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
    let log = events(&env, &["doc.md"]);
    let release = log
        .iter()
        .find(|e| e["event"] == "release")
        .expect("a release event");
    assert!(
        release.to_string().contains("killed by SIGKILL"),
        "release: {release}"
    );
}

// ---------------------------------------------------------------------------------------
// run: terminals and stopped commands

/// A command that traps SIGTERM (so the signal waits while it is stopped) and stops
/// itself: only a SIGCONT after the SIGTERM lets it act on it.
const STOPS_ITSELF: &str = "trap 'echo term > \"$FENCEPOST_ROOT/marker\"; exit 3' TERM; \
                            echo $PPID > \"$FENCEPOST_ROOT/runpid\"; echo $$ > \"$FENCEPOST_ROOT/pid\"; \
                            kill -STOP $$; sleep 30 & wait";

#[test]
fn run_wakes_a_stopped_command_to_deliver_a_forwarded_sigterm() {
    let env = Env::with_root();
    let handle = background(run_sh(&env, "doc.md", "O", "3s", &[], STOPS_ITSELF));
    let run_pid = pid_in(&env.path("runpid"));
    let group = pid_in(&env.path("pid"));
    wait_until_stopped(group);
    kill(run_pid, Signal::SIGTERM).expect("signal run");
    let done = join_within(handle, Duration::from_secs(15), group);
    assert_eq!(
        done.signal,
        Some(Signal::SIGTERM as i32),
        "stderr: {}",
        done.stderr
    );
    assert_one_error_line(&done);
    assert_eq!(env.text("marker"), "term\n");
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
    assert!(group_gone(group, Duration::from_secs(5)));
}

#[test]
fn run_wakes_a_stopped_command_to_stop_it_on_a_lost_lease() {
    let env = Env::with_root();
    // A grace far past the bound: the SIGKILL after it must not be what ends the command.
    let handle = background(run_sh(
        &env,
        "doc.md",
        "O",
        "600ms",
        &["--grace", "60s"],
        STOPS_ITSELF,
    ));
    let group = pid_in(&env.path("pid"));
    wait_until_stopped(group);
    take_over_as_x(&env);
    let done = join_within(handle, Duration::from_secs(15), group);
    assert_eq!(done.code, 4, "stderr: {}", done.stderr);
    assert_one_error_line(&done);
    assert_eq!(env.text("marker"), "term\n");
    assert!(group_gone(group, Duration::from_secs(5)));
}

#[test]
fn run_in_the_foreground_of_a_terminal_lends_it_to_the_command() {
    let env = Env::new();
    std::fs::write(
        env.path("child.sh"),
        "echo $$ > \"$FENCEPOST_ROOT/pid\"; read x; echo \"got:$x\" > \"$FENCEPOST_ROOT/got\"\n",
    )
    .expect("write the child's script");
    // sh without job control runs run in its own (foreground) group. After run, sh
    // reads the terminal itself: that works only if run gave the terminal back.
    let script = r#"fencepost --root "$ROOT" --json run doc.md --owner O --ttl 3s -- sh "$ROOT/child.sh"
echo "run-exit:$?"
read y
echo "after:$y""#;
    let (code, shown) = in_terminal(
        env.root(),
        script,
        &[("", "hello\n"), ("run-exit:", "world\n")],
    );
    kill_group_in(&env.path("pid"));
    assert_eq!(code, 0, "terminal showed: {shown:?}");
    assert!(shown.contains("run-exit:0"), "terminal showed: {shown:?}");
    assert_eq!(env.text("got"), "got:hello\n");
    assert!(
        shown.contains("after:world"),
        "run did not give the terminal back: {shown:?}"
    );
    // run's own report reached the terminal, after the command.
    let report = shown
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no --json report: {shown:?}"));
    let j: Value = serde_json::from_str(report.trim()).expect("the report is JSON");
    assert_eq!(j["outcome"], "completed");
    let r = row(&env, "doc.md");
    assert_eq!(r["lease"]["state"], "completed");
    assert_eq!(r["lease"]["owner"], "O");
}

/// In a job-control shell (`set -m`, as at a prompt), starts `run` (followed by `tail`
/// in the same job), types Ctrl-Z once the command reads the terminal, then `fg`s the
/// job and types a line. The job must stop and give the shell the terminal back, and
/// the line typed after `fg` must reach the command.
fn ctrl_z_then_fg(tail: &str) -> Env {
    let env = Env::new();
    std::fs::write(
        env.path("child.sh"),
        "echo $$ > \"$FENCEPOST_ROOT/pid\"; echo child-ready; read x; \
         echo \"got:$x\" > \"$FENCEPOST_ROOT/got\"\n",
    )
    .expect("write the child's script");
    let script = format!(
        r#"set -m
fencepost --root "$ROOT" run doc.md --owner O --ttl 60s -- sh "$ROOT/child.sh"{tail}
echo "stopped:$?"
fg > /dev/null
echo "fg-exit:$?""#
    );
    let (code, shown) = in_terminal(
        env.root(),
        &script,
        &[("child-ready", "\x1a"), ("stopped:", "hello\n")],
    );
    kill_group_in(&env.path("pid"));
    assert_eq!(code, 0, "terminal showed: {shown:?}");
    // A stopped job's status is 128 + SIGTSTP.
    assert!(shown.contains("stopped:148"), "terminal showed: {shown:?}");
    assert!(shown.contains("fg-exit:0"), "terminal showed: {shown:?}");
    assert_eq!(env.text("got"), "got:hello\n");
    env
}

#[test]
fn ctrl_z_stops_the_command_and_run_and_fg_resumes_both() {
    let env = ctrl_z_then_fg("");
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "completed");
}

#[test]
fn ctrl_z_stops_a_whole_pipeline_job_not_only_run() {
    // run shares its job with `cat`: Ctrl-Z must stop both, or the shell never sees a
    // stopped job and the terminal hangs.
    ctrl_z_then_fg(" | cat");
}

#[test]
fn ctrl_z_while_the_command_starts_a_program_stops_the_job() {
    let env = Env::new();
    // The command keeps starting programs, so a Ctrl-Z often lands while its shell waits
    // in vfork for one to exec: the child is stopped, the shell (the group's leader) is
    // not, and run must still see a stopped job. On each resume the command prints the
    // round the outer shell wrote just before `fg`, which is the cue for the next Ctrl-Z.
    std::fs::write(
        env.path("child.sh"),
        "trap '{ read r < \"$FENCEPOST_ROOT/round\"; } 2>/dev/null; echo \"resumed-$r\"' CONT\n\
         echo $$ > \"$FENCEPOST_ROOT/pid\"; echo child-ready\n\
         while [ ! -e \"$FENCEPOST_ROOT/stop\" ]; do /bin/true; done\n",
    )
    .expect("write the child's script");
    // Each round catches the vfork window only sometimes, so there are several.
    const ROUNDS: usize = 8;
    let script = format!(
        r#"set -m
fencepost --root "$ROOT" run doc.md --owner O --ttl 60s -- sh "$ROOT/child.sh"
echo "stopped-1:$?"
for round in $(seq 1 {last}); do
  echo "$round" > "$ROOT/round"
  fg > /dev/null
  echo "stopped-$((round + 1)):$?"
done
touch "$ROOT/stop"
fg > /dev/null
echo "fg-exit:$?""#,
        last = ROUNDS - 1
    );
    let cues: Vec<String> = std::iter::once("child-ready".to_string())
        .chain((1..ROUNDS).map(|r| format!("resumed-{r}")))
        .collect();
    let steps: Vec<(&str, &str)> = cues.iter().map(|c| (c.as_str(), "\x1a")).collect();
    let (code, shown) = in_terminal(env.root(), &script, &steps);
    kill_group_in(&env.path("pid"));
    assert_eq!(code, 0, "terminal showed: {shown:?}");
    for n in 1..=ROUNDS {
        assert!(
            shown.contains(&format!("stopped-{n}:148")),
            "terminal showed: {shown:?}"
        );
    }
    assert!(shown.contains("fg-exit:0"), "terminal showed: {shown:?}");
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "completed");
}

#[test]
fn after_ctrl_z_and_bg_run_leaves_the_shell_its_terminal() {
    let env = Env::new();
    std::fs::write(
        env.path("child.sh"),
        "echo $$ > \"$FENCEPOST_ROOT/pid\"; echo child-ready; sleep 1; \
         echo done > \"$FENCEPOST_ROOT/done\"\n",
    )
    .expect("write the child's script");
    // Stopped, then resumed in the background: when the command ends, run must not
    // take the terminal from the shell, which reads it next.
    let script = r#"set -m
fencepost --root "$ROOT" run doc.md --owner O --ttl 60s -- sh "$ROOT/child.sh"
echo "stopped:$?"
bg > /dev/null
wait
echo waited
read y
echo "after:$y""#;
    let (code, shown) = in_terminal(
        env.root(),
        script,
        &[("child-ready", "\x1a"), ("waited", "world\n")],
    );
    kill_group_in(&env.path("pid"));
    assert_eq!(code, 0, "terminal showed: {shown:?}");
    assert!(shown.contains("stopped:148"), "terminal showed: {shown:?}");
    assert!(
        shown.contains("after:world"),
        "run took the terminal: {shown:?}"
    );
    assert_eq!(env.text("done"), "done\n");
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "completed");
}

#[test]
fn write_from_a_terminal_says_to_pipe_the_content_in() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 1);
    let script = r#"fencepost --root "$ROOT" --now 2 write doc.md --epoch 1
echo "write-exit:$?""#;
    let (code, shown) = in_terminal(env.root(), script, &[]);
    assert_eq!(code, 0, "terminal showed: {shown:?}");
    assert!(shown.contains("write-exit:2"), "terminal showed: {shown:?}");
    assert!(
        shown.contains("stdin, which is a terminal"),
        "terminal showed: {shown:?}"
    );
    assert!(env.read("doc.md").is_none());
}

#[test]
fn run_in_the_background_of_a_terminal_leaves_it_alone() {
    let env = Env::new();
    std::fs::write(
        env.path("child.sh"),
        "trap 'echo term > \"$FENCEPOST_ROOT/marker\"; exit 3' TERM\n\
         echo $$ > \"$FENCEPOST_ROOT/pid\"\n\
         read x\n\
         echo \"got:$x\" > \"$FENCEPOST_ROOT/got\"\n",
    )
    .expect("write the child's script");
    // `set -m`: job control, so `&` puts run in a background group of its own, with the
    // terminal still on its stdin.
    let script = r#"set -m
fencepost --root "$ROOT" run doc.md --owner O --ttl 3s -- sh "$ROOT/child.sh" &
echo $! > "$ROOT/runpid"
wait $!
echo "run-exit:$?"
read y
echo "after:$y""#;
    let driver = {
        let root = env.root().to_path_buf();
        let script = script.to_string();
        thread::spawn(move || in_terminal(&root, &script, &[("run-exit:", "world\n")]))
    };
    let group = pid_in(&env.path("pid"));
    let run_pid = pid_in(&env.path("runpid"));
    // Reading a terminal it was not given stops the command (SIGTTIN)...
    wait_until_stopped(group);
    // ...and a SIGTERM to run still ends both promptly.
    kill(run_pid, Signal::SIGTERM).expect("signal run");
    let (code, shown) = driver.join().expect("driver thread");
    kill_group_in(&env.path("pid"));
    assert_eq!(code, 0, "terminal showed: {shown:?}");
    // run dies by the SIGTERM it got (the shell's 143), whatever its command's exit.
    assert!(shown.contains("run-exit:143"), "terminal showed: {shown:?}");
    assert!(shown.contains("after:world"), "terminal showed: {shown:?}");
    assert_eq!(env.text("marker"), "term\n");
    assert_eq!(env.read("got"), None);
    assert_eq!(row(&env, "doc.md")["lease"]["state"], "released");
}

// ---------------------------------------------------------------------------------------
// log

/// The main scenario of docs/protocol.md on the logical clock, with the fence on: A claims at 0 with
/// TTL 10, B takes over at 10, writes and completes, A's late write at 11 is stale and
/// its completion lost.
fn seed_scenario(env: &Env) {
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    env.fp(&["write", "doc.md", "--epoch", "2", "--owner", "B"])
        .now(10)
        .stdin("new")
        .expect_stdout(0, "written");
    env.fp(&["complete", "doc.md", "--owner", "B", "--epoch", "2"])
        .now(10)
        .expect_stdout(0, "completed");
    env.fp(&["write", "doc.md", "--epoch", "1", "--owner", "A"])
        .now(11)
        .stdin("old")
        .expect_stdout(5, "stale");
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(11)
        .expect_stdout(4, "lost");
    assert_eq!(env.text("doc.md"), "new");
}

#[test]
fn log_records_the_refused_stale_write_with_the_epochs_involved() {
    let env = Env::new();
    seed_scenario(&env);
    let log = events(&env, &[]);
    let brief: Vec<(String, Value, Value, Value)> = log
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or_default().to_string(),
                e["owner"].clone(),
                e["epoch"].clone(),
                e["at"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, Value, Value, Value)> = [
        ("claim", "A", 1, 0),
        ("takeover", "B", 2, 10),
        ("write", "B", 2, 10),
        ("complete", "B", 2, 10),
        ("stale", "A", 1, 11),
        ("lost", "A", 1, 11),
    ]
    .iter()
    .map(|(k, o, e, at)| {
        (
            k.to_string(),
            Value::from(*o),
            Value::from(*e),
            Value::from(*at),
        )
    })
    .collect();
    assert_eq!(brief, want);

    let takeover = &log[1];
    assert_eq!(takeover["prev_owner"], "A");
    assert_eq!(takeover["prev_epoch"], 1);
    assert_eq!(takeover["refused"], false);

    let write = &log[2];
    let sha = write["sha256"].as_str().expect("write has a hash");
    // SHA-256("new").
    assert_eq!(
        sha,
        "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437"
    );
    assert_eq!(write["refused"], false);

    let stale = &log[4];
    assert_eq!(stale["refused"], true);
    assert_eq!(stale["epoch"], 1);
    assert_eq!(stale["prev_epoch"], 2, "the fence that refused it");
    assert!(stale["sha256"].is_null());

    let lost = &log[5];
    assert_eq!(lost["refused"], true);
    assert_eq!(lost["prev_owner"], "B");
    assert_eq!(lost["prev_epoch"], 2);

    for e in &log {
        assert_eq!(e["resource"], "doc.md");
        assert!(e["pid"].as_u64().is_some_and(|p| p > 0), "pid: {e}");
        assert!(
            e["host"].as_str().is_some_and(|h| !h.is_empty()),
            "host: {e}"
        );
    }
    let ids: Vec<i64> = log.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in order: {ids:?}");

    // The plain table shows the refusal too.
    let table = env.fp(&["log"]).expect(0).stdout;
    let stale_line = table
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("stale"))
        .unwrap_or_else(|| panic!("no stale row:\n{table}"));
    assert!(
        stale_line.contains("epoch 1 is older than epoch 2"),
        "{stale_line}"
    );
}

#[test]
fn log_timeline_puts_each_owner_in_a_lane_and_the_stale_write_in_a() {
    let env = Env::new();
    seed_scenario(&env);
    let text = env.fp(&["log", "--timeline"]).expect(0).stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "header and six events:\n{text}");
    let header = lines[0];
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["AT", "A", "B"],
        "one column per owner:\n{text}"
    );
    let col_a = header[2..].find('A').map(|i| i + 2).expect("A column");
    let col_b = header.find('B').expect("B column");
    let cell = |line: &str, what: &str| -> usize {
        line.find(what)
            .unwrap_or_else(|| panic!("no {what:?} in {line:?}\n{text}"))
    };
    assert_eq!(cell(lines[1], "claim e1"), col_a);
    assert_eq!(cell(lines[2], "takeover e2 (from A e1)"), col_b);
    assert_eq!(cell(lines[3], "write e2"), col_b);
    assert_eq!(cell(lines[4], "complete e2"), col_b);
    assert_eq!(cell(lines[5], "STALE e1 (fence 2)"), col_a);
    assert!(lines[5].starts_with("11"));
    assert_eq!(cell(lines[6], "LOST e1 (holder B e2)"), col_a);
}

#[test]
fn log_timeline_marks_an_unfenced_write_after_a_takeover() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(20)
        .expect(0);
    // A's late write, let through without the fence's check.
    env.fp(&["write", "doc.md", "--epoch", "1", "--unfenced"])
        .now(21)
        .stdin("late")
        .expect(0);
    let text = env.fp(&["log", "--timeline"]).expect(0).stdout;
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.contains("write e1 unfenced (fence 2)"),
        "the unfenced write is not marked:\n{text}"
    );
}

#[test]
fn log_filters_by_resource_and_since() {
    let env = Env::new();
    seed_scenario(&env);
    assert_eq!(env.claim("other.md", "C", 10, 12), 1);

    let all = events(&env, &[]);
    assert_eq!(all.len(), 7);

    let doc = events(&env, &["doc.md"]);
    assert_eq!(doc.len(), 6);
    assert!(doc.iter().all(|e| e["resource"] == "doc.md"));
    let j = env.fp(&["--json", "log", "doc.md"]).expect(0).json();
    assert_eq!(j["resource"], "doc.md");

    let other = events(&env, &["other.md"]);
    assert_eq!(other.len(), 1);
    assert_eq!(other[0]["owner"], "C");

    let late = events(&env, &["--since", "11"]);
    let kinds: Vec<&str> = late.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["stale", "lost", "claim"]);
    let late_doc = events(&env, &["doc.md", "--since", "11"]);
    assert_eq!(late_doc.len(), 2);
    assert!(events(&env, &["--since", "13"]).is_empty());
    // A name the state file never saw is not an empty log.
    env.fp(&["--json", "log", "nothing.md"]).expect(2);

    // --last D: the events since now - D, on the state file's clock (here, ticks).
    let last = env
        .fp(&["--json", "log", "--last", "2"])
        .now(13)
        .expect(0)
        .json();
    let kinds: Vec<&str> = last["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(kinds, ["stale", "lost", "claim"]);
    // A wall-clock duration on a state file that counts ticks is refused, and so is a
    // UTC time.
    env.fp(&["log", "--last", "5m"]).expect(2);
    let done = env
        .fp(&["log", "--since", "2026-11-30T05:56:13Z"])
        .expect(2);
    assert_one_error_line(&done);

    // A timeline over several resources names them.
    let text = env.fp(&["log", "--timeline"]).expect(0).stdout;
    assert!(
        text.lines().next().is_some_and(|h| h.contains("RESOURCE")),
        "{text}"
    );
    // No events in the range asked says so; no state file at all is exit 2.
    env.fp(&["log", "--since", "99"])
        .expect_stdout(0, "no events");
    let fresh = Env::new();
    fresh.fp(&["log"]).expect_stdout(2, "");
}

#[test]
fn log_since_takes_the_utc_time_the_table_prints() {
    let env = Env::new();
    env.claim_wall("doc.md", "A");
    // So the claim and the write fall in different milliseconds.
    thread::sleep(Duration::from_millis(5));
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .stdin("x")
        .expect_stdout(0, "written");
    // The write's time, copied from the table as a person would.
    let table = env.fp(&["log"]).expect(0).stdout;
    let write_row = table
        .lines()
        .find(|l| l.contains(" write "))
        .unwrap_or_else(|| panic!("no write row:\n{table}"));
    let at = write_row.split_whitespace().next().expect("AT cell");
    let since = events(&env, &["--since", at]);
    let kinds: Vec<&str> = since.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["write"], "--since {at}");
    // The same time in milliseconds, as --json gives it, selects the same events.
    let ms = since[0]["at"].as_i64().expect("at").to_string();
    assert_eq!(events(&env, &["--since", &ms]).len(), 1);
    // A day that does not exist is bad input.
    let done = env
        .fp(&["log", "--since", "2026-02-30T00:00:00Z"])
        .expect(2);
    assert_one_error_line(&done);
}

#[test]
fn log_prune_keeps_the_newest_events() {
    let env = Env::new();
    seed_scenario(&env);
    let j = env
        .fp(&["--json", "--log-keep", "2", "log", "--prune"])
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "pruned");
    assert_eq!(j["dropped"], 4);
    assert_eq!(j["keep"], 2);
    let left = events(&env, &[]);
    let kinds: Vec<&str> = left.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["stale", "lost"]);
    env.fp(&["--log-keep", "2", "log", "--prune"])
        .expect_stdout(0, "pruned 0 events");
    // The setting has a variable too.
    env.fp(&["claim", "doc.md", "--owner", "C", "--ttl", "10"])
        .now(30)
        .expect(0);
    env.fp(&["log", "--prune"])
        .env("FENCEPOST_LOG_KEEP", "1")
        .expect_stdout(0, "pruned 2 events");
    let left = events(&env, &[]);
    assert_eq!(left.len(), 1);
    // B had completed, so C's is a plain claim, not a takeover.
    assert_eq!(left[0]["event"], "claim");
    assert_eq!(left[0]["owner"], "C");
    assert_eq!(left[0]["epoch"], 3);
    // The lease table and sink are not touched by pruning.
    env.fp(&["write", "doc.md", "--epoch", "2"])
        .now(31)
        .stdin("x")
        .expect_stdout(5, "stale");
}

// ---------------------------------------------------------------------------------------
// verify

/// `verify [args] --json` expecting exit 9: the (resource, problem) pairs.
fn problems(env: &Env, now: i64, args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["--json", "verify"];
    all.extend_from_slice(args);
    let done = env.fp(&all).now(now).expect(9);
    let j = done.json_contract();
    assert_eq!(j["outcome"], "diverged");
    j["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| {
            assert!(
                p["message"].as_str().is_some_and(|m| !m.is_empty()),
                "problem without a message: {p}"
            );
            (
                p["resource"].as_str().unwrap_or_default().to_string(),
                p["problem"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn one(res: &str, problem: &str) -> Vec<(String, String)> {
    vec![(res.to_string(), problem.to_string())]
}

/// Claims, writes and completes `res` at ticks 0..2.
fn published(env: &Env, res: &str, content: &str) {
    let e = env.claim(res, "A", 10, 0);
    env.write(res, e, content, 1, 0);
    env.fp(&["complete", res, "--owner", "A", "--epoch", &e.to_string()])
        .now(2)
        .expect(0);
}

#[test]
fn verify_passes_on_a_clean_root() {
    let env = Env::new();
    // No state file at all is not "ok": nothing was checked.
    let j = env.fp(&["--json", "verify"]).expect(2).json_contract();
    assert_eq!(j["outcome"], "usage");
    published(&env, "a.md", "one");
    published(&env, "dir/b.md", "two");
    // A lease still held, and one claimed but not yet written, are not problems.
    env.claim("c.md", "C", 100, 3);
    let j = env
        .fp(&["--json", "verify"])
        .now(4)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "ok");
    assert_eq!(j["checked"], 3);
    assert_eq!(j["problems"], serde_json::json!([]));
    env.fp(&["verify"])
        .now(4)
        .expect_stdout(0, "ok: 3 resources consistent");
    // Read-only: nothing changed on disk.
    assert_eq!(env.files(), ["a.md", "dir/b.md"]);
}

#[test]
fn verify_catches_a_document_edited_by_hand() {
    let env = Env::new();
    published(&env, "doc.md", "tool");
    published(&env, "ok.md", "fine");
    std::fs::write(env.path("doc.md"), "by hand").expect("edit");
    assert_eq!(problems(&env, 3, &[]), one("doc.md", "drifted"));
    // Plain output: one line per problem on stdout, one error line on stderr.
    let done = env.fp(&["verify"]).now(3).expect(9);
    assert!(
        done.stdout.starts_with("doc.md: drifted: "),
        "{}",
        done.stdout
    );
    assert_eq!(done.stdout.lines().count(), 1);
    // Checking only the clean resource passes.
    env.fp(&["verify", "ok.md"]).now(3).expect(0);
    assert_eq!(problems(&env, 3, &["doc.md"]), one("doc.md", "drifted"));
    // verify does not repair: the hand edit is still there.
    assert_eq!(env.text("doc.md"), "by hand");
}

#[test]
fn verify_catches_a_missing_document() {
    let env = Env::new();
    published(&env, "doc.md", "tool");
    std::fs::remove_file(env.path("doc.md")).expect("remove");
    assert_eq!(problems(&env, 3, &[]), one("doc.md", "missing"));
    // Missing with its folder gone too.
    published(&env, "sub/deep.md", "x");
    std::fs::remove_dir_all(env.path("sub")).expect("remove folder");
    let mut found = problems(&env, 3, &[]);
    found.sort();
    assert_eq!(
        found,
        [
            ("doc.md".to_string(), "missing".to_string()),
            ("sub/deep.md".to_string(), "missing".to_string())
        ]
    );
}

#[test]
fn verify_says_why_a_document_became_unreachable() {
    let env = Env::new();
    published(&env, "sub/doc.md", "tool");
    // A publish root of its own now starts at sub/: the outer root no longer reaches
    // the document, though the file is still there.
    std::fs::create_dir(env.path("sub/.fencepost")).expect("mkdir");
    assert_eq!(problems(&env, 3, &[]), one("sub/doc.md", "unreachable"));
    let done = env.fp(&["verify"]).now(3).expect(9);
    assert!(
        done.stdout.contains("another publish root"),
        "stdout: {}",
        done.stdout
    );
    assert_eq!(env.text("sub/doc.md"), "tool");
}

#[test]
fn verify_catches_completion_over_older_content() {
    let env = Env::new();
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    env.write("doc.md", 1, "from epoch 1", 1, 0);
    // B takes over at the deadline and completes without writing.
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    env.fp(&["complete", "doc.md", "--owner", "B", "--epoch", "2"])
        .now(11)
        .expect(0);
    assert_eq!(problems(&env, 12, &[]), one("doc.md", "older-content"));
    let done = env.fp(&["verify"]).now(12).expect(9);
    assert!(
        done.stdout.contains("epoch 2") && done.stdout.contains("epoch 1"),
        "{}",
        done.stdout
    );
}

#[test]
fn verify_catches_a_completion_that_never_published() {
    let env = Env::new();
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(1)
        .expect(0);
    assert_eq!(problems(&env, 2, &[]), one("doc.md", "never-published"));
    // A release is not a claim of success: no problem.
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.fp(&["release", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(1)
        .expect(0);
    env.fp(&["verify"]).now(2).expect(0);
}

#[test]
fn verify_catches_a_leftover_temp_file_and_recover_clears_it() {
    let env = Env::new();
    published(&env, "doc.md", "tool");
    let temp = env.path(".doc.md.fencepost-tmp-AbCd1234");
    std::fs::write(&temp, "half a write").expect("temp");
    // While a live writer holds it, it is not leftover.
    {
        let held = std::fs::File::open(&temp).expect("open temp");
        held.lock().expect("lock temp");
        env.fp(&["verify"]).now(3).expect(0);
    }
    assert_eq!(problems(&env, 3, &[]), one("doc.md", "leftover-temp"));
    assert!(temp.exists(), "verify must not remove anything");
    env.fp(&["recover", "doc.md"]).now(3).expect(0);
    assert!(
        !temp.exists(),
        "recover removes the dead writer's temp file"
    );
    env.fp(&["verify"]).now(3).expect(0);
    assert_eq!(env.text("doc.md"), "tool");
}

/// The binary under test has the failpoints compiled in.
#[cfg(feature = "failpoints")]
fn crash_write(env: &Env, res: &str, epoch: i64, content: &str, now: i64) {
    let done = env
        .fp(&["write", res, "--epoch", &epoch.to_string()])
        .now(now)
        .stdin(content)
        .env("FAILPOINTS", "write.after_rename=return(abort)")
        .output();
    assert_eq!(
        done.code, -1,
        "the write should die of SIGABRT after its rename: {done:?}"
    );
}

#[cfg(feature = "failpoints")]
#[test]
fn verify_catches_an_interrupted_write_and_recover_repairs_it() {
    let env = Env::new();
    let version = env.fp(&["--version"]).expect(0).stdout;
    assert!(version.contains("failpoints"), "{version}");

    // A rewrite that crashed after its rename, before its commit: the new bytes are in
    // place, the record still names the old ones.
    published(&env, "doc.md", "committed");
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    crash_write(&env, "doc.md", 2, "uncommitted", 11);
    assert_eq!(env.text("doc.md"), "uncommitted");
    assert_eq!(problems(&env, 12, &[]), one("doc.md", "interrupted"));
    // A first write that crashed the same way.
    assert_eq!(env.claim("first.md", "C", 10, 12), 1);
    crash_write(&env, "first.md", 1, "never committed", 13);
    let mut found = problems(&env, 14, &[]);
    found.sort();
    assert_eq!(
        found,
        [
            ("doc.md".to_string(), "interrupted".to_string()),
            ("first.md".to_string(), "interrupted".to_string())
        ]
    );
    // verify is read-only; recover puts things back, and verify is happy again.
    assert_eq!(env.text("doc.md"), "uncommitted");
    env.fp(&["recover"]).now(14).expect(0);
    assert_eq!(env.text("doc.md"), "committed");
    assert_eq!(env.read("first.md"), None);
    env.fp(&["verify"]).now(14).expect(0);
}

#[test]
fn verify_reports_every_problem_at_once() {
    let env = Env::new();
    published(&env, "drift.md", "x");
    published(&env, "gone.md", "y");
    env.claim("never.md", "N", 10, 0);
    env.fp(&["complete", "never.md", "--owner", "N", "--epoch", "1"])
        .now(1)
        .expect(0);
    published(&env, "fine.md", "z");
    std::fs::write(env.path("drift.md"), "changed").expect("edit");
    std::fs::remove_file(env.path("gone.md")).expect("remove");
    let mut found = problems(&env, 3, &[]);
    found.sort();
    let want: Vec<(String, String)> = [
        ("drift.md", "drifted"),
        ("gone.md", "missing"),
        ("never.md", "never-published"),
    ]
    .iter()
    .map(|(r, p)| (r.to_string(), p.to_string()))
    .collect();
    assert_eq!(found, want);
    let j = env.fp(&["--json", "verify"]).now(3).expect(9).json();
    assert_eq!(j["checked"], 4);
}

// ---------------------------------------------------------------------------------------
// completions and man page

#[test]
fn completions_generate_for_each_shell() {
    let env = Env::new();
    let bash = env.fp(&["completions", "bash"]).expect(0).stdout;
    assert!(bash.contains("fencepost"), "{bash}");
    for sub in ["claim", "write", "run", "verify", "log"] {
        assert!(bash.contains(sub), "bash completion lacks {sub}");
    }
    assert!(bash.contains("complete -F"), "not a bash completion script");
    let zsh = env.fp(&["completions", "zsh"]).expect(0).stdout;
    assert!(zsh.starts_with("#compdef fencepost"), "{zsh}");
    assert!(zsh.contains("verify"));
    let fish = env.fp(&["completions", "fish"]).expect(0).stdout;
    assert!(fish.contains("complete -c fencepost"), "{fish}");
    assert!(fish.contains("verify"));
    let elvish = env.fp(&["completions", "elvish"]).expect(0).stdout;
    assert!(
        elvish.contains("edit:completion:arg-completer[fencepost]"),
        "{elvish}"
    );
    assert!(elvish.contains("verify"));
    let powershell = env.fp(&["completions", "powershell"]).expect(0).stdout;
    assert!(
        powershell.contains("Register-ArgumentCompleter"),
        "{powershell}"
    );
    assert!(powershell.contains("verify"));
    // An unknown shell is bad usage, and the hint lists the shells there are.
    let done = env.fp(&["completions", "tcsh"]).expect(2);
    assert_eq!(done.stdout, "");
    assert!(
        done.stderr
            .ends_with("possible values: bash, zsh, fish, elvish, powershell\n"),
        "{}",
        done.stderr
    );
    // Needs no root and no state file.
    assert!(!db(&env).exists());
}

#[test]
fn man_page_generates_roff() {
    let env = Env::new();
    let man = env.fp(&["man"]).expect(0).stdout;
    assert!(
        man.starts_with(".TH") || man.starts_with(".ie"),
        "not roff: {}",
        &man[..man.len().min(200)]
    );
    assert!(man.contains(".TH fencepost 1"), "no title header");
    assert!(man.contains("verify") && man.contains("claim"));
    assert!(!db(&env).exists());
}

#[test]
fn man_dir_writes_every_page_the_main_page_refers_to() {
    let env = Env::new();
    // DIR is a manual folder, as MANPATH names one: the pages go in its man1/.
    env.fp(&["man", "--dir", "share/man"])
        .expect_stdout(0, "wrote man pages to share/man/man1");
    let section = env.path("share/man/man1");
    let main = std::fs::read_to_string(section.join("fencepost.1")).expect("fencepost.1");
    // Every page named as `fencepost\-NAME(1)` exists beside it.
    let mut referred = 0;
    for part in main.split("fencepost\\-").skip(1) {
        let name = part.split('(').next().expect("a name");
        let page = section.join(format!("fencepost-{name}.1"));
        assert!(
            page.exists(),
            "fencepost.1 refers to a missing page {page:?}"
        );
        referred += 1;
    }
    assert!(referred >= 10, "only {referred} pages referred to");
    // One page per command and the main one, none for `help` (which prints the same
    // text again), and nothing beside man1/.
    let mut pages: Vec<String> = std::fs::read_dir(&section)
        .expect("man1")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    assert!(
        pages.iter().all(|p| !p.contains("help")),
        "help pages: {pages:?}"
    );
    assert_eq!(pages.len(), referred + 2, "{pages:?}");
    assert!(pages.contains(&"fencepost-store-init.1".to_string()));
    let beside: Vec<_> = std::fs::read_dir(env.path("share/man"))
        .expect("share/man")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(beside, ["man1"]);
    // A folder that is a file is bad usage; a missing one is created.
    std::fs::write(env.path("plain"), "").expect("write");
    env.fp(&["man", "--dir", "plain"]).expect(2);
    // A folder whose name is not UTF-8: no panic, in --json either.
    let odd = std::ffi::OsStr::from_bytes(b"man\xff");
    std::fs::create_dir(env.root().join(odd)).expect("mkdir");
    let done = Command::new(harness::bin())
        .arg("--json")
        .arg("man")
        .arg("--dir")
        .arg(odd)
        .current_dir(env.root())
        .env_clear()
        .output()
        .expect("run fencepost");
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    let j: Value = serde_json::from_slice(&done.stdout).expect("one JSON object");
    assert_eq!(j["outcome"], "generated");
}

// ---------------------------------------------------------------------------------------
// -q and FENCEPOST_QUIET

#[test]
fn quiet_silences_confirmations_but_not_the_epoch() {
    let env = Env::new();
    env.fp(&["-q", "claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    env.fp(&["-q", "write", "doc.md", "--epoch", "1"])
        .now(1)
        .stdin("v1")
        .expect_stdout(0, "");
    env.fp(&[
        "--quiet", "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
    ])
    .now(2)
    .expect_stdout(0, "");
    env.fp(&["-q", "complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(3)
        .expect_stdout(0, "");
    assert_eq!(env.text("doc.md"), "v1");
    // Refusals: no word on stdout and no line on stderr, only the exit code (as
    // `flock -n`).
    env.fp(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(20)
        .expect(0);
    let done = env
        .fp(&["-q", "write", "doc.md", "--epoch", "1"])
        .now(21)
        .stdin("late")
        .output();
    assert_eq!((done.code, &*done.stdout, &*done.stderr), (5, "", ""));
    // Reports still print.
    assert!(
        !env.fp(&["-q", "status"])
            .now(21)
            .expect(0)
            .stdout
            .is_empty()
    );
    assert!(!env.fp(&["-q", "log"]).expect(0).stdout.is_empty());
    // --json wins over -q: a script asked for the object.
    let j = env
        .fp(&[
            "-q", "--json", "complete", "doc.md", "--owner", "B", "--epoch", "2",
        ])
        .now(22)
        .expect(0)
        .json_contract();
    assert_eq!(j["outcome"], "completed");
}

#[test]
fn fencepost_quiet_variable_works_like_q() {
    let env = Env::new();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .env("FENCEPOST_QUIET", "1")
        .expect_stdout(0, "1");
    env.fp(&["write", "doc.md", "--epoch", "1"])
        .now(1)
        .stdin("v1")
        .env("FENCEPOST_QUIET", "1")
        .expect_stdout(0, "");
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(2)
        .env("FENCEPOST_QUIET", "1")
        .expect_stdout(0, "");
    // A false value keeps the confirmations.
    env.claim("b.md", "A", 10, 3);
    env.fp(&["write", "b.md", "--epoch", "1"])
        .now(4)
        .stdin("v1")
        .env("FENCEPOST_QUIET", "0")
        .expect_stdout(0, "written");
    env.fp(&["complete", "b.md", "--owner", "A", "--epoch", "1"])
        .now(5)
        .env("FENCEPOST_QUIET", "false")
        .expect_stdout(0, "completed");
}

#[test]
fn quiet_run_passes_quiet_on_to_its_command() {
    // run -q prints nothing of its own, and its command gets FENCEPOST_QUIET=1: the
    // README's cron line, whose command's own `fencepost write` says nothing either.
    let env = Env::new();
    run_sh_with(
        &env,
        &["-q"],
        "doc.md",
        "O",
        "2s",
        &[],
        r#"printf v | fencepost write "$FENCEPOST_RESOURCE"; echo "quiet=$FENCEPOST_QUIET""#,
    )
    .expect_stdout(0, "quiet=1");
    assert_eq!(env.text("doc.md"), "v");
    // Without -q the command's write confirms as usual.
    run_sh(
        &env,
        "doc.md",
        "O",
        "2s",
        &[],
        r#"printf w | fencepost write "$FENCEPOST_RESOURCE"; echo "quiet=$FENCEPOST_QUIET""#,
    )
    .expect_stdout(0, "written\nquiet=");
    assert_eq!(env.text("doc.md"), "w");
}

// ---------------------------------------------------------------------------------------
// errors: one line on stderr

#[test]
fn errors_are_one_fencepost_line_on_stderr() {
    let env = Env::new();
    // A state file, so that renew and write below are refusals of the protocol.
    env.claim("other.md", "X", 10, 0);
    let cases: Vec<(Vec<&str>, Option<i64>, i32)> = vec![
        // Bad usage from clap.
        (vec!["claim", "doc.md", "--ttl", "10"], Some(0), 2),
        (vec!["frobnicate"], None, 2),
        // Bad input of our own.
        (
            vec!["claim", "../out.md", "--owner", "A", "--ttl", "10"],
            Some(0),
            2,
        ),
        (vec!["log", "--since", "soon"], None, 2),
        // Refusals.
        (
            vec![
                "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "5",
            ],
            Some(0),
            4,
        ),
        (vec!["write", "doc.md", "--epoch", "3"], Some(0), 8),
    ];
    for (args, now, code) in cases {
        let mut run = env.fp(&args);
        if let Some(now) = now {
            run = run.now(now);
        }
        let done = run.expect(code);
        assert!(
            done.stderr.starts_with("fencepost: "),
            "{args:?}: {:?}",
            done.stderr
        );
        assert_one_error_line(&done);
        // --json: still the line on stderr, and one object on stdout.
        let mut json_args = vec!["--json"];
        json_args.extend_from_slice(&args);
        let mut run = env.fp(&json_args);
        if let Some(now) = now {
            run = run.now(now);
        }
        let done = run.expect(code);
        assert_one_error_line(&done);
        let j = done.json_contract();
        assert!(
            j["error"].as_str().is_some_and(|e| !e.contains('\n')),
            "{args:?}: {j}"
        );
    }
    // A bad global option.
    let done = env.fp(&["--busy-timeout", "soon", "status"]).expect(2);
    assert_one_error_line(&done);
    assert!(done.stderr.contains("--busy-timeout"), "{}", done.stderr);
}

// ---------------------------------------------------------------------------------------
// Small extensions of the harness for this file.

trait EnvExt {
    /// Claims `res` for `owner` on the wall clock with a 60 s TTL, returning the epoch.
    fn claim_wall(&self, res: &str, owner: &str) -> i64;
}

impl EnvExt for Env {
    fn claim_wall(&self, res: &str, owner: &str) -> i64 {
        self.fp(&["claim", res, "--owner", owner, "--ttl", "60s"])
            .expect(0)
            .stdout
            .trim()
            .parse()
            .expect("claim prints an epoch")
    }
}
