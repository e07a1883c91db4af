//! A real PostgreSQL server for the tests that run fencepost against one.
//!
//! [`store`] gives each test a schema of its own in the database that
//! `FENCEPOST_TEST_STORE` names (a URL, `postgresql:///postgres?host=/sock&user=postgres`;
//! `tools/pg-test-cluster.sh start DIR` starts one and prints it), and a URL whose
//! `search_path` is that schema, so tests never see each other's tables; the schema is
//! dropped, its sessions ended, when the test ends. (A schema, not a database: `DROP
//! DATABASE` forces a checkpoint and cost about 0.5 s a test, more than the tests
//! themselves. What tests in one database share is harmless: publish notifications name
//! resources that another schema's `mirror --follow` looks up in its own tables.)
//! [`PrivateCluster`] starts a whole server of its own, from the programs in
//! `FENCEPOST_TEST_PGBIN`, for the tests that crash or restart it, and
//! [`PrivateCluster::standby_of`] a streaming standby of one, for the failover tests.
//!
//! Without `FENCEPOST_TEST_STORE` the suite starts a server of its own (the first test
//! that needs one does), from the programs the build found, and stops it when the test
//! process ends. A build that found none ignores these tests, with the reason, by their
//! `#[cfg_attr(fp_missing = "postgres", ignore = ...)]` (see `build.rs`); under `CI=true`
//! none is ignored and a missing server fails them. A server that cannot be reached
//! always fails the test: a broken server never passes as a skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use postgres::{Client, NoTls};
use tempfile::TempDir;

/// The variable naming the shared test server.
const STORE_VAR: &str = "FENCEPOST_TEST_STORE";
/// The variable naming the folder of the server's programs (`initdb`, `pg_ctl`).
const PGBIN_VAR: &str = "FENCEPOST_TEST_PGBIN";

/// The script that starts, crashes and stops a test cluster; the suite and people use it.
fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/pg-test-cluster.sh")
}

/// The variable's value: for [`STORE_VAR`] unset, the suite's own server (started by
/// the first test that needs one); for [`PGBIN_VAR`] unset, the server programs the build
/// found. A test that gets here runs. One whose build found no server
/// programs is ignored by its attribute (see `build.rs`) and never gets here; reaching
/// here without them means the attribute is missing, which fails the test.
#[track_caller]
fn required_var(name: &str) -> String {
    crate::support::needs::postgres();
    if let Ok(value) = std::env::var(name)
        && !value.is_empty()
    {
        return value;
    }
    match name {
        STORE_VAR => suite_server().to_string(),
        PGBIN_VAR => build_pgbin().to_string(),
        other => panic!("no such variable of the PostgreSQL tests: {other}"),
    }
}

/// The URL of the server the tests share (its superuser, who may create databases):
/// `FENCEPOST_TEST_STORE`, else the suite's own.
#[track_caller]
pub(crate) fn server_url() -> String {
    required_var(STORE_VAR)
}

/// The server programs' folder the build found (`build.rs`).
fn build_pgbin() -> &'static str {
    match option_env!("FENCEPOST_BUILD_PGBIN") {
        Some(bin) => bin,
        None => panic!(
            "the build found no PostgreSQL server programs (Debian: apt-get install \
             postgresql; or set FENCEPOST_TEST_PGBIN)"
        ),
    }
}

/// The suite's own server, for the tests of a run without `FENCEPOST_TEST_STORE`: a
/// cluster made by `tools/pg-test-cluster.sh` in a temp folder on the first call, and its
/// URL. It is stopped and removed when this test process ends, however it ends (a
/// panic, ^C, SIGKILL): a watchdog in a session of its own holds the read end of a pipe
/// whose write end only this process has, and stops the cluster when it reads the end
/// of it.
fn suite_server() -> &'static str {
    static SERVER: std::sync::OnceLock<(String, std::process::Child)> = std::sync::OnceLock::new();
    &SERVER.get_or_init(start_suite_server).0
}

/// See [`suite_server`].
fn start_suite_server() -> (String, std::process::Child) {
    use std::process::Stdio;
    // The system's temp folder: the socket's path must stay short and reachable by the
    // `postgres` user. Kept (not a TempDir): the watchdog removes it.
    let dir = tempfile::Builder::new()
        .prefix("fencepost-suite-pg-")
        .tempdir()
        .expect("temp dir for the suite's server")
        .keep();
    let script = cluster_script();
    // Started first, so that a cluster which starts is always stopped.
    let watchdog = Command::new("setsid")
        .args([
            "sh",
            "-c",
            r#"cat >/dev/null; exec "$0" stop "$1" >/dev/null 2>&1"#,
        ])
        .arg(&script)
        .arg(&dir)
        .env(PGBIN_VAR, build_pgbin())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the suite server's watchdog (setsid, util-linux)");
    let out = Command::new(&script)
        .arg("start")
        .arg(&dir)
        .env(PGBIN_VAR, build_pgbin())
        .output()
        .expect("run tools/pg-test-cluster.sh");
    assert!(
        out.status.success(),
        "tools/pg-test-cluster.sh start {}: {}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let url = printed
        .lines()
        .find_map(|l| l.strip_prefix(&format!("export {STORE_VAR}=")))
        .map(shell_unquoted)
        .unwrap_or_else(|| panic!("tools/pg-test-cluster.sh printed no {STORE_VAR}: {printed}"));
    // The watchdog, its stdin still open, is kept for the life of the process.
    (url, watchdog)
}

/// A word as the shell reads it back from `printf %q`: each backslash gives the
/// character after it.
fn shell_unquoted(word: &str) -> String {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        out.extend(if c == '\\' { chars.next() } else { Some(c) });
    }
    out
}

/// Connects to `url`, failing the test if the server does not answer.
#[track_caller]
pub(crate) fn connect(url: &str) -> Client {
    match Client::connect(url, NoTls) {
        Ok(client) => client,
        Err(e) => panic!("connect to {url}: {}", chain(&e)),
    }
}

/// An error with its causes, `a: b: c` (the driver's own message omits the cause).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// `url` naming the database `dbname` instead of its own, on the same server as the same
/// user: `postgresql://AUTHORITY/DB?PARAMS` with DB replaced (and a `dbname` parameter,
/// which would override it, dropped).
pub(crate) fn with_dbname(url: &str, dbname: &str) -> String {
    let (scheme, rest) = url
        .split_once("://")
        .unwrap_or_else(|| panic!("{STORE_VAR} must be a postgresql:// URL, not {url:?}"));
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = path
        .split_once('/')
        .map_or(path, |(authority, _)| authority);
    let params: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("dbname="))
        .collect();
    let mut out = format!("{scheme}://{authority}/{dbname}");
    if !params.is_empty() {
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// `url` with query parameters added (`key=value`, already encoded).
pub(crate) fn with_params(url: &str, params: &[String]) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{}", params.join("&"))
}

/// A schema of its own for one test, in the database `FENCEPOST_TEST_STORE` names;
/// dropped (its sessions ended) when the value is.
#[derive(Debug)]
pub(crate) struct TestStore {
    /// The URL of the shared database, as given.
    admin: String,
    name: String,
    url: String,
}

/// A fresh, empty schema for this test, on `FENCEPOST_TEST_STORE` or the suite's own
/// server. Panics if the server cannot be reached.
#[track_caller]
pub(crate) fn store() -> TestStore {
    let admin = required_var(STORE_VAR);
    let name = format!("fp_{:016x}", fastrand::u64(..));
    if let Err(e) = connect(&admin).batch_execute(&format!("CREATE SCHEMA {name}")) {
        panic!("create schema {name} through {admin}: {}", chain(&e));
    }
    let mut store = TestStore {
        admin,
        name,
        url: String::new(),
    };
    store.url = store.url_with(&[]);
    store
}

impl TestStore {
    /// The store's URL, for `--store` and `FENCEPOST_STORE`: the shared database with
    /// the test's schema as its `search_path`, and the schema's name as the sessions'
    /// `application_name` (by which they are ended at the end).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// [`Self::url`] with more server settings in its `options`, as `name=value`: e.g.
    /// `idle_in_transaction_session_timeout=1s`.
    pub(crate) fn url_with(&self, settings: &[&str]) -> String {
        let mut options = format!("-c search_path={}", self.name);
        for setting in settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        let options = options.replace(' ', "%20").replace('=', "%3D");
        with_params(
            &self.admin,
            &[
                format!("options={options}"),
                format!("application_name={}", self.name),
            ],
        )
    }

    /// The schema's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The URL of the shared database, as `FENCEPOST_TEST_STORE` gives it (a superuser).
    pub(crate) fn admin(&self) -> &str {
        &self.admin
    }

    /// A session on the store, to look at what fencepost left there.
    #[track_caller]
    pub(crate) fn client(&self) -> Client {
        connect(&self.url)
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        // A killed or paused fencepost may still hold locks on the schema's tables.
        let dropped = Client::connect(&self.admin, NoTls).and_then(|mut c| {
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = $1 AND pid <> pg_backend_pid()",
                &[&self.name],
            )?;
            c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
        });
        if let Err(e) = dropped {
            let e = chain(&e);
            eprintln!("warning: could not drop test schema {}: {e}", self.name);
        }
    }
}

/// The `application_name` a standby made by [`PrivateCluster::standby_of`] streams as.
pub(crate) const STANDBY_NAME: &str = "fencepost_standby";

/// A PostgreSQL server of the test's own, in a temp folder, for tests that crash and
/// restart it; stopped and removed when dropped.
#[derive(Debug)]
pub(crate) struct PrivateCluster {
    dir: TempDir,
    pgbin: String,
    /// The script's variables for where the server listens (see [`Self::start_in`]).
    listen: Vec<(&'static str, String)>,
}

impl PrivateCluster {
    /// Makes and starts a cluster with the programs in `FENCEPOST_TEST_PGBIN`, else those
    /// the build found. Panics if the cluster does not start.
    #[track_caller]
    pub(crate) fn start() -> PrivateCluster {
        Self::start_listening(Vec::new())
    }

    /// [`Self::start`], the server running inside the network namespace `netns` and
    /// listening on TCP at `addresses` there (comma-separated, as `listen_addresses`),
    /// open to clients in 198.18.0.0/15 as to the socket. Needs root, as the namespace does.
    #[track_caller]
    pub(crate) fn start_in(netns: &str, addresses: &str) -> PrivateCluster {
        Self::start_listening(vec![
            ("FENCEPOST_TEST_PG_NETNS", netns.to_string()),
            ("FENCEPOST_TEST_PG_LISTEN", addresses.to_string()),
        ])
    }

    /// [`Self::start`], the server also listening on TCP at 127.0.0.1 on a free port
    /// ([`Self::port`]), where initdb's rules trust every user (as on the socket).
    #[track_caller]
    pub(crate) fn start_tcp() -> PrivateCluster {
        // A port the system had free a moment ago; another program taking it in between
        // fails the start, which says so.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free TCP port on 127.0.0.1")
            .port();
        Self::start_listening(vec![
            ("FENCEPOST_TEST_PG_LISTEN", "127.0.0.1".to_string()),
            ("FENCEPOST_TEST_PG_PORT", port.to_string()),
        ])
    }

    /// The TCP port of a cluster started with [`Self::start_tcp`] (5432 for any other,
    /// which listens on its socket only).
    pub(crate) fn port(&self) -> u16 {
        self.listen
            .iter()
            .find(|(name, _)| *name == "FENCEPOST_TEST_PG_PORT")
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or(5432)
    }

    /// Writes `contents` to `name` in the cluster's data folder, owned by the server's
    /// user and readable by it alone (the server refuses a key that others may read).
    #[track_caller]
    pub(crate) fn write_data_file(&self, name: &str, contents: &str) {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let data = self.dir().join("data");
        let owner = std::fs::metadata(&data).expect("the cluster's data folder");
        let path = data.join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600 a data file");
        std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))
            .expect("give a data file to the server's user");
    }

    /// Replaces the cluster's pg_hba.conf with `rules` and has the server reload it.
    #[track_caller]
    pub(crate) fn set_hba(&self, rules: &str) {
        let hba = self.dir().join("data/pg_hba.conf");
        std::fs::write(&hba, rules).expect("write pg_hba.conf");
        connect(&self.url())
            .batch_execute("SELECT pg_reload_conf()")
            .expect("reload the server's rules");
    }

    #[track_caller]
    fn start_listening(listen: Vec<(&'static str, String)>) -> PrivateCluster {
        let pgbin = required_var(PGBIN_VAR);
        // The system's temp folder, not the build's: the socket's path must stay short
        // (about 100 bytes) and reachable by the `postgres` user.
        let dir = tempfile::Builder::new()
            .prefix("fencepost-pg-")
            .tempdir()
            .expect("temp dir for a cluster");
        let cluster = PrivateCluster { dir, pgbin, listen };
        cluster.script("start");
        cluster
    }

    /// Makes a streaming standby of `primary` (`pg_basebackup -R` over its replication
    /// connection, its own socket folder) and starts it. It reports to the primary as
    /// [`STANDBY_NAME`], the name `synchronous_standby_names` takes to wait for it.
    #[track_caller]
    pub(crate) fn standby_of(primary: &PrivateCluster) -> PrivateCluster {
        let dir = tempfile::Builder::new()
            .prefix("fencepost-pg-")
            .tempdir()
            .expect("temp dir for a standby");
        let out = Command::new(cluster_script())
            .arg("standby")
            .arg(primary.dir())
            .arg(dir.path())
            .env(PGBIN_VAR, &primary.pgbin)
            .output()
            .expect("run tools/pg-test-cluster.sh");
        assert!(
            out.status.success(),
            "tools/pg-test-cluster.sh standby {} {}: {}\n{}",
            primary.dir().display(),
            dir.path().display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // On the socket: the standby streams from the primary's socket folder.
        PrivateCluster {
            dir,
            pgbin: primary.pgbin.clone(),
            listen: Vec::new(),
        }
    }

    /// Promotes a standby to a primary (`pg_ctl promote --wait`): it accepts writes once
    /// this returns.
    #[track_caller]
    pub(crate) fn promote(&self) {
        self.script("promote");
    }

    /// The URL of the cluster's `postgres` database, as the superuser `postgres`.
    pub(crate) fn url(&self) -> String {
        let port = match self.port() {
            5432 => String::new(),
            port => format!("&port={port}"),
        };
        format!(
            "postgresql:///postgres?host={}&user=postgres{port}",
            self.dir.path().display()
        )
    }

    /// Sets server settings (`ALTER SYSTEM SET name = value`, `value` as SQL, quoted
    /// where it must be) and has the server reload them.
    #[track_caller]
    pub(crate) fn configure(&self, settings: &[(&str, &str)]) {
        let mut admin = connect(&self.url());
        for (name, value) in settings {
            if let Err(e) = admin.batch_execute(&format!("ALTER SYSTEM SET {name} = {value}")) {
                panic!("ALTER SYSTEM SET {name} = {value}: {}", chain(&e));
            }
        }
        if let Err(e) = admin.batch_execute("SELECT pg_reload_conf()") {
            panic!("pg_reload_conf(): {}", chain(&e));
        }
    }

    /// The folder holding the cluster (its data, log and socket).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `setup` (which makes the role `role` with a password, and any grants), then
    /// has the server ask that role alone for its password on the socket
    /// (`scram-sha-256`); everyone else keeps the socket's trust.
    #[track_caller]
    pub(crate) fn with_password_role(&self, setup: &str, role: &str) {
        let mut admin = connect(&self.url());
        admin
            .batch_execute(setup)
            .expect("create a role with a password");
        let hba = self.dir().join("data/pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        std::fs::write(&hba, format!("local all {role} scram-sha-256\n{rules}"))
            .expect("write pg_hba.conf");
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .expect("reload the server's rules");
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`): no shutdown
    /// checkpoint, sessions cut; the next start replays the WAL.
    #[track_caller]
    pub(crate) fn stop_immediate(&self) {
        self.script("crash");
    }

    /// Starts the server again on the same data, after [`Self::stop_immediate`].
    #[track_caller]
    pub(crate) fn start_again(&self) {
        self.script("start");
    }

    /// Runs `tools/pg-test-cluster.sh ACTION DIR`; panics with its output if it fails.
    #[track_caller]
    fn script(&self, action: &str) -> String {
        let out = Command::new(cluster_script())
            .arg(action)
            .arg(self.dir.path())
            .env(PGBIN_VAR, &self.pgbin)
            .envs(self.listen.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run tools/pg-test-cluster.sh");
        assert!(
            out.status.success(),
            "tools/pg-test-cluster.sh {action} {}: {}\n{}",
            self.dir.path().display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let stopped = Command::new(cluster_script())
            .arg("stop")
            .arg(self.dir.path())
            .env(PGBIN_VAR, &self.pgbin)
            .status();
        if !matches!(stopped, Ok(s) if s.success()) {
            eprintln!(
                "warning: could not stop the cluster in {}",
                self.dir.path().display()
            );
        }
    }
}

/// PgBouncer in transaction mode, in front of a test's schema: each transaction a client
/// starts may run on any of a few server sessions, and statements outside one on any.
/// Listens on a Unix socket in a temp folder of its own; stopped when dropped (and, as
/// its parent's death signal, killed with the test's thread should the suite be
/// interrupted).
#[derive(Debug)]
pub(crate) struct Pooler {
    child: std::process::Child,
    dir: TempDir,
    url: String,
}

/// Where Debian's package puts the pooler (not on a user's PATH).
const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

impl Pooler {
    /// A pooler for `store`'s schema with at most `sessions` server sessions, each made
    /// with `session` run first
    /// (SQL, e.g. `SET idle_in_transaction_session_timeout = '1s'`, as an operator's
    /// `connect_query` would). A test that uses one carries
    /// `#[cfg_attr(fp_missing = "pgbouncer", ignore = ...)]`; without PgBouncer it fails.
    #[track_caller]
    pub(crate) fn in_front_of(store: &TestStore, session: &str, sessions: u32) -> Pooler {
        crate::support::needs::pgbouncer();
        let program = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("pgbouncer"))
            .chain([PathBuf::from(PGBOUNCER)])
            .find(|p| p.is_file())
            .expect(
                "pgbouncer (Debian: apt-get install pgbouncer) runs the tests through a pooler",
            );
        let server = ServerAddress::of(store.admin());
        let dir = tempfile::Builder::new()
            .prefix("fencepost-pgbouncer-")
            .tempdir()
            .expect("temp dir for a pooler");
        write_pooler_config(dir.path(), store, &server, session, sessions);
        // PgBouncer refuses to run as root: as the server's user then, as pg-test-cluster.sh
        // runs the server. setpriv execs it (no process in between to signal).
        let mut cmd = Command::new("setpriv");
        if crate::support::netns::is_root() {
            let chown = Command::new("chown")
                .arg("-R")
                .arg("postgres")
                .arg(dir.path())
                .status()
                .expect("run chown");
            assert!(chown.success(), "chown the pooler's folder to postgres");
            cmd.args([
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--clear-groups",
            ]);
        }
        let child = cmd
            .args(["--pdeathsig", "KILL"])
            .arg(&program)
            .arg(dir.path().join("pgbouncer.ini"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let url = format!(
            "postgresql:///fencepost?host={}&port={POOLER_PORT}&user={}&application_name={}",
            dir.path().display(),
            server.user,
            store.name()
        );
        let pooler = Pooler { child, dir, url };
        pooler.wait_until_up();
        pooler
    }

    /// The URL fencepost is given: the pooler's database, no `options` (PgBouncer refuses
    /// them).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The pooler's log, for a failing test's message.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }

    #[track_caller]
    fn wait_until_up(&self) {
        let socket = self.dir.path().join(format!(".s.PGSQL.{POOLER_PORT}"));
        for _ in 0..200 {
            if socket.exists() && Client::connect(&self.url, NoTls).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("pgbouncer did not come up: {}", self.log());
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the pooler's configuration and users into `dir`: one database, `fencepost`,
/// for `store`'s schema on `server`, at most `sessions` server sessions each starting
/// with `session`.
fn write_pooler_config(
    dir: &Path,
    store: &TestStore,
    server: &ServerAddress,
    session: &str,
    sessions: u32,
) {
    let connect_query =
        format!("SET search_path = {}; {session}", store.name()).replace('\'', "''");
    let ini = format!(
        "[databases]\n\
             fencepost = host={host} port={port} dbname={db} user={user} \
             connect_query='{connect_query}'\n\
             [pgbouncer]\n\
             listen_addr =\n\
             unix_socket_dir = {dir}\n\
             listen_port = {POOLER_PORT}\n\
             auth_type = trust\n\
             auth_file = {dir}/users.txt\n\
             pool_mode = transaction\n\
             default_pool_size = {sessions}\n\
             max_client_conn = 200\n\
             logfile = {dir}/pgbouncer.log\n",
        host = server.host,
        port = server.port,
        db = server.dbname,
        user = server.user,
        dir = dir.display(),
    );
    std::fs::write(dir.join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
    std::fs::write(dir.join("users.txt"), format!("\"{}\" \"\"\n", server.user))
        .expect("write the pooler's users");
}

/// The port in the pooler's socket name (its folder is its own, so any port will do).
const POOLER_PORT: u16 = 6432;

/// Where a test server listens and as whom, read from a URL of the form the suite uses
/// (`postgresql://[host[:port]]/db?host=...&port=...&user=...`).
struct ServerAddress {
    host: String,
    port: String,
    dbname: String,
    user: String,
}

impl ServerAddress {
    #[track_caller]
    fn of(url: &str) -> ServerAddress {
        let rest = url
            .strip_prefix("postgresql://")
            .or_else(|| url.strip_prefix("postgres://"))
            .unwrap_or_else(|| panic!("{STORE_VAR} is not a postgresql:// URL: {url}"));
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, dbname) = path.split_once('/').unwrap_or((path, ""));
        let authority = authority.rsplit('@').next().unwrap_or("");
        let (mut host, mut port) = match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), p.to_string()),
            None => (authority.to_string(), String::new()),
        };
        let mut user = String::from("postgres");
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("host", v)) => host = v.to_string(),
                Some(("port", v)) => port = v.to_string(),
                Some(("user", v)) => user = v.to_string(),
                _ => {}
            }
        }
        ServerAddress {
            host: if host.is_empty() { "/tmp".into() } else { host },
            port: if port.is_empty() { "5432".into() } else { port },
            dbname: if dbname.is_empty() {
                user.clone()
            } else {
                dbname.to_string()
            },
            user,
        }
    }
}
