//! Bad input with `--store`: each is one `fencepost:` line (and a hint) with its exit
//! code, and changes nothing, neither in the store nor on this host: an unreachable
//! server, a database whose `fencepost_*` table someone else made, a mirror root pointed
//! at another store or asked for a claim of its own, options that contradict `--store`,
//! a resource locked by another session past `--busy-timeout`, a malformed key=value
//! connection string; the orphan blob a writer killed after its upload leaves, which
//! `recover` removes; and a well-formed key=value string, which reaches the store as its
//! URL does.

use std::path::Path;

use postgres::Client;

use crate::harness::{Env, Run};
use crate::hosts::Host;
use crate::support::pg::{self, TestStore};

/// Every row of every table of the store, as text, sorted: what "nothing changed"
/// compares.
fn dump(client: &mut Client) -> Vec<String> {
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() ORDER BY 1",
            &[],
        )
        .expect("list tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut rows = Vec::new();
    for table in tables {
        let sql = format!("SELECT {table}::text FROM {table} ORDER BY 1");
        for row in client.query(&sql, &[]).expect("read a table") {
            rows.push(format!("{table}: {}", row.get::<_, String>(0)));
        }
    }
    rows
}

/// Names in `dir`, sorted (hidden ones included).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A `fencepost` command against `url` run in `dir` without a root.
fn in_folder(dir: &Env, url: &str, args: &[&str]) -> Run {
    dir.fp(args).inside(dir.root()).env("FENCEPOST_STORE", url)
}

/// A published version of `res` in `store` (claimed by A at tick 0, written at 1).
fn publish(store: &TestStore, res: &str, bytes: &str) {
    let dir = Env::new();
    in_folder(
        &dir,
        store.url(),
        &["claim", res, "--owner", "A", "--ttl", "10"],
    )
    .now(0)
    .expect_stdout(0, "1");
    in_folder(&dir, store.url(), &["write", res, "--epoch", "1"])
        .now(1)
        .stdin(bytes)
        .expect_stdout(0, "written");
}

#[test]
fn an_unreachable_server_is_exit_1_and_creates_nothing_here() {
    // A socket folder with no server in it: nothing listens, nothing is there to start.
    let empty = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "postgresql:///fencepost?host={}&user=postgres",
        empty.path().display()
    );
    let cwd = Env::new();
    let mirror = Env::new();
    let cases: [(&[&str], &str); 6] = [
        (&["claim", "doc.md", "--owner", "A", "--ttl", "10"], ""),
        (&["write", "doc.md", "--epoch", "1"], "bytes"),
        (&["status"], ""),
        (&["cat", "doc.md"], ""),
        (&["log"], ""),
        (&["verify"], ""),
    ];
    for (args, stdin) in cases {
        let done = in_folder(&cwd, &url, args).stdin(stdin).expect(1);
        let first = done.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("fencepost: cannot reach the store postgresql:///fencepost?"),
            "{args:?}: {}",
            done.stderr
        );
        assert!(done.stderr.contains("hint: "), "{args:?}: {}", done.stderr);
        // With a root given, it is a mirror: not even its .fencepost/ is made.
        cwd.fp(args)
            .root(mirror.root())
            .env("FENCEPOST_STORE", &url)
            .stdin(stdin)
            .expect(1);
    }
    cwd.fp(&["mirror"])
        .root(mirror.root())
        .env("FENCEPOST_STORE", &url)
        .expect(1);
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
    assert_eq!(entries(mirror.root()), Vec::<String>::new());
    assert_eq!(entries(empty.path()), Vec::<String>::new());
}

#[test]
fn options_that_contradict_the_store_are_bad_usage() {
    let cwd = Env::new();
    let url = "postgresql:///fencepost?host=/nonexistent&user=postgres";
    // --db and --store name two places for the state.
    let db = cwd.path("elsewhere.db");
    let db = db.to_str().expect("utf-8 path");
    let done = in_folder(&cwd, url, &["--db", db, "status"]).expect(2);
    assert!(done.stderr.contains("--db and --store"), "{}", done.stderr);
    in_folder(
        &cwd,
        url,
        &["--db", db, "claim", "d.md", "-o", "A", "-t", "10"],
    )
    .expect(2);
    // Not a PostgreSQL URL, or not a URL at all.
    for bad in [
        "mysql://localhost/db",
        "/var/lib/fencepost/state.db",
        "postgresql://host:notaport/db",
    ] {
        let done = cwd
            .fp(&["claim", "d.md", "-o", "A", "-t", "10"])
            .inside(cwd.root())
            .env("FENCEPOST_STORE", bad)
            .expect(2);
        assert!(done.stderr.contains("--store"), "{bad}: {}", done.stderr);
    }
    // cat reads a store; a root's documents are files.
    let done = cwd.fp(&["cat", "d.md"]).inside(cwd.root()).expect(2);
    assert!(done.stderr.contains("--store"), "{}", done.stderr);
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_database_with_a_foreign_fencepost_table_is_refused_and_left_alone() {
    let store = pg::store();
    let mut client = store.client();
    client
        .batch_execute(
            "CREATE TABLE fencepost_lease (id int PRIMARY KEY, note text);
             INSERT INTO fencepost_lease VALUES (1, 'theirs')",
        )
        .expect("someone else's table");
    let before = dump(&mut client);
    let cwd = Env::new();
    for args in [
        &["claim", "doc.md", "--owner", "A", "--ttl", "10"][..],
        &["status"],
        &["cat", "doc.md"],
        &["write", "doc.md", "--epoch", "1"],
    ] {
        let done = in_folder(&cwd, store.url(), args)
            .now(0)
            .stdin("x")
            .expect(2);
        assert!(
            done.stderr
                .contains("has a table fencepost_lease that fencepost did not make"),
            "{args:?}: {}",
            done.stderr
        );
    }
    assert_eq!(dump(&mut client), before);
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}

/// A first claim that finds no schema, and then sees the tables another first claim
/// committed meanwhile, does not take them for someone else's (it refused them, exit 2,
/// before): paused at that moment, it resumes after the other's claim and gets its epoch.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_claim_that_saw_no_schema_accepts_the_one_made_meanwhile() {
    let store = pg::store();
    let cwd = Env::new();
    let mut cmd = std::process::Command::new(crate::harness::bin());
    cmd.env_clear()
        .env("FENCEPOST_STORE", store.url())
        .current_dir(cwd.root())
        .args(["--now", "0", "claim", "a.md", "-o", "A", "-t", "10"]);
    let paused = crate::support::spawn_paused_command(cmd, b"", "store.no_schema_seen");
    in_folder(&cwd, store.url(), &["claim", "b.md", "-o", "B", "-t", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let out = paused.resume();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{out:?}");
}

/// First claims racing on a fresh store, one of which makes its tables while the others
/// look: none takes those tables for someone else's. The others had found no
/// `fencepost_meta`, then saw the tables the first had committed meanwhile, and refused
/// them (exit 2, in one round of eight to one of thirty before the fix).
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn first_claims_racing_on_a_fresh_store_never_call_its_tables_foreign() {
    for round in 0..30 {
        let store = pg::store();
        let cwd = Env::new();
        let results: Vec<(i32, String)> = std::thread::scope(|scope| {
            let claims: Vec<_> = (0..8)
                .map(|w| {
                    let (cwd, url) = (&cwd, store.url());
                    scope.spawn(move || {
                        let res = format!("doc{w}.md");
                        let done = in_folder(cwd, url, &["claim", &res, "-o", "w", "-t", "10"])
                            .now(0)
                            .output();
                        (done.code, done.stderr)
                    })
                })
                .collect();
            claims
                .into_iter()
                .map(|c| c.join().expect("a claim"))
                .collect()
        });
        for (code, stderr) in &results {
            assert_eq!(*code, 0, "round {round}: {stderr}");
        }
    }
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_mirror_root_takes_one_store_and_no_claim_or_write_of_its_own() {
    let first = pg::store();
    let second = pg::store();
    publish(&first, "doc.md", "first store's");
    publish(&second, "doc.md", "second store's");
    let host = Host::new(first.url());
    host.fp(&["mirror"])
        .expect_stdout(0, "applied doc.md (epoch 1)");
    let files = || {
        let state = std::fs::read(host.root.path(".fencepost/state.db")).ok();
        (host.root.files(), host.file("doc.md"), state)
    };
    let before = files();

    // Pointed at the second store, the mirror is refused.
    let done = host
        .fp(&["mirror"])
        .env("FENCEPOST_STORE", second.url())
        .expect(2);
    assert!(
        done.stderr.contains("mirrors another store"),
        "{}",
        done.stderr
    );
    // Nor does a write through the second store with this root: refused before it is
    // made, since its mirror would be the wrong one.
    let mut store2 = second.client();
    let store2_before = dump(&mut store2);
    let done = host
        .fp(&["write", "doc.md", "--epoch", "1"])
        .env("FENCEPOST_STORE", second.url())
        .now(2)
        .stdin("second store's")
        .expect(2);
    assert!(
        done.stderr.contains("mirrors another store"),
        "{}",
        done.stderr
    );

    // Without --store, the mirror root takes no claim or write: the hint names the store.
    // (On the wall clock, as the mirror's own state file: with --now, the clock's
    // refusal comes first.)
    for (args, stdin) in [
        (&["claim", "doc.md", "--owner", "L", "--ttl", "10"][..], ""),
        (&["write", "doc.md", "--epoch", "1"], "local"),
    ] {
        let done = host.root.fp(args).stdin(stdin).expect(2);
        assert!(
            done.stderr.contains("is a mirror of the store"),
            "{}",
            done.stderr
        );
        let hint = done.stderr.lines().nth(1).unwrap_or_default();
        assert!(
            hint.starts_with("hint: ") && hint.contains(first.url()),
            "{args:?}: {}",
            done.stderr
        );
    }
    assert_eq!(files(), before);
    assert_eq!(dump(&mut store2), store2_before);

    // A publish root with leases of its own is no mirror either.
    let local = Env::new();
    local
        .fp(&["claim", "own.md", "--owner", "L", "--ttl", "10"])
        .now(0)
        .expect_stdout(0, "1");
    let done = local
        .fp(&["mirror"])
        .env("FENCEPOST_STORE", first.url())
        .expect(2);
    assert!(done.stderr.contains("leases of its own"), "{}", done.stderr);
    assert_eq!(local.files(), Vec::<String>::new());
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_row_locked_past_the_busy_timeout_is_busy_and_changes_nothing() {
    let store = pg::store();
    publish(&store, "doc.md", "v1");
    let cwd = Env::new();
    let mut holder = store.client();
    let mut lock = holder.transaction().expect("BEGIN");
    let locked = lock
        .query(
            "SELECT resource FROM fencepost_lock WHERE resource = 'doc.md' FOR UPDATE",
            &[],
        )
        .expect("lock the row");
    assert_eq!(locked.len(), 1);
    let before = dump(&mut store.client());
    let cases: [(&[&str], &str); 3] = [
        (&["claim", "doc.md", "--owner", "B", "--ttl", "10"], ""),
        (&["write", "doc.md", "--epoch", "1"], "v2"),
        (
            &[
                "renew", "doc.md", "--owner", "A", "--epoch", "1", "--ttl", "10",
            ],
            "",
        ),
    ];
    for (args, stdin) in cases {
        let mut all = vec!["--busy-timeout", "300ms", "--json"];
        all.extend(args);
        let done = in_folder(&cwd, store.url(), &all)
            .now(5)
            .stdin(stdin)
            .expect(7);
        let j = done.json_contract();
        assert_eq!(j["outcome"], "busy", "{args:?}: {j}");
    }
    // Other resources are not held up.
    in_folder(
        &cwd,
        store.url(),
        &["claim", "other.md", "-o", "B", "-t", "10"],
    )
    .now(5)
    .expect_stdout(0, "1");
    lock.rollback().expect("ROLLBACK");
    let mut after = dump(&mut store.client());
    after.retain(|r| !r.contains("other.md"));
    let mut before = before;
    before.retain(|r| !r.contains("other.md"));
    // The refusals' log lines aside (busy is not logged), nothing changed.
    assert_eq!(after, before);
    in_folder(&cwd, store.url(), &["write", "doc.md", "--epoch", "1"])
        .now(6)
        .stdin("v1")
        .expect_stdout(0, "replay");
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn recover_removes_the_blob_of_a_writer_killed_after_its_upload() {
    let store = pg::store();
    publish(&store, "doc.md", "published");
    let cwd = Env::new();
    in_folder(
        &cwd,
        store.url(),
        &["claim", "doc.md", "-o", "B", "-t", "10"],
    )
    .now(10)
    .expect_stdout(0, "2");
    let blobs = |client: &mut Client| -> i64 {
        client
            .query_one("SELECT count(*) FROM fencepost_blob", &[])
            .expect("count blobs")
            .get(0)
    };
    let mut client = store.client();
    let published = blobs(&mut client);
    // Killed after the whole upload, before the fenced transaction; and in the middle of
    // uploading (after the first chunk of a two-chunk document). A small document, which
    // goes in with the fenced transaction, leaves nothing when killed before it.
    let big = "x".repeat((1 << 20) + 10);
    let bigger = "y".repeat((1 << 20) + 10);
    for (point, content) in [
        ("write.before_lock", "unpublished"),
        ("write.before_lock", &big[..]),
        ("write.uploading", &bigger[..]),
    ] {
        let done = in_folder(&cwd, store.url(), &["write", "doc.md", "--epoch", "2"])
            .now(11)
            .stdin(content)
            .env("FAILPOINTS", &format!("{point}=return(abort)"))
            .output();
        assert_eq!(done.code, -1, "{point}: killed by SIGABRT: {done:?}");
    }
    assert_eq!(blobs(&mut client), published + 2);
    let before = dump(&mut client);
    // Younger than the grace period: kept (a write may still be uploading it).
    let j = in_folder(&cwd, store.url(), &["--json", "recover"])
        .expect(0)
        .json();
    assert_eq!(j["blobs_removed"], 0, "{j}");
    assert_eq!(dump(&mut client), before);
    let j = in_folder(&cwd, store.url(), &["--json", "recover", "--grace", "0"])
        .expect(0)
        .json();
    assert_eq!(j["blobs_removed"], 2, "{j}");
    assert_eq!(blobs(&mut client), published);
    let done = in_folder(&cwd, store.url(), &["cat", "doc.md"]).expect(0);
    assert_eq!(done.stdout, "published");
    in_folder(&cwd, store.url(), &["verify"]).now(12).expect(0);
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_foreign_meta_table_with_other_column_types_is_refused_not_a_panic() {
    let store = pg::store();
    let mut client = store.client();
    client
        .batch_execute(
            "CREATE TABLE fencepost_meta (key text PRIMARY KEY, value text);
             INSERT INTO fencepost_meta VALUES
                 ('application', 'fencepost'), ('schema', '1'), ('id', 'x')",
        )
        .expect("someone else's table");
    let before = dump(&mut client);
    let cwd = Env::new();
    let done = in_folder(
        &cwd,
        store.url(),
        &["claim", "doc.md", "--owner", "A", "--ttl", "10"],
    )
    .expect(2);
    assert!(
        done.stderr
            .contains("has a table fencepost_meta that fencepost did not make"),
        "{}",
        done.stderr
    );
    assert_eq!(dump(&mut client), before);
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn log_prune_with_a_store_prunes_the_stores_log() {
    let store = pg::store();
    publish(&store, "doc.md", "v1");
    let count = |client: &mut Client| -> i64 {
        client
            .query_one("SELECT count(*) FROM fencepost_log", &[])
            .expect("count")
            .get(0)
    };
    let mut client = store.client();
    assert_eq!(count(&mut client), 2);
    let cwd = Env::new();
    in_folder(&cwd, store.url(), &["log", "--prune", "--log-keep", "1"])
        .expect_stdout(0, "pruned 1 event");
    assert_eq!(count(&mut client), 1);
}

/// A name longer than a btree entry can hold (2,705 bytes and more failed with the
/// server's `index row size ... exceeds btree` and exit 1) is bad input before the store
/// is touched: every store takes names up to 1,024 bytes, and the longest works in every
/// table, the log's index included.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn names_the_store_could_not_index_are_bad_input() {
    let store = pg::store();
    let cwd = Env::new();
    let named = |len: usize| {
        let mut name = format!("{}/", "f".repeat(200)).repeat(len / 201);
        name.push_str(&"x".repeat(len - name.len()));
        name
    };
    in_folder(
        &cwd,
        store.url(),
        &["claim", "other.md", "-o", "A", "-t", "10"],
    )
    .now(0)
    .expect(0);
    let before = dump(&mut store.client());
    for len in [1025, 2705, 3000, 4030] {
        let name = named(len);
        let done = in_folder(&cwd, store.url(), &["claim", &name, "-o", "A", "-t", "10"])
            .now(1)
            .expect(2);
        assert!(
            done.stderr
                .contains(&format!("is {len} bytes long, longer than 1024")),
            "{len}: {}",
            done.stderr
        );
        in_folder(&cwd, store.url(), &["write", &name, "--epoch", "1"])
            .now(1)
            .stdin("x")
            .expect(2);
    }
    assert_eq!(dump(&mut store.client()), before, "nothing changed");
    let longest = named(1024);
    in_folder(
        &cwd,
        store.url(),
        &["claim", &longest, "-o", "A", "-t", "10"],
    )
    .now(1)
    .expect_stdout(0, "1");
    in_folder(&cwd, store.url(), &["write", &longest, "--epoch", "1"])
        .now(2)
        .stdin("the longest name")
        .expect_stdout(0, "written");
    in_folder(&cwd, store.url(), &["log", &longest]).expect(0);
    in_folder(&cwd, store.url(), &["verify"]).now(3).expect(0);
}

/// A URL that names no server (`postgresql://`, `postgresql:///db`) can never connect:
/// bad input (exit 2, with a hint), not an unreachable server (exit 1).
#[test]
fn a_store_url_without_a_server_is_bad_usage() {
    let cwd = Env::new();
    for url in [
        "postgresql://",
        "postgres://",
        "postgresql:///db",
        "postgresql://me@/db",
    ] {
        let done = in_folder(&cwd, url, &["claim", "d.md", "-o", "A", "-t", "10"]).expect(2);
        let lines: Vec<&str> = done.stderr.lines().collect();
        assert!(
            lines.len() == 2
                && lines[0]
                    == format!(
                        "fencepost: --store {url}: names no server (no host in the URL, and no host= parameter)"
                    )
                && lines[1].starts_with("hint: pass postgresql://USER@HOST/DB"),
            "{url}: {}",
            done.stderr
        );
    }
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}

/// The store's database as a key=value connection string, its values quoted (a quote
/// in one escaped), with its port, `sslmode` and `application_name` (the test's schema
/// name, by which its sessions are ended after it).
fn key_value(store: &TestStore, sslmode: &str) -> String {
    let (_, query) = store
        .admin()
        .split_once('?')
        .expect("the test URL has a query");
    let socket = query
        .split('&')
        .find_map(|p| p.strip_prefix("host="))
        .expect("the test URL names its socket folder");
    let name = store.name();
    format!(
        "host='{socket}' port=5432 dbname = postgres user=postgres sslmode={sslmode} \
         application_name={name} options='-c search_path={name} -c lock_timeout=1s' \
         password='not\\'checked'"
    )
}

/// A key=value connection string names the same store as the URL: a claim through the
/// URL is written and completed through key=value strings, and `status` through either
/// reads it.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_key_value_connection_string_reaches_the_store() {
    let store = pg::store();
    let cwd = Env::new();
    let (plain, preferred) = (key_value(&store, "disable"), key_value(&store, "prefer"));
    in_folder(&cwd, store.url(), &["claim", "d.md", "-o", "A", "-t", "60"]).expect_stdout(0, "1");
    in_folder(&cwd, &plain, &["write", "d.md", "--epoch", "1", "-o", "A"])
        .stdin("through key=value")
        .expect_stdout(0, "written");
    in_folder(
        &cwd,
        &preferred,
        &["complete", "d.md", "--epoch", "1", "-o", "A"],
    )
    .expect(0);
    for url in [store.url(), plain.as_str(), preferred.as_str()] {
        let status = in_folder(&cwd, url, &["--json", "status"]).expect(0).json();
        assert_eq!(
            status["resources"][0]["resource"], "d.md",
            "{url}: {status}"
        );
        assert_eq!(
            status["resources"][0]["lease"]["state"], "completed",
            "{url}: {status}"
        );
    }
    in_folder(&cwd, &plain, &["cat", "d.md"]).expect_stdout(0, "through key=value");
    let lease: String = store
        .client()
        .query_one(
            "SELECT state FROM fencepost_lease WHERE resource = 'd.md'",
            &[],
        )
        .expect("the lease is in the test's schema")
        .get(0);
    assert_eq!(lease, "completed");
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}

/// A URL whose query names a list of hosts (`?host=/nowhere,/the/socket`, as libpq takes
/// it) tries each in turn: the first has no server, the second does.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_host_list_in_a_urls_query_tries_each_host() {
    let store = pg::store();
    let cwd = Env::new();
    let listed = store
        .url()
        .replacen("host=", "host=/nonexistent-fencepost-socket,", 1);
    assert_ne!(listed, store.url(), "the test URL names its socket folder");
    in_folder(&cwd, &listed, &["claim", "h.md", "-o", "A", "-t", "60"]).expect_stdout(0, "1");
    in_folder(&cwd, &listed, &["write", "h.md", "--epoch", "1", "-o", "A"])
        .stdin("through a host list")
        .expect_stdout(0, "written");
    in_folder(&cwd, store.url(), &["cat", "h.md"]).expect_stdout(0, "through a host list");
}

/// A key=value string that is malformed, or that the driver refuses, is one line naming
/// the string (its password masked) and a hint, exit 2, and changes nothing.
#[test]
fn a_malformed_key_value_string_is_bad_usage() {
    let cwd = Env::new();
    for (text, first) in [
        (
            "host=/tmp/x password='Hush1 Hush2",
            "fencepost: --store host=/tmp/x ***: not a key=value connection string: a quoted \
             value without its closing quote at byte 12",
        ),
        (
            "host=/tmp/x password=Hush1 Hush2",
            "fencepost: --store host=/tmp/x password=*** ***: not a key=value connection \
             string: a keyword without `=` at byte 27",
        ),
        (
            "host=/tmp/x dbname= password=Hush1",
            "fencepost: --store host=/tmp/x ***: not a key=value connection string: a keyword \
             whose value, after white space, reads as the next pair (quote an empty value: '') \
             at byte 12",
        ),
        (
            "host=/tmp/x dbname=",
            "fencepost: --store host=/tmp/x ***: not a key=value connection string: a keyword \
             without a value (quote an empty one: '') at byte 12",
        ),
        (
            "host=/tmp/x passwd=Hush1",
            "fencepost: --store host=/tmp/x passwd=***: invalid connection string: unknown \
             option `passwd`",
        ),
        (
            "host=/tmp/x password=Hush1 sslmode=verify-everything",
            "fencepost: --store host=/tmp/x password=*** sslmode=verify-everything: \
             sslmode=verify-everything: not an sslmode; take disable, prefer, require, \
             verify-ca or verify-full",
        ),
        (
            "dbname=x password=Hush1",
            "fencepost: --store dbname=x password=***: names no server (no host= or hostaddr=)",
        ),
    ] {
        let done = in_folder(&cwd, text, &["claim", "d.md", "-o", "A", "-t", "10"]).expect(2);
        assert_eq!(done.stderr.lines().next(), Some(first), "{text}");
        assert!(!done.stderr.contains("Hush"), "{text}: {}", done.stderr);
    }
    assert_eq!(entries(cwd.root()), Vec::<String>::new());
}
