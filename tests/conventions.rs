//! The conventions an operator brings from `flock(1)`, `timeout(1)`, `sleep` and `consul
//! lock`: durations in seconds, short flags, "did you mean", help that fits a screen,
//! `-q` that silences an expected refusal, outputs that never claim a success they did
//! not deliver, and names and tables that do not fool the eye.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::harness::{self, Done, Env};

/// Wall-clock milliseconds now, as fencepost counts them.
fn wall_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("fits")
}

/// Claims `res` on the wall clock with `--ttl TTL` and returns (deadline - the time
/// before the call, deadline - the time after it): the TTL in milliseconds lies between.
fn ttl_span(env: &Env, res: &str, ttl: &str) -> (i64, i64) {
    let before = wall_ms();
    let j = env
        .fp(&["--json", "claim", res, "--owner", "A", "--ttl", ttl])
        .expect(0)
        .json();
    let after = wall_ms();
    let deadline = j["deadline"].as_i64().expect("deadline");
    (deadline - after, deadline - before)
}

#[track_caller]
fn assert_ttl_ms(env: &Env, res: &str, ttl: &str, ms: i64) {
    let (low, high) = ttl_span(env, res, ttl);
    assert!(
        low <= ms && ms <= high,
        "--ttl {ttl}: deadline is now + {low}..{high} ms, wanted {ms}"
    );
}

/// The one `fencepost:` line of a failure (and its hint line, if any).
fn stderr_lines(done: &Done) -> (String, Option<String>) {
    let mut lines = done.stderr.lines();
    let first = lines.next().unwrap_or_default().to_string();
    (first, lines.next().map(str::to_string))
}

/// Runs SQL against a state file from another process (python3's sqlite3).
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

// ---------------------------------------------------------------------------------------
// Durations

#[test]
fn a_bare_number_is_seconds_on_the_wall_clock() {
    let env = Env::new();
    assert_ttl_ms(&env, "bare.md", "30", 30_000);
    assert_ttl_ms(&env, "fraction.md", "1.5", 1_500);
    assert_ttl_ms(&env, "half.md", "0.5s", 500);
    assert_ttl_ms(&env, "compound.md", "2m30s", 150_000);
    assert_ttl_ms(&env, "day.md", "1d", 86_400_000);
    assert_ttl_ms(&env, "ms.md", "500ms", 500);
    // renew reads its TTL the same way.
    let before = wall_ms();
    let deadline: i64 = env
        .fp(&[
            "renew", "bare.md", "--owner", "A", "--epoch", "1", "--ttl", "90",
        ])
        .expect(0)
        .stdout
        .trim()
        .parse()
        .expect("renew prints the deadline");
    assert!(deadline >= before + 90_000, "renew --ttl 90 is not 90 s");
}

#[test]
fn log_last_counts_seconds_on_the_wall_clock() {
    let env = Env::new();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1m"])
        .expect(0);
    // The claim happened a minute ago, as far as the log knows.
    let a_minute_ago = wall_ms() - 60_000;
    sql(
        &env.path(".fencepost/state.db"),
        &format!("UPDATE log SET at = {a_minute_ago};"),
    );
    let seen = |last: &str| {
        let j = env.fp(&["--json", "log", "--last", last]).expect(0).json();
        j["events"].as_array().expect("events").len()
    };
    assert_eq!(seen("3600"), 1, "--last 3600 is an hour");
    assert_eq!(seen("1.5h"), 1);
    assert_eq!(seen("30"), 0, "--last 30 is half a minute");
}

#[test]
fn with_now_a_bare_number_stays_ticks_and_units_are_refused() {
    let env = Env::new();
    let j = env
        .fp(&["--json", "claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(5)
        .expect(0)
        .json();
    assert_eq!(j["deadline"], 15);
    for ttl in ["10s", "1.5", "2m30s", "1d"] {
        let done = env
            .fp(&["claim", "new.md", "--owner", "A", "--ttl", ttl])
            .now(5)
            .expect(2);
        assert!(done.stderr.contains("--ttl"), "{ttl}: {}", done.stderr);
    }
    assert!(!env.path("new.md").exists());
}

#[test]
fn zero_is_one_zero_in_every_spelling() {
    let env = Env::new();
    for zero in ["0", "0s", "0ms", "0m", "0.0", "0h"] {
        // Do not wait: taken by --busy-timeout and --wait alike.
        env.fp(&["--busy-timeout", zero, "status"]).expect(0);
        let res = format!("wait-{}.md", zero.replace('.', "_"));
        env.fp(&["claim", &res, "--owner", "A", "--ttl", "1m", "--wait", zero])
            .expect(0);
        // A lease of no length: refused, whichever way zero is written.
        let done = env
            .fp(&["claim", "zero.md", "--owner", "A", "--ttl", zero])
            .expect(2);
        assert!(
            done.stderr.contains("more than zero"),
            "{zero}: {}",
            done.stderr
        );
    }
}

#[test]
fn durations_that_are_not_durations_are_refused() {
    let env = Env::new();
    for bad in [
        "1.", "30s2m", "1m1m", "2m30", "1 m", "0.0001", "-5", "1w", "ten",
    ] {
        let joined = format!("--ttl={bad}");
        let done = env
            .fp(&["claim", "doc.md", "--owner", "A", &joined])
            .expect(2);
        assert!(done.stderr.contains("--ttl"), "{bad}: {}", done.stderr);
    }
    assert!(!env.path(".fencepost").exists(), "bad input created state");
}

// ---------------------------------------------------------------------------------------
// Short flags, "did you mean", help

#[test]
fn short_flags_work_where_people_expect_them() {
    let env = Env::new();
    std::fs::write(env.path("in.txt"), "by short flags\n").expect("write");
    env.fp(&["claim", "doc.md", "-o", "A", "-t", "10"])
        .now(0)
        .expect_stdout(0, "1");
    env.fp(&["write", "doc.md", "-e", "1", "-o", "A", "-f", "in.txt"])
        .now(1)
        .expect_stdout(0, "written");
    env.fp(&["renew", "doc.md", "-o", "A", "-e", "1", "-t", "20"])
        .now(2)
        .expect_stdout(0, "22");
    assert_eq!(env.text("doc.md"), "by short flags\n");
    // -r names the root (the harness passes --root itself, so run the binary as is).
    let out = Command::new(harness::bin())
        .env_clear()
        .args(["--now", "3", "--json", "status", "doc.md", "-r"])
        .arg(env.root())
        .output()
        .expect("run fencepost");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(j["resources"][0]["lease"]["owner"], "A", "{j}");
    // -w on the wall clock, in a root of its own.
    let wall = Env::new();
    wall.fp(&["claim", "doc.md", "-o", "A", "-t", "1m", "-w", "0.5"])
        .expect_stdout(0, "1");
}

#[test]
fn a_misspelled_command_or_flag_gets_did_you_mean() {
    let env = Env::new();
    for (args, wanted) in [
        (vec!["stauts"], "did you mean 'status'?"),
        (vec!["clam", "doc.md"], "did you mean 'claim'?"),
        (
            vec!["claim", "doc.md", "--ownr", "A", "--ttl", "1"],
            "did you mean '--owner'?",
        ),
        (vec!["log", "--timelin"], "did you mean '--timeline'?"),
    ] {
        let done = env.fp(&args).expect(2);
        let (line, hint) = stderr_lines(&done);
        assert!(line.starts_with("fencepost: "), "{args:?}: {line}");
        assert_eq!(
            hint.as_deref(),
            Some(&*format!("hint: {wanted}")),
            "{args:?}"
        );
    }
    // No suggestion: the hint points at the command's help, never a garbled usage line.
    let done = env.fp(&["man", "--bogus"]).expect(2);
    let (line, hint) = stderr_lines(&done);
    assert_eq!(line, "fencepost: fencepost man has no option '--bogus'");
    assert_eq!(hint.as_deref(), Some("hint: see fencepost man --help"));
    let done = env.fp(&["status", "--bogus"]).expect(2);
    let (_, hint) = stderr_lines(&done);
    assert_eq!(
        hint.as_deref(),
        Some("hint: see fencepost status --help; to pass '--bogus' as a value, use '-- --bogus'")
    );
    let done = env.fp(&["status", "--held"]).expect(2);
    let (line, hint) = stderr_lines(&done);
    assert_eq!(line, "fencepost: fencepost status has no option '--held'");
    assert!(
        !hint.unwrap_or_default().contains("usage:"),
        "{}",
        done.stderr
    );
}

#[test]
fn short_help_fits_a_screen_and_long_help_keeps_everything() {
    let env = Env::new();
    let short = env.fp(&["write", "-h"]).expect(0).stdout;
    assert!(
        short.lines().count() <= 24,
        "write -h is {} lines:\n{short}",
        short.lines().count()
    );
    // The options listed: each line that starts with a dash, by its long name.
    let listed: Vec<&str> = short
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split([' ', ',']).find(|w| w.starts_with("--")))
        .collect();
    assert_eq!(
        listed,
        ["--epoch", "--owner", "--from", "--allow-empty", "--help"],
        "{short}"
    );
    let long = env.fp(&["write", "--help"]).expect(0).stdout;
    let (own, global) = long
        .split_once("Global options:")
        .expect("--help has a heading for the global options");
    assert!(own.contains("--unfenced"), "{long}");
    for option in [
        "--root",
        "--db",
        "--now",
        "--json",
        "--quiet",
        "--busy-timeout",
        "--log-keep",
    ] {
        assert!(global.contains(option), "global options lack {option}");
        assert!(
            !own.contains(&format!("  {option}")),
            "{option} not grouped"
        );
    }
    // The top-level short help still names the global options.
    let top = env.fp(&["-h"]).expect(0).stdout;
    assert!(top.contains("-r/--root DIR"), "{top}");
}

#[test]
fn man_pages_name_values_and_environment_variables() {
    let env = Env::new();
    env.fp(&["man", "--dir", "share/man/man1"]).expect(0);
    let page = |name: &str| {
        std::fs::read_to_string(env.path(&format!("share/man/man1/{name}")))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let write = page("fencepost-write.1");
    for wanted in [
        "FENCEPOST_ROOT",
        "FENCEPOST_EPOCH",
        "FENCEPOST_BUSY_TIMEOUT",
        "<DIR>",
        "<EPOCH>",
        "<FILE>",
        "<DURATION>",
        "unfenced",
        "Publish root",
    ] {
        assert!(write.contains(wanted), "fencepost-write.1 lacks {wanted}");
    }
    let claim = page("fencepost-claim.1");
    for wanted in ["FENCEPOST_TTL", "FENCEPOST_WAIT", "<OWNER>", "<DURATION>"] {
        assert!(claim.contains(wanted), "fencepost-claim.1 lacks {wanted}");
    }
}

// ---------------------------------------------------------------------------------------
// -q and stdout

#[test]
fn quiet_silences_an_expected_refusal_but_not_an_error() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "v1", 1, 0);
    // held, as `flock -n` under cron: nothing on stdout or stderr, exit 3.
    let done = env
        .fp(&["-q", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(2)
        .output();
    assert_eq!((done.code, &*done.stdout, &*done.stderr), (3, "", ""));
    // The variable does the same; stale and lost too.
    env.claim("doc.md", "B", 10, 10);
    let done = env
        .fp(&["write", "doc.md", "--epoch", "1"])
        .now(11)
        .stdin("late")
        .env("FENCEPOST_QUIET", "1")
        .output();
    assert_eq!((done.code, &*done.stdout, &*done.stderr), (5, "", ""));
    let done = env
        .fp(&["-q", "complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(11)
        .output();
    assert_eq!((done.code, &*done.stdout, &*done.stderr), (4, "", ""));
    // Real errors still say why.
    let done = env
        .fp(&["-q", "claim", "../out.md", "--owner", "A", "--ttl", "10"])
        .now(12)
        .expect(2);
    assert!(done.stderr.starts_with("fencepost: "), "{}", done.stderr);
    let done = env.fp(&["-q", "claim", "doc.md"]).expect(2);
    assert!(done.stderr.starts_with("fencepost: "), "{}", done.stderr);
}

/// Runs fencepost with `--root root ARGS` and stdout on `stdout`.
fn with_stdout(root: &Path, args: &[&str], stdout: Stdio) -> (i32, String) {
    let out = Command::new(harness::bin())
        .env_clear()
        .current_dir(root)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run fencepost");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full"),
    )
}

#[test]
fn a_claim_whose_epoch_cannot_be_printed_fails_and_says_what_it_left() {
    let env = Env::new();
    let (code, stderr) = with_stdout(
        env.root(),
        &["claim", "full.md", "--owner", "A", "--ttl", "10"],
        dev_full(),
    );
    assert_eq!(code, 1, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("fencepost: cannot write"), "{stderr}");
    assert!(
        lines[0].contains("the lease on full.md is held by A as epoch 1 until"),
        "{stderr}"
    );
    // It is: the message told the truth.
    let j = env.fp(&["--json", "status", "full.md"]).expect(0).json();
    assert_eq!(j["resources"][0]["lease"]["state"], "held");
    // Every other command too: status with nothing changed, write with its epoch.
    let (code, stderr) = with_stdout(env.root(), &["status"], dev_full());
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    std::fs::write(env.path("in.txt"), "x\n").expect("write");
    let (code, stderr) = with_stdout(
        env.root(),
        &["write", "full.md", "--epoch", "1", "--from", "in.txt"],
        dev_full(),
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("full.md was written under epoch 1"),
        "{stderr}"
    );
    let (code, stderr) = with_stdout(env.root(), &["--help"], dev_full());
    assert_eq!(code, 1, "{stderr}");
}

#[test]
fn a_closed_pipe_is_left_quietly() {
    let env = Env::new();
    // A pipe whose reader is gone before fencepost writes, as `| head -0` leaves it.
    let (reader, writer) = nix::unistd::pipe().expect("pipe");
    drop(reader);
    let (code, stderr) = with_stdout(
        env.root(),
        &["claim", "doc.md", "--owner", "A", "--ttl", "10"],
        Stdio::from(writer),
    );
    assert_eq!((code, &*stderr), (0, ""));
}

// ---------------------------------------------------------------------------------------
// Empty content

#[test]
fn empty_content_is_refused_unless_allowed() {
    let env = Env::new();
    env.claim("doc.md", "A", 100, 0);
    env.write("doc.md", 1, "the report\n", 1, 0);
    env.claim("sub/new.md", "A", 100, 1);
    // What cron gives a script that forgot --from: an empty stdin.
    for (res, epoch) in [("doc.md", "1"), ("sub/new.md", "1")] {
        let done = env
            .fp(&["--json", "write", res, "--epoch", epoch])
            .now(2)
            .stdin("")
            .expect(2);
        assert_eq!(done.json()["outcome"], "usage");
        assert!(done.stderr.contains("empty"), "{}", done.stderr);
        assert!(done.stderr.contains("--allow-empty"), "{}", done.stderr);
    }
    assert_eq!(env.text("doc.md"), "the report\n");
    assert!(
        !env.path("sub").exists(),
        "a refused write created a folder"
    );
    std::fs::write(env.path("empty.txt"), "").expect("write");
    env.fp(&["write", "doc.md", "--epoch", "1", "--from", "empty.txt"])
        .now(2)
        .expect(2);
    assert_eq!(env.text("doc.md"), "the report\n");
    let j = env
        .fp(&["--json", "status", "doc.md"])
        .now(2)
        .expect(0)
        .json();
    assert_eq!(j["resources"][0]["sink"]["size"], 11);
    // Asked for, an empty document is published.
    env.claim("doc.md", "A", 100, 200);
    env.fp(&["write", "doc.md", "--epoch", "2", "--allow-empty"])
        .now(201)
        .stdin("")
        .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "");
}
