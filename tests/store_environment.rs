//! The libpq environment variables with `--store`: `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, `PGPASSWORD` and `PGAPPNAME` fill in what the URL or key=value string
//! leaves out, and never what it says; a password from `PGPASSWORD` shows nowhere, and a
//! `run`'s child reaches the store with it as its parent did.

use crate::harness::{Done, Env, Run};
use crate::support::pg::{self, PrivateCluster, TestStore};

/// The socket folder of the server `FENCEPOST_TEST_STORE` names.
fn socket(store: &TestStore) -> String {
    let (_, query) = store
        .admin()
        .split_once('?')
        .expect("the test URL has a query");
    query
        .split('&')
        .find_map(|p| p.strip_prefix("host="))
        .expect("the test URL names its socket folder")
        .to_string()
}

/// The test store's own settings (its `search_path` and `application_name`) as URL query
/// parameters and as key=value: a string naming neither host nor user still lands in
/// the test's schema.
fn settings(store: &TestStore) -> (String, String) {
    let name = store.name();
    (
        format!("options=-c%20search_path%3D{name}&application_name={name}"),
        format!("options='-c search_path={name}' application_name={name}"),
    )
}

/// `fencepost ARGS` against the store `url` (`--store`) in `env`'s folder without a
/// root, with the variables `vars`.
fn with(env: &Env, url: &str, vars: &[(&str, &str)], args: &[&str]) -> Run {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    vars.iter()
        .fold(env.fp(&all).inside(env.root()), |run, (name, value)| {
            run.env(name, value)
        })
}

/// A claim and a write of `d.md` through `url` with `vars`, each exit 0.
#[track_caller]
fn claim_and_write(url: &str, vars: &[(&str, &str)], bytes: &str) {
    let env = Env::new();
    with(&env, url, vars, &["claim", "d.md", "-o", "A", "-t", "60"]).expect_stdout(0, "1");
    with(
        &env,
        url,
        vars,
        &["write", "d.md", "--epoch", "1", "-o", "A"],
    )
    .stdin(bytes)
    .expect_stdout(0, "written");
}

/// The bytes of `d.md` in the store's schema, read through the test's own session.
fn published(store: &TestStore) -> String {
    let env = Env::new();
    with(&env, store.url(), &[], &["cat", "d.md"])
        .expect(0)
        .stdout
}

/// A URL with no host reaches the server `PGHOST` names (a list, the first of which has
/// no server: the next is tried), as the user `PGUSER` names.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_url_without_a_host_takes_pghost_and_pguser() {
    let store = pg::store();
    let (query, _) = settings(&store);
    let url = format!("postgresql:///postgres?{query}");
    let hosts = format!("/nonexistent-fencepost-socket,{}", socket(&store));
    claim_and_write(
        &url,
        &[
            ("PGHOST", &hosts),
            ("PGUSER", "postgres"),
            ("PGPORT", "5432"),
        ],
        "through PGHOST",
    );
    assert_eq!(published(&store), "through PGHOST");
}

/// A key=value string with a host and database but no user connects as `PGUSER`.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_key_value_string_without_a_user_takes_pguser() {
    let store = pg::store();
    let (_, kv) = settings(&store);
    let url = format!("host={} dbname=postgres {kv}", socket(&store));
    claim_and_write(&url, &[("PGUSER", "postgres")], "through PGUSER");
    assert_eq!(published(&store), "through PGUSER");
}

/// What the string says wins over the variables: its user over `PGUSER`, its database
/// over `PGDATABASE`, its port over `PGPORT`, its `application_name` over `PGAPPNAME`
/// (none of the variables' values would connect, or land in the test's schema).
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn the_strings_own_settings_win_over_the_variables() {
    let store = pg::store();
    let (query, kv) = settings(&store);
    let socket = socket(&store);
    let vars = [
        ("PGHOST", socket.as_str()),
        ("PGUSER", "nobody"),
        ("PGDATABASE", "nowhere"),
        ("PGPORT", "1"),
        ("PGAPPNAME", "not-the-tests"),
    ];
    let url = format!("postgresql://postgres@/postgres?port=5432&{query}");
    claim_and_write(&url, &vars, "the URL's user");
    assert_eq!(published(&store), "the URL's user");
    let url = format!("user=postgres dbname=postgres port=5432 {kv}");
    let env = Env::new();
    let status = with(&env, &url, &vars, &["--json", "status"])
        .expect(0)
        .json();
    assert_eq!(status["resources"][0]["resource"], "d.md", "{status}");
}

/// Whether the database `db` of `cluster` holds fencepost's lease table.
fn has_store(cluster: &PrivateCluster, db: &str) -> bool {
    pg::connect(&pg::with_dbname(&cluster.url(), db))
        .query_one("SELECT to_regclass('fencepost_lease') IS NOT NULL", &[])
        .expect("look for the lease table")
        .get(0)
}

/// A string that names no database uses the one `PGDATABASE` names: the claim is there,
/// seen through a URL naming it, and not in the database named after the user.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn pgdatabase_picks_the_database_the_string_leaves_out() {
    let cluster = PrivateCluster::start();
    pg::connect(&cluster.url())
        .batch_execute("CREATE DATABASE fp_other")
        .expect("create a second database");
    let dir = cluster.dir().display().to_string();
    let env = Env::new();
    let vars = [("PGDATABASE", "fp_other")];
    for url in [
        format!("host={dir} user=postgres"),
        format!("postgresql://postgres@/?host={dir}"),
    ] {
        with(&env, &url, &vars, &["claim", "d.md", "-o", "A", "-t", "60"]).expect(0);
    }
    let explicit = pg::with_dbname(&cluster.url(), "fp_other");
    let status = with(&Env::new(), &explicit, &[], &["--json", "status"])
        .expect(0)
        .json();
    assert_eq!(status["resources"][0]["resource"], "d.md", "{status}");
    assert_eq!(status["resources"][0]["lease"]["state"], "held", "{status}");
    assert!(has_store(&cluster, "fp_other"));
    assert!(
        !has_store(&cluster, "postgres"),
        "the claim went to postgres"
    );
}

/// In every password below: no output may contain it.
const SECRET: &str = "Hush";

/// Asserts that neither output of `done` shows the secret.
#[track_caller]
fn hidden(done: &Done, what: &str) {
    for (name, text) in [("stdout", &done.stdout), ("stderr", &done.stderr)] {
        assert!(
            !text.contains(SECRET),
            "{what}: the password shows on {name}:\n{text}"
        );
    }
}

/// A server that checks passwords takes the one `PGPASSWORD` gives when the string has
/// none, refuses a wrong one (exit 1), and neither shows in any output; a string's own
/// password wins over it. A `run`'s child, inheriting the variable, reaches the store.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn pgpassword_is_used_refused_when_wrong_and_never_shown() {
    let cluster = PrivateCluster::start();
    cluster.with_password_role(
        "CREATE ROLE guarded LOGIN SUPERUSER PASSWORD 'Hush-right'",
        "guarded",
    );
    let dir = cluster.dir().display().to_string();
    let urls = [
        format!("postgresql://guarded@/postgres?host={dir}"),
        format!("host={dir} user=guarded dbname=postgres"),
    ];
    for url in &urls {
        let env = Env::new();
        let wrong = [("PGPASSWORD", "Hush-wrong")];
        let done = with(&env, url, &wrong, &["claim", "d.md", "-o", "A", "-t", "60"]).expect(1);
        assert!(
            done.stderr.contains("password authentication failed"),
            "{url}: {}",
            done.stderr
        );
        hidden(&done, url);
        for args in [&["--json", "status"][..], &["claim", "--help"][..]] {
            let done = with(&env, url, &wrong, args).output();
            hidden(&done, url);
        }
    }
    // The right one, from the variable: a claim, and a `run` whose child writes.
    let env = Env::new();
    let right = [("PGPASSWORD", "Hush-right")];
    let url = &urls[0];
    with(&env, url, &right, &["claim", "d.md", "-o", "A", "-t", "60"]).expect_stdout(0, "1");
    let script = format!(
        "printf 'from the child' | '{}' write \"$FENCEPOST_RESOURCE\" --epoch \"$FENCEPOST_EPOCH\" \
         --owner \"$FENCEPOST_OWNER\"",
        crate::harness::bin().display()
    );
    let done = with(
        &env,
        url,
        &right,
        &[
            "run", "e.md", "-o", "B", "-t", "60", "--", "/bin/sh", "-c", &script,
        ],
    )
    .output();
    assert_eq!(done.code, 0, "{done:?}");
    hidden(&done, "run");
    let done = with(&env, url, &right, &["cat", "e.md"]).expect(0);
    assert_eq!(done.stdout, "from the child");
    // The URL's own password wins: a wrong one there is refused whatever the variable.
    let wrong_in_url = format!("postgresql://guarded:Hush-wrong@/postgres?host={dir}");
    let done = with(
        &env,
        &wrong_in_url,
        &right,
        &["claim", "f.md", "-o", "A", "-t", "60"],
    )
    .expect(1);
    assert!(
        done.stderr.contains("password authentication failed"),
        "{}",
        done.stderr
    );
    hidden(&done, &wrong_in_url);
}
