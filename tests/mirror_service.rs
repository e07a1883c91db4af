//! A mirror's follower as a service: `mirror --follow` says what it follows when it
//! starts, dates every line, stops on SIGTERM with exit 0 after the apply under way, and
//! is alone on its root (a second one is refused as `held`, a single pass still runs).
//! `verify` on a mirror root without `--store` checks it against the store the root is
//! bound to, and says how far behind it is and since when (`--max-lag` for monitoring);
//! `status --json` gives each document's epoch on the mirror and in the store. The
//! systemd unit in `dist/` runs options the binary has.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::harness::Env;
use crate::hosts::{Follower, Host, wait_for_file};
use crate::mirror_edges::publish;
use crate::support::pg;

/// `2026-12-02T18:30:01.123Z `, the start of every plain line a follower prints.
fn starts_with_a_utc_time(line: &str) -> bool {
    let Some((stamp, _)) = line.split_once(' ') else {
        return false;
    };
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ";
    stamp.len() == shape.len()
        && stamp.bytes().zip(shape.bytes()).all(|(c, s)| {
            if s == b'd' {
                c.is_ascii_digit()
            } else {
                c == s
            }
        })
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_follower_prints_a_dated_start_line_and_a_dated_line_per_apply() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v1");
    let m = Host::new(url);
    let follower = Follower::start(&m);
    let started = &follower.started;
    assert_eq!(started["store"], store.url(), "{started}");
    assert_eq!(
        started["root"],
        m.root.root().display().to_string(),
        "{started}"
    );
    assert_eq!(started["rescan_ms"], 60_000, "{started}");
    assert_eq!(started["pid"], follower.pid(), "{started}");
    assert!(started["time"].as_i64().is_some_and(|t| t > 0), "{started}");
    let first = follower.next_pass(Duration::from_secs(30));
    assert_eq!(first["applied"][0]["outcome"], "applied", "{first}");
    assert!(first["time"].as_i64().is_some_and(|t| t > 0), "{first}");
    let (status, rest) = follower.terminate();
    assert_eq!(status.code(), Some(0), "{status}: {rest:?}");

    // The plain lines: the start line names the store, the root and the rescan, and
    // each line starts with the time.
    publish(url, "doc.md", "A", "v2");
    let child = Follower::command(&m, &["mirror", "--follow", "--rescan", "90s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mirror --follow");
    wait_for_file(&m.root.path("doc.md"), b"v2", Duration::from_secs(30));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.iter().all(|l| starts_with_a_utc_time(l)), "{stdout}");
    let want = [
        format!(
            " following {} into {}, rescan 90s (pid {})",
            store.url(),
            m.root.root().display(),
            out_pid(pid)
        ),
        " applied doc.md (epoch 2)".to_string(),
        format!(
            " stopped following {} into {} on SIGTERM",
            store.url(),
            m.root.root().display()
        ),
    ];
    assert_eq!(lines.len(), want.len(), "{stdout}");
    for (line, want) in lines.iter().zip(&want) {
        assert!(
            line.ends_with(want.as_str()),
            "{line:?} does not end with {want:?}"
        );
    }
}

fn out_pid(pid: nix::unistd::Pid) -> i32 {
    pid.as_raw()
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn sigterm_stops_a_follower_with_exit_0_and_the_root_consistent() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v1");
    let m = Host::new(url);
    let follower = Follower::start(&m);
    follower.next_pass(Duration::from_secs(30));
    publish(url, "doc.md", "A", "v2");
    let pass = follower.next_pass(Duration::from_secs(30));
    assert_eq!(pass["applied"][0]["epoch"], 2, "{pass}");
    let pid = follower.pid();
    let (status, rest) = follower.terminate();
    // Before: killed by the signal (no exit code; the shell's 143).
    assert_eq!(status.code(), Some(0), "{status}");
    let stop = rest.last().expect("a stop line");
    assert_eq!(stop["outcome"], "stopped", "{stop}");
    assert_eq!(stop["signal"], "SIGTERM", "{stop}");
    assert_eq!(m.file("doc.md").as_deref(), Some(&b"v2"[..]));
    m.fp(&["verify"]).expect(0);
    // Its lock went with it: another follower starts.
    let next = Follower::start(&m);
    assert_ne!(next.started["pid"], pid, "{}", next.started);
    let (status, _) = next.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
}

#[cfg(feature = "failpoints")]
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn sigterm_during_an_apply_finishes_it_then_exits_0() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v1");
    let m = Host::new(url);
    m.fp(&["mirror"]).expect(0);
    publish(url, "doc.md", "A", "v2");
    // The follower's first pass applies v2 and is held after its rename, before the
    // mirror's COMMIT; SIGTERM arrives there.
    let cmd = Follower::command(&m, &["--json", "mirror", "--follow"]);
    let paused = crate::support::spawn_paused_command(cmd, b"", "write.after_rename");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(paused.pid).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let follower = Follower::of(paused.let_go());
    let (status, rest) = follower.finish();
    // Before: killed by the signal mid-apply, leaving it for `recover`.
    assert_eq!(status.code(), Some(0), "{status}: {rest:?}");
    let outcomes: Vec<&Value> = rest.iter().map(|l| &l["outcome"]).collect();
    assert_eq!(outcomes, ["mirrored", "stopped"], "{rest:?}");
    assert_eq!(rest[0]["applied"][0]["outcome"], "applied", "{rest:?}");
    // The whole new version, recorded: nothing left to recover.
    assert_eq!(m.file("doc.md").as_deref(), Some(&b"v2"[..]));
    m.fp(&["verify"]).expect(0);
    let status = m.fp(&["--json", "status"]).expect(0).json();
    assert_eq!(
        status["resources"][0]["document"]["state"], "matches",
        "{status}"
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_second_follower_on_one_root_is_refused_as_held() {
    let store = pg::store();
    let url = store.url();
    publish(url, "doc.md", "A", "v1");
    let m = Host::new(url);
    let follower = Follower::start(&m);
    follower.next_pass(Duration::from_secs(30));
    // Before: both ran, each applying every version.
    let second = m.fp(&["mirror", "--follow"]).expect(3);
    assert_eq!(second.stdout, "held\n", "{second:?}");
    let root = m.root.root().display().to_string();
    assert!(
        second.stderr.starts_with(&format!(
            "fencepost: {root} is followed already by pid {}: ",
            follower.pid()
        )),
        "{second:?}"
    );
    let json = m.fp(&["--json", "mirror", "--follow"]).expect(3).json();
    assert_eq!(json["outcome"], "held", "{json}");
    assert_eq!(json["holder_pid"], follower.pid(), "{json}");
    // A single pass beside the follower is safe, and runs.
    publish(url, "doc.md", "A", "v2");
    m.fp(&["mirror"]).expect(0);
    wait_for_file(&m.root.path("doc.md"), b"v2", Duration::from_secs(30));
    let (status, _) = follower.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
}

/// A mirror root one epoch behind a store on logical ticks: epoch 1 applied (written at
/// tick 1), epoch 2 written at tick 21 and not applied. Returns the host.
fn one_epoch_behind(url: &str) -> Host {
    let m = Host::new(url);
    m.claim_and_write("doc.md", "v1");
    m.fp(&["mirror"]).expect(0);
    let other = Env::new();
    let run = |args: &[&str]| {
        other
            .fp(args)
            .inside(other.root())
            .env("FENCEPOST_STORE", url)
    };
    run(&["claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(20)
        .expect_stdout(0, "2");
    run(&["write", "doc.md", "--epoch", "2"])
        .now(21)
        .stdin("v2")
        .expect_stdout(0, "written");
    m
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn verify_on_a_mirror_root_without_store_reads_its_store_and_says_it_is_behind() {
    let store = pg::store();
    let m = one_epoch_behind(store.url());
    // No --store: the root's own binding. Before: `ok: 1 resource consistent`.
    let done = m.root.fp(&["--json", "verify"]).now(100).expect(9);
    let j = done.json();
    let problem = &j["problems"][0];
    assert_eq!(problem["problem"], "behind", "{j}");
    assert_eq!(problem["mirror_epoch"], 1, "{j}");
    assert_eq!(problem["store_epoch"], 2, "{j}");
    assert_eq!(problem["since"], 21, "{j}");
    let plain = m.root.fp(&["verify"]).now(100).expect(9);
    assert_eq!(
        plain.stdout,
        "doc.md: behind: the mirror holds epoch 1, the store publishes epoch 2 since 21 \
         (run `fencepost mirror`)\n",
        "{plain:?}"
    );
    // Behind for 79 ticks: within 200 it is noted, over 50 it is a problem.
    let within = m
        .root
        .fp(&["verify", "--max-lag", "200"])
        .now(100)
        .expect(0);
    assert_eq!(
        within.stdout,
        "ok: 1 resource consistent\n\
         doc.md: behind for 79 ticks (mirror epoch 1, store epoch 2), within --max-lag\n",
        "{within:?}"
    );
    let j = m
        .root
        .fp(&["--json", "verify", "--max-lag", "200"])
        .now(100)
        .expect(0)
        .json();
    assert_eq!(j["problems"], serde_json::json!([]), "{j}");
    assert_eq!(j["lagging"][0]["since"], 21, "{j}");
    m.root.fp(&["verify", "--max-lag", "50"]).now(100).expect(9);
    // Brought up, it is consistent; its store agrees.
    m.fp(&["mirror"]).expect(0);
    m.root
        .fp(&["verify"])
        .now(100)
        .expect_stdout(0, "ok: 1 resource consistent");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn verify_on_a_mirror_root_whose_store_is_out_of_reach_exits_1() {
    let store = pg::store();
    // The store reached through a link to its socket folder, removed once the root is
    // bound: the store the root names is then out of reach.
    let url = store.url();
    let folder = url
        .split_once("host=")
        .and_then(|(_, rest)| rest.split('&').next())
        .expect("a socket folder in the test store's URL");
    let links = tempfile::tempdir().expect("a temp folder");
    let link = links.path().join("socket");
    std::os::unix::fs::symlink(folder, &link).expect("symlink");
    let linked = url.replacen(folder, &link.display().to_string(), 1);
    let m = Host::new(&linked);
    m.claim_and_write("doc.md", "v1");
    m.fp(&["mirror"]).expect(0);
    std::fs::remove_file(&link).expect("remove the link");
    let done = m.root.fp(&["verify"]).now(100).output();
    assert_eq!(done.code, 1, "{done:?}");
    let lines: Vec<&str> = done
        .stderr
        .lines()
        .filter(|l| !l.starts_with("hint:"))
        .collect();
    assert_eq!(lines.len(), 1, "{done:?}");
    assert!(lines[0].starts_with("fencepost: "), "{done:?}");
    assert!(lines[0].contains(&link.display().to_string()), "{done:?}");
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn status_on_a_mirror_root_gives_each_documents_epoch_on_the_mirror_and_in_the_store() {
    let store = pg::store();
    let m = one_epoch_behind(store.url());
    // Before: no such keys, and without --store only the mirror's own view.
    for run in [
        m.root.fp(&["--json", "status"]),
        m.fp(&["--json", "status"]),
    ] {
        let j = run.now(100).expect(0).json();
        let row = &j["resources"][0];
        assert_eq!(row["mirror_epoch"], 1, "{j}");
        assert_eq!(row["store_epoch"], 2, "{j}");
        assert_eq!(row["document"]["state"], "behind", "{j}");
    }
    // A host with no mirror root has no mirror epochs.
    let bare = Env::new();
    let j = bare
        .fp(&["--json", "status"])
        .inside(bare.root())
        .env("FENCEPOST_STORE", store.url())
        .now(100)
        .expect(0)
        .json();
    assert!(j["resources"][0].get("mirror_epoch").is_none(), "{j}");
}

#[test]
fn the_systemd_unit_runs_options_the_binary_has() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist/systemd/fencepost-mirror@.service");
    let text = std::fs::read_to_string(&path).expect("the systemd unit");
    let unit = crate::package::settings(&text, "Service");
    let setting = |key| crate::package::setting(&unit, key);
    for (key, want) in [
        ("Restart", "on-failure"),
        ("KillMode", "mixed"),
        ("KillSignal", "SIGTERM"),
        ("EnvironmentFile", "/etc/fencepost/mirror.env"),
    ] {
        assert_eq!(setting(key), want, "{key}");
    }
    // Held (another follower) is not restarted into.
    let prevent = setting("RestartPreventExitStatus");
    assert!(prevent.split_whitespace().any(|c| c == "3"), "{prevent}");
    // The variable the environment file sets is the one --store reads.
    let help = Env::new().fp(&["mirror", "--help"]).expect(0).stdout;
    assert!(help.contains("[env: FENCEPOST_STORE]"), "{help}");
    // The command line: fencepost, each option one `mirror --help` lists, and the whole
    // line accepted (with --help after it, so it parses and does not run).
    let exec = setting("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    let (program, args) = words.split_first().expect("a command");
    assert!(program.ends_with("/fencepost"), "{exec}");
    assert!(args.contains(&"--follow"), "{exec}");
    for option in args.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(option) || l.contains(&format!(", {option}"))),
            "{option} is not an option of fencepost mirror: {help}"
        );
    }
    let root = Env::new();
    let shown = root.root().display().to_string();
    let mut line: Vec<String> = args.iter().map(|a| a.replace("%f", &shown)).collect();
    line.push("--help".to_string());
    let line: Vec<&str> = line.iter().map(String::as_str).collect();
    let parsed = std::process::Command::new(crate::harness::bin())
        .env_clear()
        .args(&line)
        .output()
        .expect("run fencepost");
    assert_eq!(parsed.status.code(), Some(0), "{exec}: {parsed:?}");
}
