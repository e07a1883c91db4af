//! The `--json` contract, key by key: for every command's answer and every refusal, the
//! set of keys (nested ones as `a.b`, array items as `a[].b`) is the one scripts were
//! given before the answers became types. A key that goes, comes or is renamed is a
//! change of the contract, and fails here.

use serde_json::Value;

use crate::harness::{Done, Env};
use crate::hosts::{Follower, Host};
use crate::support::pg;

/// Every key path of a JSON value, sorted.
fn keys(value: &Value) -> Vec<String> {
    fn walk(value: &Value, at: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let path = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    out.push(path.clone());
                    walk(inner, &path, out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{at}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out.sort();
    out.dedup();
    out
}

#[track_caller]
fn assert_keys(done: &Done, want: &[&str]) {
    let got = keys(&done.json_contract());
    let mut want = want.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "stdout: {}", done.stdout);
}

const LEASE: [&str; 5] = ["owner", "epoch", "deadline", "state", "result"];

/// `want` with a lease object's keys under each of `at`.
fn with_lease(want: &[&str], at: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = want.iter().map(|k| (*k).to_string()).collect();
    for base in at {
        all.extend(LEASE.iter().map(|k| format!("{base}.{k}")));
    }
    all.sort();
    all
}

#[track_caller]
fn assert_keys_owned(done: &Done, want: &[String]) {
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_keys(done, &want);
}

#[test]
fn lease_answers_keep_their_keys() {
    let env = Env::new();
    let claimed = env
        .fp(&["--json", "claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .expect(0);
    let claim_keys = [
        "deadline",
        "epoch",
        "fenced_at_sink",
        "outcome",
        "owner",
        "previous",
        "resource",
    ];
    assert_keys(&claimed, &claim_keys);
    // A takeover names the lease it replaced.
    let took = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(10)
        .expect(0);
    assert_keys_owned(&took, &with_lease(&claim_keys, &["previous"]));
    let holder = ["doc.md", "--owner", "B", "--epoch", "2"];
    let renewed = env
        .fp(&[&["--json", "renew"][..], &holder, &["--ttl", "10"]].concat())
        .now(11)
        .expect(0);
    assert_keys(
        &renewed,
        &["deadline", "epoch", "outcome", "owner", "resource"],
    );
    let completed = env
        .fp(&[&["--json", "complete"][..], &holder, &["--result", "ok"]].concat())
        .now(12)
        .expect(0);
    assert_keys(
        &completed,
        &["epoch", "outcome", "owner", "resource", "result"],
    );
    let replayed = env
        .fp(&[&["--json", "complete"][..], &holder, &["--result", "ok"]].concat())
        .now(12)
        .expect(0);
    assert_keys(
        &replayed,
        &["epoch", "outcome", "owner", "replay", "resource", "result"],
    );
    env.claim("doc.md", "C", 10, 13);
    let released = env
        .fp(&[
            "--json", "release", "doc.md", "--owner", "C", "--epoch", "3",
        ])
        .now(14)
        .expect(0);
    assert_keys(&released, &["epoch", "outcome", "owner", "resource"]);
    // Replays (a retry of a change already made; the complete's above) add `replay`,
    // and only they.
    let replayed = env
        .fp(&[
            "--json", "release", "doc.md", "--owner", "C", "--epoch", "3",
        ])
        .now(14)
        .expect(0);
    assert_keys(
        &replayed,
        &["epoch", "outcome", "owner", "replay", "resource"],
    );
    env.claim("doc.md", "D", 10, 16);
    let replayed = env
        .fp(&["--json", "claim", "doc.md", "--owner", "D", "--ttl", "10"])
        .now(17)
        .expect(0);
    let mut replay_keys = claim_keys.to_vec();
    replay_keys.push("replay");
    assert_keys(&replayed, &replay_keys);
}

#[test]
fn lease_refusals_keep_their_keys() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    let held = env
        .fp(&["--json", "claim", "doc.md", "--owner", "B", "--ttl", "10"])
        .now(1)
        .expect(3);
    let held_keys = with_lease(
        &[
            "deadline",
            "epoch",
            "error",
            "holder",
            "holder_epoch",
            "lease",
            "outcome",
            "owner",
            "resource",
            "waited_ms",
        ],
        &["lease"],
    );
    assert_keys_owned(&held, &held_keys);
    // Lost, with the lease as it now is, and with none at all.
    let lost_keys = [
        "epoch", "error", "lease", "outcome", "owner", "reason", "resource",
    ];
    let lost = env
        .fp(&[
            "--json", "renew", "doc.md", "--owner", "B", "--epoch", "1", "--ttl", "5",
        ])
        .now(2)
        .expect(4);
    assert_keys_owned(&lost, &with_lease(&lost_keys, &["lease"]));
    env.claim("other.md", "A", 10, 0);
    let never = env
        .fp(&[
            "--json", "complete", "none.md", "--owner", "B", "--epoch", "1",
        ])
        .now(2)
        .expect(4);
    assert_keys(&never, &lost_keys);
    let expired = env
        .fp(&[
            "--json", "release", "doc.md", "--owner", "A", "--epoch", "1",
        ])
        .now(10)
        .expect(4);
    assert_keys_owned(&expired, &with_lease(&lost_keys, &["lease"]));
}

#[test]
fn write_answers_and_refusals_keep_their_keys() {
    let env = Env::new();
    let write = |epoch: &str, owner: Option<&str>, content: &str, now: i64, code: i32| {
        let mut args = vec!["--json", "write", "doc.md", "--epoch", epoch];
        if let Some(owner) = owner {
            args.extend(["--owner", owner]);
        }
        env.fp(&args).now(now).stdin(content).expect(code)
    };
    env.claim("other.md", "A", 10, 0);
    let unissued = write("1", None, "a", 0, 8);
    assert_keys(
        &unissued,
        &[
            "epoch", "error", "issued", "outcome", "owner", "resource", "seq",
        ],
    );
    env.claim("doc.md", "A", 10, 0);
    let accepted = [
        "epoch",
        "outcome",
        "owner",
        "previous_fence",
        "resource",
        "seq",
        "sha256",
        "size",
        "unfenced",
    ];
    assert_keys(&write("1", None, "a", 1, 0), &accepted);
    assert_keys(&write("1", Some("A"), "a", 2, 0), &accepted);
    assert_keys(
        &write("1", None, "b", 3, 6),
        &[
            "epoch",
            "error",
            "fence",
            "outcome",
            "owner",
            "recorded_sha256",
            "resource",
            "seq",
        ],
    );
    assert_keys(
        &write("1", Some("B"), "a", 4, 8),
        &[
            "epoch",
            "error",
            "issued_to",
            "outcome",
            "owner",
            "resource",
            "seq",
        ],
    );
    env.claim("doc.md", "B", 10, 10);
    assert_keys(
        &write("1", None, "c", 11, 5),
        &[
            "epoch", "error", "fence", "outcome", "owner", "resource", "seq",
        ],
    );
    // Bad input: the envelope alone.
    assert_keys(
        &write("0", None, "c", 12, 2),
        &["epoch", "error", "outcome", "resource"],
    );
}

#[test]
fn remove_answers_keep_their_keys() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    env.write("doc.md", 1, "a", 1, 0);
    let remove = |seq: &str, now: i64, code: i32| {
        env.fp(&["--json", "remove", "doc.md", "--epoch", "1", "--seq", seq])
            .now(now)
            .expect(code)
    };
    let removed = [
        "epoch",
        "had_document",
        "outcome",
        "owner",
        "previous_fence",
        "removed",
        "resource",
        "seq",
    ];
    assert_keys(&remove("2", 2, 0), &removed);
    // The same removal again: a replay, with the same keys.
    assert_keys(&remove("2", 3, 0), &removed);
    assert_keys(
        &remove("1", 4, 5),
        &[
            "epoch", "error", "fence", "outcome", "owner", "resource", "seq",
        ],
    );
}

/// A root with a written document and a claimed one.
fn two_resources() -> Env {
    let env = Env::new();
    env.claim("doc.md", "A", 100, 0);
    env.write("doc.md", 1, "a", 1, 0);
    env.claim("empty.md", "A", 100, 0);
    env
}

#[test]
fn status_keeps_its_keys() {
    let env = two_resources();
    let row = [
        "resources",
        "resources[].document",
        "resources[].document.sha256",
        "resources[].document.size",
        "resources[].document.state",
        "resources[].lease",
        "resources[].resource",
        "resources[].sink",
        "resources[].sink.content_epoch",
        "resources[].sink.fence",
        "resources[].sink.removed",
        "resources[].sink.seq",
        "resources[].sink.sha256",
        "resources[].sink.size",
        "resources[].sink.written_at",
    ];
    let status_keys = with_lease(
        &[&["epoch", "now", "outcome", "resource"][..], &row].concat(),
        &["resources[].lease"],
    );
    let status = env.fp(&["--json", "status"]).now(2).expect(0);
    assert_keys_owned(&status, &status_keys);
    let one = env.fp(&["--json", "status", "doc.md"]).now(2).expect(0);
    assert_keys_owned(&one, &status_keys);
}

#[test]
fn log_keeps_its_keys() {
    let env = two_resources();
    let event = [
        "events",
        "events[].at",
        "events[].detail",
        "events[].epoch",
        "events[].event",
        "events[].host",
        "events[].id",
        "events[].owner",
        "events[].pid",
        "events[].prev_epoch",
        "events[].prev_owner",
        "events[].refused",
        "events[].resource",
        "events[].sha256",
    ];
    let log_keys = [&["epoch", "outcome", "resource"][..], &event].concat();
    assert_keys(&env.fp(&["--json", "log"]).now(2).expect(0), &log_keys);
    assert_keys(
        &env.fp(&["--json", "log", "doc.md"]).now(2).expect(0),
        &log_keys,
    );
    assert_keys(
        &env.fp(&["--json", "log", "--prune"]).now(2).expect(0),
        &["dropped", "epoch", "keep", "outcome", "resource"],
    );
}

#[test]
fn verify_recover_and_man_keep_their_keys() {
    let env = two_resources();
    let verified = ["checked", "epoch", "outcome", "problems", "resource"];
    assert_keys(&env.fp(&["--json", "verify"]).now(2).expect(0), &verified);
    std::fs::write(env.path("doc.md"), "edited").expect("edit by hand");
    assert_keys(
        &env.fp(&["--json", "verify"]).now(2).expect(9),
        &[
            "checked",
            "epoch",
            "error",
            "outcome",
            "problems",
            "problems[].message",
            "problems[].problem",
            "problems[].resource",
            "resource",
        ],
    );
    // A dead writer's temp file, for recover to remove.
    std::fs::write(env.path(".doc.md.fencepost-tmp-dead"), "x").expect("temp");
    assert_keys(
        &env.fp(&["--json", "recover"]).now(3).expect(0),
        &[
            "epoch",
            "outcome",
            "resource",
            "resources",
            "resources[].action",
            "resources[].resource",
            "resources[].temps_removed",
        ],
    );
    let pages = env.path("man");
    let dir = pages.to_str().expect("utf-8 path");
    assert_keys(
        &env.fp(&["--json", "man", "--dir", dir]).expect(0),
        &["dir", "epoch", "outcome", "resource"],
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn mirror_and_recover_with_a_store_keep_their_keys() {
    let store = pg::store();
    let writer = Host::new(store.url());
    writer.claim_and_write("doc.md", "v1");
    let mirrored = [
        "applied",
        "applied[].epoch",
        "applied[].outcome",
        "applied[].removed",
        "applied[].resource",
        "applied[].seq",
        "applied[].sha256",
        "epoch",
        "outcome",
        "resource",
        "root",
        "store",
    ];
    let mirror = Host::new(store.url());
    assert_keys(&mirror.fp(&["--json", "mirror"]).expect(0), &mirrored);
    assert_keys(
        &mirror.fp(&["--json", "mirror", "doc.md"]).expect(0),
        &mirrored,
    );
    // Each pass of --follow that applies something prints an object of the same keys,
    // and its time; its start and stop lines have theirs.
    let follows = Host::new(store.url());
    let follower = Follower::start(&follows);
    let pass = follower.next_pass(std::time::Duration::from_secs(30));
    let mut passed = mirrored.to_vec();
    passed.push("time");
    passed.sort_unstable();
    assert_eq!(keys(&pass), passed, "{pass}");
    let started = [
        "epoch",
        "outcome",
        "pid",
        "rescan_ms",
        "resource",
        "root",
        "store",
        "time",
    ];
    assert_eq!(keys(&follower.started), started, "{}", follower.started);
    let (_, rest) = follower.terminate();
    let stopped = [
        "epoch", "outcome", "resource", "root", "signal", "store", "time",
    ];
    let last = rest.last().expect("a stop line");
    assert_eq!(keys(last), stopped, "{last}");
    // recover says how many orphan blobs it removed; without a root it has no
    // resources of its own to recover, with a mirror root it reports the mirror's.
    let recovered = ["blobs_removed", "epoch", "outcome", "resource", "resources"];
    let done = mirror
        .fp(&["--json", "recover"])
        .inside(Env::new().root())
        .expect(0);
    assert_keys(&done, &recovered);
    let mut recovered = recovered.to_vec();
    recovered.extend([
        "resources[].action",
        "resources[].resource",
        "resources[].temps_removed",
    ]);
    assert_keys(&mirror.fp(&["--json", "recover"]).expect(0), &recovered);
}

#[test]
fn a_row_or_a_resource_that_cannot_be_read_back_keeps_its_keys() {
    let env = Env::new();
    env.claim("good.md", "A", 100, 0);
    let db = rusqlite::Connection::open(env.path(".fencepost/state.db")).expect("open");
    db.execute(
        "INSERT INTO lease (resource, owner, epoch, deadline, state, result, updated_at)
         VALUES ('x.fencepost-y/doc.md', 'old', 1, 100, 'held', NULL, 0)",
        [],
    )
    .expect("insert a row no longer valid");
    drop(db);
    let status = env.fp(&["--json", "status"]).now(1).expect(0);
    let got = keys(&status.json());
    assert!(
        got.contains(&"resources[].document.problem".to_string()),
        "{got:?}"
    );
    assert_keys(
        &env.fp(&["--json", "recover"]).now(1).expect(2),
        &[
            "epoch",
            "error",
            "outcome",
            "resource",
            "resources",
            "resources[].action",
            "resources[].error",
            "resources[].resource",
            "resources[].temps_removed",
        ],
    );
}

#[test]
fn run_answers_keep_their_keys() {
    let env = Env::new();
    let run = |owner: &str, script: &str, code: i32| {
        env.fp(&[
            "--json", "run", "doc.md", "--owner", owner, "--ttl", "30s", "--", "sh", "-c", script,
        ])
        .env("PATH", &std::env::var("PATH").unwrap_or_default())
        .expect(code)
    };
    let exit = [
        "epoch",
        "exit_code",
        "exit_from",
        "outcome",
        "owner",
        "resource",
    ];
    assert_keys(&run("A", "true", 0), &[&exit[..], &["result"]].concat());
    assert_keys(&run("A", "exit 3", 3), &[&exit[..], &["error"]].concat());
    // The command itself takes the lease over, and waits to be stopped for it.
    let taken = "python3 -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
                 c.executescript(\\\"UPDATE lease SET epoch = epoch + 1, owner = 'X', \
                 deadline = 9000000000000 WHERE resource = 'doc.md'\\\")\" \"$FENCEPOST_DB\" \
                 && exec sleep 60";
    let lost = env
        .fp(&[
            "--json", "run", "doc.md", "--owner", "A", "--ttl", "3s", "--grace", "0", "--", "sh",
            "-c", taken,
        ])
        .env("PATH", &std::env::var("PATH").unwrap_or_default())
        .expect(4);
    // Lost, with the lease of whoever took it over (X's).
    assert_keys_owned(
        &lost,
        &with_lease(&[&exit[..], &["error", "lease"]].concat(), &["lease"]),
    );
    let held = run("B", "true", 3);
    let held_keys = with_lease(
        &[
            "deadline",
            "epoch",
            "error",
            "exit_code",
            "exit_from",
            "holder",
            "holder_epoch",
            "lease",
            "outcome",
            "owner",
            "resource",
            "waited_ms",
        ],
        &["lease"],
    );
    assert_keys_owned(&held, &held_keys);
}

#[test]
fn init_keeps_its_keys() {
    let env = Env::new();
    let keys = ["db", "epoch", "outcome", "resource", "root"];
    assert_keys(&env.fp(&["--json", "init"]).expect(0), &keys);
    assert_keys(&env.fp(&["--json", "init"]).expect(0), &keys);
}
