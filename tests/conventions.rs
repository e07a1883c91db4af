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
    // `status` reads a state file: the first claim makes it.
    env.fp(&["claim", "first.md", "--owner", "A", "--ttl", "1m"])
        .expect(0);
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

#[test]
fn a_negative_duration_is_refused_in_one_line_with_a_hint_that_works() {
    let env = Env::new();
    // `--ttl -5`: a duration, refused as one; never clap's `use '-- -5'`, which fails
    // the same way.
    for (args, wanted) in [
        (
            vec!["claim", "doc.md", "-o", "A", "--ttl", "-5"],
            "fencepost: --ttl must be positive, got \"-5\"",
        ),
        (
            vec!["claim", "doc.md", "-o", "A", "-t", "1", "--wait", "-1"],
            "fencepost: --wait must be zero or more, got \"-1\"",
        ),
        (
            vec!["--busy-timeout", "-1.5", "status"],
            "fencepost: --busy-timeout must be zero or more, got \"-1.5\"",
        ),
        (
            vec!["renew", "doc.md", "-o", "A", "-e", "1", "--ttl", "-1"],
            "fencepost: --ttl must be positive, got \"-1\"",
        ),
    ] {
        let done = env.fp(&args).expect(2);
        assert_eq!(done.stderr.trim_end(), wanted, "{args:?}");
    }
    // With a unit it cannot read as a number: no option, and the hint says why.
    let done = env
        .fp(&["claim", "doc.md", "-o", "A", "--ttl", "-5s"])
        .expect(2);
    let (line, hint) = stderr_lines(&done);
    assert!(line.contains("no value may be negative"), "{line}");
    let hint = hint.unwrap_or_default();
    assert!(!hint.contains("'--"), "{hint}");
    assert!(hint.contains("--ttl 30s"), "{hint}");
    assert!(!env.path(".fencepost").exists(), "bad input created state");
}

#[test]
fn a_missing_option_names_the_command_once() {
    let env = Env::new();
    let done = env.fp(&["claim", "doc.md", "-o", "A"]).expect(2);
    let (line, hint) = stderr_lines(&done);
    assert_eq!(line, "fencepost: claim needs --ttl <DURATION>");
    assert_eq!(hint.as_deref(), Some("hint: see fencepost claim --help"));
    let done = env
        .fp(&["write", "doc.md", "--epoch", "1", "extra"])
        .expect(2);
    let (line, _) = stderr_lines(&done);
    assert_eq!(line, "fencepost: unexpected argument 'extra' for write");
}

#[test]
fn renew_help_says_its_deadline_is_milliseconds_for_scripts() {
    let env = Env::new();
    let help = env.fp(&["renew", "--help"]).expect(0).stdout;
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("milliseconds since the Unix epoch"), "{help}");
    assert!(flat.contains("UTC time"), "{help}");
}

/// Every state a document can be in, by its word in `status` (and `--json`): the match
/// is exhaustive, so a new state fails to compile here until it is listed.
fn document_state_words() -> Vec<&'static str> {
    use fencepost::document::DocState;
    let all = [
        DocState::Matches,
        DocState::Drifted,
        DocState::Missing,
        DocState::Removed,
        DocState::Reappeared,
        DocState::Untracked,
        DocState::Absent,
        DocState::Ahead,
        DocState::Behind,
        DocState::Interrupted,
        DocState::InProgress,
        DocState::NotAFile,
        DocState::Unreachable,
        DocState::StateFile,
        DocState::Unreadable,
        DocState::Invalid,
        DocState::CheckFailed,
        DocState::Stored,
    ];
    for state in all {
        match state {
            DocState::Matches
            | DocState::Drifted
            | DocState::Missing
            | DocState::Removed
            | DocState::Reappeared
            | DocState::Untracked
            | DocState::Absent
            | DocState::Ahead
            | DocState::Behind
            | DocState::Interrupted
            | DocState::InProgress
            | DocState::NotAFile
            | DocState::Unreachable
            | DocState::StateFile
            | DocState::Unreadable
            | DocState::Invalid
            | DocState::CheckFailed
            | DocState::Stored => {}
        }
    }
    all.iter().map(|s| s.word()).collect()
}

#[test]
fn status_help_lists_every_document_state() {
    let env = Env::new();
    let help = env.fp(&["status", "--help"]).expect(0).stdout;
    // The list: one state per line, its word first after the indent.
    let listed: Vec<&str> = help
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for word in document_state_words() {
        assert!(
            listed.contains(&word),
            "status --help does not list the document state {word:?}:\n{help}"
        );
    }
}

#[test]
fn counts_are_singular_for_one() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.fp(&["verify"])
        .now(1)
        .expect_stdout(0, "ok: 1 resource consistent");
    std::fs::write(env.path(".doc.md.fencepost-tmp-dead"), "x").expect("temp");
    let done = env.fp(&["verify"]).now(1).expect(9);
    assert_eq!(
        done.stderr.lines().next(),
        Some("fencepost: 1 inconsistency in 1 resource checked"),
        "{}",
        done.stderr
    );
    assert!(
        done.stdout.contains(": 1 temp file of dead writers"),
        "{}",
        done.stdout
    );
    let done = env.fp(&["recover"]).now(2).expect(0);
    assert!(
        done.stdout.contains(", 1 temp file removed"),
        "{}",
        done.stdout
    );
    env.write("doc.md", 1, "v1", 3, 0);
    env.fp(&["--log-keep", "1", "log", "--prune"])
        .expect_stdout(0, "pruned 1 event");
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
        // `cat` is as near as `claim` by clap's measure; both are offered.
        (vec!["clam", "doc.md"], "did you mean 'cat' or 'claim'?"),
        (vec!["clami", "doc.md"], "did you mean 'claim'?"),
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
    assert_eq!(line, "fencepost: man has no option '--bogus'");
    assert_eq!(hint.as_deref(), Some("hint: see fencepost man --help"));
    let done = env.fp(&["status", "--bogus"]).expect(2);
    let (_, hint) = stderr_lines(&done);
    assert_eq!(
        hint.as_deref(),
        Some("hint: see fencepost status --help; to pass '--bogus' as a value, use '-- --bogus'")
    );
    let done = env.fp(&["status", "--held"]).expect(2);
    let (line, hint) = stderr_lines(&done);
    assert_eq!(line, "fencepost: status has no option '--held'");
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
        [
            "--epoch",
            "--owner",
            "--seq",
            "--from",
            "--allow-empty",
            "--tree",
            "--help"
        ],
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

/// The `\fBNAME\fR` paragraph heads of a man page's section `heading`.
fn man_section_heads(page: &str, heading: &str) -> Vec<String> {
    let (_, rest) = page
        .split_once(&format!(".SH {heading}\n"))
        .unwrap_or_else(|| panic!("no {heading} section"));
    let section = rest.split("\n.SH ").next().unwrap_or_default();
    let mut lines = section.lines();
    let mut heads = Vec::new();
    while let Some(line) = lines.next() {
        if line == ".TP"
            && let Some(head) = lines.next()
        {
            heads.push(
                head.trim_start_matches("\\fB")
                    .trim_end_matches("\\fR")
                    .to_string(),
            );
        }
    }
    heads
}

#[test]
fn man_pages_list_the_environment_and_exit_status() {
    let env = Env::new();
    let page = env.fp(&["man"]).expect(0).stdout;
    assert!(
        !page.contains(".SH EXTRA"),
        "the exit codes reflowed as EXTRA"
    );
    // Every variable any command's --help names is under ENVIRONMENT: the section is
    // gathered from the same definitions.
    let environment = man_section_heads(&page, "ENVIRONMENT");
    let top = env.fp(&["--help"]).expect(0).stdout;
    let commands: Vec<&str> = top
        .split_once("Commands:")
        .expect("a command list")
        .1
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        // A command's line; a wrapped description goes on under it, indented further.
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(
        commands.contains(&"init") && commands.len() >= 15,
        "{commands:?}"
    );
    let mut named = Vec::new();
    for command in commands
        .iter()
        .map(|c| vec![*c])
        .chain([vec!["store", "init"]])
    {
        let help = env
            .fp(&[&command[..], &["--help"]].concat())
            .expect(0)
            .stdout;
        for part in help.split("[env: ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            named.push(name);
        }
    }
    assert!(named.contains(&"FENCEPOST_NO_CREATE".to_string()));
    for name in &named {
        assert!(
            environment.contains(name),
            "{name} is not under ENVIRONMENT"
        );
    }
    // And every libpq variable the store's code reads.
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut read = Vec::new();
    for file in std::fs::read_dir(&store).expect("src/store") {
        let text = std::fs::read_to_string(file.expect("entry").path()).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for part in code.split("\"PG").skip(1) {
            let rest: String = part.chars().take_while(char::is_ascii_uppercase).collect();
            if part[rest.len()..].starts_with('"') {
                read.push(format!("PG{rest}"));
            }
        }
    }
    assert!(read.len() >= 10, "{read:?}");
    for name in &read {
        assert!(
            environment.contains(name),
            "{name} is not under ENVIRONMENT"
        );
    }
    // EXIT STATUS: a paragraph per code, in the order --help lists them.
    let codes = man_section_heads(&page, "\"EXIT STATUS\"");
    assert_eq!(
        codes,
        ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "other"]
    );
    // A command's page lists its own variables and names the libpq ones.
    env.fp(&["man", "--dir", "m"]).expect(0);
    let claim = std::fs::read_to_string(env.path("m/man1/fencepost-claim.1")).expect("page");
    let own = man_section_heads(&claim, "ENVIRONMENT");
    assert!(own.contains(&"FENCEPOST_TTL".to_string()), "{own:?}");
    assert!(!own.contains(&"FENCEPOST_GRACE".to_string()), "{own:?}");
    assert!(claim.contains("PGHOST"));
    assert_eq!(man_section_heads(&claim, "\"EXIT STATUS\"").len(), 11);
}

#[test]
fn man_pages_name_values_and_environment_variables() {
    let env = Env::new();
    env.fp(&["man", "--dir", "share/man"]).expect(0);
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
    let env = Env::with_root();
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
    let env = Env::with_root();
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

// ---------------------------------------------------------------------------------------
// JSON a script can trust

/// PATH for a child of `run`: the binary under test first, then the basic tools.
fn path_env() -> String {
    let bin = harness::bin();
    let dir = bin.parent().expect("binary has a folder");
    format!("{}:/usr/bin:/bin", dir.display())
}

/// `fencepost GLOBALS run RES --owner O --ttl TTL EXTRA -- sh -c SCRIPT` on the wall clock.
fn run_sh(env: &Env, globals: &[&str], extra: &[&str], script: &str) -> crate::harness::Run {
    let mut args = globals.to_vec();
    args.extend_from_slice(&["run", "job.md", "--owner", "O", "--ttl", "30s"]);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    env.fp(&args).env("PATH", &path_env())
}

/// `log --json` events, oldest first.
fn events(env: &Env) -> Vec<serde_json::Value> {
    let j = env.fp(&["--json", "log"]).expect(0).json();
    j["events"].as_array().expect("events").clone()
}

#[test]
fn a_refused_claim_carries_the_callers_epoch_and_the_holders_apart() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    let j = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(1)
        .expect(3)
        .json_contract();
    assert_eq!(j["epoch"], serde_json::Value::Null, "{j}");
    assert_eq!(j["owner"], "B");
    assert_eq!(j["holder"], "A");
    assert_eq!(j["holder_epoch"], 1);
}

#[test]
fn runs_json_line_starts_a_line_of_its_own() {
    let env = Env::new();
    let done = run_sh(&env, &["--json"], &[], "printf 'no newline'").expect(0);
    let (output, last) = done
        .stdout
        .trim_end_matches('\n')
        .rsplit_once('\n')
        .expect("two lines");
    assert_eq!(output, "no newline");
    let j: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(j["outcome"], "completed");
    // Output that ends with its newline gets no blank line, and bytes pass unchanged.
    let done = run_sh(&env, &["--json"], &[], "printf 'a\\000b\\n'").expect(0);
    assert!(done.stdout.starts_with("a\0b\n{"), "{:?}", done.stdout);
}

#[test]
fn a_json_flag_after_the_double_dash_is_the_commands() {
    let env = Env::new();
    // Bad usage (no --ttl): fencepost's own error is plain, whatever the command takes.
    let done = env
        .fp(&["run", "job.md", "--owner", "O", "--", "report", "--json"])
        .expect(2);
    assert_eq!(done.stdout, "", "usage error printed as JSON");
    assert!(done.stderr.contains("--ttl"), "{}", done.stderr);
    // Before the double dash it is fencepost's.
    let done = env
        .fp(&["--json", "run", "job.md", "--owner", "O", "--", "report"])
        .expect(2);
    assert_eq!(done.json()["outcome"], "usage");
}

// ---------------------------------------------------------------------------------------
// Messages that say what happened

#[test]
fn an_epoch_never_issued_is_not_called_superseded() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    let done = env
        .fp(&[
            "--json", "renew", "doc.md", "--owner", "A", "--epoch", "2", "--ttl", "10",
        ])
        .now(1)
        .expect(4);
    let j = done.json_contract();
    assert_eq!(j["reason"], "no claim ever issued that epoch");
    assert!(!done.stderr.contains("newer epoch"), "{}", done.stderr);
    assert!(
        done.stderr.contains("A epoch 2 does not hold"),
        "{}",
        done.stderr
    );
}

#[test]
fn a_lost_line_says_lost_once() {
    let env = Env::new();
    // A resource may be called anything, "lost" too.
    env.claim("lost", "A", 10, 0);
    env.fp(&["release", "lost", "--owner", "A", "--epoch", "1"])
        .now(1)
        .expect(0);
    // A release run again is a replay; a complete of the released lease is lost.
    let done = env
        .fp(&["complete", "lost", "--owner", "A", "--epoch", "1"])
        .now(2)
        .expect(4);
    assert_eq!(done.stderr.matches("lost:").count(), 1, "{}", done.stderr);
    assert!(
        done.stderr.contains(
            "A epoch 1 no longer holds the lease on lost (the lease was already released"
        ),
        "{}",
        done.stderr
    );
}

#[test]
fn a_run_that_loses_its_lease_stops_the_command_first_and_logs_the_loss_once() {
    let env = Env::new();
    // The command gives its own lease up, so run's next renewal is refused. On SIGTERM it
    // copies the log as it stands: the loss is not in it yet, since stopping the command
    // comes first (logging may wait on a store out of reach), and it is logged after.
    let script = "trap 'fencepost --json log > \"$FENCEPOST_ROOT/seen.json\"; exit 0' TERM
        fencepost -q release \"$FENCEPOST_RESOURCE\" --owner \"$FENCEPOST_OWNER\" --epoch \"$FENCEPOST_EPOCH\"
        while :; do sleep 1; done";
    let mut args = vec!["run", "job.md", "--owner", "O", "--ttl", "600ms"];
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let done = env.fp(&args).env("PATH", &path_env()).output();
    assert_eq!(done.code, 4, "{}", done.stderr);
    // The shell may say "Terminated" for its sleep; run's own line is the last.
    let line = done.stderr.lines().last().unwrap_or_default();
    assert_eq!(line.matches("lost:").count(), 1, "{line}");
    assert!(
        line.ends_with("(the lease was already released; current: owner O epoch 1, released); the command is stopped"),
        "{line}"
    );
    let seen: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.path("seen.json")).expect("the command saw the log"),
    )
    .expect("JSON");
    let kinds: Vec<&str> = seen["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(kinds, ["claim", "release"], "when SIGTERM arrived");
    // Logged once, not again when run returned.
    let lost = events(&env).iter().filter(|e| e["event"] == "lost").count();
    assert_eq!(lost, 1);
}

#[test]
fn a_wait_that_ran_out_says_how_long_it_waited() {
    let env = Env::new();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "1h"])
        .expect(0);
    let done = env
        .fp(&[
            "--json", "claim", "doc.md", "--owner", "B", "--ttl", "10", "--wait", "0.2",
        ])
        .expect(3);
    assert!(
        done.stderr.contains("gave up after waiting 0."),
        "{}",
        done.stderr
    );
    let waited = done.json()["waited_ms"].as_u64().expect("waited_ms");
    assert!(waited >= 200, "waited {waited} ms");
}

#[test]
#[cfg_attr(fp_missing = "strace", ignore = "needs strace (Debian: strace)")]
fn a_full_disk_under_the_state_file_is_said_in_plain_words() {
    let env = Env::new();
    // SQLite sizes its shared-memory file with ftruncate: ENOSPC there is what a full
    // filesystem gives when the state file is first opened.
    let out = Command::new(crate::strace::strace())
        .args([
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "inject=ftruncate:error=ENOSPC",
        ])
        .arg(harness::bin())
        .arg("--root")
        .arg(env.root())
        .args(["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .env_clear()
        .output()
        .expect("strace is required (apt-get install strace)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].contains("the filesystem failed"), "{stderr}");
    assert!(
        lines[1].starts_with("hint: ") && lines[1].contains("full"),
        "{stderr}"
    );
}

#[test]
#[cfg_attr(fp_missing = "root", ignore = "needs root")]
fn a_state_file_this_user_may_not_change_is_said_in_plain_words() {
    crate::documents::needs_root();
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(harness::bin())
        .arg("--root")
        .arg(env.root())
        .args([
            "--now", "1", "claim", "other.md", "--owner", "B", "--ttl", "10",
        ])
        .env_clear()
        .output()
        .expect("run setpriv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].contains("this user may not change the state file"),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("hint: ") && lines[1].contains("write access"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------------------
// Names and tables

#[test]
fn invisible_and_direction_changing_characters_are_refused_in_names() {
    let env = Env::new();
    env.claim("doc.md", "A", 100, 0);
    for owner in [
        "evil\u{202e}txt.exe",
        "zero\u{200b}width",
        "soft\u{00ad}hyphen",
    ] {
        let done = env
            .fp(&["claim", "new.md", "--owner", owner, "--ttl", "10"])
            .now(1)
            .expect(2);
        assert!(done.stderr.contains("invisible"), "{}", done.stderr);
        env.fp(&["write", "doc.md", "--epoch", "1", "--owner", owner])
            .now(1)
            .stdin("x")
            .expect(2);
    }
    env.fp(&[
        "complete",
        "doc.md",
        "--owner",
        "A",
        "--epoch",
        "1",
        "--result",
        "ok\u{2066}",
    ])
    .now(1)
    .expect(2);
    // Nothing changed: still A's live lease, and no new resource.
    let j = env.fp(&["--json", "status"]).now(2).expect(0).json();
    let rows = j["resources"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{j}");
    assert_eq!(rows[0]["lease"]["state"], "held");
    // Ordinary non-ASCII names are fine.
    env.claim("other.md", "工人甲", 10, 3);
}

/// The display column at which each line's `n`th field (split on two spaces) starts.
fn field_columns(text: &str, n: usize) -> Vec<usize> {
    use unicode_width::UnicodeWidthStr;
    text.lines()
        .map(|line| {
            let mut at = 0;
            for _ in 0..n {
                let rest = &line[at..];
                let gap = rest.find("  ").expect("a column gap");
                let next = rest[gap..].find(|c: char| c != ' ').expect("a next column");
                at += gap + next;
            }
            line[..at].width()
        })
        .collect()
}

#[test]
fn tables_line_up_by_display_width() {
    use unicode_width::UnicodeWidthStr;
    let env = Env::new();
    env.claim("a.md", "工人甲", 10, 0);
    env.claim("b.md", "bob", 10, 0);
    let status = env.fp(&["status"]).now(1).expect(0).stdout;
    // Column 3 (EPOCH) starts at one display column on every line.
    let cols = field_columns(&status, 3);
    assert!(cols.windows(2).all(|w| w[0] == w[1]), "{status}\n{cols:?}");
    let log = env.fp(&["log"]).now(1).expect(0).stdout;
    let cols = field_columns(&log, 4);
    assert!(cols.windows(2).all(|w| w[0] == w[1]), "{log}\n{cols:?}");
    // In the lanes, bob's event stands under bob.
    let timeline = env.fp(&["log", "--timeline"]).now(1).expect(0).stdout;
    let lines: Vec<&str> = timeline.lines().collect();
    let column = |line: &str, word: &str| line[..line.find(word).expect(word)].width();
    assert_eq!(
        column(lines[0], "bob"),
        column(lines[2], "claim"),
        "{timeline}"
    );
}

#[test]
fn a_timeline_of_many_owners_fits_100_columns() {
    use unicode_width::UnicodeWidthStr;
    let env = Env::new();
    // Eight runs named as the README advises, "$(hostname)-$$".
    for i in 0..8 {
        let owner = format!("build-host-{}", 31_000 + i);
        env.claim("doc.md", &owner, 1, i * 2);
    }
    let text = env.fp(&["log", "--timeline"]).now(20).expect(0).stdout;
    for line in text.lines() {
        assert!(line.width() <= 100, "{} columns: {line}", line.width());
    }
    assert!(text.contains("build-host-31007"), "{text}");
}

// ---------------------------------------------------------------------------------------
// run beside flock and consul lock

#[test]
fn run_tells_its_own_refusals_from_the_commands_exit_codes() {
    let env = Env::new();
    // The command's own 3 is the command's, and says so.
    let done = run_sh(&env, &["--json"], &[], "exit 3").expect(3);
    let j = done.json_contract();
    assert_eq!(
        (&j["exit_code"], &j["exit_from"]),
        (&3.into(), &"command".into())
    );
    // held, as fencepost's: the default 3, or the code asked for.
    env.fp(&["claim", "job.md", "--owner", "X", "--ttl", "1h"])
        .expect(0);
    let done = run_sh(&env, &["--json"], &[], "true").expect(3);
    assert_eq!(done.json()["exit_from"], "fencepost");
    let done = run_sh(&env, &["--json"], &["--held-exit-code", "75"], "true").expect(75);
    let j = done.json_contract();
    assert_eq!(j["outcome"], "held");
    assert_eq!(
        (&j["exit_code"], &j["exit_from"]),
        (&75.into(), &"fencepost".into())
    );
    // lost, as fencepost's: the command gives its lease up, run's renewal is refused.
    let lose = "fencepost -q release \"$FENCEPOST_RESOURCE\" --owner \"$FENCEPOST_OWNER\" \
                --epoch \"$FENCEPOST_EPOCH\"; while :; do sleep 1; done";
    let mut args = vec!["--json", "run", "own.md", "--owner", "O", "--ttl", "600ms"];
    args.extend_from_slice(&["--lost-exit-code", "76", "--", "sh", "-c", lose]);
    let done = env.fp(&args).env("PATH", &path_env()).expect(76);
    let j = done.json();
    assert_eq!(j["outcome"], "lost");
    assert_eq!(j["exit_from"], "fencepost");
    // The codes are bytes.
    run_sh(&env, &[], &["--held-exit-code", "256"], "true").expect(2);
}

#[test]
fn killing_run_with_sigkill_stops_the_commands_group() {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let env = Env::new();
    // The command says it has started once run has renewed the lease, which run does
    // only after arming its guard.
    let script = "until fencepost log | grep -q renew; do sleep 0.1; done
        echo $$ > \"$FENCEPOST_ROOT/pid\"; sleep 100 & sleep 100; wait";
    let mut run = Command::new(harness::bin())
        .env_clear()
        .env("PATH", path_env())
        .current_dir(env.root())
        .arg("--root")
        .arg(env.root())
        .args([
            "run", "job.md", "--owner", "O", "--ttl", "600ms", "--grace", "1",
        ])
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start run");
    let pid_file = env.path("pid");
    let started = std::time::Instant::now();
    let group = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && text.ends_with('\n')
        {
            break Pid::from_raw(text.trim().parse().expect("a pid"));
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    kill(Pid::from_raw(run.id() as i32), Signal::SIGKILL).expect("kill run");
    run.wait().expect("reap run");
    // Every process of the command's group goes (orphans are reaped by init, not at once).
    let gone_by = std::time::Instant::now();
    while killpg(group, None).is_ok() {
        if gone_by.elapsed().as_secs() > 20 {
            let ps = Command::new("ps")
                .args(["-eo", "pid,ppid,pgid,stat,args"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let _ = killpg(group, Signal::SIGKILL);
            panic!("the command's group {group} outlived run:\n{ps}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_log_records_how_a_failed_command_ended() {
    let env = Env::new();
    let detail = |env: &Env| {
        let all = events(env);
        let last = all.last().expect("an event").clone();
        assert_eq!(last["event"], "release", "{all:?}");
        last["detail"].as_str().unwrap_or_default().to_string()
    };
    run_sh(&env, &[], &[], "exit 42").expect(42);
    assert!(
        detail(&env).contains("exited with code 42"),
        "{}",
        detail(&env)
    );
    run_sh(&env, &[], &[], "kill -KILL $$").expect(137);
    assert!(
        detail(&env).contains("killed by SIGKILL"),
        "{}",
        detail(&env)
    );
    env.fp(&[
        "run",
        "job.md",
        "--owner",
        "O",
        "--ttl",
        "30s",
        "--",
        "/no/such/program",
    ])
    .expect(127);
    assert!(
        detail(&env).contains("cannot run /no/such/program"),
        "{}",
        detail(&env)
    );
}

#[test]
fn resource_names_that_would_show_as_another_are_refused() {
    let env = Env::new();
    env.claim("doc.md", "A", 100, 0);
    let invisible = [
        ("evil\u{202e}dm.txt", "U+202E"),
        ("zero\u{200b}width.md", "U+200B"),
        ("\u{feff}bom.md", "U+FEFF"),
        ("soft\u{00ad}hyphen.md", "U+00AD"),
        ("reports/\u{2066}daily.md", "U+2066"),
    ];
    let padded = [
        " doc.md",
        "doc.md ",
        "reports /daily.md",
        "reports/ daily.md",
    ];
    let cases = invisible.iter().map(|(n, c)| (*n, *c)).chain(
        padded
            .iter()
            .map(|n| (*n, "leading or trailing white space")),
    );
    for (name, why) in cases {
        for args in [
            &["claim", name, "--owner", "B", "--ttl", "10"][..],
            &["write", name, "--epoch", "1"],
            &["status", name],
        ] {
            let done = env.fp(args).now(1).stdin("x").expect(2);
            assert_eq!(done.stderr.lines().count(), 1, "{args:?}: {}", done.stderr);
            assert!(
                done.stderr.starts_with("fencepost: resource \"") && done.stderr.contains(why),
                "{args:?}: {}",
                done.stderr
            );
            let escaped = format!("{name:?}");
            assert!(
                done.stderr.contains(&escaped)
                    && (name.contains(' ') || !done.stderr.contains(name)),
                "the name is shown quoted, escaped: {}",
                done.stderr
            );
        }
    }
    // Spaces inside a name are fine.
    env.claim("my report.md", "B", 10, 1);
    let j = env.fp(&["--json", "status"]).now(2).expect(0).json();
    assert_eq!(j["resources"].as_array().map(Vec::len), Some(2), "{j}");
}
