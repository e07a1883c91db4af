//! A store's connection string as people write it, and as messages show it.
//!
//! Two spellings name a PostgreSQL server, as libpq takes them: a URL
//! (`postgresql://USER:PASSWORD@HOST:PORT/DB?key=value&...`) and a key=value string
//! (`host=HOST dbname=DB user=USER password='a b'`). The driver parses both; this module
//! checks the key=value grammar first, so that a malformed string gets a message of its
//! own (the driver's can quote the text), and masks every password for messages, logs and
//! the files fencepost writes.
//!
//! Masking errs on the side of hiding: a password with an unencoded `@`, `?`, `/`, `#` or
//! `:` in it is hidden whole however the driver would split it, and a string that stops
//! following its grammar is hidden from where it stops.

use std::ops::Range;

/// What stands for a password, or for the rest of a string that stopped parsing.
const MASK: &str = "***";

/// The spelling of a connection string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form<'a> {
    /// `SCHEME://...`, with its scheme (not necessarily PostgreSQL's).
    Url(&'a str),
    /// `key=value` pairs.
    Keywords,
    /// Neither: no `SCHEME://` and no `=`.
    Other,
}

impl Form<'_> {
    /// How `text` is spelt: a URL when it starts with `SCHEME://` (a scheme without `=`
    /// or white space), key=value when it has a `=`.
    #[must_use]
    pub fn of(text: &str) -> Form<'_> {
        if let Some((scheme, _)) = text.split_once("://")
            && !scheme.is_empty()
            && !scheme.contains(|c: char| c == '=' || c.is_whitespace())
        {
            return Form::Url(scheme);
        }
        if text.contains('=') {
            Form::Keywords
        } else {
            Form::Other
        }
    }
}

/// A URL whose query names several hosts in one `host=` parameter (`?host=/a,/b`, as
/// libpq takes a list) rewritten with one `host=` per host, which is how the driver takes
/// a list from a URL's query: it reads a query's `host=` as one host (a socket folder may
/// hold any character), and adds one for each `host=`. Only unencoded commas separate (a
/// `%2C` stays part of the name). Any other string is returned as it is.
#[must_use]
pub fn one_host_each(text: &str) -> std::borrow::Cow<'_, str> {
    let Form::Url(scheme) = Form::of(text) else {
        return text.into();
    };
    let rest = scheme.len() + "://".len();
    // The driver ends the user's part at the first `@`; the query starts after it.
    let from = text[rest..].find('@').map_or(rest, |at| rest + at);
    let Some(query) = text[from..].find('?').map(|q| from + q + 1) else {
        return text.into();
    };
    let pieces: Vec<String> = text[query..]
        .split('&')
        .map(|piece| match piece.strip_prefix("host=") {
            Some(hosts) if hosts.contains(',') => hosts
                .split(',')
                .map(|host| format!("host={host}"))
                .collect::<Vec<_>>()
                .join("&"),
            _ => piece.to_string(),
        })
        .collect();
    let joined = pieces.join("&");
    if joined == text[query..] {
        return text.into();
    }
    format!("{}{joined}", &text[..query]).into()
}

/// `text` without the parameters named in `names`, and the values they had (the last one
/// of each name, as the driver and libpq take a repeated one), unquoted and unescaped as
/// a key=value string holds them, percent-decoded as a URL's query does. For the
/// parameters fencepost reads itself, that the driver refuses or does not know
/// (`sslmode=verify-full`, `sslrootcert`). A key=value string that does not follow its
/// grammar, and any other form, is returned as it is, with nothing taken.
#[must_use]
pub fn take_params(text: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let mut taken: Vec<(String, String)> = Vec::new();
    let mut keep = |name: &str, value: String| {
        taken.retain(|(n, _)| n != name);
        taken.push((name.to_string(), value));
    };
    match Form::of(text) {
        Form::Keywords => {
            let (found, malformed) = pairs(text);
            if malformed.is_some() {
                return (text.to_string(), Vec::new());
            }
            let mut rest = String::with_capacity(text.len());
            let mut shown_to = 0;
            for pair in found {
                let name = &text[pair.keyword.clone()];
                if !names.contains(&name) {
                    continue;
                }
                keep(name, unquoted(&text[pair.value.clone()]));
                rest.push_str(&text[shown_to..pair.keyword.start]);
                shown_to = pair.value.end;
            }
            rest.push_str(&text[shown_to..]);
            (rest, taken)
        }
        Form::Url(scheme) => {
            let start = scheme.len() + "://".len();
            // The driver ends the user's part at the first `@`; the query starts after it.
            let from = text[start..].find('@').map_or(start, |at| start + at);
            let Some(query) = text[from..].find('?').map(|q| from + q) else {
                return (text.to_string(), Vec::new());
            };
            let mut kept = Vec::new();
            for piece in text[query + 1..].split('&') {
                match piece.split_once('=') {
                    Some((name, value)) if names.contains(&percent_decoded(name).as_str()) => {
                        keep(&percent_decoded(name), percent_decoded(value));
                    }
                    _ => kept.push(piece),
                }
            }
            let mut rest = text[..query].to_string();
            let kept: Vec<&str> = kept.into_iter().filter(|p| !p.is_empty()).collect();
            if !kept.is_empty() {
                rest.push('?');
                rest.push_str(&kept.join("&"));
            }
            (rest, taken)
        }
        Form::Other => (text.to_string(), Vec::new()),
    }
}

/// A key=value string's value as it means it: without its quotes, each `\` taking the
/// character after it as it is.
fn unquoted(value: &str) -> String {
    let inner = value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// The password a libpq password file (`~/.pgpass`, `PGPASSFILE`) gives a connection to
/// `host`, `port`, `database` as `user`: the fifth field of its first line whose first four
/// match (each the value itself or `*`). Lines starting with `#` are comments; in every
/// field `\` takes the next character as it is (`\:`, `\\`); a line with fewer than five
/// fields matches nothing.
#[must_use]
pub fn pgpass_password(
    contents: &str,
    (host, port, database, user): (&str, &str, &str, &str),
) -> Option<String> {
    contents
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let fields = pgpass_fields(line)?;
            let wanted = [host, port, database, user];
            fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, value)| field == "*" || field == value)
                .then(|| fields[4].clone())
        })
}

/// The five fields of a password file's line, unescaped; the fifth runs to the line's
/// end. `None` for a line with fewer.
fn pgpass_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == ':' && fields.len() < 5 {
            fields.push(String::new());
            continue;
        }
        let field = fields.last_mut()?;
        match c {
            '\\' => field.extend(chars.next()),
            c => field.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

/// Where a key=value string stops following the grammar, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// The byte where the pair that is wrong starts.
    pub at: usize,
    pub why: &'static str,
}

/// One `keyword = value` of a key=value string: where its keyword and its value (with
/// its quotes) lie in the text.
#[derive(Debug)]
struct Pair {
    keyword: Range<usize>,
    value: Range<usize>,
}

/// The pairs of a key=value string, as libpq reads them: white space between pairs and
/// around `=`, a value either quoted (`'...'`) or running to the next white space, a
/// backslash taking the next character as it is in both. Stops at the first pair that
/// does not follow that.
fn pairs(text: &str) -> (Vec<Pair>, Option<Malformed>) {
    let mut chars = text.char_indices().peekable();
    let mut found = Vec::new();
    let here = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        chars.peek().map_or(text.len(), |&(i, _)| i)
    };
    let skip_space = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|&(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_space(&mut chars);
        let start = here(&mut chars);
        if start == text.len() {
            return (found, None);
        }
        let fail = |why| Some(Malformed { at: start, why });
        while chars
            .next_if(|&(_, c)| !c.is_whitespace() && c != '=')
            .is_some()
        {}
        let keyword = start..here(&mut chars);
        if keyword.is_empty() {
            return (found, fail("a `=` with no keyword before it"));
        }
        skip_space(&mut chars);
        if chars.next_if(|&(_, c)| c == '=').is_none() {
            return (found, fail("a keyword without `=`"));
        }
        let before = here(&mut chars);
        skip_space(&mut chars);
        let value_start = here(&mut chars);
        // libpq reads `dbname= password=x` as the database `password=x`: what someone
        // meant as the next pair (a password perhaps) would reach messages as a value.
        let spaced = value_start > before;
        if chars.next_if(|&(_, c)| c == '\'').is_some() {
            loop {
                match chars.next() {
                    None => return (found, fail("a quoted value without its closing quote")),
                    Some((_, '\\')) => {
                        chars.next();
                    }
                    Some((_, '\'')) => break,
                    Some(_) => {}
                }
            }
        } else {
            let mut empty = true;
            while let Some((_, c)) = chars.next_if(|&(_, c)| !c.is_whitespace()) {
                empty = false;
                if c == '\\' {
                    chars.next();
                }
            }
            if empty {
                return (
                    found,
                    fail("a keyword without a value (quote an empty one: '')"),
                );
            }
        }
        let value = value_start..here(&mut chars);
        if spaced && text[value.clone()].contains('=') {
            return (
                found,
                fail(
                    "a keyword whose value, after white space, reads as the next pair \
                      (quote an empty value: '')",
                ),
            );
        }
        found.push(Pair { keyword, value });
    }
}

/// Checks `text` against the key=value grammar (see `pairs`).
///
/// # Errors
///
/// Where the first pair that does not follow it starts, and why.
pub fn check_keywords(text: &str) -> Result<(), Malformed> {
    match pairs(text) {
        (_, Some(malformed)) => Err(malformed),
        (_, None) => Ok(()),
    }
}

/// The parameters whose values messages may show: the driver's, but the password. A
/// value of any other (a misspelt `passwd`, libpq's `sslpassword`) is hidden too.
const SHOWN: &[&str] = &[
    "user",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslnegotiation",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// Whether a parameter's value may hold a secret: its name (percent-decoded, as the
/// driver takes it) is not one of [`SHOWN`].
fn secret(name: &str) -> bool {
    !SHOWN.contains(&percent_decoded(name).as_str())
}

/// The connection string with every password replaced by `***`, for messages, logs and
/// files: a URL's (between its user's `:` and the last `@`) and the value of every
/// parameter but those of `SHOWN`, in a URL's query or as key=value; of a string that
/// stops following its grammar, everything from there.
#[must_use]
pub fn redact(text: &str) -> String {
    let hidden = match Form::of(text) {
        Form::Url(scheme) => url_secrets(text, scheme.len() + "://".len()),
        Form::Keywords => {
            let (pairs, malformed) = pairs(text);
            let mut hidden: Vec<Range<usize>> = pairs
                .into_iter()
                .filter(|p| secret(&text[p.keyword.clone()]))
                .map(|p| p.value)
                .collect();
            if let Some(m) = malformed {
                hidden.push(m.at..text.len());
            }
            hidden
        }
        // Perhaps a URL without its scheme (`user:password@host/db`).
        Form::Other => url_secrets(text, 0),
    };
    masked(text, hidden)
}

/// A connection string as [`redact`] showed it, made usable again: each masked value
/// dropped (a URL's password, a masked parameter of its query or of a key=value string),
/// so that the password comes from where libpq would look for one (`PGPASSWORD`, the
/// password file). What was not masked is kept as it is.
#[must_use]
pub fn unmasked(shown: &str) -> String {
    let masked = |piece: &str| piece.split_once('=').is_some_and(|(_, v)| v == MASK);
    match Form::of(shown) {
        Form::Keywords => shown
            .split_whitespace()
            .filter(|pair| !masked(pair))
            .collect::<Vec<_>>()
            .join(" "),
        Form::Url(_) | Form::Other => {
            let user_part = format!(":{MASK}@");
            let text = shown.replacen(&user_part, "@", 1);
            match text.split_once('?') {
                None => text,
                Some((base, query)) => {
                    let kept: Vec<&str> = query.split('&').filter(|p| !masked(p)).collect();
                    if kept.is_empty() {
                        base.to_string()
                    } else {
                        format!("{base}?{}", kept.join("&"))
                    }
                }
            }
        }
    }
}

/// The ranges of a URL (whose authority starts at `rest`) that may hold a password. The
/// driver ends the user's part at the first `@`; a password with an `@` of its own ends
/// at a later one, so all up to the last is hidden. Where the query starts depends on
/// which `@` ends the user's part, so both readings' queries are searched.
fn url_secrets(text: &str, rest: usize) -> Vec<Range<usize>> {
    let after = &text[rest..];
    let mut hidden = Vec::new();
    let mut queries = vec![after.find('?').map(|q| rest + q)];
    if let (Some(first), Some(last)) = (after.find('@'), after.rfind('@')) {
        if let Some(colon) = after[..first].find(':') {
            hidden.push(rest + colon + 1..rest + last);
        }
        queries.push(after[last..].find('?').map(|q| rest + last + q));
    }
    for query in queries.into_iter().flatten() {
        hidden.extend(query_secrets(text, query + 1));
    }
    hidden
}

/// The values in the query string starting at `start` whose names hold a password; an
/// unencoded `&` in one makes a piece without `=` after it, taken as part of it.
fn query_secrets(text: &str, start: usize) -> Vec<Range<usize>> {
    let mut hidden = Vec::new();
    let mut in_secret = false;
    let mut at = start;
    for piece in text[start..].split('&') {
        let range = at..at + piece.len();
        at = range.end + 1;
        match piece.split_once('=') {
            Some((name, _)) => {
                in_secret = secret(name);
                if in_secret {
                    hidden.push(range.start + name.len() + 1..range.end);
                }
            }
            None if in_secret => hidden.push(range),
            None => {}
        }
    }
    hidden
}

/// `text` with each of the `hidden` ranges (overlapping ones merged) replaced by
/// [`MASK`].
fn masked(text: &str, mut hidden: Vec<Range<usize>>) -> String {
    hidden.retain(|r| !r.is_empty());
    hidden.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(text.len());
    let mut shown_to = 0;
    for range in hidden {
        if range.end <= shown_to {
            continue;
        }
        if range.start >= shown_to {
            out.push_str(&text[shown_to..range.start]);
            out.push_str(MASK);
        }
        shown_to = range.end;
    }
    out.push_str(&text[shown_to..]);
    out
}

/// `text` with its `%XX` escapes decoded (bytes that are not UTF-8 kept as escapes).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::{one_host_each, pgpass_password, take_params, unmasked};

    #[test]
    fn the_tls_parameters_are_taken_out_of_either_form() {
        let names = ["sslmode", "sslrootcert"];
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        for (given, rest, taken) in [
            (
                "postgresql://u@h/db?sslmode=verify-full&port=5&sslrootcert=%2Fa%20b.crt",
                "postgresql://u@h/db?port=5",
                pairs(&[("sslmode", "verify-full"), ("sslrootcert", "/a b.crt")]),
            ),
            (
                "postgresql://h/db?sslmode=require&sslmode=disable",
                "postgresql://h/db",
                pairs(&[("sslmode", "disable")]),
            ),
            ("postgresql://h/db", "postgresql://h/db", pairs(&[])),
            (
                r"host=h sslrootcert='/a b\'c.crt' dbname=x sslmode = verify-ca",
                "host=h  dbname=x ",
                pairs(&[("sslrootcert", "/a b'c.crt"), ("sslmode", "verify-ca")]),
            ),
            (
                "host=h sslmode='verify-full",
                "host=h sslmode='verify-full",
                pairs(&[]),
            ),
        ] {
            assert_eq!(
                take_params(given, &names),
                (rest.to_string(), taken),
                "{given}"
            );
        }
    }

    #[test]
    fn a_shown_string_loses_its_masked_values_and_keeps_the_rest() {
        let cases = [
            (
                "postgresql://app:s3cret@db1/jobs?sslmode=require&password=x",
                "postgresql://app@db1/jobs?sslmode=require",
            ),
            (
                "postgresql:///jobs?host=/run/postgresql&user=app",
                "postgresql:///jobs?host=/run/postgresql&user=app",
            ),
            (
                "postgresql://app:pw@db1/jobs?password=x",
                "postgresql://app@db1/jobs",
            ),
            (
                "host=db1 user=app password=pw dbname=jobs",
                "host=db1 user=app dbname=jobs",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(unmasked(&redact(url)), want, "{url}");
        }
    }

    #[test]
    fn a_password_file_gives_the_first_matching_lines_password() {
        let file = "# comment\n\
                    db1:5432:app:jobs:first\n\
                    *:*:*:jobs:any\\:colon\\\\slash\n\
                    short:line\n";
        let find = |host, port, db, user| pgpass_password(file, (host, port, db, user));
        assert_eq!(find("db1", "5432", "app", "jobs").as_deref(), Some("first"));
        assert_eq!(
            find("db2", "5433", "other", "jobs").as_deref(),
            Some("any:colon\\slash")
        );
        assert_eq!(find("db1", "5432", "app", "someone"), None);
        assert_eq!(pgpass_password("h:1:d:u", ("h", "1", "d", "u")), None);
        assert_eq!(
            pgpass_password("/run/pg:5432:*:u:p:q", ("/run/pg", "5432", "x", "u")).as_deref(),
            Some("p:q")
        );
    }

    #[test]
    fn a_host_list_in_a_urls_query_becomes_one_host_parameter_each() {
        for (given, taken) in [
            (
                "postgresql:///db?host=/a,/b&user=u",
                "postgresql:///db?host=/a&host=/b&user=u",
            ),
            (
                "postgresql://u:p?w@/db?host=db1,db2&target_session_attrs=read-write",
                "postgresql://u:p?w@/db?host=db1&host=db2&target_session_attrs=read-write",
            ),
            (
                "postgresql:///db?host=/a&user=u",
                "postgresql:///db?host=/a&user=u",
            ),
            (
                "postgresql:///db?host=/a%2Cb",
                "postgresql:///db?host=/a%2Cb",
            ),
            ("postgresql://db1,db2/db", "postgresql://db1,db2/db"),
            ("host=/a,/b dbname=db", "host=/a,/b dbname=db"),
        ] {
            assert_eq!(one_host_each(given), taken, "{given}");
        }
    }
    use super::{Form, Malformed, check_keywords, redact};

    #[test]
    fn passwords_never_show_however_they_are_spelled() {
        for (text, shown) in [
            ("postgresql://app:s3cr3t@db/x", "postgresql://app:***@db/x"),
            ("postgresql://app@db/x", "postgresql://app@db/x"),
            (
                "postgresql:///x?host=/run&password=s3cr3t&user=a",
                "postgresql:///x?host=/run&password=***&user=a",
            ),
            (
                "postgresql:///x?password=a&password=s3cr3t",
                "postgresql:///x?password=***&password=***",
            ),
            (
                "postgresql:///x?pass%77ord=s3cr3t",
                "postgresql:///x?pass%77ord=***",
            ),
            (
                "postgresql:///x?PASSWORD=s3cr3t",
                "postgresql:///x?PASSWORD=***",
            ),
            (
                "postgresql:///x?passwd=s3cr3t&port=1",
                "postgresql:///x?passwd=***&port=1",
            ),
            (
                "host=/run passwd=s3cr3t port=1",
                "host=/run passwd=*** port=1",
            ),
            (
                "postgresql://u:p@h/x?password=q",
                "postgresql://u:***@h/x?password=***",
            ),
            ("postgresql://u:s3?cr3t@h/x", "postgresql://u:***@h/x"),
            ("postgresql://u:s3@cr3t@h/x", "postgresql://u:***@h/x"),
            ("postgresql://u:s3/cr3t@h/x", "postgresql://u:***@h/x"),
            ("postgresql://u:s3#cr3t@h/x", "postgresql://u:***@h/x"),
            ("postgresql://u:s3:cr3t@h/x", "postgresql://u:***@h/x"),
            ("postgresql://u:s3%40cr3t@h/x", "postgresql://u:***@h/x"),
            (
                "postgresql:///x?password=s3&cr3t&user=u",
                "postgresql:///x?password=***&***&user=u",
            ),
            (
                "postgresql:///x?host=/s&password=s3:cr@3t",
                "postgresql:///x?host=/s&password=***",
            ),
            ("mysql://u:s3cr3t@h/x", "mysql://u:***@h/x"),
            (
                "host=/run user=u password=s3cr3t dbname=x",
                "host=/run user=u password=*** dbname=x",
            ),
            (
                "host=/run password = 's3 cr3t' user=u",
                "host=/run password = *** user=u",
            ),
            (
                r"host=/run password='s3\'cr3t' user=u",
                "host=/run password=*** user=u",
            ),
            (r"password=s3\ cr3t user=u", "password=*** user=u"),
            ("host=/run sslpassword=s3cr3t", "host=/run sslpassword=***"),
            ("host=/run password='s3 cr3t", "host=/run ***"),
            ("host=/run password=s3 cr3t", "host=/run password=*** ***"),
            ("host=/run dbname= password=s3cr3t", "host=/run ***"),
            ("u:s3cr3t@h/x", "u:***@h/x"),
            ("./state.db", "./state.db"),
        ] {
            assert_eq!(redact(text), shown, "{text}");
            assert!(!redact(text).contains("s3"), "{text}");
            assert!(!redact(text).contains("cr3t"), "{text}");
        }
    }

    #[test]
    fn a_url_is_told_from_key_value() {
        assert_eq!(Form::of("postgresql:///x"), Form::Url("postgresql"));
        assert_eq!(Form::of("mysql://h"), Form::Url("mysql"));
        assert_eq!(Form::of("host=/run dbname=x"), Form::Keywords);
        assert_eq!(Form::of("dbname=postgresql://h/x"), Form::Keywords);
        assert_eq!(Form::of("./state.db"), Form::Other);
    }

    #[test]
    fn key_value_follows_libpqs_grammar() {
        for good in [
            "host=/run",
            " host = /run  dbname=x ",
            r"password='a b\'c' user=u",
            r"password=a\ b",
            "password=''",
            "",
        ] {
            assert_eq!(check_keywords(good), Ok(()), "{good}");
        }
        for (bad, at) in [
            ("host=/run password='a", 10),
            ("host=/run dbname", 10),
            ("host=/run dbname=", 10),
            ("host=/run dbname= password=a", 10),
            ("host=/run =x", 10),
        ] {
            assert!(
                matches!(check_keywords(bad), Err(Malformed { at: a, .. }) if a == at),
                "{bad}: {:?}",
                check_keywords(bad)
            );
        }
    }
}
