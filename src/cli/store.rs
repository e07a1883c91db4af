//! `fencepost store init`: make a PostgreSQL store's tables, as its owner, and print the
//! grants the other roles need.

use clap::{ArgGroup, Args, Subcommand};

use super::Report;
use fencepost::error::{Error, Result};
use fencepost::outcome::{Grants, Outcome, StoreSchema};
use fencepost::session::Ctx;
use fencepost::store::postgres::PgStore;
use fencepost::store::roles::{self, Access};

/// Set up a PostgreSQL store (--store): its tables, and the grants of its roles.
///
/// Example:
///   fencepost --store 'postgresql:///fencepost?host=/run/postgresql' store init
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    Init(InitArgs),
}

/// Make the tables of the store --store names, or print the grants a role needs.
///
/// Run once by the database's owner (or a role with CREATE on the schema) before the
/// first claim: it makes fencepost's tables (fencepost_*) in the store's schema and
/// answers `initialized`; run again it changes nothing and answers `ready`, upgrading a
/// schema an older fencepost made. A first claim by a role that may create tables makes
/// them too; one by a role that may not is refused (exit 2) saying to run this.
/// The schema is the first of the URL's search_path (options=-c search_path=NAME), else
/// public: several environments share a database each in a schema of its own.
/// Without --store it is refused (exit 2): `fencepost init` makes a local root (a first
/// claim does too).
///
/// --print-grants ROLE prints, and runs nothing, the SQL (for the owner to run) that
/// lets ROLE, with --writer, claim, renew, complete, release, write, run, recover and
/// prune the log (and read); with --reader, run cat, mirror, status, verify and log
/// (USAGE on the schema and SELECT, nothing more). It needs no server: the schema is the
/// URL's as above, public without --store. A command a role lacks a grant for exits 2
/// naming the role and the privilege.
///
/// Example:
///   export FENCEPOST_STORE='postgresql:///fencepost?host=/run/postgresql&user=postgres'
///   fencepost store init
///   fencepost store init --print-grants jobs --writer | psql -d fencepost
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("access").args(["writer", "reader"])))]
pub(crate) struct InitArgs {
    /// Print the grants ROLE needs instead of making the tables (with --writer or
    /// --reader).
    #[arg(long, value_name = "ROLE", requires = "access")]
    pub print_grants: Option<String>,

    /// With --print-grants: the grants of a role that changes the store.
    #[arg(long, requires = "print_grants")]
    pub writer: bool,

    /// With --print-grants: the grants of a role that only reads it.
    #[arg(long, requires = "print_grants")]
    pub reader: bool,
}

impl StoreArgs {
    /// Only prints (`--print-grants`): whatever happens to its output, nothing changed.
    pub(crate) fn prints_only(&self) -> bool {
        let StoreCommand::Init(init) = &self.command;
        init.print_grants.is_some()
    }
}

pub(crate) fn run(ctx: &Ctx, args: &StoreArgs) -> Result<Report> {
    let StoreCommand::Init(init) = &args.command;
    if let Some(role) = &init.print_grants {
        let access = if init.reader {
            Access::Reader
        } else {
            Access::Writer
        };
        return print_grants(ctx, role, access);
    }
    let Some(remote) = &ctx.remote else {
        return Err(Error::usage_hint(
            "store init is for a PostgreSQL store, and no --store was given",
            "pass --store URL (FENCEPOST_STORE); a local root is made by `fencepost init` (or \
             its first claim)",
        ));
    };
    let done = PgStore::init(&remote.url, ctx.busy, remote.commit_timeout)?;
    let schema = StoreSchema {
        store: remote.url.shown.clone(),
        schema: done.schema,
    };
    if done.made {
        let changed = format!(
            "the store {} has fencepost's tables (schema version {})",
            schema.store, schema.schema
        );
        Ok(Report::new("initialized", Outcome::Initialized(schema)).changed(changed))
    } else {
        Ok(Report::new("ready", Outcome::Ready(schema)))
    }
}

/// `--print-grants ROLE`: the SQL, for the schema the store URL names (public without
/// one).
fn print_grants(ctx: &Ctx, role: &str, access: Access) -> Result<Report> {
    if role.is_empty() || role.eq_ignore_ascii_case("public") {
        return Err(Error::usage_hint(
            format!("--print-grants {role:?}: not a role's name"),
            "name the role that will connect (its user in the store URL); PUBLIC is every role",
        ));
    }
    let schema = match &ctx.remote {
        Some(remote) => roles::schema_in(&remote.url)?,
        None => "public".to_string(),
    };
    let sql = roles::grants(&schema, role, access);
    let plain = sql.trim_end().to_string();
    Ok(Report::new(
        plain,
        Outcome::Grants(Grants {
            role: role.to_string(),
            access: access.as_str(),
            sql,
        }),
    ))
}
