//! How names and other text are shown in messages and reports: the characters that
//! would make a name read as another, names quoted when they would, long names cut, and
//! bytes as hex. Pure functions over strings, used from every layer.

/// A count and its noun, as a person says it: `1 document`, `2 documents` (`many` is the
/// plural: `inconsistencies`).
#[must_use]
pub fn count<N: std::fmt::Display + PartialEq + From<u8>>(n: N, one: &str, many: &str) -> String {
    let noun = if n == N::from(1) { one } else { many };
    format!("{n} {noun}")
}

/// True for a character that must not appear in a name, or a result shown by `status` and
/// `log`: controls (newlines, escapes), line and paragraph separators, and Unicode's
/// invisible format characters (general category Cf), such as the bidirectional overrides
/// (U+202E turns the text after it around), zero-width spaces and U+FEFF, which make a
/// name show as another.
#[must_use]
pub fn misleading(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    c.is_control()
        || matches!(
            c.general_category(),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
}

/// The first misleading character of `text`, as `U+202E`.
#[must_use]
pub fn first_misleading(text: &str) -> Option<String> {
    text.chars()
        .find(|&c| misleading(c))
        .map(|c| format!("U+{:04X}", u32::from(c)))
}

/// True when a component of the name starts or ends with white space: `doc.md ` and
/// ` doc.md` show as `doc.md` in a table.
#[must_use]
pub fn padded(name: &str) -> bool {
    name.split('/')
        .any(|part| part.starts_with(char::is_whitespace) || part.ends_with(char::is_whitespace))
}

/// A stored name as `status`, `verify`, `recover` and `log` show it: as it is when it
/// reads as itself; quoted with its invisible characters escaped (`"a\u{202e}b"`) when it
/// holds a control or invisible character or a component with leading or trailing white
/// space, which only a name from before today's rules, or put in by hand, can.
pub fn display_name(name: &str) -> String {
    if name.chars().any(misleading) || padded(name) {
        format!("{name:?}")
    } else {
        name.to_string()
    }
}

/// A name for a message: whole when short, else its start and its length.
#[must_use]
pub fn shown(name: &str) -> String {
    if name.len() <= 120 {
        return name.to_string();
    }
    let mut end = 60;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len())
}

/// Lower-case hex of `bytes` (SHA-256 digests, ids).
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}
