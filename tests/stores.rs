//! Behaviours checked against both stores besides the lease and sink tests: the README's
//! table of the sink's rules, row by row with its exit codes, and a write that fails or
//! crashes just before its COMMIT, which must leave neither its epoch nor its content.

use serde_json::Value;

use crate::support::{Backend, both_stores};

/// The README's table of the sink's rules: (the condition, the outcome word, the exit
/// code), one per row; a row without "exit N" succeeds (0).
fn readme_sink_rules() -> Vec<(String, String, i32)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let table = readme
        .split_once("| request compared with the sink | result |")
        .expect("the sink's rules table in README.md")
        .1;
    let mut rows = Vec::new();
    for line in table.lines().skip(2) {
        let Some(cells) = line.strip_prefix('|').and_then(|l| l.strip_suffix('|')) else {
            break;
        };
        let (condition, result) = cells.split_once('|').expect("two cells");
        let word = result
            .split('`')
            .nth(1)
            .expect("the result names its outcome in backquotes");
        let code = result.split_once("exit ").map_or(0, |(_, n)| {
            let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().expect("exit N")
        });
        rows.push((condition.trim().to_string(), word.to_string(), code));
    }
    rows
}

/// A write of a README row: its version (epoch, seq; seq 0: no `--seq`), owner and content.
#[derive(Debug, Clone, Copy)]
struct Request {
    epoch: i64,
    seq: i64,
    owner: Option<&'static str>,
    content: &'static str,
}

impl Request {
    /// `write RES --epoch E [--seq N] [--owner O]`'s arguments after `write`.
    fn args(&self, res: &str) -> Vec<String> {
        let mut args = vec![
            "write".to_string(),
            res.to_string(),
            "--epoch".to_string(),
            self.epoch.to_string(),
        ];
        if self.seq != 0 {
            args.extend(["--seq".to_string(), self.seq.to_string()]);
        }
        if let Some(owner) = self.owner {
            args.extend(["--owner".to_string(), owner.to_string()]);
        }
        args
    }
}

/// A `--json` write of `request` to `res` at tick `now`.
fn write(env: &Backend, res: &str, request: Request, now: i64, code: i32) -> Value {
    let owned = request.args(res);
    let mut args = vec!["--json"];
    args.extend(owned.iter().map(String::as_str));
    let content = request.content;
    env.fp(&args)
        .now(now)
        .stdin(content)
        .expect(code)
        .json_contract()
}

/// `status RES --json` at tick `now`: the resource's row.
fn row(env: &Backend, res: &str, now: i64) -> Value {
    env.fp(&["--json", "status", res]).now(now).expect(0).json()["resources"][0].clone()
}

/// The history a row of the README's table starts from, on `res`, and the write under
/// test.
fn set_up_row(env: &Backend, condition: &str, res: &str) -> Request {
    env.claim(res, "A", 10, 0);
    env.write(res, 1, "one", 1, 0);
    let request = |epoch, seq, content| Request {
        epoch,
        seq,
        owner: None,
        content,
    };
    if condition.starts_with("E lower than F") {
        env.claim(res, "B", 10, 10);
        env.write(res, 2, "two", 11, 0);
        request(1, 0, "late")
    } else if condition.starts_with("E higher than e") {
        env.claim(res, "B", 10, 10);
        request(2, 0, "two")
    } else if condition.starts_with("E equal to e, N higher than n") {
        request(1, 1, "next")
    } else if condition.starts_with("E equal to e, N equal to n, the same bytes") {
        request(1, 0, "one")
    } else if condition.starts_with("E equal to e, N equal to n, different bytes") {
        request(1, 0, "other")
    } else if condition.starts_with("E equal to e, N lower than n") {
        env.fp(&["write", res, "--epoch", "1", "--seq", "2"])
            .now(2)
            .stdin("two")
            .expect(0);
        request(1, 1, "one again")
    } else if condition.starts_with("E never issued") {
        // Issued to another owner (the row's parenthesis); an epoch never issued at all
        // is checked after it.
        Request {
            owner: Some("B"),
            ..request(1, 0, "other")
        }
    } else {
        panic!("a row of the README's sink table this test does not know: {condition}");
    }
}

/// Each row of the README's table, on resources of its own: the write the row describes
/// gets the row's outcome and exit code, in JSON and plain output alike; a refusal
/// changes neither the document nor the records and leaves nothing behind.
fn the_readmes_sink_rules_hold(env: &Backend) {
    let rules = readme_sink_rules();
    assert_eq!(rules.len(), 7, "{rules:?}");
    for (i, (condition, word, code)) in rules.into_iter().enumerate() {
        for json in [true, false] {
            let res = &format!("row{i}-{json}.md");
            let request = set_up_row(env, &condition, res);
            let before = (env.read(res), row(env, res, 12));
            if json {
                let j = write(env, res, request, 12, code);
                assert_eq!(j["outcome"], word.as_str(), "{condition}: {j}");
            } else {
                let args = request.args(res);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                env.fp(&args)
                    .now(12)
                    .stdin(request.content)
                    .expect_stdout(code, &word);
            }
            let after = (env.read(res), row(env, res, 12));
            if word == "written" {
                let content = request.content.as_bytes();
                assert_eq!(after.0.as_deref(), Some(content), "{condition}");
                let sink = &after.1["sink"];
                assert_eq!(sink["content_epoch"], request.epoch, "{condition}");
                assert_eq!(sink["seq"], request.seq, "{condition}");
            } else {
                assert_eq!(after, before, "{condition}: {word} changed something");
            }
            assert_eq!(env.debris(), Vec::<String>::new(), "{condition}");
            if word == "unissued" {
                let made_up = Request {
                    epoch: 9,
                    seq: 0,
                    owner: None,
                    content: "made up",
                };
                let j = write(env, res, made_up, 12, code);
                assert_eq!(j["outcome"], word.as_str(), "an epoch never issued: {j}");
                assert_eq!((env.read(res), row(env, res, 12)), before);
            }
        }
    }
}

/// A write that fails, or crashes, after deciding and recording its epoch but before its
/// COMMIT: neither its epoch nor its content stays (after `recover`, for the crash of a
/// local write, whose renamed file it undoes), nothing is left behind, and the same
/// write then succeeds.
fn a_write_failing_before_commit_leaves_neither_epoch_nor_content(env: &Backend) {
    for (i, action) in ["fail", "abort"].into_iter().enumerate() {
        let res = &format!("doc{i}.md");
        env.claim(res, "A", 10, 0);
        env.write(res, 1, "old (A)", 1, 0);
        env.fp(&["claim", res, "--owner", "B", "--ttl", "10", "--lazy-fence"])
            .now(10)
            .expect_stdout(0, "2");
        let before = row(env, res, 11);
        assert_eq!(before["sink"]["fence"], 1);
        let failed = env
            .fp(&["write", res, "--epoch", "2"])
            .now(11)
            .stdin("new (B)")
            .env("FAILPOINTS", &format!("txn.before_commit=return({action})"));
        if action == "fail" {
            failed.expect(1);
        } else {
            let done = failed.output();
            assert_eq!(done.code, -1, "killed by SIGABRT: {done:?}");
            env.fp(&["recover", res, "--grace", "0"]).now(11).expect(0);
        }
        let after = row(env, res, 11);
        assert_eq!(after["sink"], before["sink"], "{action}: {after}");
        assert_eq!(
            after["document"]["state"],
            env.current(),
            "{action}: {after}"
        );
        assert_eq!(env.text(res), "old (A)", "{action}");
        assert_eq!(env.debris(), Vec::<String>::new(), "{action}");
        env.write(res, 2, "new (B)", 12, 0);
        assert_eq!(env.text(res), "new (B)", "{action}");
        assert_eq!(row(env, res, 12)["sink"]["content_epoch"], 2, "{action}");
    }
}

/// The README's first table, third row: A's `write` process itself is paused after its
/// content is staged (uploaded, for a store) and before it takes the lock; B takes over,
/// writes and completes; A's write then finds B's epoch and is `stale`, its completion
/// `lost`, and B's document stays, with nothing of A's left behind.
fn a_worker_paused_inside_write_is_stale_after_the_takeover(env: &Backend) {
    let lazy = ["--ttl", "10", "--lazy-fence"];
    let claim = |owner: &str, now: i64| {
        let mut args = vec!["claim", "doc.md", "--owner", owner];
        args.extend(lazy);
        env.fp(&args).now(now).expect(0).stdout.trim().to_string()
    };
    assert_eq!(claim("A", 0), "1");
    let args = ["--json", "write", "doc.md", "--epoch", "1", "--owner", "A"];
    let a = env.spawn_paused(&args, 11, b"old (A)", "write.before_lock");
    assert_eq!(claim("B", 10), "2");
    env.fp(&["write", "doc.md", "--epoch", "2", "--owner", "B"])
        .now(10)
        .stdin("new (B)")
        .expect_stdout(0, "written");
    env.fp(&["complete", "doc.md", "--owner", "B", "--epoch", "2"])
        .now(10)
        .expect_stdout(0, "completed");
    let out = a.resume();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let j: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        (j["outcome"].as_str(), j["fence"].as_i64()),
        (Some("stale"), Some(2))
    );
    env.fp(&["complete", "doc.md", "--owner", "A", "--epoch", "1"])
        .now(11)
        .expect_stdout(4, "lost");
    assert_eq!(env.text("doc.md"), "new (B)");
    let r = row(env, "doc.md", 11);
    assert_eq!(r["lease"]["owner"], "B", "{r}");
    assert_eq!(r["lease"]["state"], "completed", "{r}");
    assert_eq!(r["sink"]["content_epoch"], 2, "{r}");
    assert_eq!(r["document"]["state"], env.current(), "{r}");
    assert_eq!(env.debris(), Vec::<String>::new());
}

/// Claims racing on a fresh store (which they create together): of those on one
/// resource exactly one gets epoch 1 and the others are `held`; those on resources of
/// their own all get epoch 1.
fn racing_first_claims_grant_one_epoch_and_hold_the_rest(env: &Backend) {
    let results: Vec<(String, i32, String)> = std::thread::scope(|scope| {
        let claims: Vec<_> = (0..8)
            .map(|w| {
                scope.spawn(move || {
                    let res = if w % 2 == 0 {
                        "doc.md".to_string()
                    } else {
                        format!("own{w}.md")
                    };
                    let owner = format!("w{w}");
                    let done = env
                        .fp(&["claim", &res, "--owner", &owner, "--ttl", "10"])
                        .now(0)
                        .output();
                    (res, done.code, done.stdout.trim().to_string())
                })
            })
            .collect();
        claims
            .into_iter()
            .map(|c| c.join().expect("a claim"))
            .collect()
    });
    let shared: Vec<_> = results.iter().filter(|(r, ..)| r == "doc.md").collect();
    let won: Vec<_> = shared.iter().filter(|(_, code, _)| *code == 0).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert_eq!(won[0].2, "1", "{results:?}");
    assert!(
        shared
            .iter()
            .all(|(_, code, out)| (*code, out.as_str()) == (0, "1")
                || (*code, out.as_str()) == (3, "held")),
        "{results:?}"
    );
    for (res, code, out) in results.iter().filter(|(r, ..)| r != "doc.md") {
        assert_eq!((*code, out.as_str()), (0, "1"), "{res}: {results:?}");
    }
    assert_eq!(row(env, "doc.md", 1)["lease"]["epoch"], 1);
}

both_stores!(
    the_readmes_sink_rules_hold,
    a_worker_paused_inside_write_is_stale_after_the_takeover,
    racing_first_claims_grant_one_epoch_and_hold_the_rest,
    a_write_failing_before_commit_leaves_neither_epoch_nor_content,
);

/// Ends every session of the store's schema but this one: the COMMIT of a command paused
/// just before it then meets a broken connection, and the command cannot know whether it
/// was made.
fn end_sessions(env: &Backend) {
    crate::support::pg::connect(env.url())
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = current_setting('application_name')
               AND pid <> pg_backend_pid()",
            &[],
        )
        .expect("end the paused command's session");
}

/// A command whose connection broke at COMMIT, and whose outcome a new session could not
/// learn either (failpoint `txn.resolving`, as with a server out of reach), exits 1 with a
/// hint that says what running it again will answer, each command its own; run again, it
/// is decided afresh (here the COMMIT never reached the server).
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_commit_whose_answer_is_lost_says_what_the_retry_tells() {
    let env = Backend::postgres();
    env.claim("other.md", "Z", 10, 0);
    let claim = ["claim", "doc.md", "--owner", "A", "--ttl", "10"];
    let complete = [
        "complete", "doc.md", "--owner", "A", "--epoch", "1", "--result", "ok",
    ];
    let write = ["write", "doc.md", "--epoch", "1"];
    let release = ["release", "doc.md", "--owner", "A", "--epoch", "2"];
    let cases: [(&[&str], &[u8], &str); 4] = [
        (
            &claim,
            b"",
            "claim again: if it was made, you get the same epoch back",
        ),
        (
            &write,
            b"v1",
            "a replay if it was made, else decided afresh",
        ),
        (
            &complete,
            b"",
            "complete again with the same --result: if it was made, the answer is \
             `completed`, marked as a replay",
        ),
        (
            &release,
            b"",
            "release again: if it was made, the answer is `released`, marked as a replay",
        ),
    ];
    for (i, (args, stdin, retry)) in cases.into_iter().enumerate() {
        let now = i64::try_from(i).expect("tick") + 1;
        if args[0] == "release" {
            assert_eq!(env.claim("doc.md", "A", 10, now), 2);
        }
        let paused = env.spawn_paused_also(args, now, stdin, "txn.before_commit", UNRESOLVED);
        end_sessions(&env);
        let out = paused.resume();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 2, "{args:?}: one line and a hint: {stderr}");
        assert!(
            lines[0].contains("broke at COMMIT: the change may or may not have been made"),
            "{args:?}: {stderr}"
        );
        assert!(
            lines[1].starts_with("hint: `fencepost status` (or `log`) tells whether it was made; ")
                && lines[1].contains(retry),
            "{args:?}: {stderr}"
        );
        // Not made: the same command again makes it.
        let again = env.fp(args).now(now).stdin(stdin.to_vec()).expect(0);
        assert_ne!(again.stdout.trim(), "replay", "{args:?}");
    }
}

/// Keeps a broken COMMIT unresolved: the new session that would ask the server what
/// became of it is not made, so the outcome stays unknown.
const UNRESOLVED: &str = "txn.resolving=return(unreachable)";

/// `run` never takes a live lease of its own owner back: when its claim's COMMIT breaks,
/// its hint says what running it again will answer instead (a store of its own: `run`
/// needs the wall clock).
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_run_whose_claim_answer_is_lost_says_it_will_be_held() {
    let env = Backend::postgres();
    let mut cmd = std::process::Command::new(crate::harness::bin());
    cmd.env_clear()
        .env("FENCEPOST_STORE", env.url())
        .current_dir(env.env().root())
        .args(["run", "job.md", "--owner", "A", "--ttl", "1h", "--", "true"]);
    let paused =
        crate::support::spawn_paused_command_also(cmd, b"", "txn.before_commit", UNRESOLVED);
    end_sessions(&env);
    let out = paused.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "run: {stderr}");
    assert!(
        stderr.contains(
            "the lease is held under this owner until its deadline and `run` answers `held`"
        ),
        "run: {stderr}"
    );
}

/// `write --unfenced` on a store would let any epoch make its bytes current for every
/// host: refused (exit 2, nothing changed) on old epochs, never-issued ones and
/// never-claimed resources, even with the reproduction's variable set once the store
/// exists; only a store made for the reproduction takes it.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn an_unfenced_write_is_refused_by_a_store_not_made_for_the_reproduction() {
    let env = Backend::postgres();
    assert_eq!(env.claim("doc.md", "A", 10, 0), 1);
    env.write("doc.md", 1, "A's old bytes", 1, 0);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    env.write("doc.md", 2, "B's bytes", 11, 0);
    let before = row(&env, "doc.md", 12);
    for (res, epoch, reproduction) in [
        ("doc.md", "1", false),
        ("doc.md", "999", false),
        ("new.md", "1", false),
        ("doc.md", "1", true),
    ] {
        let mut run = env
            .fp(&["write", res, "-e", epoch, "--unfenced"])
            .now(12)
            .stdin("late bytes");
        if reproduction {
            run = run.env("FENCEPOST_REPRODUCTION_STORE", "1");
        }
        let done = run.expect(2);
        assert_eq!(done.stdout, "", "{res} {epoch}");
        assert!(
            done.stderr
                .starts_with("fencepost: write --unfenced is refused by the store ")
                && done.stderr.contains("\nhint: drop --unfenced"),
            "{res} {epoch}: {}",
            done.stderr
        );
    }
    assert_eq!(env.text("doc.md"), "B's bytes");
    assert_eq!(row(&env, "doc.md", 12), before);
    env.fp(&["status", "new.md"]).now(12).expect(2);
    env.fp(&["verify"]).now(12).expect(0);
}

/// A store made for the reproduction (its first claim run with
/// `FENCEPOST_REPRODUCTION_STORE=1`) takes `write --unfenced`, and `verify` reports the
/// unfenced version it publishes (exit 9, naming the resource and epoch), and `status`
/// marks it.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn the_reproductions_store_takes_an_unfenced_write_and_verify_reports_it() {
    let env = Backend::postgres();
    env.fp(&["claim", "doc.md", "--owner", "A", "--ttl", "10"])
        .now(0)
        .env("FENCEPOST_REPRODUCTION_STORE", "1")
        .expect_stdout(0, "1");
    env.write("doc.md", 1, "A's bytes", 1, 0);
    assert_eq!(env.claim("doc.md", "B", 10, 10), 2);
    env.write("doc.md", 2, "B's bytes", 11, 0);
    env.fp(&["verify"]).now(12).expect(0);
    env.fp(&["write", "doc.md", "-e", "1", "--unfenced"])
        .now(12)
        .stdin("A's late bytes")
        .expect_stdout(0, "written");
    assert_eq!(env.text("doc.md"), "A's late bytes");
    let out = env.fp(&["--json", "verify"]).now(13).expect(9).json();
    let problems = out["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{out}");
    assert_eq!(problems[0]["resource"], "doc.md");
    assert_eq!(problems[0]["problem"], "unfenced");
    let plain = env.fp(&["verify"]).now(13).expect(9);
    assert!(
        plain
            .stdout
            .contains("doc.md: unfenced: the store publishes epoch 1 written with --unfenced"),
        "{}",
        plain.stdout
    );
    assert_eq!(row(&env, "doc.md", 13)["sink"]["unfenced"], true);
    let table = env.fp(&["status"]).now(13).expect(0).stdout;
    assert!(table.contains("epoch 1 unfenced"), "{table}");
    // A fenced write after it clears the mark.
    assert_eq!(env.claim("doc.md", "C", 10, 20), 3);
    env.write("doc.md", 3, "C's bytes", 21, 0);
    env.fp(&["verify"]).now(22).expect(0);
    assert_eq!(row(&env, "doc.md", 22)["sink"].get("unfenced"), None);
}
