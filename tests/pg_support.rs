//! The PostgreSQL test support itself: a store database is a fresh database of the
//! test's own that goes away with it, and a private cluster keeps a committed row across
//! an immediate stop and a restart. These run whenever `FENCEPOST_TEST_STORE` and
//! `FENCEPOST_TEST_PGBIN` are set (CI sets both) and say "skipped" otherwise.

use crate::support::pg::{self, PrivateCluster, with_dbname};

/// Whether the server behind `admin` has a database called `name`.
fn database_exists(admin: &str, name: &str) -> bool {
    pg::connect(admin)
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&name],
        )
        .expect("look up pg_database")
        .get::<_, i64>(0)
        == 1
}

#[test]
fn a_store_database_is_the_tests_own_and_is_dropped_after_it() {
    let Some(store) = pg::store() else { return };
    let other = pg::store().expect("a second store database");
    assert_ne!(store.name(), other.name());

    let mut client = store.client();
    let one: i32 = client.query_one("SELECT 1", &[]).expect("SELECT 1").get(0);
    assert_eq!(one, 1);
    let current: String = client
        .query_one("SELECT current_database()", &[])
        .expect("current_database()")
        .get(0);
    assert_eq!(current, store.name());
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .expect("count tables")
        .get(0);
    assert_eq!(tables, 0, "a new store database is empty");

    // A session still open on it does not keep it alive.
    let admin = std::env::var("FENCEPOST_TEST_STORE").expect("set, since store() ran");
    let name = store.name().to_owned();
    assert!(database_exists(&admin, &name));
    drop(store);
    assert!(!database_exists(&admin, &name), "{name} outlived its test");
    assert!(client.query_one("SELECT 1", &[]).is_err());
    assert!(database_exists(&admin, other.name()));
}

#[test]
fn a_private_cluster_keeps_a_committed_row_across_an_immediate_stop() {
    let Some(cluster) = PrivateCluster::start() else {
        return;
    };
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
