//! Row P5 of the benchmarks (`bench/pg.py` runs it): the least a process that publishes 4
//! KiB to PostgreSQL costs, against which the three fencepost processes of a publish
//! (claim, write, complete) are measured. Each run of this program is one process that
//! connects with the same client crate fencepost uses, commits one transaction that
//! inserts the file's bytes into a table of its own, and exits.
//!
//! ```text
//! bench_pg_floor URL FILE
//! ```
//!
//! The table is the bench's to make first: `CREATE TABLE bench_floor (id bigserial
//! PRIMARY KEY, data bytea)`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(file), None) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: bench_pg_floor URL FILE");
        std::process::exit(2);
    };
    let data = std::fs::read(file)?;
    let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
    let mut tx = client.transaction()?;
    tx.execute("INSERT INTO bench_floor (data) VALUES ($1)", &[&data])?;
    tx.commit()?;
    Ok(())
}
