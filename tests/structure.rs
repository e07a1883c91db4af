//! The shape of the code, read from its text: the library's modules keep to their layers
//! with no import circle among them, and every file under `tests/` is part of a test target.
//! Nothing is built or run; both checks read the sources under `CARGO_MANIFEST_DIR`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// The library's layers, lowest first, each a name and its modules: a module uses only
/// modules of its own layer and of the layers above it in this list. A module is a file
/// `src/x.rs` or a folder `src/x/`; the binary (`src/main.rs`, `src/cli/`, `src/bin/`) and
/// the crate root (`src/lib.rs`) stand above every layer. Every module is listed once.
/// One layer a line, so that moving a module is a one-line change.
#[rustfmt::skip]
const LAYERS: Layers = &[
    ("rules", &["lease", "sink", "refusal"]),
    ("text and time", &["text", "clock"]),
    ("answers", &["audit", "outcome"]),
    ("errors", &["error", "failpoints"]),
    ("files and names", &["folder", "resource"]),
    ("stores", &["store"]),
    ("root", &["root"]),
    ("document", &["tree", "atomic", "recovery", "document"]),
    ("session", &["session"]),
    ("engine", &["leases", "publish"]),
    ("mirror", &["mirror"]),
    ("reports", &["reports", "upkeep"]),
    ("api", &["api"]),
];

/// Layers as [`LAYERS`] writes them: (layer name, its modules), lowest first.
type Layers = &'static [(&'static str, &'static [&'static str])];

#[test]
fn the_library_keeps_its_layers_without_circles() {
    let problems = layer_problems(Path::new(env!("CARGO_MANIFEST_DIR")), LAYERS);
    let listed = problems.join("\n");
    assert!(
        problems.is_empty(),
        "src/ does not keep the LAYERS of tests/structure.rs:\n{listed}"
    );
}

#[test]
fn every_test_file_is_part_of_the_suite() {
    let problems = forgotten_tests(Path::new(env!("CARGO_MANIFEST_DIR")));
    let listed = problems.join("\n");
    assert!(problems.is_empty(), "test files that never run:\n{listed}");
}

/// The library prints nothing (the command line does): no print macro and no handle on
/// stdout or stderr in a library module's code, comments and literals aside.
#[test]
fn the_library_prints_nothing() {
    let problems = printing(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        problems.is_empty(),
        "the library prints:\n{}",
        problems.join("\n")
    );
}

/// Every place in a library module of the crate at `root` that prints, as `file:line`.
fn printing(root: &Path) -> Vec<String> {
    const PRINTS: [&str; 6] = [
        "println!",
        "eprintln!",
        "print!",
        "eprint!",
        "io::stdout(",
        "io::stderr(",
    ];
    let mut found = Vec::new();
    for file in rust_files(&root.join("src")) {
        let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        if library_module(&rel).is_none() {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).unwrap_or_default());
        for (n, line) in code.lines().enumerate() {
            if PRINTS.iter().any(|p| line.contains(p)) {
                found.push(format!("{}:{}", rel.display(), n + 1));
            }
        }
    }
    found
}

/// Everything wrong with the layering of the crate at `root` against `layers`, one line
/// each: modules missing from the table or listed in it without a file, imports of a
/// higher layer (`file:line: ...`), and circles (`a -> b -> a`).
fn layer_problems(root: &Path, layers: Layers) -> Vec<String> {
    let layer = |module: &str| layers.iter().position(|(_, ms)| ms.contains(&module));
    let layer_name = |module: &str| layer(module).map_or("none", |i| layers[i].0);
    let mut problems = Vec::new();
    let mut uses = Vec::new(); // (file, line, from module, to the first segment after crate::)
    let mut modules = BTreeSet::new();
    for file in rust_files(&root.join("src")) {
        let rel = file.strip_prefix(root).expect("under the root");
        let Some(from) = library_module(rel) else {
            continue;
        };
        modules.insert(from.clone());
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for (line, to) in crate_paths(&text) {
            uses.push((rel.display().to_string(), line, from.clone(), to));
        }
    }
    for (name, listed) in layers {
        for module in listed.iter().filter(|m| !modules.contains(**m)) {
            problems.push(format!(
                "module {module} of layer {name} has no src/{module}.rs or src/{module}/"
            ));
        }
    }
    for module in &modules {
        let times = layers
            .iter()
            .flat_map(|(_, ms)| *ms)
            .filter(|m| *m == module);
        match times.count() {
            1 => {}
            0 => problems.push(format!("module {module} is in no layer of the table")),
            n => problems.push(format!("module {module} is in the table {n} times")),
        }
    }
    let mut graph: BTreeMap<&str, BTreeMap<&str, String>> = BTreeMap::new();
    for (file, line, from, to) in &uses {
        let at = format!("{file}:{line}");
        if !modules.contains(to) {
            // Not a module: an item of lib.rs, which declares and runs everything else.
            problems.push(format!(
                "{at}: module {from} (layer {}) uses crate::{to} of the crate root (lib.rs, \
                 above every layer)",
                layer_name(from)
            ));
        } else if to != from {
            let edges = graph.entry(from).or_default();
            edges.entry(to).or_insert_with(|| at.clone());
            if let (Some(a), Some(b)) = (layer(from), layer(to))
                && b > a
            {
                problems.push(format!(
                    "{at}: module {from} (layer {}) uses module {to} (layer {}, higher)",
                    layers[a].0, layers[b].0
                ));
            }
        }
    }
    problems.extend(circles(&graph));
    problems
}

/// The module a file under `src/` (`rel`, from the crate root) belongs to: the first
/// path segment, or `None` for the crate root and the binary.
fn library_module(rel: &Path) -> Option<String> {
    let first = rel.iter().nth(1)?.to_str()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (!["lib", "main", "cli", "bin"].contains(&module)).then(|| module.to_string())
}

/// Every circle of the module graph (edges: from → to → where it is first used), each
/// once, starting at its smallest module. Each edge `a -> b` whose `b` reaches back to
/// `a` (the two are then in one strongly connected component) gives the shortest circle
/// through that edge, so every edge on a circle shows in one of them.
fn circles(graph: &BTreeMap<&str, BTreeMap<&str, String>>) -> Vec<String> {
    let mut found = BTreeSet::new();
    for (from, edges) in graph {
        for to in edges.keys() {
            let Some(mut circle) = shortest_path(graph, to, from) else {
                continue;
            };
            circle.insert(0, from);
            let start = (0..circle.len()).min_by_key(|i| circle[*i]).unwrap_or(0);
            circle.rotate_left(start);
            found.insert(circle);
        }
    }
    let edge = |a: &str, b: &str| format!("{a} -> {b} at {}", graph[a][b]);
    found
        .into_iter()
        .map(|circle| {
            let next = |i: usize| circle[(i + 1) % circle.len()];
            let places: Vec<_> = (0..circle.len())
                .map(|i| edge(circle[i], next(i)))
                .collect();
            format!(
                "circle: {} -> {} ({})",
                circle.join(" -> "),
                circle[0],
                places.join(", ")
            )
        })
        .collect()
}

/// The modules of the shortest path from `from` to `to` in `graph`, `to` excluded.
fn shortest_path<'a>(
    graph: &BTreeMap<&'a str, BTreeMap<&'a str, String>>,
    from: &'a str,
    to: &'a str,
) -> Option<Vec<&'a str>> {
    let mut came_from = BTreeMap::from([(from, from)]);
    let mut queue = VecDeque::from([from]);
    while let Some(here) = queue.pop_front() {
        for next in graph.get(here).into_iter().flat_map(BTreeMap::keys) {
            if *next == to {
                let mut path = vec![here];
                while path[0] != from {
                    path.insert(0, came_from[path[0]]);
                }
                return Some(path);
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, here);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Each `crate::x` of a source file, as (line, x): in paths anywhere in the code and in
/// every branch of a `use crate::{a, b::c}` group, but not in comments or literals. A
/// macro's path (`crate::m!`) is left out: an exported macro lives at the crate root,
/// whichever module defines it. `self::` and `super::` are not read: under `src/x/` they
/// stay within module `x` (a `super::` outside any inline module of `src/x.rs`, which names
/// the crate root, goes unseen).
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let code = code_only(text);
    let tokens = tokens(&code);
    let tok = |i: usize| tokens.get(i).map_or("", |t| t.1);
    let is_ident = |s: &str| s.starts_with(|c: char| c.is_alphabetic() || c == '_');
    let line = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for i in 0..tokens.len() {
        if tok(i) != "crate" || tok(i + 1) != ":" || tok(i + 2) != ":" {
            continue;
        }
        if tok(i + 3) == "{" {
            let (mut depth, mut item_starts) = (0, true);
            for (at, t) in &tokens[i + 3..] {
                match *t {
                    "{" => depth += 1,
                    "}" if depth == 1 => break,
                    "}" => depth -= 1,
                    "," if depth == 1 => item_starts = true,
                    t if item_starts && is_ident(t) && t != "self" => {
                        found.push((line(*at), t.to_string()));
                        item_starts = false;
                    }
                    _ => item_starts = false,
                }
            }
        } else if is_ident(tok(i + 3)) && tok(i + 4) != "!" {
            found.push((line(tokens[i + 3].0), tok(i + 3).to_string()));
        }
    }
    found
}

/// Every file under `tests/` that no test target reaches, one line each. The targets are
/// `tests/main.rs` and the `path` of each `[[test]]`, `[[bench]]` and `[[example]]` of
/// Cargo.toml; a target reaches the files its `mod x;` declarations name, and theirs.
fn forgotten_tests(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let mut targets = vec![root.join("tests/main.rs")];
    let mut in_target = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_target = ["[[test]]", "[[bench]]", "[[example]]"].contains(&line);
        } else if let Some(value) = line.strip_prefix("path").map(str::trim_start)
            && in_target
            && let Some(value) = value.strip_prefix('=')
        {
            targets.extend(value.split('"').nth(1).map(|path| root.join(path)));
        }
    }
    let mut reached = BTreeSet::new();
    let mut pending: Vec<(PathBuf, bool)> = targets.into_iter().map(|t| (t, true)).collect();
    while let Some((file, owns_dir)) = pending.pop() {
        let Ok(file) = file.canonicalize() else {
            continue; // of the two files a `mod x;` may mean, the one that is not there
        };
        if reached.insert(file.clone()) {
            let text = std::fs::read_to_string(&file).expect("read a test file");
            pending.extend(declared_modules(&file, owns_dir, &text));
        }
    }
    rust_files(&root.join("tests"))
        .into_iter()
        .filter(|file| !reached.contains(&file.canonicalize().expect("a listed file")))
        .map(|file| {
            let rel = file.strip_prefix(root).unwrap_or(&file).display();
            format!(
                "{rel} is in no test target (no `mod` reaches it, and Cargo.toml does not \
                 name it)"
            )
        })
        .collect()
}

/// The files the `mod x;` declarations of `file` name, each with whether its own
/// declarations are looked up beside it (`owns_dir`: a crate root, a `mod.rs` or a file
/// named by `#[path]`) rather than in a folder named after it.
fn declared_modules(file: &Path, owns_dir: bool, text: &str) -> Vec<(PathBuf, bool)> {
    let code = code_only(text);
    let tokens = tokens(&code);
    let tok = |i: usize| tokens.get(i).map_or("", |t| t.1);
    let dir = file.parent().expect("a file has a folder");
    let stem = file.file_stem().expect("a file has a name");
    let base = if owns_dir || stem == "mod" {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let (mut depth, mut inline) = (0_usize, Vec::<(&str, usize)>::new());
    let mut found = Vec::new();
    for i in 0..tokens.len() {
        match tok(i) {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                inline.retain(|(_, d)| *d < depth);
            }
            "mod" if tok(i + 2) == "{" => inline.push((tok(i + 1), depth)),
            "mod" if tok(i + 2) == ";" => {
                let mut here = base.clone();
                here.extend(inline.iter().map(|(name, _)| name));
                // The item's attributes are the tokens back to the end of the last item.
                let start = (0..i).rev().find(|j| [";", "{", "}"].contains(&tok(*j)));
                let path = (start.map_or(0, |j| j + 1)..i).find(|j| {
                    tok(*j) == "path" && tok(j + 1) == "=" && tok(j + 2) == "\"" && j + 3 < i
                });
                if let Some(j) = path {
                    let quoted = &text[tokens[j + 2].0 + 1..tokens[j + 3].0];
                    let at = if inline.is_empty() {
                        dir.to_path_buf()
                    } else {
                        here
                    };
                    found.push((at.join(quoted), true));
                } else {
                    let name = tok(i + 1);
                    found.push((here.join(format!("{name}.rs")), false));
                    found.push((here.join(name).join("mod.rs"), true));
                }
            }
            _ => {}
        }
    }
    found
}

/// The `.rs` files under `dir`, sorted (none if it is missing).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// `text` with its comments and the insides of its string and character literals
/// blanked out byte for byte (the quotes and newlines kept), so what is left is code at
/// the same offsets and on the same lines.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut blank = |from: usize, to: usize| {
        for byte in out[from..to.min(b.len())]
            .iter_mut()
            .filter(|c| **c != b'\n')
        {
            *byte = b' ';
        }
    };
    let find = |from: usize, what: &[u8]| {
        (from..b.len())
            .find(|i| b[*i..].starts_with(what))
            .unwrap_or(b.len())
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let starts_word = i == 0 || !ident(b[i - 1]);
        // A raw string: r"..", r#".."#, br"..", cr"..".
        let raw = usize::from(starts_word && (rest.starts_with(b"br") || rest.starts_with(b"cr")));
        let hashes = rest
            .iter()
            .skip(raw + 1)
            .take_while(|c| **c == b'#')
            .count();
        if rest.starts_with(b"//") {
            let end = find(i, b"\n");
            blank(i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < b.len() {
                let step = &b[j..];
                depth += i32::from(step.starts_with(b"/*")) - i32::from(step.starts_with(b"*/"));
                j += if step.starts_with(b"/*") || step.starts_with(b"*/") {
                    2
                } else {
                    1
                };
                if depth == 0 {
                    break;
                }
            }
            blank(i, j);
            i = j;
        } else if starts_word
            && rest.get(raw) == Some(&b'r')
            && rest.get(raw + 1 + hashes) == Some(&b'"')
        {
            let open = i + raw + 1 + hashes;
            let close = find(open + 1, &[b"\"".as_slice(), &vec![b'#'; hashes]].concat());
            blank(open + 1, close);
            i = close + 1 + hashes;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(i + 1, j);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character ('x', '\n', '\u{..}') or a lifetime ('a), which has no closing quote.
            let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
            let close = if rest.get(1) == Some(&b'\\') {
                Some(find(i + 3, b"'"))
            } else {
                (rest.get(1 + width) == Some(&b'\'')).then_some(i + 1 + width)
            };
            if let Some(close) = close {
                blank(i + 1, close);
                i = close;
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

/// The tokens of code (after [`code_only`]) with their offsets: words (identifiers,
/// keywords, numbers) whole, and every other character but white space alone.
fn tokens(code: &str) -> Vec<(usize, &str)> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut tokens = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if word(c) {
            let mut end = at + c.len_utf8();
            while let Some((next, c)) = chars.next_if(|(_, c)| word(*c)) {
                end = next + c.len_utf8();
            }
            tokens.push((at, &code[at..end]));
        } else if !c.is_whitespace() {
            tokens.push((at, &code[at..at + c.len_utf8()]));
        }
    }
    tokens
}

/// The layers the checks of the checker use: `a` lowest, `b` and `c` together, `d` top.
const FAKE: Layers = &[("low", &["a"]), ("middle", &["b", "c"]), ("high", &["d"])];

/// A clean crate for [`FAKE`]: downward paths and groups, a binary above everything,
/// `super::`, a module naming itself, `$crate::` and a macro's path.
const CLEAN: &str = r#"== src/lib.rs
mod a;
mod b;
mod c;
mod d;
pub use d::run;
== src/main.rs
fn main() { fencepost::run(); }
== src/cli/mod.rs
use crate::d::run;
== src/a.rs
pub(crate) fn f() {}
== src/b.rs
use crate::{a, c::{self, g}};
pub(crate) fn h() { crate::a::f() }
== src/c/mod.rs
mod inner;
pub(crate) fn g() {}
== src/c/inner.rs
use super::g;
use crate::c::g as again;
== src/d.rs
pub fn run() { $crate::b::h(); crate::failpoint!("x"); }
"#;

/// A tree in a temp folder, from `files`: each file starts with a line `== path`.
fn fake(files: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp folder");
    for file in format!("\n{files}").split("\n== ").skip(1) {
        let (path, text) = file.split_once('\n').unwrap_or((file, ""));
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("make the folder");
        std::fs::write(path, text).expect("write a file");
    }
    root
}

#[test]
fn a_clean_tree_passes_the_layer_check() {
    let root = fake(CLEAN);
    assert_eq!(layer_problems(root.path(), FAKE), Vec::<String>::new());
}

#[test]
fn an_import_of_a_higher_layer_is_named_with_its_place() {
    let root = fake(&[CLEAN, "== src/a/up.rs\nfn up() {\n    crate::c::g();\n}\n"].concat());
    assert_eq!(
        layer_problems(root.path(), FAKE),
        ["src/a/up.rs:2: module a (layer low) uses module c (layer middle, higher)"]
    );
}

#[test]
fn a_circle_within_one_layer_is_named() {
    let root = fake(
        &[
            CLEAN,
            "== src/c/back.rs\nuse crate::{\n    a::f,\n    b::h,\n};\n",
        ]
        .concat(),
    );
    assert_eq!(
        layer_problems(root.path(), FAKE),
        ["circle: b -> c -> b (b -> c at src/b.rs:1, c -> b at src/c/back.rs:3)"]
    );
}

#[test]
fn a_module_missing_from_the_table_or_the_tree_or_listed_twice_is_named() {
    let root = fake(&[CLEAN, "== src/e.rs\n"].concat());
    let other: Layers = &[
        ("low", &["a", "z"]),
        ("middle", &["b", "c"]),
        ("high", &["d", "b"]),
    ];
    assert_eq!(
        layer_problems(root.path(), other),
        [
            "module z of layer low has no src/z.rs or src/z/",
            "module b is in the table 2 times",
            "module e is in no layer of the table",
        ]
    );
}

#[test]
fn a_crate_path_in_a_comment_or_a_literal_is_no_import() {
    let quiet = r###"== src/a/quiet.rs
//! Uses [`crate::d`].
/// Calls crate::d::run.
fn f() -> (&'static str, char, &'static str) {
    /* crate::d /* crate::d */ crate::d */
    let _ = b'"'; // crate::d
    ("crate::d \" crate::d", '"', r##"crate::d "# crate::d"##)
}
"###;
    let root = fake(&[CLEAN, quiet].concat());
    assert_eq!(layer_problems(root.path(), FAKE), Vec::<String>::new());
}

/// A test tree every file of which is in the suite: through `mod` in files, folders and
/// inline modules, `#[path]`, and a `[[bench]]` with modules of its own. The `mod lost;`
/// in a comment and in a string declares nothing.
const SUITE: &str = r#"== Cargo.toml
[package]
name = "x"

[[bench]]
name = "speed"
path = "tests/speed.rs"
== tests/main.rs
mod a;
mod b;
#[path = "shared/c.rs"]
mod c;
// mod lost;
== tests/a.rs
mod deep;
mod tests {
    mod inner;
}
== tests/a/deep.rs
== tests/a/tests/inner.rs
== tests/b/mod.rs
mod e;
== tests/b/e.rs
const NOT_A_MODULE: &str = "mod lost;";
== tests/shared/c.rs
mod f;
== tests/shared/f.rs
== tests/speed.rs
mod g;
== tests/g.rs
"#;

#[test]
fn a_print_in_a_library_module_is_named_and_the_binarys_are_not() {
    let tree = fake(
        "== src/lib.rs\nmod quiet;\nmod loud;\n\
         == src/quiet.rs\n// println!(\"a comment\")\nfn f() -> &'static str { \"eprintln!\" }\n\
         == src/loud.rs\nfn f() {\n    eprintln!(\"here\");\n}\n\
         == src/cli/app.rs\nfn f() { println!(\"the binary may\"); }\n",
    );
    assert_eq!(printing(tree.path()), ["src/loud.rs:2"]);
}

#[test]
fn a_complete_test_tree_passes() {
    let root = fake(SUITE);
    assert_eq!(forgotten_tests(root.path()), Vec::<String>::new());
}

#[test]
fn a_forgotten_test_file_is_named() {
    let root = fake(&[SUITE, "== tests/lost.rs\n#[test]\nfn never_runs() {}\n"].concat());
    assert_eq!(
        forgotten_tests(root.path()),
        [
            "tests/lost.rs is in no test target (no `mod` reaches it, and Cargo.toml does \
             not name it)"
        ]
    );
}
