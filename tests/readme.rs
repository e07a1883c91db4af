//! The README's commands and recipes, run as written against this build: its first two
//! lines, the quick start, the scripting recipes, the cron line and the systemd unit's
//! command and stop. Only what cannot exist here is swapped for a stand-in: `/srv/publish`
//! becomes a temp folder, and the report generators are small scripts. Its Rust example
//! is the doctest that opens the crate's documentation, which `cargo test` runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::harness::{self, Env};
use crate::package::{seconds, setting, settings};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md")
}

/// The fenced blocks of the README whose info string is `lang`, in order.
fn blocks(lang: &str) -> Vec<String> {
    let text = readme();
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line == format!("```{lang}") => current = Some(String::new()),
            Some(_) if line == "```" => found.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    found
}

/// The one block of `lang` that contains `marker`.
fn block(lang: &str, marker: &str) -> String {
    let mut matching = blocks(lang).into_iter().filter(|b| b.contains(marker));
    let found = matching
        .next()
        .unwrap_or_else(|| panic!("no ```{lang} block with {marker:?} in README.md"));
    assert!(matching.next().is_none(), "two blocks with {marker:?}");
    found
}

/// A folder of programs for the recipes: `fencepost` (this build) and the stand-ins.
struct Tools {
    dir: tempfile::TempDir,
    /// PATH: the folder, then the system's; or, for the installed package, cron's alone.
    path: String,
}

impl Tools {
    fn new() -> Tools {
        let tools = Tools::stand_ins(None);
        std::os::unix::fs::symlink(harness::bin(), tools.path("fencepost")).expect("symlink");
        tools
    }

    /// The stand-ins alone, and cron's PATH, `/usr/bin:/bin`: `fencepost` is the one the
    /// Debian package installed (the recipes name the stand-ins by their full paths).
    fn installed() -> Tools {
        crate::support::needs::package();
        Tools::stand_ins(Some("/usr/bin:/bin"))
    }

    fn stand_ins(path: Option<&str>) -> Tools {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = path.map_or_else(
            || format!("{}:/usr/bin:/bin", dir.path().display()),
            str::to_string,
        );
        let tools = Tools { dir, path };
        // The README's report generator: three lines of report.
        tools.script("render-report", "#!/bin/sh\nprintf 'rows\\n1\\n2\\n'\n");
        // The cron line's and the unit's job: render to a file, publish it.
        tools.script(
            "publish-daily",
            "#!/bin/sh\nset -eu\nout=$(mktemp)\ntrap 'rm -f \"$out\"' EXIT\n\
             echo 'the daily numbers' > \"$out\"\n\
             fencepost -q write \"$FENCEPOST_RESOURCE\" --from \"$out\"\n",
        );
        tools
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn script(&self, name: &str, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path(name);
        std::fs::write(&path, text).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// PATH with these tools first (none for the installed package).
    fn path_env(&self) -> String {
        self.path.clone()
    }

    /// `bash -c SCRIPT` in `cwd` with a clean environment and these tools on PATH.
    fn bash(&self, script: &str, cwd: &Path, tmp: &Path) -> Output {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .env_clear()
            .env("PATH", self.path_env())
            .env("TMPDIR", tmp)
            .env("HOME", tmp)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .output()
            .expect("run bash")
    }
}

#[track_caller]
fn succeeded(out: &Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

#[test]
fn the_first_command_builds_a_plain_fencepost_and_the_reproduction_its_own() {
    let first = blocks("sh").into_iter().next().expect("a first block");
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(
        lines,
        [
            "cargo build --release --locked && fixtures/reproduce.sh",
            "cargo test --locked --all-features",
        ],
        "the README's first two lines changed: check that they still build a plain \
         fencepost, reproduce the experiment, and run the tests"
    );
    // Nothing of the failpoints build reaches the binary a user installs.
    assert!(!lines[0].contains("failpoints") && !lines[0].contains("FENCEPOST="));
}

#[test]
fn the_quick_start_runs_as_written() {
    quick_start(&Tools::new(), "fencepost");
}

#[test]
#[cfg_attr(
    fp_missing = "package",
    ignore = "needs fencepost installed by its package (tools/deb.sh, then apt install ./target/debian/fencepost_*.deb)"
)]
fn the_quick_start_runs_as_written_with_the_installed_package() {
    quick_start(&Tools::installed(), "/usr/bin/fencepost");
}

/// The Quick start, run by `tools`, whose `fencepost` is `program`.
fn quick_start(tools: &Tools, program: &str) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tools.bash(
        &format!("set -euo pipefail\n{}", block("sh", "cd \"$(mktemp -d)\"")),
        tmp.path(),
        tmp.path(),
    );
    let (stdout, _) = succeeded(&out);
    assert!(stdout.contains("written"), "{stdout}");
    assert!(stdout.contains("reports/daily.md"), "status: {stdout}");
    assert!(stdout.contains("complete e1"), "timeline: {stdout}");
    let out = tools.bash("command -v fencepost", tmp.path(), tmp.path());
    let (found, _) = succeeded(&out);
    assert!(found.trim_end().ends_with(program), "{found}");
}

/// The scripting recipe with its root in `root`.
fn scripting_recipe(root: &Path) -> String {
    block("sh", "Take the job").replace("/srv/publish", &root.display().to_string())
}

#[test]
fn the_scripting_recipe_publishes_and_leaves_quietly_when_held() {
    let tools = Tools::new();
    let env = Env::new();
    let tmp = tempfile::tempdir().expect("temp dir");
    let recipe = scripting_recipe(env.root());
    let out = tools.bash(&recipe, tmp.path(), tmp.path());
    let (stdout, stderr) = succeeded(&out);
    assert_eq!(env.text("reports/daily.md"), "rows\n1\n2\n");
    assert_eq!((&*stdout, &*stderr), ("written\ncompleted\n", ""));
    let j = env
        .fp(&["--json", "status", "reports/daily.md"])
        .expect(0)
        .json();
    assert_eq!(j["resources"][0]["lease"]["result"], "rows=3");
    // Another worker holds it: the recipe leaves, and says nothing cron would mail.
    env.fp(&[
        "claim",
        "reports/daily.md",
        "--owner",
        "other",
        "--ttl",
        "1h",
    ])
    .expect(0);
    let out = tools.bash(&recipe, tmp.path(), tmp.path());
    let (stdout, stderr) = succeeded(&out);
    assert_eq!((&*stdout, &*stderr), ("", ""));
}

#[test]
fn the_refusal_branch_recipe_drops_a_stale_result() {
    let tools = Tools::new();
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.claim("doc.md", "B", 10, 10);
    std::fs::write(env.path("out"), "late\n").expect("write");
    let recipe = block("sh", "rc=0; fencepost write \"$res\"");
    let script = format!(
        "set -euo pipefail\nexport FENCEPOST_ROOT=. FENCEPOST_NOW=11\nres=doc.md epoch=1\n{recipe}"
    );
    let out = tools.bash(&script, env.root(), env.root());
    let (stdout, stderr) = succeeded(&out);
    assert_eq!(stdout, "stale\n");
    assert!(
        stderr.ends_with("taken over; dropping my result\n"),
        "{stderr}"
    );
    assert_eq!(env.read("doc.md"), None);
}

#[test]
fn the_run_recipe_publishes_through_the_command() {
    let tools = Tools::new();
    let env = Env::new();
    let out = tools.bash(
        &block("sh", "fencepost run reports/daily.md"),
        env.root(),
        env.root(),
    );
    let (stdout, _) = succeeded(&out);
    assert_eq!(stdout, "written\n");
    assert_eq!(env.text("reports/daily.md"), "rows\n1\n2\n");
}

/// The cron line's command (its five time fields dropped), with its root in `root` and
/// its job from `tools`.
fn cron_command(root: &Path, tools: &Tools) -> String {
    let lines = block("crontab", "run reports/daily.md");
    let line = lines.lines().next().expect("a cron line");
    let command = line.splitn(6, ' ').nth(5).expect("five time fields");
    command
        .replace("/srv/publish", &root.display().to_string())
        .replace(
            "/usr/local/bin/publish-daily",
            &tools.path("publish-daily").display().to_string(),
        )
}

/// Runs a command as cron does: `/bin/sh -c`, a bare environment, stdin `/dev/null`.
fn as_cron(command: &str, tools: &Tools, home: &Path) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .env_clear()
        .env("PATH", tools.path_env())
        .env("SHELL", "/bin/sh")
        .env("HOME", home)
        .env("LOGNAME", "root")
        .current_dir(home)
        .stdin(Stdio::null())
        .output()
        .expect("run sh")
}

#[test]
fn the_cron_line_publishes_and_is_silent_when_another_host_has_the_lease() {
    cron_line(&Tools::new());
}

/// The cron line as cron runs it, `PATH=/usr/bin:/bin` and nothing else: where `cargo
/// install` puts fencepost (`~/.cargo/bin`) it fails with exit 127, `fencepost: not found`.
#[test]
#[cfg_attr(
    fp_missing = "package",
    ignore = "needs fencepost installed by its package (tools/deb.sh, then apt install ./target/debian/fencepost_*.deb)"
)]
fn the_cron_line_runs_with_crons_path_and_the_installed_package() {
    cron_line(&Tools::installed());
}

/// The cron line run by `tools` wins the lease, publishes and says nothing; then it loses
/// the race, still exits 0 and still says nothing.
fn cron_line(tools: &Tools) {
    let env = Env::new();
    let command = cron_command(env.root(), tools);
    let out = as_cron(&command, tools, env.root());
    let (stdout, stderr) = succeeded(&out);
    // Anything printed would be mailed.
    assert_eq!((&*stdout, &*stderr), ("", ""));
    assert_eq!(env.text("reports/daily.md"), "the daily numbers\n");
    // Lost the race: still exit 0, and silent.
    env.fp(&[
        "claim",
        "reports/daily.md",
        "--owner",
        "other-host",
        "--ttl",
        "1h",
    ])
    .expect(0);
    let out = as_cron(&command, tools, env.root());
    let (stdout, stderr) = succeeded(&out);
    assert_eq!((&*stdout, &*stderr), ("", ""));
}

/// The README unit's `[Service]` settings, in order.
fn unit() -> Vec<(String, String)> {
    settings(&block("ini", "[Service]"), "Service")
}

/// The unit's ExecStart, as systemd would run it here: its words (it quotes nothing),
/// with `%H` the host name and the paths of this test.
fn exec_start(unit: &[(String, String)], tools: &Tools, root: &Path) -> Command {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let line = setting(unit, "ExecStart")
        .replace("%H", host.trim())
        .replace("/usr/bin/fencepost", &harness::bin().display().to_string())
        .replace(
            "/usr/local/bin/publish-daily",
            &tools.path("publish-daily").display().to_string(),
        );
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut command = Command::new(words[0]);
    command
        .args(&words[1..])
        .env_clear()
        .env("PATH", tools.path_env());
    let environment = setting(unit, "Environment");
    let (key, value) = environment.split_once('=').expect("KEY=VALUE");
    command.env(
        key,
        value.replace("/srv/publish", &root.display().to_string()),
    );
    command.current_dir("/").stdin(Stdio::null());
    command
}

#[test]
fn the_systemd_units_command_publishes_and_stops_as_the_unit_says() {
    let tools = Tools::new();
    let env = Env::new();
    let unit = unit();
    let out = exec_start(&unit, &tools, env.root())
        .output()
        .expect("run ExecStart");
    succeeded(&out);
    assert_eq!(env.text("reports/daily.md"), "the daily numbers\n");

    // TimeoutStopSec must leave run the time of its own --grace.
    let exec = setting(&unit, "ExecStart");
    let grace = exec
        .split_whitespace()
        .skip_while(|w| *w != "--grace")
        .nth(1)
        .expect("ExecStart gives --grace");
    assert!(
        seconds(&setting(&unit, "TimeoutStopSec")) > seconds(grace),
        "TimeoutStopSec is not above --grace"
    );
    assert_eq!(setting(&unit, "KillMode"), "mixed");

    // `systemctl stop` with KillMode=mixed: SIGTERM to run alone. run passes it on to the
    // job, which ends, the lease is released, and run dies by SIGTERM: a clean stop for
    // systemd, which for a oneshot needs SuccessExitStatus to say so.
    if setting(&unit, "Type") == "oneshot" {
        assert!(
            setting(&unit, "SuccessExitStatus")
                .split_whitespace()
                .any(|s| s == "SIGTERM"),
            "a oneshot unit whose run dies by SIGTERM on stop needs SuccessExitStatus=SIGTERM"
        );
    }
    tools.script(
        "publish-daily",
        "#!/bin/sh\necho started > \"$FENCEPOST_ROOT/started\"\nexec sleep 100\n",
    );
    let run = exec_start(&unit, &tools, env.root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ExecStart");
    let started = std::time::Instant::now();
    while !env.path("started").exists() {
        assert!(started.elapsed().as_secs() < 20, "the job never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(run.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM run");
    let out = run.wait_with_output().expect("wait for run");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(15),
        "{out:?}"
    );
    let j = env
        .fp(&["--json", "status", "reports/daily.md"])
        .expect(0)
        .json();
    assert_eq!(j["resources"][0]["lease"]["state"], "released", "{j}");
}

/// The crate documentation's first example, as the README shows it: its lines but the
/// hidden ones (`# `), which rustdoc compiles and the reader does not need.
fn crate_doctest() -> String {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read src/lib.rs");
    let doc: Vec<&str> = lib
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let start = 1 + doc
        .iter()
        .position(|l| l.starts_with("```"))
        .expect("an example in the crate documentation");
    let len = doc[start..]
        .iter()
        .position(|l| *l == "```")
        .expect("the example's end");
    doc[start..start + len]
        .iter()
        .filter(|l| !l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_rust_example_is_the_crate_doctest_that_cargo_test_runs() {
    assert_eq!(
        block("rust", "fencepost::"),
        crate_doctest(),
        "the README's Rust example is run as the doctest opening src/lib.rs: keep the two alike"
    );
}

/// "From an empty server to two hosts and a mirror", run as written on a server of the
/// test's own: its socket folder for `/run/postgresql`, a temp folder for `/srv/reports`,
/// stand-ins for `hostname` and `render`. Step 3's `useradd`, `install`, `cp` and
/// `systemctl` are what cannot run here: its environment file's line and the unit's
/// `ExecStart` (from `dist/systemd/`) are run as systemd would, then its check as written.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn the_several_hosts_walkthrough_runs_from_an_empty_server_to_a_mirror_service() {
    let cluster = crate::support::pg::PrivateCluster::start();
    let socket = cluster.dir().display().to_string();
    let on_this_server = |text: &str| text.replace("/run/postgresql", &socket);
    let scratch = tempfile::tempdir().expect("temp dir");
    // 1. The server.
    let tools = Tools::new();
    let server = on_this_server(&block("sh", "# 1. The server"));
    let out = tools.bash(
        &format!("set -euo pipefail\n{server}"),
        scratch.path(),
        scratch.path(),
    );
    succeeded(&out);
    // 2. Two worker hosts in turn, each in a folder of its own.
    let worker = on_this_server(&block("sh", "# 2. A worker host"));
    for (host, epoch) in [("host-a", "1"), ("host-b", "2")] {
        let tools = Tools::new();
        tools.script("hostname", &format!("#!/bin/sh\necho {host}\n"));
        tools.script("render", &format!("#!/bin/sh\necho 'report from {host}'\n"));
        let home = tempfile::tempdir().expect("temp dir");
        let script = format!("set -euo pipefail\n{worker}echo \"epoch=$epoch\"\n");
        let (stdout, _) = succeeded(&tools.bash(&script, home.path(), home.path()));
        assert_eq!(
            stdout,
            format!("written\ncompleted\nepoch={epoch}\n"),
            "{host}"
        );
    }
    serving_host(&tools, &on_this_server, scratch.path());
}

/// The walkthrough's step 3 (see above), run by `tools` in `scratch`; `on_this_server`
/// puts the test's server in a text.
fn serving_host(tools: &Tools, on_this_server: &dyn Fn(&str) -> String, scratch: &Path) {
    use std::io::{BufRead as _, BufReader};
    let serving = block("sh", "# 3. A serving host");
    let env_line = serving
        .lines()
        .find_map(|l| {
            l.strip_prefix("echo '")?
                .split_once("' > /etc/fencepost/mirror.env")
        })
        .map(|(line, _)| on_this_server(line))
        .expect("step 3 writes /etc/fencepost/mirror.env");
    let (key, url) = env_line.split_once('=').expect("KEY=value");
    assert!(
        serving.contains("cp dist/systemd/fencepost-mirror@.service /etc/systemd/system/")
            && serving.contains("systemctl enable --now \"fencepost-mirror@"),
        "{serving}"
    );
    let unit_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/systemd/fencepost-mirror@.service");
    let unit = std::fs::read_to_string(unit_path).expect("the unit the README copies");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit's ExecStart");
    let mirror = tempfile::tempdir().expect("temp dir");
    let root = mirror.path().display().to_string();
    let mut words = exec.split_whitespace().map(|w| w.replace("%f", &root));
    let program = words.next().expect("a program");
    assert_eq!(program, "/usr/bin/fencepost", "{exec}");
    let mut follower = Command::new(harness::bin())
        .args(words)
        .env_clear()
        .env(key, url)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the unit's command");
    let mut lines = BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let mut next = || lines.next().expect("a line").expect("utf-8");
    let started = next();
    assert!(
        started.contains(" following ") && started.contains(&root),
        "{started}"
    );
    let applied = next();
    assert!(
        applied.ends_with(" applied reports/daily.md (epoch 2)"),
        "{applied}"
    );
    assert_eq!(
        std::fs::read_to_string(mirror.path().join("reports/daily.md")).expect("the mirror's copy"),
        "report from host-b\n"
    );
    // Its check for monitoring, as written: the store the root is bound to, no lag.
    let check = serving
        .lines()
        .last()
        .expect("the check")
        .replace("/srv/reports", &root);
    let (stdout, _) = succeeded(&tools.bash(&check, scratch, scratch));
    assert_eq!(stdout, "ok: 1 resource consistent\n");
    // systemctl stop: SIGTERM, exit 0, a last line.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(follower.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let stopped = next();
    assert!(
        stopped.contains(" stopped following ") && stopped.ends_with("on SIGTERM"),
        "{stopped}"
    );
    let status = follower.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The queue worker's handler as written, run in a publish root (`FENCEPOST_ROOT`) with a
/// `do-job` stand-in; `timing` swaps its `--ttl 5m --wait 6m` for a test's (the one thing
/// changed). Its exit status and the document afterwards.
fn handle_job(env: &Env, tools: &Tools, timing: &str, job: &str) -> (i32, Option<String>) {
    let script = block("sh", "# handle-job JOB:").replace("--ttl 5m --wait 6m", timing);
    let path = tools.path("handle-job");
    std::fs::write(&path, script).expect("write the handler");
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = Command::new("bash")
        .arg(&path)
        .arg(job)
        .env_clear()
        .env("PATH", tools.path_env())
        .env("FENCEPOST_ROOT", env.root())
        .env("HOME", tmp.path())
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .output()
        .expect("run the handler");
    let code = out.status.code().expect("an exit code");
    let doc = env.read(&format!("jobs/{job}.out"));
    (code, doc.map(|d| String::from_utf8(d).expect("utf-8")))
}

#[test]
fn the_queue_workers_handler_acks_retries_and_drops_as_its_table_says() {
    let tools = Tools::new();
    tools.script("do-job", "#!/bin/sh\necho \"result of $1\"\n");
    let env = Env::with_root();
    // Its own job: done, written, completed, acked.
    let (code, doc) = handle_job(&env, &tools, "--ttl 5m --wait 6m", "a");
    assert_eq!((code, doc.as_deref()), (0, Some("result of a\n")));
    // Held by a live delivery past the wait: retry later (75), nothing written.
    env.fp(&["claim", "jobs/b.out", "--owner", "other", "--ttl", "1h"])
        .expect(0);
    let (code, doc) = handle_job(&env, &tools, "--ttl 5m --wait 0.2s", "b");
    assert_eq!((code, doc), (75, None));
    // Taken over while the job ran (its lease ran out, another delivery claimed and
    // wrote): the write is stale, the result dropped, the message acked.
    let root = env.root().display().to_string();
    tools.script(
        "do-job",
        &format!(
            "#!/bin/sh\nsleep 1.5\n\
             e=$(FENCEPOST_ROOT={root} fencepost claim jobs/$1.out --owner other --ttl 1m)\n\
             echo theirs | FENCEPOST_ROOT={root} fencepost -q write jobs/$1.out --epoch \"$e\"\n\
             echo ours\n"
        ),
    );
    let (code, doc) = handle_job(&env, &tools, "--ttl 1s --wait 6m", "c");
    assert_eq!((code, doc.as_deref()), (0, Some("theirs\n")));
}
