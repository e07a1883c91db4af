//! A small builder over `assert_cmd`: each [`Env`] owns a temp publish root, each
//! [`Run`] is one `fencepost` process with a cleared environment, and `expect` asserts
//! the exit code, stdout and stderr together.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

/// The binary under test.
pub(crate) fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fencepost"))
}

/// Where test folders are made: the build's own temp folder, not the system's, because a
/// publish root made in `/tmp` by anyone (a `.fencepost/` there) would enclose every root
/// the tests make, and roots do not nest.
pub(crate) fn scratch() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

/// A scratch publish root, removed when dropped.
pub(crate) struct Env {
    dir: TempDir,
}

impl Env {
    pub(crate) fn new() -> Env {
        Env::new_in(scratch())
    }

    /// A scratch folder made a publish root up front (`fencepost init`), for a test whose
    /// first claim's stderr is about something other than the root it would make.
    pub(crate) fn with_root() -> Env {
        let env = Env::new();
        env.fp(&["init"]).expect(0);
        env
    }

    /// A scratch publish root in `parent` (a folder of a given file system).
    pub(crate) fn new_in(parent: &Path) -> Env {
        Env {
            dir: tempfile::Builder::new()
                .prefix("fencepost-test-")
                .tempdir_in(parent)
                .expect("temp dir"),
        }
    }

    /// The publish root.
    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A path inside the root.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// The document's bytes, or None if absent.
    pub(crate) fn read(&self, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(rel)).ok()
    }

    /// The document as text; panics if absent.
    #[track_caller]
    pub(crate) fn text(&self, rel: &str) -> String {
        let Some(bytes) = self.read(rel) else {
            panic!("{rel} is absent");
        };
        String::from_utf8(bytes).expect("utf-8 document")
    }

    /// Every file name under the root (recursively, relative), excluding `.fencepost/`.
    pub(crate) fn files(&self) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("read_dir") {
                let entry = entry.expect("entry");
                let path = entry.path();
                let rel = path
                    .strip_prefix(base)
                    .expect("prefix")
                    .to_string_lossy()
                    .into_owned();
                if rel == ".fencepost" {
                    continue;
                }
                if entry.file_type().expect("type").is_dir() {
                    walk(base, &path, out);
                } else {
                    out.push(rel);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root(), self.root(), &mut out);
        out.sort();
        out
    }

    /// A `fencepost` invocation with `--root` set to this env.
    pub(crate) fn fp(&self, args: &[&str]) -> Run {
        Run {
            root: self.root().to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            now: None,
            stdin: Vec::new(),
            env: Vec::new(),
            umask: None,
            inside: None,
        }
    }

    /// Shorthand: claim at tick `now`, asserting success, returning the epoch.
    #[track_caller]
    pub(crate) fn claim(&self, res: &str, owner: &str, ttl: i64, now: i64) -> i64 {
        let out = self
            .fp(&["claim", res, "--owner", owner, "--ttl", &ttl.to_string()])
            .now(now)
            .expect(0);
        out.stdout.trim().parse().expect("claim prints an epoch")
    }

    /// Shorthand: write `content` with `epoch` at tick `now`, asserting the exit code.
    #[track_caller]
    pub(crate) fn write(&self, res: &str, epoch: i64, content: &str, now: i64, code: i32) -> Done {
        self.fp(&["write", res, "--epoch", &epoch.to_string()])
            .now(now)
            .stdin(content)
            .expect(code)
    }
}

/// How the line starts that a command prints on stderr when it makes a new publish root.
pub(crate) const NEW_ROOT: &str = "fencepost: made a new publish root: ";

/// One process to run.
#[must_use = "a Run does nothing until expect() is called"]
pub(crate) struct Run {
    root: PathBuf,
    args: Vec<String>,
    now: Option<i64>,
    stdin: Vec<u8>,
    env: Vec<(String, String)>,
    umask: Option<u32>,
    /// Run in this folder without `--root`: the root is found from it.
    inside: Option<PathBuf>,
}

/// A finished process.
#[derive(Debug)]
pub(crate) struct Done {
    /// The exit code, or -1 when a signal ended the process (`signal` says which).
    pub code: i32,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Done {
    /// stdout parsed as the one JSON object `--json` promises.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        match serde_json::from_str(self.stdout.trim()) {
            Ok(value) => value,
            Err(e) => panic!("stdout is not one JSON object ({e}): {:?}", self.stdout),
        }
    }

    /// The `--json` contract: stdout is exactly one line holding one JSON object with at
    /// least `outcome`, `resource` and `epoch`. Returns the object.
    #[track_caller]
    pub(crate) fn json_contract(&self) -> Value {
        assert_eq!(
            self.stdout.lines().count(),
            1,
            "--json must print exactly one line: {:?}",
            self.stdout
        );
        let j = self.json();
        let Some(obj) = j.as_object() else {
            panic!("not a JSON object: {j}");
        };
        for key in ["outcome", "resource", "epoch"] {
            assert!(obj.contains_key(key), "--json object lacks {key:?}: {j}");
        }
        assert!(j["outcome"].is_string(), "outcome is not a string: {j}");
        j
    }
}

impl Run {
    /// Sets the logical clock (`--now`).
    pub(crate) fn now(mut self, now: i64) -> Run {
        self.now = Some(now);
        self
    }

    pub(crate) fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Run {
        self.stdin = bytes.into();
        self
    }

    /// Runs with another `--root` (e.g. a folder inside this env).
    pub(crate) fn root(mut self, root: &Path) -> Run {
        self.root = root.to_path_buf();
        self
    }

    pub(crate) fn env(mut self, key: &str, value: &str) -> Run {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs in `dir` as the current folder, without `--root`, as a user at a shell would:
    /// the root is the nearest folder from `dir` up holding `.fencepost/`.
    pub(crate) fn inside(mut self, dir: &Path) -> Run {
        self.inside = Some(dir.to_path_buf());
        self
    }

    /// Runs the process under this umask (through `sh -c 'umask M; exec ...'`).
    pub(crate) fn umask(mut self, mask: u32) -> Run {
        self.umask = Some(mask);
        self
    }

    /// Runs without asserting.
    pub(crate) fn output(self) -> Done {
        let mut cmd = match self.umask {
            None => Command::new(bin()),
            Some(mask) => {
                let mut sh = Command::new("/bin/sh");
                sh.arg("-c")
                    .arg(format!("umask {mask:03o} && exec \"$0\" \"$@\""))
                    .arg(bin());
                sh
            }
        };
        cmd.env_clear();
        match &self.inside {
            Some(dir) => cmd.current_dir(dir),
            None => cmd.current_dir(&self.root).arg("--root").arg(&self.root),
        };
        if let Some(now) = self.now {
            cmd.arg("--now").arg(now.to_string());
        }
        cmd.args(&self.args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let out: Output = cmd.write_stdin(self.stdin).output().expect("run fencepost");
        Done {
            code: out.status.code().unwrap_or(-1),
            signal: std::os::unix::process::ExitStatusExt::signal(&out.status),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs and asserts the exit code. A success must be silent on stderr; a failure must
    /// say one `fencepost: ` line (and maybe a `hint:` line) on stderr. The line of a
    /// first claim that made its root ([`NEW_ROOT`]) is news rather than noise, so these
    /// checks pass over it (tests of it read `stderr`). A failed assertion points at the
    /// test that called it.
    #[track_caller]
    pub(crate) fn expect(self, code: i32) -> Done {
        let what = format!("fencepost {}", self.args.join(" "));
        let done = self.output();
        assert_eq!(
            done.code, code,
            "{what}: exit {} (wanted {code})\nstdout: {}\nstderr: {}",
            done.code, done.stdout, done.stderr
        );
        let said: Vec<&str> = done
            .stderr
            .lines()
            .filter(|line| !line.starts_with(NEW_ROOT))
            .collect();
        if code == 0 {
            assert_eq!(said, [] as [&str; 0], "{what}: stderr on success");
        } else {
            let lines = said;
            let shaped = match lines.as_slice() {
                [first] => first.starts_with("fencepost: "),
                [first, hint] => first.starts_with("fencepost: ") && hint.starts_with("hint: "),
                _ => false,
            };
            assert!(
                shaped,
                "{what}: stderr must be one 'fencepost: ' line and at most a 'hint:' line: {:?}",
                done.stderr
            );
        }
        done
    }

    /// Runs and asserts the exit code and the exact stdout (trimmed).
    #[track_caller]
    pub(crate) fn expect_stdout(self, code: i32, stdout: &str) -> Done {
        let done = self.expect(code);
        assert_eq!(done.stdout.trim(), stdout, "stdout");
        done
    }
}
