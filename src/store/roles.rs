//! The roles of a PostgreSQL store: what each of fencepost's objects must grant a role
//! that changes the store (a writer: claim, renew, complete, release, write, run,
//! recover, `log --prune`) and one that only reads it (a reader: cat, mirror, status,
//! verify, log), as the SQL `fencepost store init --print-grants` prints, and the words
//! for a role that lacks one.
//!
//! One table, `NEEDS`, says it all: the printed grants, the privileges a session looks
//! for before a change it may not make (so that a reader's change is refused naming what
//! it lacks), and the hint under a permission error are read from it, so they cannot
//! disagree. Its content
//! is what the commands were found to need, each privilege by a command that fails
//! without it (tests/roles.rs).

/// The grants of a role: a writer's include a reader's, so a writer may also run
/// status, verify, log, cat and mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Writer,
    Reader,
}

impl Access {
    /// The word the command line and `--json` use.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Writer => "writer",
            Access::Reader => "reader",
        }
    }
}

/// What kind of object a grant is on, as `GRANT ... ON KIND` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Table,
    Sequence,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Table => "table",
            Kind::Sequence => "sequence",
        }
    }
}

/// One object and the privileges each access needs on it.
struct Needs {
    kind: Kind,
    name: &'static str,
    /// A writer's privileges (a reader's are among them).
    writer: &'static [&'static str],
    reader: &'static [&'static str],
}

/// What every object of the schema must grant. A reader reads every table but
/// `fencepost_lock` (only changes lock) and `fencepost_seen` (only claims read it); a
/// writer only adds to `fencepost_meta` (the clock's binding, with `ON CONFLICT DO
/// NOTHING`), and writes `fencepost_seen` when its mirror is ahead of the store.
/// `SELECT ... FOR UPDATE` and `FOR KEY SHARE` need UPDATE, `INSERT ... ON CONFLICT DO
/// UPDATE` needs UPDATE, `INSERT ... RETURNING` needs SELECT, `bigserial` ids need USAGE
/// on their sequence; what a foreign key checks or cascades the server does as the
/// tables' owner, so `fencepost_chunk` needs no DELETE.
const NEEDS: &[Needs] = &[
    Needs {
        kind: Kind::Table,
        name: "fencepost_meta",
        writer: &["SELECT", "INSERT"],
        reader: &["SELECT"],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_lock",
        writer: &["SELECT", "INSERT", "UPDATE"],
        reader: &[],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_lease",
        writer: &["SELECT", "INSERT", "UPDATE"],
        reader: &["SELECT"],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_blob",
        writer: &["SELECT", "INSERT", "UPDATE", "DELETE"],
        reader: &[],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_chunk",
        writer: &["SELECT", "INSERT"],
        reader: &["SELECT"],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_sink",
        writer: &["SELECT", "INSERT", "UPDATE"],
        reader: &["SELECT"],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_log",
        writer: &["SELECT", "INSERT", "DELETE"],
        reader: &["SELECT"],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_seen",
        writer: &["SELECT", "INSERT", "UPDATE"],
        reader: &[],
    },
    Needs {
        kind: Kind::Table,
        name: "fencepost_tree_blob",
        writer: &["SELECT", "INSERT"],
        reader: &["SELECT"],
    },
    Needs {
        kind: Kind::Sequence,
        name: "fencepost_blob_id_seq",
        writer: &["USAGE"],
        reader: &[],
    },
    Needs {
        kind: Kind::Sequence,
        name: "fencepost_log_id_seq",
        writer: &["USAGE"],
        reader: &[],
    },
];

/// The SQL that gives `role` the privileges `access` needs on a store whose tables are
/// in `schema`: USAGE on the schema, then one GRANT per object, one statement a line.
#[must_use]
pub fn grants(schema: &str, role: &str, access: Access) -> String {
    let (schema, role) = (quote(schema), quote(role));
    let mut sql = format!("GRANT USAGE ON SCHEMA {schema} TO {role};\n");
    for needs in NEEDS {
        let privileges = match access {
            Access::Writer => needs.writer,
            Access::Reader => needs.reader,
        };
        if privileges.is_empty() {
            continue;
        }
        sql.push_str(&format!(
            "GRANT {} ON {} {schema}.{} TO {role};\n",
            privileges.join(", "),
            needs.kind.as_str().to_uppercase(),
            needs.name
        ));
    }
    sql
}

/// An expression giving, as a text array, the privileges of a writer that the session's
/// role lacks on the objects the schema has (`INSERT on table fencepost_lock`), none
/// when it has them all.
pub(super) fn lacking_sql() -> String {
    let pairs: Vec<String> = NEEDS
        .iter()
        .flat_map(|n| {
            n.writer
                .iter()
                .map(move |p| format!("('{}', '{}', '{p}')", n.kind.as_str(), n.name))
        })
        .collect();
    format!(
        "ARRAY(SELECT p || ' on ' || k || ' ' || o
               FROM (VALUES {}) AS v (k, o, p)
               WHERE to_regclass(o) IS NOT NULL
                 AND NOT CASE k WHEN 'table' THEN has_table_privilege(to_regclass(o), p)
                                ELSE has_sequence_privilege(to_regclass(o), p) END)",
        pairs.join(", ")
    )
}

/// A boolean expression: the session's role holds every one of `needed` (privileges as
/// [`lacking_sql`] names them) on the objects that exist. Cheap enough for every
/// connect, where [`lacking_sql`], which looks at every object, is not: the full list
/// is asked for only when a change would be refused.
pub(super) fn holds_sql(needed: &[&str]) -> String {
    let checks: Vec<String> = needed
        .iter()
        .filter_map(|n| {
            let (privilege, object) = n.split_once(" on ")?;
            let (kind, name) = object.split_once(' ')?;
            Some(format!(
                "coalesce(has_{kind}_privilege(to_regclass('{name}'), '{privilege}'), true)"
            ))
        })
        .collect();
    if checks.is_empty() {
        return "true".to_string();
    }
    format!("({})", checks.join(" AND "))
}

/// What every change does first (its transaction locks the resource's row of
/// `fencepost_lock` with an upsert, INSERT ... ON CONFLICT DO UPDATE, which reads the row
/// it meets), as [`lacking_sql`] names privileges.
pub(super) const CHANGE: &[&str] = &[
    "SELECT on table fencepost_lock",
    "INSERT on table fencepost_lock",
    "UPDATE on table fencepost_lock",
];

/// What an upload of content does: a new blob row (its id from the sequence, returned),
/// its chunks, and the blob marked complete.
pub(super) const UPLOAD: &[&str] = &[
    "SELECT on table fencepost_blob",
    "INSERT on table fencepost_blob",
    "UPDATE on table fencepost_blob",
    "USAGE on sequence fencepost_blob_id_seq",
    "INSERT on table fencepost_chunk",
];

/// The object (`table fencepost_lock`) of the first of `needed` that `lacking` (as
/// [`lacking_sql`] gives it) holds.
pub(super) fn lacks_on<'a>(lacking: &[String], needed: &[&'a str]) -> Option<&'a str> {
    needed
        .iter()
        .find(|n| lacking.iter().any(|l| l == **n))
        .and_then(|n| object_of(n))
}

/// The object of one of [`lacking_sql`]'s entries.
fn object_of(lacking: &str) -> Option<&str> {
    lacking.split_once(" on ").map(|(_, o)| o)
}

/// `lacking` in words, the privileges on `first` (an object) together: `INSERT, UPDATE
/// on table fencepost_lock`, and how many more there are on other objects.
pub(super) fn lacking_words(lacking: &[String], first: &str) -> String {
    let (on_first, rest): (Vec<&String>, Vec<&String>) =
        lacking.iter().partition(|l| object_of(l) == Some(first));
    let privileges: Vec<&str> = on_first
        .iter()
        .filter_map(|l| l.split_once(" on ").map(|(p, _)| p))
        .collect();
    let mut words = format!("{} on {first}", privileges.join(", "));
    match rest.len() {
        0 => {}
        1 => words.push_str(" (and 1 more privilege of a writer)"),
        n => words.push_str(&format!(" (and {n} more privileges of a writer)")),
    }
    words
}

/// What a writer has on the object a server's "permission denied for KIND NAME" names,
/// in words (`SELECT, INSERT, DELETE`), when it is one of fencepost's; USAGE on a
/// schema.
pub(super) fn writer_has(kind: &str, name: &str) -> Option<String> {
    if kind == "schema" {
        return Some("USAGE".to_string());
    }
    NEEDS
        .iter()
        .find(|n| n.kind.as_str() == kind && n.name == name)
        .map(|n| n.writer.join(", "))
}

/// The object of a server's "permission denied for KIND NAME" (in English; a server in
/// another language gives `None`).
pub(super) fn denied_object(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("permission denied for ")?;
    let (kind, name) = rest.split_once(' ')?;
    Some((kind, name))
}

/// The hint under every refusal for a missing privilege.
pub(super) fn grants_hint(role: &str) -> String {
    format!(
        "`fencepost store init --print-grants {role} --writer` (or --reader) prints the grants \
         a role needs; the store's owner runs them"
    )
}

/// The schema a store's tables are in as its URL says: the first entry of `search_path`
/// in the connection's `options` (`-c search_path=NAME`, `--search_path=NAME`), else
/// `public`. A first entry of `$user` names no one schema: refused.
pub fn schema_of(options: Option<&str>) -> Result<String, String> {
    let Some(options) = options else {
        return Ok("public".to_string());
    };
    let mut found = None;
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let setting = match word {
            "-c" => words.next(),
            other => other
                .strip_prefix("--")
                .or_else(|| other.strip_prefix("-c")),
        };
        if let Some(path) = setting.and_then(|s| {
            s.strip_prefix("search_path=")
                .or_else(|| s.strip_prefix("search-path="))
        }) {
            found = Some(path);
        }
    }
    let Some(path) = found else {
        return Ok("public".to_string());
    };
    let first = path.split(',').next().unwrap_or("").trim();
    let first = match first.strip_prefix('"').and_then(|f| f.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => first.to_lowercase(),
    };
    if first.is_empty() || first.starts_with('$') {
        return Err(format!(
            "its search_path ({path}) does not start with a schema's name"
        ));
    }
    Ok(first)
}

/// The schema the store `url` keeps its tables in, as [`schema_of`] reads its options.
pub fn schema_in(url: &super::postgres::StoreUrl) -> crate::error::Result<String> {
    let options = url
        .url
        .parse::<postgres::Config>()
        .ok()
        .and_then(|c| c.get_options().map(str::to_string));
    schema_of(options.as_deref()).map_err(|why| {
        crate::error::Error::usage_hint(
            format!("--store {}: {why}", url.shown),
            "name the schema first: options=-c search_path=NAME (public when none is named)",
        )
    })
}

/// `name` as an SQL identifier: as it is when it is a plain lower-case name that is no
/// reserved word, else in double quotes.
#[must_use]
pub fn quote(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !RESERVED.contains(&name);
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// PostgreSQL's words that cannot be a role's or a schema's name unquoted: its reserved
/// key words and those that may name only types or functions.
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "none",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_when_they_must_be() {
        assert_eq!(quote("jobs"), "jobs");
        assert_eq!(quote("app_2"), "app_2");
        assert_eq!(quote("Jobs"), "\"Jobs\"");
        assert_eq!(quote("user"), "\"user\"");
        assert_eq!(quote("a-b"), "\"a-b\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote("2x"), "\"2x\"");
    }

    #[test]
    fn the_schema_is_the_first_of_the_search_path_else_public() {
        assert_eq!(schema_of(None), Ok("public".into()));
        assert_eq!(schema_of(Some("-c lock_timeout=1")), Ok("public".into()));
        assert_eq!(
            schema_of(Some("-c search_path=staging")),
            Ok("staging".into())
        );
        assert_eq!(
            schema_of(Some("-c lock_timeout=1 -csearch_path=Prod,public")),
            Ok("prod".into())
        );
        assert_eq!(
            schema_of(Some("--search_path=\"Prod\",public")),
            Ok("Prod".into())
        );
        assert!(schema_of(Some("-c search_path=$user,public")).is_err());
    }

    #[test]
    fn a_reader_is_granted_a_part_of_what_a_writer_is() {
        for needs in NEEDS {
            for privilege in needs.reader {
                assert!(needs.writer.contains(privilege), "{}", needs.name);
            }
        }
        let reader = grants("public", "r", Access::Reader);
        assert!(!reader.contains("INSERT") && !reader.contains("fencepost_lock"));
    }

    #[test]
    fn what_is_lacking_is_said_object_by_object() {
        let lacking: Vec<String> = [
            "INSERT on table fencepost_lock",
            "UPDATE on table fencepost_lock",
            "DELETE on table fencepost_log",
            "USAGE on sequence fencepost_log_id_seq",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            lacking_words(&lacking, "table fencepost_lock"),
            "INSERT, UPDATE on table fencepost_lock (and 2 more privileges of a writer)"
        );
        assert_eq!(lacks_on(&lacking, CHANGE), Some("table fencepost_lock"));
        assert_eq!(lacks_on(&lacking, UPLOAD), None);
        assert_eq!(
            denied_object("permission denied for table fencepost_log"),
            Some(("table", "fencepost_log"))
        );
        assert_eq!(
            writer_has("table", "fencepost_log").as_deref(),
            Some("SELECT, INSERT, DELETE")
        );
    }
}
