//! Roles of a PostgreSQL store: `fencepost store init` makes the tables as the owner, the
//! grants `store init --print-grants ROLE --writer|--reader` prints are all a writer and
//! a reader need and nothing more (each one is taken away in turn, and a command fails
//! without it), a role that lacks one is told which and where the grants are (exit 2),
//! and environments live side by side in one database, a schema each. Every role is made
//! by its test, named after the test's schema (roles are the whole server's), and
//! dropped at the end.

use std::path::Path;

use crate::harness::{self, Env, Run};
use crate::support::pg::{self, PrivateCluster};

/// A login role of the test's own, dropped with its privileges when the value is.
struct Role {
    admin: String,
    name: String,
}

impl Role {
    /// Makes the role `name` (no privileges) through the superuser URL `admin`.
    #[track_caller]
    fn new(admin: &str, name: &str) -> Role {
        pg::connect(admin)
            .batch_execute(&format!("CREATE ROLE {name} LOGIN"))
            .unwrap_or_else(|e| panic!("create role {name}: {}", pg::chain(&e)));
        Role {
            admin: admin.to_string(),
            name: name.to_string(),
        }
    }

    /// `url` connecting as this role.
    fn url(&self, url: &str) -> String {
        pg::with_params(url, &[format!("user={}", self.name)])
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let dropped = postgres::Client::connect(&self.admin, postgres::NoTls).and_then(|mut c| {
            c.batch_execute(&format!(
                "DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}",
                self.name
            ))
        });
        if let Err(e) = dropped {
            eprintln!(
                "warning: could not drop role {}: {}",
                self.name,
                pg::chain(&e)
            );
        }
    }
}

/// `fencepost ARGS` in `dir` (no root of its own: the store's names) on the store `url`.
fn on(dir: &Env, url: &str, args: &[&str]) -> Run {
    dir.fp(args)
        .inside(dir.root())
        .env("FENCEPOST_STORE", url)
        .env("PATH", "/usr/bin:/bin")
}

/// The grants `store init --print-grants ROLE --ACCESS` prints for the store `url`.
#[track_caller]
fn printed_grants(url: &str, role: &str, access: &str) -> String {
    let dir = Env::new();
    let done = on(
        &dir,
        url,
        &["store", "init", "--print-grants", role, access],
    )
    .expect(0);
    done.stdout
}

/// Runs `sql` as the superuser of `admin`.
#[track_caller]
fn as_admin(admin: &str, sql: &str) {
    pg::connect(admin)
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {}", pg::chain(&e)));
}

/// The issue as reported: a role made as the README says, on a server of PostgreSQL 15
/// or later (whose `public` schema no longer lets everyone create), in a new database.
/// Its first claim is refused with exit 2 saying to run `store init` as the owner (it
/// was exit 1 with the server's "permission denied for schema public" alone); after
/// the owner's `store init` and the printed grants, the README's commands work as that
/// role.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_role_made_as_the_readme_says_works_after_store_init_and_its_grants() {
    let cluster = PrivateCluster::start();
    as_admin(&cluster.url(), "CREATE ROLE jobs LOGIN");
    as_admin(&cluster.url(), "CREATE DATABASE fencepost");
    let socket = cluster.dir().display().to_string();
    let jobs = format!("postgresql:///fencepost?host={socket}&user=jobs");
    let owner = format!("postgresql:///fencepost?host={socket}&user=postgres");
    let dir = Env::new();
    let claim = ["claim", "reports/daily.md", "-o", "host-a", "-t", "5m"];
    let refused = on(&dir, &jobs, &claim).expect(2);
    let (first, hint) = refused.stderr.split_once('\n').expect("a hint line");
    assert!(
        first.contains("the role jobs may not make them: it lacks CREATE on schema public"),
        "{first}"
    );
    assert!(
        hint.contains("run `fencepost store init` once as the database's owner")
            && hint.contains("--print-grants jobs --writer"),
        "{hint}"
    );
    on(&dir, &owner, &["store", "init"]).expect_stdout(0, "initialized");
    let again = on(&dir, &owner, &["--json", "store", "init"])
        .expect(0)
        .json();
    assert_eq!(
        (again["outcome"].as_str(), again["schema"].as_u64()),
        (Some("ready"), Some(4)),
        "{again}"
    );
    // Before the grants: the owner's tables are not jobs's to use.
    let denied = on(&dir, &jobs, &claim).expect(2);
    assert!(
        denied
            .stderr
            .contains("the role jobs lacks SELECT on table fencepost_meta"),
        "{}",
        denied.stderr
    );
    let grants = printed_grants(&owner, "jobs", "--writer");
    assert!(
        grants.starts_with("GRANT USAGE ON SCHEMA public TO jobs;"),
        "{grants}"
    );
    as_admin(&pg::with_dbname(&cluster.url(), "fencepost"), &grants);
    let epoch = on(&dir, &jobs, &claim).expect(0).stdout.trim().to_string();
    assert_eq!(epoch, "1");
    on(&dir, &jobs, &["write", "reports/daily.md", "-e", &epoch])
        .stdin("daily\n")
        .expect_stdout(0, "written");
    on(
        &dir,
        &jobs,
        &["complete", "reports/daily.md", "-o", "host-a", "-e", &epoch],
    )
    .expect(0);
    on(&dir, &jobs, &["cat", "reports/daily.md"]).expect_stdout(0, "daily");
}

/// One writer's day with the store `url`, each step as the role there: claim, write,
/// renew, complete, a second epoch's write and release, run, recover (removing the first
/// epoch's blob), `log --prune`, and the readers' commands. `None` when every step
/// succeeded, else the first that failed, with its exit code and stderr.
fn writers_day(url: &str, res: &str) -> Option<String> {
    let dir = Env::new();
    let mirror = Env::new();
    let step = |run: Run, what: &str, stdin: &str| -> Result<String, String> {
        let done = run.stdin(stdin).output();
        if done.code == 0 {
            Ok(done.stdout.trim().to_string())
        } else {
            Err(format!(
                "{what}: exit {}: {}",
                done.code,
                done.stderr.trim()
            ))
        }
    };
    let bin = harness::bin();
    let script = format!("echo three | '{}' write", bin.display());
    let day = || -> Result<(), String> {
        let run = |args: &[&str], stdin: &str| step(on(&dir, url, args), &args.join(" "), stdin);
        let one = run(&["claim", res, "-o", "w", "-t", "1m"], "")?;
        run(&["write", res, "-e", &one], "one")?;
        run(&["renew", res, "-o", "w", "-e", &one, "-t", "1m"], "")?;
        run(&["complete", res, "-o", "w", "-e", &one], "")?;
        let two = run(&["claim", res, "-o", "w", "-t", "1m"], "")?;
        run(&["write", res, "-e", &two], "two")?;
        run(&["release", res, "-o", "w", "-e", &two], "")?;
        run(
            &["run", res, "-o", "w", "-t", "1m", "--", "sh", "-c", &script],
            "",
        )?;
        run(&["recover", "--grace", "0"], "")?;
        run(&["log", "--prune"], "")?;
        run(&["status"], "")?;
        run(&["verify"], "")?;
        run(&["log", res], "")?;
        run(&["cat", res], "")?;
        // A tree, and a file of it read back.
        let site = format!("{res}.site");
        let folder = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::write(folder.path().join("page"), "a page").map_err(|e| e.to_string())?;
        let tree = folder.path().to_str().ok_or("a UTF-8 path")?;
        let three = run(&["claim", &site, "-o", "w", "-t", "1m"], "")?;
        run(&["write", &site, "-e", &three, "--tree", tree], "")?;
        run(&["cat", &format!("{site}/page")], "")?;
        step(
            mirror.fp(&["mirror"]).env("FENCEPOST_STORE", url),
            "mirror",
            "",
        )?;
        Ok(())
    };
    day().err()
}

/// A reader's commands on the store `url`, which holds `res`: `None` when each
/// succeeded, else the first that failed.
fn readers_day(url: &str, res: &str) -> Option<String> {
    let dir = Env::new();
    let mirror = Env::new();
    let runs = [
        ("status", on(&dir, url, &["status"])),
        ("verify", on(&dir, url, &["verify"])),
        ("log", on(&dir, url, &["log"])),
        ("cat", on(&dir, url, &["cat", res])),
        (
            "cat a tree's file",
            on(&dir, url, &["cat", &format!("{res}.site/page")]),
        ),
        ("mirror", mirror.fp(&["mirror"]).env("FENCEPOST_STORE", url)),
    ];
    for (what, run) in runs {
        let done = run.output();
        if done.code != 0 {
            return Some(format!(
                "{what}: exit {}: {}",
                done.code,
                done.stderr.trim()
            ));
        }
    }
    None
}

/// `GRANT P1, P2 ON KIND OBJECT TO ROLE;` lines as the single revokes of each privilege:
/// (the privilege and its object, `REVOKE P ON KIND OBJECT FROM ROLE`).
fn single_revokes(grants: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in grants.lines() {
        let body = line
            .strip_prefix("GRANT ")
            .and_then(|l| l.strip_suffix(';'))
            .unwrap_or_else(|| panic!("not a GRANT line: {line:?}"));
        let (privileges, rest) = body.split_once(" ON ").expect("GRANT ... ON");
        let (object, role) = rest.rsplit_once(" TO ").expect("ON ... TO");
        for privilege in privileges.split(", ") {
            out.push((
                format!("{privilege} on {object}"),
                format!("REVOKE {privilege} ON {object} FROM {role}"),
            ));
        }
    }
    out
}

/// The grants a writer and a reader are printed are enough for their commands, and each
/// is needed: with one taken away, some command of theirs fails. (Before `store init`
/// there were no grants to print, and `fencepost_meta` was also granted UPDATE, which no
/// command of a role uses.) A reader's change is refused naming the role, what it
/// lacks and where the grants are, exit 2.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn the_printed_grants_are_what_a_writer_and_a_reader_need_and_no_more() {
    let store = pg::store();
    let dir = Env::new();
    on(&dir, store.url(), &["store", "init"]).expect_stdout(0, "initialized");
    let writer = Role::new(store.admin(), &format!("{}_w", store.name()));
    let reader = Role::new(store.admin(), &format!("{}_r", store.name()));
    let writer_grants = printed_grants(store.url(), &writer.name, "--writer");
    let reader_grants = printed_grants(store.url(), &reader.name, "--reader");
    as_admin(store.admin(), &writer_grants);
    as_admin(store.admin(), &reader_grants);
    let as_writer = writer.url(store.url());
    let as_reader = reader.url(store.url());

    // Each privilege of the writer, taken away in turn, is missed by a command. INSERT on
    // fencepost_meta comes first: only the store's first change needs it (to bind the
    // clock). INSERT and UPDATE on fencepost_seen are for a mirror that is ahead of the
    // store (a store that lost history), which tests/mirror_edges.rs makes.
    let mut revokes = single_revokes(&writer_grants);
    revokes.sort_by_key(|(what, _)| {
        !what.starts_with("INSERT on TABLE") || !what.ends_with(".fencepost_meta")
    });
    let mut n = 0;
    for (what, revoke) in revokes {
        if what.ends_with(".fencepost_seen") && !what.starts_with("SELECT") {
            continue;
        }
        n += 1;
        as_admin(store.admin(), &revoke);
        let failed = writers_day(&as_writer, &format!("r{n}.md"));
        as_admin(store.admin(), &writer_grants);
        assert!(
            failed.is_some(),
            "{} without {what}: every command succeeded",
            writer.name
        );
    }
    assert_eq!(writers_day(&as_writer, "all.md"), None, "{writer_grants}");
    assert_eq!(readers_day(&as_reader, "all.md"), None, "{reader_grants}");
    for (what, revoke) in single_revokes(&reader_grants) {
        n += 1;
        as_admin(store.admin(), &revoke);
        let failed = readers_day(&as_reader, "all.md");
        as_admin(store.admin(), &reader_grants);
        assert!(
            failed.is_some(),
            "{} without {what}: every command succeeded",
            reader.name
        );
    }

    // The reader may not change anything, and is told so.
    for args in [
        vec!["claim", "r.md", "-o", "r", "-t", "1m"],
        vec!["log", "--prune"],
    ] {
        let what = args.join(" ");
        let done = on(&dir, &as_reader, &args).expect(2);
        let (first, hint) = done.stderr.split_once('\n').expect("a hint");
        let lacks = "it lacks SELECT, INSERT, UPDATE on table fencepost_lock";
        assert!(
            first.contains(&format!(
                "the role {} may not change the store",
                reader.name
            )) && first.contains(lacks),
            "{what}: {first}"
        );
        assert!(
            hint.contains(&format!(
                "`fencepost store init --print-grants {} --writer`",
                reader.name
            )),
            "{what}: {hint}"
        );
    }
    assert_eq!(n, 33, "privileges tried");
}

/// Environments share one database, a schema each, named by `search_path` in the URL's
/// options: `store init` makes each one's tables in its schema, a claim in one is not
/// seen in the other, and the grants printed for each name its schema.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn environments_in_one_database_are_apart_by_schema() {
    let store = pg::store();
    let staging = format!("{}_staging", store.name());
    as_admin(store.admin(), &format!("CREATE SCHEMA {staging}"));
    let _dropped = Dropped(store.admin().to_string(), staging.clone());
    let env_url = |schema: &str| {
        pg::with_params(
            store.admin(),
            &[format!("options=-c%20search_path%3D{schema}")],
        )
    };
    let (prod_url, staging_url) = (env_url(store.name()), env_url(&staging));
    let dir = Env::new();
    // A search_path naming a schema that does not exist is said so, before any claim.
    let missing = on(&dir, &env_url("nowhere_at_all"), &["store", "init"]).expect(2);
    assert!(
        missing
            .stderr
            .contains("its search_path names none that exists"),
        "{}",
        missing.stderr
    );
    on(&dir, &prod_url, &["store", "init"]).expect_stdout(0, "initialized");
    on(&dir, &staging_url, &["store", "init"]).expect_stdout(0, "initialized");
    on(
        &dir,
        &staging_url,
        &["claim", "a.md", "-o", "s", "-t", "1m"],
    )
    .expect_stdout(0, "1");
    let prod = on(&dir, &prod_url, &["--json", "status"]).expect(0).json();
    assert_eq!(
        prod["resources"].as_array().map(Vec::len),
        Some(0),
        "{prod}"
    );
    let seen = on(&dir, &staging_url, &["--json", "status"])
        .expect(0)
        .json();
    assert_eq!(seen["resources"][0]["resource"], "a.md", "{seen}");
    let grants = printed_grants(&staging_url, "app", "--reader");
    assert!(
        grants.starts_with(&format!("GRANT USAGE ON SCHEMA {staging} TO app;"))
            && grants.contains(&format!("ON TABLE {staging}.fencepost_lease TO app;")),
        "{grants}"
    );
}

/// Drops the schema `.1` through the superuser URL `.0` at the end of a test.
struct Dropped(String, String);

impl Drop for Dropped {
    fn drop(&mut self) {
        let _ = postgres::Client::connect(&self.0, postgres::NoTls)
            .and_then(|mut c| c.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.1)));
    }
}

/// `store init` without `--store`, and `--print-grants` without a role's name or an
/// access, are refused with one line, exit 2; the grants of a store without
/// `search_path` are for `public`, and names that need quotes get them.
#[test]
fn store_init_refuses_without_a_store_and_prints_grants_without_one() {
    let env = Env::new();
    let done = env.fp(&["store", "init"]).expect(2);
    assert!(
        done.stderr
            .starts_with("fencepost: store init is for a PostgreSQL store"),
        "{}",
        done.stderr
    );
    assert!(!env.path(".fencepost").exists(), "nothing made");
    env.fp(&["store", "init", "--print-grants", "jobs"])
        .expect(2);
    env.fp(&["store", "init", "--writer"]).expect(2);
    env.fp(&["store", "init", "--print-grants", "PUBLIC", "--reader"])
        .expect(2);
    let sql = env
        .fp(&["store", "init", "--print-grants", "Ops Team", "--reader"])
        .expect(0)
        .stdout;
    assert!(
        sql.starts_with("GRANT USAGE ON SCHEMA public TO \"Ops Team\";\n"),
        "{sql}"
    );
    let json = env
        .fp(&[
            "--json",
            "store",
            "init",
            "--print-grants",
            "jobs",
            "--writer",
        ])
        .expect(0)
        .json();
    assert_eq!(json["outcome"], "grants");
    assert_eq!(json["access"], "writer");
    assert!(
        json["sql"]
            .as_str()
            .is_some_and(|s| s.contains("fencepost_lock"))
    );
}
/// The README's grants are what `--print-grants jobs` prints, for a writer and a reader.
#[test]
fn the_readme_shows_the_grants_as_printed() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("read README.md");
    let env = Env::new();
    for access in ["--writer", "--reader"] {
        let printed = env
            .fp(&["store", "init", "--print-grants", "jobs", access])
            .expect(0)
            .stdout;
        let marker = format!("-- fencepost store init --print-grants jobs {access}\n");
        let shown = readme
            .split_once(&marker)
            .map(|(_, rest)| rest.split_once("```").map_or(rest, |(block, _)| block))
            .unwrap_or_else(|| panic!("README.md has no block after {marker:?}"));
        let shown: String = shown
            .lines()
            .take_while(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(shown, printed, "README.md's grants for {access}");
    }
}
