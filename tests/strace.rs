//! Fault injection with strace (promise 4 of docs/crash-safety.md): the order of
//! the syscalls that make a write durable, an EIO injected into each fsync of a write,
//! a SIGKILL delivered at each rename, link and unlink, the fsync budget of a fenced
//! write, and the kernel-side copy of `--from` refused or failing.
//!
//! strace is required: these tests fail (they do not skip) when it is missing.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::harness::{Env, bin};
use crate::support::{
    DbHolder, RES, Scenario, assert_consistent, new, setup, status_row, tool_files,
};

/// The strace binary, or a panic that says how to get it. A test that runs it carries
/// `#[cfg_attr(fp_missing = "strace", ignore = ...)]`.
#[track_caller]
pub(crate) fn strace() -> PathBuf {
    crate::support::needs::strace();
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("strace"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "strace is required by tests/strace.rs and is not in PATH: \
                 install it (Debian/Ubuntu: apt-get install strace; .ci/run does)"
            )
        })
}

/// One traced `fencepost` run.
struct Traced {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    /// Syscalls in order: (name, whole line).
    calls: Vec<Call>,
}

#[derive(Debug, Clone)]
struct Call {
    name: String,
    /// The call's line; for a call that another thread's calls split in two
    /// ("fsync(3</p> <unfinished ...>", then "<... fsync resumed>) = 0"), both halves.
    line: String,
    /// The index of the first call traced after this one returned.
    returned: usize,
}

impl Call {
    /// The path strace (`-y`) shows for the first fd argument, if any.
    fn fd_path(&self) -> Option<&str> {
        let open = self.line.find('<')?;
        let close = self.line[open..].find('>')? + open;
        Some(&self.line[open + 1..close])
    }

    /// The quoted string arguments.
    fn strings(&self) -> Vec<&str> {
        self.line.split('"').skip(1).step_by(2).collect()
    }

    fn injected(&self) -> bool {
        self.line.contains("(INJECTED)")
    }

    fn is_sync(&self) -> bool {
        self.name == "fsync" || self.name == "fdatasync"
    }
}

fn traced(env: &Env, strace_args: &[&str], args: &[&str], now: i64, stdin: &[u8]) -> Traced {
    let out_file = tempfile::NamedTempFile::new().expect("trace file");
    let mut cmd = Command::new(strace());
    cmd.env_clear()
        .current_dir(env.root())
        .args(["-f", "-y", "-qq", "-o"])
        .arg(out_file.path())
        .args(strace_args)
        .arg(bin())
        .arg("--root")
        .arg(env.root())
        .arg("--now")
        .arg(now.to_string())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run strace");
    {
        use std::io::Write as _;
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("stdin");
    }
    let out = child.wait_with_output().expect("strace");
    let text = std::fs::read_to_string(out_file.path()).expect("read trace");
    let mut calls: Vec<Call> = Vec::new();
    // Per thread, the call strace left unfinished.
    let mut open = std::collections::HashMap::<&str, usize>::new();
    for line in text.lines() {
        // "1234  fsync(6</path>) = 0": skip the pid, take the name up to '('.
        let tid = line.split_whitespace().next().unwrap_or("");
        let rest = line
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start();
        if rest.starts_with("<... ") {
            if let Some(at) = open.remove(tid) {
                let end = rest.split_once("resumed>").map_or("", |(_, end)| end);
                calls[at].line = format!("{}{end}", calls[at].line);
                calls[at].returned = calls.len();
            }
            continue;
        }
        let Some(name) = rest.split('(').next() else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let (line, returned) = match line.strip_suffix("<unfinished ...>") {
            Some(start) => {
                open.insert(tid, calls.len());
                // Until its other half is read: never (a killed process leaves it so).
                (start.trim_end().to_string(), usize::MAX)
            }
            None => (line.to_string(), calls.len() + 1),
        };
        calls.push(Call {
            name: name.to_string(),
            line,
            returned,
        });
    }
    use std::os::unix::process::ExitStatusExt;
    Traced {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        calls,
    }
}

const TRACE_FILE_OPS: &str = "trace=fsync,fdatasync,link,linkat,symlink,symlinkat,rename,renameat,renameat2,unlink,unlinkat,\
     pwrite64,write";

fn canonical(env: &Env) -> PathBuf {
    env.root().canonicalize().expect("canonical root")
}

/// A traced path relative to the env's root (temp file names made generic), to compare
/// two runs.
fn rel(env: &Env, p: &str) -> String {
    let root = canonical(env);
    let p = p.strip_prefix(root.to_str().expect("utf-8")).unwrap_or(p);
    match p.find(".fencepost-tmp-") {
        Some(at) => format!("{}.fencepost-tmp-*", &p[..at]),
        None => p.to_string(),
    }
}

fn is_wal(p: &str) -> bool {
    p.ends_with("state.db-wal")
}

/// Where in a traced write its steps happened.
#[derive(Debug)]
struct Steps {
    temp_sync: usize,
    pre_link: Option<usize>,
    new_link: usize,
    /// The `-sum` symlink recording the staged content's hash.
    sum_link: usize,
    rename: usize,
    dir_sync: usize,
    /// fsync of the state file's folder (where the WAL lives), by fencepost before it
    /// stages the content (outside the lock, before COMMIT).
    state_dir_sync: Option<usize>,
    first_wal_write: usize,
    /// The first WAL write of a frame (not the 32-byte WAL header).
    frames: usize,
    commit_sync: usize,
    unlink_new: usize,
    unlink_pre: Option<usize>,
}

fn steps(env: &Env, calls: &[Call]) -> Steps {
    let root = canonical(env);
    let doc = root.join(RES);
    let doc = doc.to_str().expect("utf-8 path");
    let root_s = root.to_str().expect("utf-8 path");
    let state_dir = root.join(".fencepost");
    let state_dir = state_dir.to_str().expect("utf-8 path");
    let find = |from: usize, what: &str, f: &dyn Fn(&Call) -> bool| -> usize {
        (from..calls.len())
            .find(|&i| f(&calls[i]))
            .unwrap_or_else(|| panic!("no {what} in the trace:\n{}", dump(calls)))
    };
    let temp_sync = find(0, "fsync of the temp file", &|c| {
        c.is_sync()
            && c.fd_path()
                .is_some_and(|p| p.contains(".doc.md.fencepost-tmp-"))
    });
    let link_to = |suffix: &'static str| {
        move |c: &Call| {
            c.name.starts_with("link") && c.strings().last().is_some_and(|t| t.contains(suffix))
        }
    };
    let pre_link = (0..calls.len()).find(|&i| link_to(".fencepost-pre-")(&calls[i]));
    let new_link = find(0, "link of -new", &link_to(".fencepost-new-"));
    let sum_link = find(0, "symlink of -sum", &|c| {
        c.name.starts_with("symlink")
            && c.strings()
                .last()
                .is_some_and(|t| t.contains(".fencepost-sum-"))
    });
    let rename = find(0, "rename over the document", &|c| {
        c.name.starts_with("rename")
            && c.strings()
                .first()
                .is_some_and(|s| s.contains(".fencepost-tmp-"))
            // Renamed within the folder's handle: the target is the bare file name.
            && c.strings().last().is_some_and(|t| *t == doc || *t == RES)
    });
    let dir_sync = find(rename, "fsync of the document's folder", &|c| {
        c.is_sync() && c.fd_path() == Some(root_s)
    });
    let first_wal_write = find(0, "a WAL write", &|c| {
        c.name == "pwrite64" && c.fd_path().is_some_and(is_wal)
    });
    let frames = find(0, "a WAL frame write", &|c| {
        c.name == "pwrite64"
            && c.fd_path().is_some_and(is_wal)
            && !c.line.ends_with(", 32, 0) = 32")
    });
    let commit_sync = find(frames, "the COMMIT fsync of the WAL", &|c| {
        c.is_sync() && c.fd_path().is_some_and(is_wal)
    });
    let state_dir_sync =
        (0..temp_sync).find(|&i| calls[i].is_sync() && calls[i].fd_path() == Some(state_dir));
    let unlink = |suffix: &'static str| {
        move |c: &Call| {
            c.name.starts_with("unlink") && c.line.contains(suffix) && c.line.ends_with("= 0")
        }
    };
    let unlink_new = find(commit_sync, "unlink of -new", &unlink(".fencepost-new-"));
    let unlink_pre = (commit_sync..calls.len()).find(|&i| unlink(".fencepost-pre-")(&calls[i]));
    Steps {
        temp_sync,
        pre_link,
        new_link,
        sum_link,
        rename,
        dir_sync,
        state_dir_sync,
        first_wal_write,
        frames,
        commit_sync,
        unlink_new,
        unlink_pre,
    }
}

fn dump(calls: &[Call]) -> String {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{i:3} {}", c.line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The state file's WAL before the traced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wal {
    /// Kept from the setup's commands, as between any two commands.
    Kept,
    /// Gone: checkpointed and deleted by another SQLite program closing the state file
    /// last, so the write's store creates it again.
    New,
}

const WALS: [Wal; 2] = [Wal::Kept, Wal::New];

/// [`setup`], then the WAL as `wal` says.
fn setup_wal(env: &Env, scenario: Scenario, wal: Wal) -> (i64, Option<(Vec<u8>, i64)>) {
    let done = setup(env, scenario);
    let path = env.path(".fencepost/state.db-wal");
    assert!(
        path.exists(),
        "{scenario:?}: the setup's commands did not keep the WAL"
    );
    if wal == Wal::New {
        let script = "import sqlite3, sys\n\
                      c = sqlite3.connect(sys.argv[1])\n\
                      c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall()\n\
                      c.close()\n";
        let status = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(env.path(".fencepost/state.db"))
            .status()
            .expect("python3 is needed to remove the WAL");
        assert!(status.success());
        assert!(!path.exists(), "{scenario:?}: the WAL is still there");
    }
    done
}

fn write_args(epoch: i64) -> Vec<String> {
    vec![
        "write".into(),
        RES.into(),
        "--epoch".into(),
        epoch.to_string(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Promise 4, the order: fsync(temp) → links → rename → fsync(folder) → WAL frames →
/// fsync(WAL) = COMMIT → `written` printed → links removed. Nothing reaches the WAL
/// before the folder fsync. When the WAL is new, the state file's folder (the WAL's
/// directory entry) is fsynced by fencepost before the content is staged, well before
/// the COMMIT, because SQLite ignores errors of its own directory fsync; a WAL that
/// already has content was made durable that way by the process that created it, and
/// its folder is not fsynced again.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn write_syscalls_are_ordered_fsync_temp_rename_fsync_dir_commit() {
    for (scenario, wal) in [Scenario::First, Scenario::Rewrite]
        .into_iter()
        .flat_map(|s| WALS.map(|w| (s, w)))
    {
        let env = Env::new();
        let (epoch, before) = setup_wal(&env, scenario, wal);
        let args = write_args(epoch);
        let t = traced(&env, &["-e", TRACE_FILE_OPS], &strs(&args), 20, &new());
        assert_eq!(t.code, Some(0), "{scenario:?}, {wal:?}: {}", t.stderr);
        assert_eq!(t.stdout.trim(), "written");
        let s = steps(&env, &t.calls);
        let trace = dump(&t.calls);
        let scenario = format!("{scenario:?}, {wal:?}");
        let link = s.pre_link.unwrap_or(s.new_link);
        assert_eq!(
            s.pre_link.is_some(),
            before.is_some(),
            "{scenario:?}: pre link\n{trace}"
        );
        assert!(
            s.temp_sync < link,
            "{scenario:?}: temp fsync before the links\n{trace}"
        );
        assert!(
            link <= s.new_link && s.new_link < s.rename,
            "{scenario:?}\n{trace}"
        );
        assert!(
            s.new_link < s.sum_link && s.sum_link < s.rename,
            "{scenario:?}: -sum between -new and the rename\n{trace}"
        );
        assert!(
            s.rename < s.dir_sync,
            "{scenario:?}: folder fsync after rename\n{trace}"
        );
        assert!(
            s.dir_sync < s.first_wal_write,
            "{scenario:?}: the WAL is written before the folder fsync\n{trace}"
        );
        match wal {
            Wal::New => {
                let state_dir_sync = s.state_dir_sync.unwrap_or_else(|| {
                    panic!(
                        "{scenario}: the new WAL's folder is not fsynced before staging\n{trace}"
                    )
                });
                assert!(state_dir_sync < s.temp_sync, "{scenario}\n{trace}");
            }
            Wal::Kept => assert_eq!(
                s.state_dir_sync, None,
                "{scenario}: the folder of a WAL with content is fsynced again\n{trace}"
            ),
        }
        assert!(s.frames < s.commit_sync, "{scenario:?}\n{trace}");
        let printed = t
            .calls
            .iter()
            .position(|c| c.name == "write" && c.strings().first() == Some(&"written\\n"))
            .unwrap_or_else(|| panic!("{scenario}: `written` is not in the trace\n{trace}"));
        assert!(
            s.commit_sync < printed,
            "{scenario}: `written` printed before the COMMIT fsync\n{trace}"
        );
        assert!(
            s.commit_sync < s.unlink_new,
            "{scenario:?}: links removed before COMMIT\n{trace}"
        );
        if let Some(pre) = s.unlink_pre {
            assert!(s.commit_sync < pre, "{scenario:?}\n{trace}");
        }
        assert_eq!(tool_files(&env), Vec::<String>::new());
    }
}

/// The syncs of a clean traced write, and which of them is the COMMIT.
struct Syncs {
    paths: Vec<String>,
    /// 0-based index (among syncs) of the WAL fsync that commits.
    commit: usize,
    /// Syncs that SQLite issues on the state file's folder itself, after the WAL write
    /// began: SQLite ignores their errors.
    sqlite_dir: Vec<usize>,
}

fn syncs(env: &Env, calls: &[Call]) -> Syncs {
    let s = steps(env, calls);
    let state_dir = canonical(env).join(".fencepost");
    let state_dir = state_dir.to_str().expect("utf-8");
    let mut paths = Vec::new();
    let mut commit = None;
    let mut sqlite_dir = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        if !c.is_sync() {
            continue;
        }
        assert_eq!(
            c.name, "fsync",
            "SQLite or fencepost used {}: adapt the test",
            c.name
        );
        if i == s.commit_sync {
            commit = Some(paths.len());
        }
        if i > s.first_wal_write && c.fd_path() == Some(state_dir) {
            sqlite_dir.push(paths.len());
        }
        paths.push(c.fd_path().unwrap_or("?").to_string());
    }
    Syncs {
        paths,
        commit: commit.expect("commit sync"),
        sqlite_dir,
    }
}

/// Promise 4, failures: an EIO from each fsync of a write, in turn. Up to the COMMIT
/// fsync the command fails (exit 1, no outcome), and the old document and record stand;
/// after it, the state is the new one and consistent. A write never reports success
/// with a state it has not committed, and leaves no files behind.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn fsync_error_at_each_step_fails_the_write_and_keeps_the_old_state() {
    for (scenario, wal) in [Scenario::First, Scenario::Rewrite]
        .into_iter()
        .flat_map(|s| WALS.map(|w| (s, w)))
    {
        let clean_env = Env::new();
        let (epoch, _) = setup_wal(&clean_env, scenario, wal);
        let args = write_args(epoch);
        let clean = traced(
            &clean_env,
            &["-e", TRACE_FILE_OPS],
            &strs(&args),
            20,
            &new(),
        );
        assert_eq!(clean.code, Some(0), "{}", clean.stderr);
        let plan = syncs(&clean_env, &clean.calls);
        // At least the temp file, the document's folder and the COMMIT; a new WAL adds
        // its folder and its header.
        let least = if wal == Wal::New { 5 } else { 3 };
        assert!(
            plan.paths.len() >= least,
            "too few fsyncs: {:?}",
            plan.paths
        );

        for n in 1..=plan.paths.len() {
            eio_at_fsync(n, scenario, wal, &clean_env, &plan);
        }
    }
}

/// One run of the test above: an EIO injected at the `n`th fsync of the write whose clean
/// run made `plan`'s fsyncs.
fn eio_at_fsync(n: usize, scenario: Scenario, wal: Wal, clean_env: &Env, plan: &Syncs) {
    let k = n - 1;
    let what = format!(
        "{scenario:?}, {wal:?}: EIO at fsync #{n} ({})",
        plan.paths[k]
    );
    let env = Env::new();
    let (epoch, before) = setup_wal(&env, scenario, wal);
    let args = write_args(epoch);
    let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
    let inject = format!("inject=fsync:error=EIO:when={n}");
    let t = traced(
        &env,
        &["-e", "trace=fsync", "-e", &inject],
        &strs(&args),
        20,
        &new(),
    );
    let hit: Vec<&Call> = t.calls.iter().filter(|c| c.injected()).collect();
    assert_eq!(
        hit.len(),
        1,
        "{what}: one injected fsync\n{}",
        dump(&t.calls)
    );
    assert_eq!(
        hit[0].fd_path().map(|p| rel(&env, p)),
        Some(rel(clean_env, &plan.paths[k])),
        "{what}: the syscall sequence differs from the clean run"
    );
    let newv = new();
    let committed = (epoch, newv.as_slice());
    if t.code == Some(0) {
        // Success only when the COMMIT fsync had succeeded: after it, or at
        // SQLite's own directory fsync (whose error SQLite ignores; fencepost
        // has fsynced that folder already, before COMMIT).
        assert!(
            k > plan.commit || plan.sqlite_dir.contains(&k),
            "{what}: reported success after a failed fsync before COMMIT: {}",
            t.stdout
        );
        assert_eq!(t.stdout.trim(), "written", "{what}");
        assert_consistent(&env, RES, Some(21), Some((committed.1, committed.0)), &what);
    } else {
        assert_eq!(t.code, Some(1), "{what}: {}", t.stderr);
        assert_eq!(t.stdout, "", "{what}: a failed write reports no outcome");
        let io = t.stderr.contains("Input/output error") || t.stderr.contains("I/O error");
        assert!(io, "{what}: {}", t.stderr);
        let want = if k > plan.commit {
            Some((committed.1, committed.0))
        } else {
            before
        };
        assert_consistent(&env, RES, Some(21), want, &what);
    }
    if k < plan.commit && !plan.sqlite_dir.contains(&k) {
        assert_eq!(t.code, Some(1), "{what}: must fail");
    }
    assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
    // Nothing is stuck: the same write can be retried.
    let retry = env.fp(&strs(&args)).now(22).stdin(new()).expect(0);
    assert!(
        ["written", "replay"].contains(&retry.stdout.trim()),
        "{what}"
    );
    assert_consistent(&env, RES, Some(23), Some((committed.1, committed.0)), &what);
}

/// A failed COMMIT fsync can leave the transaction's frames in the WAL file beyond the
/// last valid commit. If another connection keeps the WAL alive and then dies without
/// closing it, the next opener rebuilds the WAL index from the file and would bring that
/// commit back, after the write had already rolled its document back. The write's own
/// recovery must commit over those frames.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn failed_commit_fsync_is_not_resurrected_by_wal_recovery() {
    for scenario in [Scenario::First, Scenario::Rewrite] {
        let clean_env = Env::new();
        let (epoch, _) = setup(&clean_env, scenario);
        let args = write_args(epoch);
        let holder = DbHolder::start(&clean_env, "SELECT count(*) FROM sink");
        let clean = traced(
            &clean_env,
            &["-e", TRACE_FILE_OPS],
            &strs(&args),
            20,
            &new(),
        );
        holder.finish();
        assert_eq!(clean.code, Some(0), "{}", clean.stderr);
        let n = syncs(&clean_env, &clean.calls).commit + 1;

        let env = Env::new();
        let (_, before) = setup(&env, scenario);
        let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
        let holder = DbHolder::start(&env, "SELECT count(*) FROM sink");
        let inject = format!("inject=fsync:error=EIO:when={n}");
        let t = traced(
            &env,
            &["-e", "trace=fsync", "-e", &inject],
            &strs(&args),
            20,
            &new(),
        );
        assert_eq!(t.code, Some(1), "{scenario:?}: {}", t.stderr);
        assert!(
            t.calls
                .iter()
                .any(|c| c.injected() && c.fd_path().is_some_and(is_wal))
        );
        assert_consistent(&env, RES, Some(21), before, "right after the failed commit");
        // The other connection dies without closing: the next opener recovers the WAL.
        holder.kill();
        assert_consistent(&env, RES, Some(22), before, "after WAL recovery");
        assert_eq!(tool_files(&env), Vec::<String>::new());
    }
}

/// The calls of a clean write to kill a write at: each fsync, link, symlink, rename and
/// unlink, as (name, its number among calls of that name, its index, its strace line).
fn kill_targets(calls: &[Call]) -> Vec<(String, usize, usize, String)> {
    let mut count = std::collections::HashMap::<String, usize>::new();
    let mut targets = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        if [
            "fsync",
            "link",
            "linkat",
            "symlink",
            "symlinkat",
            "rename",
            "renameat",
            "renameat2",
            "unlink",
            "unlinkat",
        ]
        .contains(&c.name.as_str())
        {
            let n = count.entry(c.name.clone()).or_default();
            *n += 1;
            targets.push((c.name.clone(), *n, i, c.line.clone()));
        }
    }
    targets
}

/// A SIGKILL delivered at each fsync, link, symlink, rename and unlink of a write (strace
/// `inject=SYSCALL:signal=SIGKILL:when=N`, delivered on entry). Before the WAL frames
/// are written, recovery restores the old state; after the COMMIT fsync, the new state
/// stands; `status` says `interrupted` only between the rename and the COMMIT.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn sigkill_at_each_fsync_rename_link_and_unlink_is_recovered() {
    for (scenario, wal) in [Scenario::First, Scenario::Rewrite]
        .into_iter()
        .flat_map(|s| WALS.map(|w| (s, w)))
    {
        let clean_env = Env::new();
        let (epoch, _) = setup_wal(&clean_env, scenario, wal);
        let args = write_args(epoch);
        let clean = traced(
            &clean_env,
            &["-e", TRACE_FILE_OPS],
            &strs(&args),
            20,
            &new(),
        );
        assert_eq!(clean.code, Some(0), "{}", clean.stderr);
        let s = steps(&clean_env, &clean.calls);
        let targets = kill_targets(&clean.calls);
        assert!(
            targets.iter().any(|t| t.0.starts_with("rename")),
            "no rename in {targets:?}"
        );
        for (name, n, index, line) in targets {
            let what = format!("{scenario:?}, {wal:?}: SIGKILL at {name} #{n}: {line}");
            let env = Env::new();
            let (_, before) = setup_wal(&env, scenario, wal);
            let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
            let inject = format!("inject={name}:signal=SIGKILL:when={n}");
            let t = traced(
                &env,
                &["-e", &format!("trace={name}"), "-e", &inject],
                &strs(&args),
                20,
                &new(),
            );
            assert!(
                t.signal == Some(9) || t.code == Some(128 + 9),
                "{what}: not killed: {:?} {:?} {}",
                t.code,
                t.signal,
                t.stderr
            );
            assert_eq!(t.stdout, "", "{what}");
            let newv = new();
            let committed = Some((newv.as_slice(), epoch));
            let row = status_row(&env, RES, Some(21));
            let doc = env.read(RES);
            if row["document"]["state"] == "interrupted" {
                assert!(index <= s.commit_sync, "{what}: interrupted after COMMIT");
                assert_eq!(doc.as_deref(), Some(newv.as_slice()), "{what}");
                assert!(index >= s.rename, "{what}: interrupted before the rename");
            }
            env.fp(&["recover"]).now(21).expect(0);
            let want = if index > s.commit_sync {
                committed
            } else if index < s.frames {
                before
            } else if env.read(RES).as_deref() == Some(newv.as_slice()) {
                // Killed between writing the WAL frames and their fsync: the frames are
                // in the page cache, so WAL recovery may count the commit or not. It was
                // never reported; either outcome is fine if consistent.
                committed
            } else {
                before
            };
            assert_consistent(&env, RES, Some(22), want, &what);
            assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
        }
    }
}

/// Crashes a write at `write.after_rename` (abort): new bytes in place, old record.
fn crashed_after_rename(scenario: Scenario) -> (Env, Option<(Vec<u8>, i64)>) {
    let env = Env::new();
    let (epoch, before) = setup(&env, scenario);
    let e = epoch.to_string();
    let done = env
        .fp(&["write", RES, "--epoch", &e])
        .now(20)
        .stdin(new())
        .env("FAILPOINTS", "write.after_rename=return(abort)")
        .output();
    assert_eq!(done.code, -1, "{done:?}");
    assert_eq!(
        status_row(&env, RES, Some(20))["document"]["state"],
        "interrupted"
    );
    (env, before)
}

/// Recovery is itself crash-safe: `recover` SIGKILLed at each of its fsyncs, renames and
/// unlinks leaves a state the next `recover` finishes, ending with the old document and
/// record, and no files behind.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn recovery_killed_at_each_step_is_finished_by_the_next_one() {
    for scenario in [Scenario::First, Scenario::Rewrite] {
        let (clean_env, _) = crashed_after_rename(scenario);
        let clean = traced(&clean_env, &["-e", TRACE_FILE_OPS], &["recover"], 21, b"");
        assert_eq!(clean.code, Some(0), "{}", clean.stderr);
        let mut count = std::collections::HashMap::<String, usize>::new();
        let mut targets = Vec::new();
        for c in &clean.calls {
            if [
                "fsync",
                "rename",
                "renameat",
                "renameat2",
                "unlink",
                "unlinkat",
            ]
            .contains(&c.name.as_str())
            {
                let n = count.entry(c.name.clone()).or_default();
                *n += 1;
                targets.push((c.name.clone(), *n, c.line.clone()));
            }
        }
        let undo = if scenario == Scenario::First {
            "unlink"
        } else {
            "rename"
        };
        assert!(
            targets.iter().any(|t| t.0.starts_with(undo)),
            "{scenario:?}: recovery did not {undo}:\n{}",
            dump(&clean.calls)
        );
        for (name, n, line) in targets {
            let what = format!("{scenario:?}: recover SIGKILLed at {name} #{n}: {line}");
            let (env, before) = crashed_after_rename(scenario);
            let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
            let inject = format!("inject={name}:signal=SIGKILL:when={n}");
            let t = traced(
                &env,
                &["-e", &format!("trace={name}"), "-e", &inject],
                &["recover"],
                21,
                b"",
            );
            assert!(
                t.signal == Some(9) || t.code == Some(128 + 9),
                "{what}: not killed: {:?} {:?} {}",
                t.code,
                t.signal,
                t.stderr
            );
            if let Some(doc) = env.read(RES) {
                let complete = Some(doc.as_slice()) == before.map(|b| b.0) || doc == new();
                assert!(complete, "{what}: the document is not one complete version");
            }
            env.fp(&["recover"]).now(22).expect(0);
            assert_consistent(&env, RES, Some(23), before, &what);
            assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
        }
    }
}

/// Most fsyncs a fenced 4 KiB write may make on average: the staged file, the document's
/// folder and the COMMIT are the three it needs; the WAL's occasional checkpoint and the
/// fsyncs that come with it are shared by the writes between two checkpoints.
const FSYNC_BUDGET: f64 = 3.5;

/// The fsync budget, counted (never timed): 100 fenced 4 KiB writes, each after the claim
/// that issues its epoch, as a worker publishing in turn does. Every fsync of every
/// process is counted, checkpoints included wherever they land; only the one fsync each
/// claim needs for its own COMMIT is not charged to the writes.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn fenced_writes_stay_within_the_fsync_budget() {
    const WRITES: usize = 100;
    let env = Env::new();
    std::fs::write(env.path("in4k"), &new()[..4096]).expect("content");
    assert_eq!(env.claim(RES, "w", 1, 0), 1);
    let bin = bin();
    let script = format!(
        "for i in $(seq 1 {WRITES}); do \
           e=$('{bin}' --root . --now $((2 * i)) claim {RES} --owner w --ttl 1) || exit 1; \
           '{bin}' --root . --now $((2 * i + 1)) write {RES} --epoch \"$e\" --from in4k || exit 1; \
         done",
        bin = bin.display()
    );
    let out_file = tempfile::NamedTempFile::new().expect("trace file");
    let out = Command::new(strace())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(env.root())
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=execve,clone,clone3,fsync,fdatasync",
            "-o",
        ])
        .arg(out_file.path())
        .args(["sh", "-c", &script])
        .output()
        .expect("strace");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| *l == "written").count(),
        WRITES,
        "every write publishes: {stdout}"
    );
    let trace = std::fs::read_to_string(out_file.path()).expect("read trace");
    // The command each pid runs, from its execve; a thread, or a child before its execve,
    // runs its parent's (from the clone, whose return strace may print after the child's
    // first calls: hence two passes). Then each fsync is charged to its command.
    let calls: Vec<(&str, &str)> = trace
        .lines()
        .filter_map(|line| line.split_once(char::is_whitespace))
        .map(|(pid, call)| (pid, call.trim_start()))
        .collect();
    let mut command = std::collections::HashMap::<&str, &str>::new();
    let mut parent = std::collections::HashMap::<&str, &str>::new();
    for &(pid, call) in &calls {
        if call.starts_with("execve(") {
            let what = ["\"claim\"", "\"write\""]
                .into_iter()
                .find(|w| call.contains(w))
                .unwrap_or("other");
            command.insert(pid, what);
        } else if (call.starts_with("clone") || call.starts_with("<... clone"))
            && !call.contains("<unfinished")
        {
            parent.insert(call.rsplit("= ").next().unwrap_or("").trim(), pid);
        }
    }
    let (mut claims, mut writes, mut other) = (0usize, 0usize, 0usize);
    for &(pid, call) in &calls {
        if call.starts_with("fsync(") || call.starts_with("fdatasync(") {
            let mut of = pid;
            while !command.contains_key(of)
                && let Some(up) = parent.get(of)
            {
                of = up;
            }
            match command.get(of).copied().unwrap_or("other") {
                "\"claim\"" => claims += 1,
                "\"write\"" => writes += 1,
                _ => other += 1,
            }
        }
    }
    assert_eq!(other, 0, "fsyncs by no fencepost process?\n{trace}");
    assert!(claims >= WRITES, "each claim fsyncs its COMMIT\n{trace}");
    let per_write = (writes + claims - WRITES) as f64 / WRITES as f64;
    assert!(
        per_write <= FSYNC_BUDGET,
        "{per_write:.2} fsyncs per fenced write (budget {FSYNC_BUDGET}): the writes made \
         {writes}, the claims {claims} ({WRITES} of them their COMMITs)"
    );
}

/// [`setup`], then 45 claims of other resources while another connection keeps anyone
/// from checkpointing: the WAL is past the size at which a process that opens the state
/// file alone checkpoints it (128 pages).
fn setup_big_wal(env: &Env) -> (i64, Option<(Vec<u8>, i64)>) {
    let done = setup(env, Scenario::Rewrite);
    let holder = DbHolder::start(env, "SELECT count(*) FROM sink");
    for i in 0..45 {
        env.claim(&format!("other/{i}.md"), "O", 10, 15);
    }
    // Killed, it never closes: nothing checkpoints on its way out.
    holder.kill();
    done
}

/// A write that finds the WAL past its checkpoint size, alone, checkpoints it before
/// staging (fsync of the WAL, then of the database file), and its COMMIT starts the WAL
/// over (the header rewritten and fsynced before the frames). An EIO at either
/// checkpoint fsync fails the write with nothing changed; the retry publishes.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_write_that_checkpoints_fails_on_a_checkpoint_fsync_error() {
    let clean_env = Env::new();
    let (epoch, _) = setup_big_wal(&clean_env);
    let args = write_args(epoch);
    let clean = traced(
        &clean_env,
        &["-e", TRACE_FILE_OPS],
        &strs(&args),
        20,
        &new(),
    );
    assert_eq!(clean.code, Some(0), "{}", clean.stderr);
    let trace = dump(&clean.calls);
    let plan = syncs(&clean_env, &clean.calls);
    let s = steps(&clean_env, &clean.calls);
    assert!(
        is_wal(&plan.paths[0]) && plan.paths[1].ends_with("state.db"),
        "no checkpoint before staging: {:?}\n{trace}",
        plan.paths
    );
    assert!(s.temp_sync > 1, "{trace}");
    let header = &clean.calls[s.first_wal_write];
    assert!(
        header.line.ends_with(", 32, 0) = 32"),
        "the COMMIT did not start the WAL over\n{trace}"
    );
    for n in [1, 2] {
        let what = format!("EIO at checkpoint fsync #{n} ({})", plan.paths[n - 1]);
        let env = Env::new();
        let (_, before) = setup_big_wal(&env);
        let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
        let inject = format!("inject=fsync:error=EIO:when={n}");
        let t = traced(
            &env,
            &["-e", "trace=fsync", "-e", &inject],
            &strs(&args),
            20,
            &new(),
        );
        assert_eq!(t.code, Some(1), "{what}: {}", t.stderr);
        assert_eq!(t.stdout, "", "{what}");
        assert!(t.stderr.contains("I/O error"), "{what}: {}", t.stderr);
        assert_consistent(&env, RES, Some(21), before, &what);
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
        let retry = env.fp(&strs(&args)).now(22).stdin(new()).expect(0);
        assert_eq!(retry.stdout.trim(), "written", "{what}");
        assert_consistent(&env, RES, Some(23), Some((&new(), epoch)), &what);
    }
}

/// The pid of a process holding a POSIX lock on byte `at` of `path` that a write lock
/// would conflict with, as `F_GETLK` reports it.
fn lock_holder(path: &std::path::Path, at: i64) -> Option<i32> {
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;
    let file = std::fs::File::open(path).expect("open");
    let mut lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: at,
        l_len: 1,
        l_pid: 0,
    };
    fcntl(&file, FcntlArg::F_GETLK(&mut lock)).expect("F_GETLK");
    (lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_pid)
}

/// A process with the state file open keeps SQLite's lock on the WAL index (the byte at
/// 128 of `-shm`) all along, also when it looked at the index and the state file to
/// decide on a checkpoint: closing any descriptor of a file drops all of the process's
/// POSIX locks on it. Without that lock the next process takes itself for the first,
/// resets the index under the open one, and that one dies of SIGBUS or reads a reset
/// index. Checked with a small WAL and with one past the checkpoint size.
#[test]
fn an_open_store_keeps_its_lock_on_the_wal_index() {
    for big in [false, true] {
        let env = Env::new();
        let (epoch, _) = if big {
            setup_big_wal(&env)
        } else {
            setup(&env, Scenario::Rewrite)
        };
        let e = epoch.to_string();
        let paused = crate::support::spawn_paused(
            &env,
            &["write", RES, "--epoch", &e],
            Some(20),
            &new(),
            "write.before_lock",
        );
        let index = env.path(".fencepost/state.db-shm");
        assert_eq!(
            lock_holder(&index, 128),
            i32::try_from(paused.pid).ok(),
            "big WAL {big}: the paused writer does not hold its lock on the WAL index"
        );
        // Another process opens the state file, commits and closes meanwhile.
        env.claim("other.md", "O", 10, 20);
        let out = paused.resume();
        assert_eq!(out.status.code(), Some(0), "big WAL {big}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "written");
        assert_consistent(&env, RES, Some(21), Some((&new(), epoch)), "resumed");
    }
}

/// Content of `len` bytes that differs at every offset from `seed`'s (a document that
/// spans several `copy_file_range` calls, each asked for at most 8 MiB).
fn big_content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

/// `--from` a regular file is copied in the kernel (`copy_file_range`). Where the kernel
/// refuses (EXDEV across filesystems, EINVAL, ENOSYS, EOPNOTSUPP), at the first call or
/// after part of the file was copied, the rest goes through the read/write loop and the
/// write publishes the exact bytes with their hash. Any other error (EIO) fails the
/// write, changes nothing and leaves no file behind.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_refused_kernel_copy_falls_back_and_a_failed_one_fails_the_write() {
    let big = big_content((9 << 20) + 5, 0);
    let small = new();
    let cases = [
        ("EXDEV", 1, &big),
        ("EXDEV", 2, &big),
        ("EINVAL", 1, &big),
        ("EINVAL", 2, &big),
        ("ENOSYS", 1, &small),
        ("EOPNOTSUPP", 2, &big),
        ("EIO", 1, &small),
        ("EIO", 2, &big),
    ];
    for (errno, when, content) in cases {
        let what = format!(
            "{errno} at copy_file_range #{when}, {} bytes",
            content.len()
        );
        let env = Env::new();
        let (epoch, before) = setup(&env, Scenario::Rewrite);
        std::fs::write(env.path("src.bin"), content).expect("source");
        let inject = format!("inject=copy_file_range:error={errno}:when={when}");
        let e = epoch.to_string();
        let t = traced(
            &env,
            &["-e", "trace=copy_file_range", "-e", &inject],
            &["--json", "write", RES, "--epoch", &e, "--from", "src.bin"],
            20,
            b"",
        );
        assert_eq!(
            t.calls.iter().filter(|c| c.injected()).count(),
            1,
            "{what}: not injected\n{}",
            dump(&t.calls)
        );
        if errno == "EIO" {
            assert_eq!(t.code, Some(1), "{what}: {}", t.stderr);
            assert!(
                t.stderr.contains("cannot copy the content"),
                "{what}: {}",
                t.stderr
            );
            let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
            assert_consistent(&env, RES, Some(21), before, &what);
        } else {
            assert_eq!(t.code, Some(0), "{what}: {}", t.stderr);
            let j: serde_json::Value = serde_json::from_str(&t.stdout).expect("json");
            assert_eq!(j["sha256"], crate::support::sha256_hex(content), "{what}");
            assert_eq!(j["size"], content.len(), "{what}");
            assert_consistent(&env, RES, Some(21), Some((content, epoch)), &what);
            // Refused once, the kernel copy is not asked again.
            let after = t.calls.iter().skip_while(|c| !c.injected()).skip(1).count();
            assert_eq!(
                after,
                0,
                "{what}: copy_file_range again\n{}",
                dump(&t.calls)
            );
        }
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
    }
}

/// `--from` a FIFO (a pipe) is read as a stream, never offered to the kernel copy, and
/// an empty regular file publishes an empty document.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn from_a_pipe_or_an_empty_file_is_read_as_a_stream() {
    let env = Env::new();
    let (epoch, _) = setup(&env, Scenario::Rewrite);
    let fifo = env.path("src.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let content = big_content(9 << 20, 7);
    let feeder = {
        let (fifo, content) = (fifo.clone(), content.clone());
        std::thread::spawn(move || std::fs::write(fifo, content).expect("feed the fifo"))
    };
    let e = epoch.to_string();
    let t = traced(
        &env,
        &["-e", "trace=copy_file_range"],
        &["--json", "write", RES, "--epoch", &e, "--from", "src.fifo"],
        20,
        b"",
    );
    feeder.join().expect("feeder");
    assert_eq!(t.code, Some(0), "{}", t.stderr);
    assert!(
        t.calls.is_empty(),
        "a pipe offered to copy_file_range\n{}",
        dump(&t.calls)
    );
    let j: serde_json::Value = serde_json::from_str(&t.stdout).expect("json");
    assert_eq!(j["sha256"], crate::support::sha256_hex(&content));
    assert_consistent(&env, RES, Some(21), Some((&content, epoch)), "from a fifo");

    let e = env.claim(RES, "C", 10, 200).to_string();
    std::fs::write(env.path("empty"), b"").expect("empty source");
    let done = env
        .fp(&[
            "--json",
            "write",
            RES,
            "--epoch",
            &e,
            "--from",
            "empty",
            "--allow-empty",
        ])
        .now(201)
        .expect(0);
    assert_eq!(done.json()["size"], 0);
    assert_eq!(env.read(RES).as_deref(), Some(&b""[..]));
}

/// A `--from` file rewritten or truncated while it is being copied (the copy paused after
/// its first 8 MiB): the record's hash is the hash of the bytes published, whatever mix
/// of old and new the copy staged, and `verify` finds the document and record agree.
#[test]
fn a_source_changed_mid_copy_is_recorded_as_published() {
    for change in ["rewrite", "truncate"] {
        let env = Env::new();
        let (epoch, _) = setup(&env, Scenario::Rewrite);
        let len = (9 << 20) + 5;
        std::fs::write(env.path("src.bin"), big_content(len, 0)).expect("source");
        let e = epoch.to_string();
        let paused = crate::support::spawn_paused(
            &env,
            &["--json", "write", RES, "--epoch", &e, "--from", "src.bin"],
            Some(20),
            b"",
            "write.copying",
        );
        let src = std::fs::OpenOptions::new()
            .write(true)
            .open(env.path("src.bin"))
            .expect("open the source");
        match change {
            "rewrite" => std::io::Write::write_all(&mut &src, &big_content(len, 0x5a)),
            _ => src.set_len(4 << 20),
        }
        .expect("change the source");
        drop(src);
        let out = paused.resume();
        assert_eq!(out.status.code(), Some(0), "{change}: {out:?}");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let doc = env.read(RES).expect("document");
        assert_eq!(j["sha256"], crate::support::sha256_hex(&doc), "{change}");
        assert_eq!(j["size"], doc.len(), "{change}");
        assert!(
            doc.starts_with(&big_content(8 << 20, 0)),
            "{change}: first 8 MiB"
        );
        assert_consistent(&env, RES, Some(21), Some((&doc, epoch)), change);
        env.fp(&["verify"]).now(22).expect(0);
    }
}

/// The thread id strace (`-f`) puts before a call.
fn tid(call: &Call) -> &str {
    call.line.split_whitespace().next().unwrap_or("")
}

/// For strace's `-E`: a small `--from` write fsyncs on its second thread whatever the
/// machine's load (a build with failpoints reads this; see `cpu_to_spare` in the write).
const OVERLAP_ALWAYS: &str = "FENCEPOST_TEST_OVERLAP=always";

/// `write_args` with the content in a file beside the root (`--from`), not stdin.
fn from_args(epoch: i64, content: &std::path::Path) -> Vec<String> {
    let mut args = write_args(epoch);
    args.extend(["--from".into(), content.display().to_string()]);
    args
}

/// A small `--from` file's fsync runs on a second thread while the first opens the state
/// file: the promise of the order above holds all the same, the COMMIT is the first
/// thread's, after the staged file's fsync, and a new WAL's folder is fsynced before it.
/// On a build that stages after opening the state file, one thread does everything and
/// this fails.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_small_from_writes_fsync_runs_on_a_second_thread_while_the_state_file_opens() {
    for (scenario, wal) in [Scenario::First, Scenario::Rewrite]
        .into_iter()
        .flat_map(|s| WALS.map(|w| (s, w)))
    {
        let what = format!("{scenario:?}, {wal:?}");
        let env = Env::new();
        let (epoch, _) = setup_wal(&env, scenario, wal);
        let content = tempfile::NamedTempFile::new().expect("content file");
        std::fs::write(content.path(), new()).expect("content");
        let args = from_args(epoch, content.path());
        // Each fsync is held 50 ms on its way in: a write that linked or renamed before
        // the temp file's fsync returned would do so inside that time.
        let t = traced(
            &env,
            &[
                "-E",
                OVERLAP_ALWAYS,
                "-e",
                &format!("{TRACE_FILE_OPS},openat"),
                "-e",
                "inject=fsync:delay_enter=50000",
            ],
            &strs(&args),
            20,
            b"",
        );
        assert_eq!(t.code, Some(0), "{what}: {}", t.stderr);
        assert_eq!(t.stdout.trim(), "written", "{what}");
        let s = steps(&env, &t.calls);
        let trace = dump(&t.calls);
        let opens_state = t
            .calls
            .iter()
            .find(|c| c.name == "openat" && c.line.contains("/.fencepost/state.db\""))
            .unwrap_or_else(|| panic!("{what}: the state file is not opened\n{trace}"));
        let (stager, committer) = (tid(&t.calls[s.temp_sync]), tid(&t.calls[s.commit_sync]));
        assert_ne!(
            stager, committer,
            "{what}: the content is staged by the thread that commits\n{trace}"
        );
        assert_eq!(tid(opens_state), committer, "{what}\n{trace}");
        assert!(
            t.calls[s.temp_sync].returned <= s.new_link,
            "{what}: linked before the temp file's fsync returned\n{trace}"
        );
        assert!(
            s.temp_sync < s.new_link
                && s.new_link < s.rename
                && s.rename < s.dir_sync
                && s.dir_sync < s.first_wal_write
                && s.frames < s.commit_sync,
            "{what}: the order of a write\n{trace}"
        );
        if wal == Wal::New {
            let state_dir = canonical(&env).join(".fencepost");
            let synced = t.calls[..s.commit_sync]
                .iter()
                .any(|c| c.is_sync() && c.fd_path() == state_dir.to_str());
            assert!(
                synced,
                "{what}: the new WAL's folder is not fsynced\n{trace}"
            );
        }
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}");
        assert_consistent(&env, RES, Some(21), Some((&new(), epoch)), &what);
    }
}

/// The staged file's fsync failing on the second thread fails the write (exit 1) with
/// nothing changed and no temp file left, and the same write then succeeds.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_failed_fsync_on_the_second_thread_fails_the_write() {
    for scenario in [Scenario::First, Scenario::Rewrite] {
        let what = format!("{scenario:?}");
        let env = Env::new();
        let (epoch, before) = setup_wal(&env, scenario, Wal::Kept);
        let content = tempfile::NamedTempFile::new().expect("content file");
        std::fs::write(content.path(), new()).expect("content");
        let args = from_args(epoch, content.path());
        // With the WAL kept, the first fsync of the write is the temp file's, whether
        // strace counts the calls per thread or per process.
        let t = traced(
            &env,
            &[
                "-E",
                OVERLAP_ALWAYS,
                "-e",
                "trace=fsync,clone,clone3",
                "-e",
                "inject=fsync:error=EIO:when=1",
            ],
            &strs(&args),
            20,
            b"",
        );
        let hit: Vec<&Call> = t.calls.iter().filter(|c| c.injected()).collect();
        assert_eq!(hit.len(), 1, "{what}\n{}", dump(&t.calls));
        // A thread the write started ("clone3(...) = TID") is the one whose fsync failed:
        // not the first thread (the other started thread watches signals).
        let started: Vec<&str> = t
            .calls
            .iter()
            .filter(|c| c.name.starts_with("clone"))
            .filter_map(|c| c.line.rsplit("= ").next())
            .map(str::trim)
            .collect();
        assert!(
            started.contains(&tid(hit[0])),
            "{what}: the failed fsync is not the second thread's\n{}",
            dump(&t.calls)
        );
        assert!(
            hit[0]
                .fd_path()
                .is_some_and(|p| p.contains(".doc.md.fencepost-tmp-")),
            "{what}: the failed fsync is not the temp file's\n{}",
            dump(&t.calls)
        );
        assert_eq!(t.code, Some(1), "{what}: {}", t.stderr);
        assert_eq!(t.stdout, "", "{what}");
        assert!(
            t.stderr.contains("Input/output error"),
            "{what}: {}",
            t.stderr
        );
        let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
        assert_consistent(&env, RES, Some(21), before, &what);
        assert_eq!(tool_files(&env), Vec::<String>::new(), "{what}: leftovers");
        let retry = env.fp(&strs(&args)).now(22).expect(0);
        assert_eq!(retry.stdout.trim(), "written", "{what}");
        assert_consistent(&env, RES, Some(23), Some((&new(), epoch)), &what);
    }
}

/// Runs a small `--from` write that must be refused, as stale (a newer epoch was issued)
/// and as unissued (an epoch never issued), on the overlapped path, under strace with
/// `strace_args`. `staged` checks each trace for how far the bytes got; every run must
/// give its refusal, leave no temp file and change nothing. `setup`: the epoch and
/// document of the scenario.
fn refused_small_from_writes(
    env: &Env,
    setup: (i64, Option<(Vec<u8>, i64)>),
    strace_args: &[&str],
    staged: impl Fn(&Traced, &str),
) {
    let (epoch, before) = setup;
    let before = before.as_ref().map(|(b, e)| (b.as_slice(), *e));
    let content = tempfile::NamedTempFile::new().expect("content file");
    std::fs::write(content.path(), new()).expect("content");
    let newer = env.claim(RES, "other", 100, 200);
    assert!(newer > epoch);
    for (epoch, code, answer) in [(epoch, 5, "stale"), (newer + 5, 8, "unissued")] {
        let args = from_args(epoch, content.path());
        let t = traced(
            env,
            &[&["-E", OVERLAP_ALWAYS], strace_args].concat(),
            &strs(&args),
            201,
            b"",
        );
        staged(&t, answer);
        assert_eq!(t.code, Some(code), "{answer}: {}", t.stderr);
        assert!(t.stderr.contains(answer), "{answer}: {}", t.stderr);
        assert_eq!(tool_files(env), Vec::<String>::new(), "{answer}: leftovers");
        assert_eq!(env.read(RES).as_deref(), before.map(|(b, _)| b), "{answer}");
    }
}

/// A small `--from` write refused early (stale: a newer epoch was issued; unissued: an
/// epoch never issued) gives its refusal, not whatever staging did meanwhile, and leaves
/// neither a temp file nor a change.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_small_from_write_refused_early_leaves_nothing_behind() {
    let env = Env::new();
    let setup = setup(&env, Scenario::Rewrite);
    refused_small_from_writes(&env, setup, &["-e", "trace=openat"], |t, answer| {
        assert!(
            t.calls
                .iter()
                .any(|c| c.line.contains(".doc.md.fencepost-tmp-")),
            "{answer}: nothing was staged before the refusal\n{}",
            dump(&t.calls)
        );
    });
}

/// A small `--from` write that would be refused, and whose staged file's fsync fails on
/// the second thread, gives its refusal, as the plain path does (it refuses before it
/// stages): the early answer, read while the fsync runs, wins over how far the bytes got.
/// Nothing changes and no temp file is left.
#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_refusal_wins_over_a_failed_fsync_of_a_small_from_write() {
    let env = Env::new();
    let setup = setup_wal(&env, Scenario::Rewrite, Wal::Kept);
    // With the WAL kept, the second thread's first fsync is the temp file's. strace counts
    // calls per thread, so the first thread's first fsync fails too: the COMMIT that logs
    // the refusal, which is best effort and changes no answer.
    let inject = ["-e", "trace=fsync", "-e", "inject=fsync:error=EIO:when=1"];
    refused_small_from_writes(&env, setup, &inject, |t, answer| {
        assert!(
            t.calls.iter().any(|c| c.injected()
                && c.fd_path()
                    .is_some_and(|p| p.contains(".doc.md.fencepost-tmp-"))),
            "{answer}: the temp file's fsync did not fail\n{}",
            dump(&t.calls)
        );
    });
}
