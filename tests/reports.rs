//! Reports that never lie by omission: `status`, `verify` and `recover` show every row of
//! the state file, a row they cannot read back or check included; and a command that reads
//! state where there is none, or names a resource the state file never saw, says so (exit
//! 2) instead of reporting "all is well".

use crate::harness::Env;

/// Adds a lease and a sink record under `name` straight into the state file, as an older
/// fencepost (or a hand) could have left them.
fn insert_row(env: &Env, name: &str) {
    let db = rusqlite::Connection::open(env.path(".fencepost/state.db")).expect("open state file");
    db.execute(
        "INSERT INTO lease (resource, owner, epoch, deadline, state, result, updated_at)
         VALUES (?1, 'old', 1, 100, 'held', NULL, 0)",
        [name],
    )
    .expect("insert lease");
    db.execute(
        "INSERT INTO sink (resource, fence, content_epoch, sha256, size, written_at)
         VALUES (?1, 1, 1, 'ab', 2, 0)",
        [name],
    )
    .expect("insert sink");
}

#[test]
fn a_stored_name_that_no_longer_passes_the_rules_is_reported_not_skipped() {
    let env = Env::new();
    env.claim("good.md", "A", 100, 0);
    env.write("good.md", 1, "good", 1, 0);
    insert_row(&env, "x.fencepost-y/doc.md");
    // The only problem is the bad row: verify must not say ok.
    let done = env.fp(&["--json", "verify"]).now(2).expect(9);
    let problems = done.json()["problems"].clone();
    assert_eq!(problems.as_array().map(Vec::len), Some(1), "{problems}");
    assert_eq!(problems[0]["resource"], "x.fencepost-y/doc.md");
    assert_eq!(problems[0]["problem"], "invalid");
    assert_eq!(done.json()["checked"], 2);
}

#[test]
fn one_bad_row_never_stops_the_report_on_the_others() {
    let env = Env::new();
    env.claim("good.md", "A", 100, 0);
    env.write("good.md", 1, "good", 1, 0);
    env.claim("drift.md", "A", 100, 1);
    env.write("drift.md", 1, "recorded", 2, 0);
    std::fs::write(env.path("drift.md"), "edited by hand").expect("edit");
    // A name too long for any path, one with a newline (it would break one-line output),
    // one that uses the tool's reserved marker.
    let long = format!("{}doc.md", format!("{}/", "f".repeat(150)).repeat(28));
    for bad in [long.as_str(), "two\nlines/doc.md", "x.fencepost-y/doc.md"] {
        insert_row(&env, bad);
    }
    // A dead writer's temp file: recover must still remove it.
    std::fs::write(env.path(".good.md.fencepost-tmp-abandoned"), "x").expect("temp");

    let status = env.fp(&["--json", "status"]).now(3).expect(0).json();
    let rows = status["resources"].as_array().expect("rows");
    assert_eq!(rows.len(), 5, "{status}");
    let state_of = |name: &str| {
        rows.iter()
            .find(|r| r["resource"] == name)
            .map(|r| r["document"]["state"].clone())
            .unwrap_or_else(|| panic!("no row for {name:?}: {status}"))
    };
    assert_eq!(state_of("good.md"), "matches");
    assert_eq!(state_of("drift.md"), "drifted");
    for bad in [long.as_str(), "two\nlines/doc.md", "x.fencepost-y/doc.md"] {
        assert_eq!(state_of(bad), "invalid", "{bad:?}");
    }
    let plain = env.fp(&["status"]).now(3).expect(0).stdout;
    assert!(
        plain.contains("\"two\\nlines/doc.md\": invalid: "),
        "{plain}"
    );
    assert!(plain.contains("x.fencepost-y/doc.md: invalid: "), "{plain}");
    assert_eq!(
        plain.lines().count(),
        1 + 5 + 3,
        "one line per row and per problem: {plain}"
    );

    verify_and_recover_every_row(&env, &long);
}

/// `verify` and `recover` on the state file of
/// `one_bad_row_never_stops_the_report_on_the_others`: every row is checked or tidied,
/// the bad ones included.
fn verify_and_recover_every_row(env: &Env, long: &str) {
    let verify = env.fp(&["--json", "verify"]).now(3).expect(9).json();
    let problems = verify["problems"].as_array().expect("problems");
    let kinds: Vec<(String, String)> = problems
        .iter()
        .map(|p| {
            (
                p["resource"].as_str().expect("name").to_string(),
                p["problem"].as_str().expect("kind").to_string(),
            )
        })
        .collect();
    assert!(
        kinds.contains(&("drift.md".into(), "drifted".into())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("good.md".into(), "leftover-temp".into())),
        "{kinds:?}"
    );
    for bad in [long, "two\nlines/doc.md", "x.fencepost-y/doc.md"] {
        assert!(
            kinds.contains(&(bad.into(), "invalid".into())),
            "{bad:?}: {kinds:?}"
        );
    }
    assert_eq!(verify["checked"], 5);

    let recover = env.fp(&["recover"]).now(4).expect(2);
    assert!(
        recover
            .stdout
            .contains("good.md: nothing to do, 1 temp file removed"),
        "{}",
        recover.stdout
    );
    assert!(
        recover
            .stdout
            .contains("x.fencepost-y/doc.md: not recovered: "),
        "{}",
        recover.stdout
    );
    assert!(
        recover
            .stdout
            .contains("\"two\\nlines/doc.md\": not recovered: "),
        "{}",
        recover.stdout
    );
    assert!(
        recover.stderr.contains("3 of 5 resources not recovered"),
        "{}",
        recover.stderr
    );
    assert!(
        !env.path(".good.md.fencepost-tmp-abandoned").exists(),
        "the good row was not recovered"
    );
}

#[test]
fn reading_where_there_is_no_state_file_is_bad_input() {
    let env = Env::new();
    std::fs::write(env.path("doc.md"), "not fenced").expect("file");
    let no_state = |args: &[&str], stdin: &str| {
        let done = env.fp(args).now(1).stdin(stdin).expect(2);
        assert!(
            done.stderr.starts_with("fencepost: no state file at "),
            "{args:?}: {}",
            done.stderr
        );
        assert!(
            done.stderr.contains("\nhint: "),
            "{args:?}: {}",
            done.stderr
        );
        done
    };
    let done = no_state(&["verify"], "");
    assert!(done.stderr.contains("nothing to verify"), "{}", done.stderr);
    assert_eq!(done.stdout, "", "verify must not say ok");
    no_state(&["verify", "doc.md"], "");
    no_state(&["status"], "");
    no_state(&["status", "doc.md"], "");
    no_state(&["log"], "");
    no_state(&["log", "--prune"], "");
    no_state(&["recover"], "");
    no_state(&["recover", "doc.md"], "");
    // Only claim makes a state file: a change of anything else has nothing to change.
    no_state(
        &[
            "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "5",
        ],
        "",
    );
    no_state(&["complete", "doc.md", "--owner", "A", "--epoch", "1"], "");
    no_state(&["release", "doc.md", "--owner", "A", "--epoch", "1"], "");
    no_state(&["write", "doc.md", "--epoch", "1", "--unfenced"], "new");
    assert_eq!(env.files(), ["doc.md"]);
    assert!(!env.path(".fencepost").exists(), "a state file was made");
    assert_eq!(env.text("doc.md"), "not fenced");
    // JSON says the same.
    let j = env
        .fp(&["--json", "verify"])
        .now(1)
        .expect(2)
        .json_contract();
    assert_eq!(j["outcome"], "usage");
}

#[test]
fn a_name_the_state_file_never_saw_is_bad_input() {
    let env = Env::new();
    env.claim("doc.md", "A", 10, 0);
    for args in [
        &["verify", "nothere.md"][..],
        &["status", "nothere.md"],
        &["log", "nothere.md"],
    ] {
        let done = env.fp(args).now(1).expect(2);
        assert!(
            done.stderr.contains("has never seen nothere.md"),
            "{args:?}: {}",
            done.stderr
        );
        assert_eq!(done.stdout, "", "{args:?}");
    }
    env.fp(&["verify", "doc.md"]).now(1).expect(0);
    env.fp(&["status", "doc.md"]).now(1).expect(0);
    env.fp(&["log", "doc.md"]).now(1).expect(0);
}

#[test]
fn log_prune_refuses_another_roots_state_file() {
    let env = Env::new();
    std::fs::create_dir(env.path("a")).expect("mkdir");
    env.fp(&[
        "--db",
        "shared.db",
        "claim",
        "doc.md",
        "--owner",
        "A",
        "--ttl",
        "10",
    ])
    .root(&env.path("a"))
    .now(0)
    .expect(0);
    let db = env.path("a/shared.db");
    let db = db.to_str().expect("utf-8");
    let other = env.path("b");
    std::fs::create_dir(&other).expect("mkdir");
    let done = env
        .fp(&["--db", db, "--log-keep", "1", "log", "--prune"])
        .root(&other)
        .now(1)
        .expect(2);
    assert!(
        done.stderr.contains("belongs to the publish root"),
        "{}",
        done.stderr
    );
    let events = env
        .fp(&["--db", "shared.db", "--json", "log"])
        .root(&env.path("a"))
        .now(1)
        .expect(0)
        .json()["events"]
        .as_array()
        .map(Vec::len);
    assert_eq!(events, Some(1), "the other root pruned the log");
}

/// Names from before today's rules that show as other names (an invisible or
/// direction-changing character, a component with a leading or trailing space) are
/// shown by `status`, `verify` and `log` quoted with their characters escaped, never raw,
/// and reported as `invalid`.
#[test]
fn a_stored_name_that_shows_as_another_is_shown_escaped() {
    let env = Env::new();
    env.claim("doc.md", "A", 100, 0);
    let names = ["evil\u{202e}dm.txt", "doc.md ", "zero\u{200b}width.md"];
    let db = rusqlite::Connection::open(env.path(".fencepost/state.db")).expect("open");
    for name in names {
        insert_row(&env, name);
        db.execute(
            "INSERT INTO log (at, resource, event, owner, epoch, pid, host)
             VALUES (0, ?1, 'claim', 'old', 1, 1, 'h')",
            [name],
        )
        .expect("insert log row");
    }
    let shown = [
        "\"evil\\u{202e}dm.txt\"",
        "\"doc.md \"",
        "\"zero\\u{200b}width.md\"",
    ];
    let status = env.fp(&["status"]).now(1).expect(0).stdout;
    let verify = env.fp(&["verify"]).now(1).expect(9).stdout;
    let log = env.fp(&["log"]).now(1).expect(0).stdout;
    for (what, out) in [("status", &status), ("verify", &verify), ("log", &log)] {
        for (name, shown) in names.iter().zip(shown) {
            assert!(out.contains(shown), "{what} shows {shown}: {out}");
            if name.ends_with(' ') {
                continue;
            }
            assert!(!out.contains(name), "{what} shows {name:?} raw: {out}");
        }
    }
    for (name, shown) in names.iter().zip(shown) {
        assert!(
            status.contains(&format!("{shown}: invalid: ")),
            "{name:?}: {status}"
        );
    }
    let j = env.fp(&["--json", "status"]).now(1).expect(0).json();
    assert_eq!(j["resources"].as_array().map(Vec::len), Some(4), "{j}");
}
