//! The PostgreSQL test support itself: a store is a fresh schema of the test's own that
//! goes away with it, its URL takes more server settings, and a private cluster keeps a
//! committed row across an immediate stop and a restart, and a standby made of it streams
//! from it and takes writes once promoted. These run wherever PostgreSQL's server
//! programs are installed (see `support::pg`), and are listed as ignored elsewhere.

use crate::support::pg::{self, PrivateCluster, with_dbname};

/// Whether the database behind `admin` has a schema called `name`.
fn schema_exists(admin: &str, name: &str) -> bool {
    pg::connect(admin)
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&name],
        )
        .expect("look up pg_namespace")
        .get::<_, i64>(0)
        == 1
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_store_schema_is_the_tests_own_and_is_dropped_after_it() {
    let store = pg::store();
    let other = pg::store();
    assert_ne!(store.name(), other.name());

    let mut client = store.client();
    let current: String = client
        .query_one("SELECT current_schema()::text", &[])
        .expect("current_schema()")
        .get(0);
    assert_eq!(current, store.name());
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
            &[],
        )
        .expect("count tables")
        .get(0);
    assert_eq!(tables, 0, "a new store schema is empty");
    // A table made through the URL lands in the schema, out of the other's sight.
    client
        .batch_execute("CREATE TABLE fencepost_meta (key text)")
        .expect("create a table");
    let seen: Option<String> = other
        .client()
        .query_one("SELECT to_regclass('fencepost_meta')::text", &[])
        .expect("to_regclass")
        .get(0);
    assert_eq!(seen, None, "one test's table is visible to another");

    // A session still open on it (holding a lock) does not keep it alive.
    let admin = pg::server_url();
    let name = store.name().to_owned();
    client
        .batch_execute("BEGIN; LOCK TABLE fencepost_meta")
        .expect("hold a lock");
    assert!(schema_exists(&admin, &name));
    drop(store);
    assert!(!schema_exists(&admin, &name), "{name} outlived its test");
    assert!(client.query_one("SELECT 1", &[]).is_err());
    assert!(schema_exists(&admin, other.name()));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_store_url_takes_more_server_settings() {
    let store = pg::store();
    let url = store.url_with(&["idle_in_transaction_session_timeout=1s"]);
    let mut client = pg::connect(&url);
    let (path, idle): (String, String) = {
        let row = client
            .query_one(
                "SELECT current_setting('search_path'),
                        current_setting('idle_in_transaction_session_timeout')",
                &[],
            )
            .expect("settings");
        (row.get(0), row.get(1))
    };
    assert_eq!((path.as_str(), idle.as_str()), (store.name(), "1s"));
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_private_cluster_keeps_a_committed_row_across_an_immediate_stop() {
    let cluster = PrivateCluster::start();
    let mut client = pg::connect(&cluster.url());
    client
        .batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
        .expect("create and fill a table");

    cluster.stop_immediate();
    assert!(
        client.query_one("SELECT 1", &[]).is_err(),
        "the session outlived its server"
    );
    assert!(postgres::Client::connect(&cluster.url(), postgres::NoTls).is_err());

    cluster.start_again();
    let v: i32 = pg::connect(&cluster.url())
        .query_one("SELECT v FROM t", &[])
        .expect("the row after the restart")
        .get(0);
    assert_eq!(v, 42);

    let dir = cluster.dir().to_path_buf();
    assert!(dir.join("data/PG_VERSION").is_file());
    drop(cluster);
    assert!(!dir.exists(), "{} outlived its cluster", dir.display());
}

#[test]
fn a_store_url_names_another_database_on_the_same_server() {
    assert_eq!(
        with_dbname("postgresql:///postgres?host=/tmp/s&user=postgres", "fp_1"),
        "postgresql:///fp_1?host=/tmp/s&user=postgres"
    );
    assert_eq!(
        with_dbname("postgres://u:p@db.example:5433", "fp_1"),
        "postgres://u:p@db.example:5433/fp_1"
    );
    assert_eq!(
        with_dbname("postgresql://h/app?dbname=app&sslmode=disable", "fp_1"),
        "postgresql://h/fp_1?sslmode=disable"
    );
}

#[test]
#[cfg_attr(
    fp_missing = "postgres",
    ignore = "needs PostgreSQL (Debian: postgresql)"
)]
fn a_standby_streams_from_its_primary_and_takes_writes_once_promoted() {
    let primary = PrivateCluster::start();
    let standby = PrivateCluster::standby_of(&primary);
    let mut p = pg::connect(&primary.url());
    p.batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (7)")
        .expect("write on the primary");
    let lsn: String = p
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .expect("lsn")
        .get(0);
    let streaming: i64 = p
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1",
            &[&pg::STANDBY_NAME],
        )
        .expect("pg_stat_replication")
        .get(0);
    assert_eq!(streaming, 1, "the standby streams under its name");
    let mut s = pg::connect(&standby.url());
    let started = std::time::Instant::now();
    while !s
        .query_one(
            "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
            &[&lsn],
        )
        .expect("replay lsn")
        .get::<_, bool>(0)
    {
        assert!(
            started.elapsed().as_secs() < 30,
            "the standby never replayed {lsn}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        s.query_one("SELECT v FROM t", &[])
            .expect("read")
            .get::<_, i32>(0),
        7
    );
    assert!(
        s.batch_execute("INSERT INTO t VALUES (8)").is_err(),
        "a standby takes no writes"
    );
    drop(s);
    drop(p);

    primary.stop_immediate();
    standby.promote();
    let mut s = pg::connect(&standby.url());
    s.batch_execute("INSERT INTO t VALUES (8)")
        .expect("the promoted standby takes writes");
    let dir = standby.dir().to_path_buf();
    drop(s);
    drop(standby);
    assert!(!dir.exists(), "{} outlived its standby", dir.display());
}
