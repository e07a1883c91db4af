//! A store's password never shows: not in `--help` (which lists the variables' values),
//! not in a message, a hint, `--json` or a log, not in the mirror root's state file,
//! however the URL or key=value connection string spells it. Every command that reads
//! the URL is run with every spelling, through `--store` and through `FENCEPOST_STORE`,
//! against the test server, a folder with no server, and a server that checks passwords,
//! and every byte they print or leave is searched for the secret.

use std::path::Path;

use crate::harness::{Done, Env, Run};
use crate::support::pg::{self, PrivateCluster, TestStore};

/// In every password below, on each side of its special character: no output may
/// contain it.
const SECRET: &str = "Hush";

/// A store's connection string with a password, in each spelling a user may type: in a
/// URL's authority (plain, with an unencoded `?`, `@`, `/`, `#` or `:` in it, and
/// percent-encoded), in its query string, and as key=value (plain, quoted with a space,
/// quoted with an escaped quote). Each names `user` on the socket folder `socket`, and
/// carries `extra` (URL query parameters, `key=value&...`, already encoded) or its
/// key=value form `extra_kv`.
fn spellings(user: &str, socket: &str, extra: &str, extra_kv: &str) -> Vec<String> {
    let query = if extra.is_empty() {
        format!("host={socket}")
    } else {
        format!("host={socket}&{extra}")
    };
    let mut urls: Vec<String> = [
        "Hush1",
        "Hush1?Hush2",
        "Hush1@Hush2",
        "Hush1/Hush2",
        "Hush1#Hush2",
        "Hush1:Hush2",
        "Hush1%3FHush2%40Hush3",
    ]
    .iter()
    .map(|password| format!("postgresql://{user}:{password}@/postgres?{query}"))
    .collect();
    urls.push(format!(
        "postgresql:///postgres?{query}&user={user}&password=Hush1"
    ));
    let kv = format!("host={socket} user={user} dbname=postgres {extra_kv}");
    for password in ["Hush1", "'Hush1 Hush2'", r"'Hush1\'Hush2'"] {
        urls.push(format!("{kv} password={password}"));
    }
    urls
}

/// The test store's own settings (its `search_path` and `application_name`) as URL query
/// parameters and as key=value.
fn store_settings(store: &TestStore) -> (String, String) {
    let name = store.name();
    (
        format!("options=-c%20search_path%3D{name}&application_name={name}"),
        format!("options='-c search_path={name}' application_name={name}"),
    )
}

/// The socket folder of the server `FENCEPOST_TEST_STORE` names.
fn socket(store: &TestStore) -> String {
    let admin = store.admin();
    let (_, query) = admin.split_once('?').expect("the test URL has a query");
    query
        .split('&')
        .find_map(|p| p.strip_prefix("host="))
        .expect("the test URL names its socket folder")
        .to_string()
}

/// Every byte under `dir`, as text, with the file each came from.
fn bytes_under(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(bytes_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            out.push((path.display().to_string(), text));
        }
    }
    out
}

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

/// Asserts that no file under `dir` holds the secret.
#[track_caller]
fn hidden_on_disk(dir: &Path, what: &str) {
    for (file, text) in bytes_under(dir) {
        assert!(!text.contains(SECRET), "{what}: the password is in {file}");
    }
}

/// How a connection string reaches fencepost.
#[derive(Debug, Clone, Copy)]
enum Via {
    Flag,
    Variable,
}

/// `fencepost ARGS` in `env`'s root with `url` passed `via`.
fn with_store(env: &Env, url: &str, via: Via, args: &[&str]) -> Run {
    match via {
        Via::Flag => {
            let mut all = vec!["--store", url];
            all.extend_from_slice(args);
            env.fp(&all)
        }
        Via::Variable => env.fp(args).env("FENCEPOST_STORE", url),
    }
}

/// `mirror --follow` in `env`'s root with `url` passed `via`, stopped by SIGTERM once it
/// printed its start line: what it printed.
fn following(env: &Env, url: &str, via: Via, json: bool) -> Done {
    use std::io::{BufRead as _, BufReader, Read as _};
    let mut args = vec!["mirror", "--follow"];
    if json {
        args.insert(0, "--json");
    }
    let mut cmd = std::process::Command::new(crate::harness::bin());
    cmd.env_clear().arg("--root").arg(env.root());
    match via {
        Via::Flag => cmd.args(["--store", url]),
        Via::Variable => cmd.env("FENCEPOST_STORE", url),
    };
    let mut child = cmd
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn mirror --follow");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the start line");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("stdout");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("wait");
    Done {
        code: status.code().unwrap_or(-1),
        signal: None,
        stdout: first + &rest,
        stderr,
    }
}

/// A claim, a write, `mirror`, `status` (plain and `--json`), `verify` and `log` with each
/// spelling, through the flag and the variable, in a root that mirrors the store, then
/// `mirror --follow` (its start and stop lines) and `verify` and `status` without the
/// store (the root's binding): each works, and neither its output nor the root's files
/// show the password.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_password_never_shows_in_output_or_files() {
    let store = pg::store();
    let (extra, extra_kv) = store_settings(&store);
    let spellings = spellings("postgres", &socket(&store), &extra, &extra_kv);
    let mut n = 0;
    for url in &spellings {
        for via in [Via::Flag, Via::Variable] {
            n += 1;
            let what = format!("{url} via {via:?}");
            let env = Env::new();
            let res = format!("d{n}.md");
            let steps: Vec<(Vec<&str>, i32)> = vec![
                (vec!["claim", &res, "-o", "A", "-t", "60"], 0),
                (vec!["write", &res, "--epoch", "1", "-o", "A"], 0),
                (vec!["complete", &res, "--epoch", "1", "-o", "A"], 0),
                (vec!["mirror"], 0),
                (vec!["--json", "mirror"], 0),
                (vec!["status"], 0),
                (vec!["--json", "status"], 0),
                (vec!["verify"], 0),
                (vec!["--json", "verify"], 0),
                (vec!["log", &res], 0),
                (vec!["--json", "log", &res], 0),
                (vec!["--json", "claim", &res, "-o", "B", "-t", "60"], 0),
            ];
            for (args, code) in steps {
                let step = format!("{what}: {}", args.join(" "));
                let done = with_store(&env, url, via, &args).stdin("x").output();
                assert_eq!(done.code, code, "{step}: {done:?}");
                hidden(&done, &step);
            }
            // The follower's start and stop lines, plain and --json, and its warnings.
            for json in [false, true] {
                let step = format!("{what}: mirror --follow (json {json})");
                let done = following(&env, url, via, json);
                assert_eq!(done.code, 0, "{step}: {done:?}");
                assert!(done.stdout.contains("following"), "{step}: {done:?}");
                hidden(&done, &step);
            }
            // Without the store: the root's binding, whose password is masked.
            for args in [vec!["verify"], vec!["--json", "status"]] {
                let step = format!("{what}: {} without --store", args.join(" "));
                let done = env.fp(&args).output();
                hidden(&done, &step);
            }
            hidden_on_disk(env.root(), &what);
            let log = store
                .client()
                .query("SELECT fencepost_log::text FROM fencepost_log", &[])
                .expect("read the audit log");
            for row in log {
                let row: String = row.get(0);
                assert!(!row.contains(SECRET), "{what}: the audit log has {row}");
            }
        }
    }
}

/// `--help` of every command lists `FENCEPOST_STORE` but never its value.
#[test]
fn help_never_shows_the_stores_value() {
    let env = Env::new();
    for url in spellings("u", "/nowhere", "", "") {
        for args in [
            vec!["--help"],
            vec!["claim", "--help"],
            vec!["write", "--help"],
            vec!["status", "--help"],
            vec!["help", "mirror"],
        ] {
            let done = env.fp(&args).env("FENCEPOST_STORE", &url).expect(0);
            hidden(&done, &format!("{url}: {}", args.join(" ")));
            if args != ["--help"] {
                assert!(done.stdout.contains("FENCEPOST_STORE"), "{}", done.stdout);
            }
        }
    }
}

/// A server that cannot be reached (a socket folder that does not exist) and a URL of
/// another kind are each one message, which names the store without its password.
#[test]
fn a_password_never_shows_in_errors() {
    let missing = Env::new();
    let socket = missing.path("no-such-folder");
    let socket = socket.display().to_string();
    let mut bad: Vec<(String, i32)> = spellings("u", &socket, "connect_timeout=2", "")
        .into_iter()
        .map(|url| (url, 1))
        .collect();
    for url in [
        "mysql://u:Hush1@db/x",
        "postgresql://u:Hush1@db/x?sslmode=bogus",
        "postgresql://u:Hush1@db/x?nonsense=1",
        "postgresql://u:Hush1@db/x?password",
        "postgresql:///x?password=Hush1&Hush2",
        "host=db password='Hush1",
        "host=db password=Hush1 Hush2",
        "host=db password=",
        "host=db password=Hush1 sslmode=bogus",
        "host=db password=Hush1 nonsense=1",
        "u:Hush1@db/x",
    ] {
        bad.push((url.to_string(), 2));
    }
    for (url, code) in bad {
        for via in [Via::Flag, Via::Variable] {
            let env = Env::new();
            for args in [
                vec!["claim", "d.md", "-o", "A", "-t", "60"],
                vec!["--json", "status"],
                vec!["verify"],
            ] {
                let what = format!("{url} via {via:?}: {}", args.join(" "));
                let done = with_store(&env, &url, via, &args).expect(code);
                hidden(&done, &what);
            }
            hidden_on_disk(env.root(), &url);
        }
    }
}

/// A server that checks passwords refuses a wrong one (exit 1, one message), and the
/// message names the store without the password.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_wrong_password_is_refused_without_showing_it() {
    let cluster = PrivateCluster::start();
    cluster.with_password_role(
        "CREATE ROLE guarded LOGIN PASSWORD 'the-right-one'",
        "guarded",
    );
    let socket = cluster.dir().display().to_string();
    for url in spellings("guarded", &socket, "connect_timeout=5", "") {
        for via in [Via::Flag, Via::Variable] {
            let env = Env::new();
            let what = format!("{url} via {via:?}");
            let done =
                with_store(&env, &url, via, &["claim", "d.md", "-o", "A", "-t", "60"]).expect(1);
            assert!(
                done.stderr.contains("password authentication failed"),
                "{what}: {}",
                done.stderr
            );
            hidden(&done, &what);
            let done = with_store(&env, &url, via, &["--json", "status"]).expect(1);
            hidden(&done, &what);
            hidden_on_disk(env.root(), &what);
        }
    }
}

/// A connection string without a password takes it from the libpq password file
/// (`PGPASSFILE`): the first line whose host (the socket folder, or `localhost` for one),
/// port, database and user match, `*` matching anything and `\:` a colon of the password.
/// A file its group or others may read is not read (the server then refuses), and the
/// password shows nowhere either way.
#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_password_file_gives_a_password_the_string_does_not() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = PrivateCluster::start();
    cluster.with_password_role(
        "CREATE ROLE filed LOGIN PASSWORD 'Hush:filed'; \
             GRANT CREATE ON SCHEMA public TO filed",
        "filed",
    );
    let socket = cluster.dir().display().to_string();
    let url = format!("postgresql:///postgres?host={socket}&user=filed&connect_timeout=5");
    let files = tempfile::tempdir().expect("a folder for the password files");
    let passfile = files.path().join("pgpass");
    let lines = [
        format!(
            "# the wrong user's entry comes first\n{socket}:5432:postgres:other:nope\n{socket}:5432:postgres:filed:Hush\\:filed\n"
        ),
        "localhost:5432:*:filed:Hush\\:filed\n".to_string(),
        "*:*:*:*:Hush\\:filed\n".to_string(),
    ];
    for (i, text) in lines.iter().enumerate() {
        std::fs::write(&passfile, text).expect("write the password file");
        std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600");
        let env = Env::new();
        let what = format!("password file {i}");
        let done = env
            .fp(&["--store", &url, "claim", "d.md", "-o", "A", "-t", "60"])
            .env("PGPASSFILE", passfile.to_str().expect("a UTF-8 path"))
            .expect_stdout(0, "1");
        hidden(&done, &what);
        hidden_on_disk(env.root(), &what);
    }
    // Readable by its group: not read, so the server asks for a password it is not given.
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o640)).expect("chmod 640");
    let env = Env::new();
    let done = env
        .fp(&["--store", &url, "claim", "e.md", "-o", "A", "-t", "60"])
        .env("PGPASSFILE", passfile.to_str().expect("a UTF-8 path"))
        .expect(1);
    assert!(done.stderr.contains("password"), "{}", done.stderr);
    hidden(&done, "a group-readable password file");
}
