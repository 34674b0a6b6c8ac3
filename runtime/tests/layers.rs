//! Holds the runtime crate's layers: a module may use only modules of its
//! own layer or of the layers below it (docs/design.md, "Layers").
//!
//! The test reads every file under `runtime/src`, finds each path into the
//! crate in code — `crate::` and `super::` chains that climb to the crate
//! root, in `use` lines, groups over several lines and paths written
//! inline — and fails naming every line where a lower layer reaches a
//! higher one. Names re-exported at the crate root (`crate::TaskId`) count
//! as the module that defines them; an alias of the crate (`crate as c`)
//! is refused, since it would hide paths. It also holds that protocol code
//! takes its atomics from the crate's loom shim: no `std` or `core`
//! `sync::atomic` outside `loom.rs`.
//!
//! A second check works on files: no import circle of more than two files,
//! and none through `sched/` (see "import circles" below; a circle that had
//! to stand would be listed, with why, in `KNOWN_CIRCLES`: none does).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom to top: each module's top-level name.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["loom", "error", "id"]),
    ("stacks", &["stack"]),
    ("task state", &["meta"]),
    ("driver", &["driver"]),
    ("scheduler", &["sched"]),
    ("wait", &["wait"]),
    ("io", &["io"]),
    (
        "public",
        &[
            "dump", "future", "join_set", "net", "runtime", "scope", "signal", "sync", "task",
            "time",
        ],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// One path into the crate found in a file: the line it is on and the
/// top-level module it names.
#[derive(Debug, PartialEq)]
struct CrateRef {
    line: usize,
    module: String,
}

/// The source with comments and the contents of string literals blanked
/// out (line breaks kept), and no whitespace around `::`, so that doc
/// links, prose and messages never count as paths, and `crate :: x` does.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut depth = 1;
                let mut prev = ' ';
                for c in chars.by_ref() {
                    out.push(blank(c));
                    match (prev, c) {
                        ('*', '/') => depth -= 1,
                        ('/', '*') => depth += 1,
                        _ => {}
                    }
                    prev = if (prev, c) == ('*', '/') || (prev, c) == ('/', '*') {
                        ' '
                    } else {
                        c
                    };
                    if depth == 0 {
                        break;
                    }
                }
            }
            ('"', _) => {
                out.push('"');
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        out.push('"');
                        break;
                    }
                    escaped = !escaped && c == '\\';
                    out.push(blank(c));
                }
            }
            _ => out.push(c),
        }
    }
    // `a :: b`, `a:: b`, `a ::b` -> `a::b` (line breaks are kept as they are).
    let mut joined = out;
    for (from, to) in [(" ::", "::"), (":: ", "::")] {
        while joined.contains(from) {
            joined = joined.replace(from, to);
        }
    }
    joined
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every path into the crate's root in `src`, a file `depth` modules below
/// the root: `crate::` paths, and `super::` chains of `depth` or more
/// links; the names of a group (`crate::{..}`) one by one. An alias of the
/// crate, or a path with no name after the root, is reported with the
/// module name `""`.
fn crate_refs(src: &str, depth: usize) -> Vec<CrateRef> {
    let code = code_only(src);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        // The next `crate::`, or `super::` chain that reaches the root.
        let next_crate = code[from..].find("crate").map(|f| (from + f, "crate"));
        let next_super = code[from..].find("super::").map(|f| (from + f, "super"));
        let Some((at, kind)) = [next_crate, next_super].into_iter().flatten().min() else {
            break;
        };
        from = at + kind.len();
        // `spindle_crate::`, `supersede`, say, are not us.
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let after = code[from..].chars().next();
        if after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if kind == "crate" {
            let rest = code[from..].trim_start();
            if rest.starts_with("as ") || rest.starts_with("as\n") {
                out.push(CrateRef {
                    line: line_of(at),
                    module: String::new(),
                });
                continue;
            }
            if !code[from..].starts_with("::") {
                continue; // `pub(crate)`, `$crate`, the word in an attribute
            }
            from += "::".len();
        } else {
            let mut links = 1;
            while code[from..].starts_with("::super::") {
                from += "::super".len();
                links += 1;
            }
            from += "::".len();
            if links < depth + inline_mods_around(&code, at) {
                continue; // stays inside the file's own top-level module
            }
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // The top-level items of the group: split on commas at depth 0.
            let mut depth = 0;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                let at_item_end = match c {
                    '{' => {
                        depth += 1;
                        false
                    }
                    '}' if depth == 0 => true,
                    '}' => {
                        depth -= 1;
                        false
                    }
                    ',' => depth == 0,
                    _ => false,
                };
                if at_item_end {
                    let item = &group[item_start..i];
                    let name = ident_at(item.trim_start());
                    if name == "self" && item.contains(" as ") {
                        out.push(CrateRef {
                            line: line_of(from),
                            module: String::new(),
                        });
                    } else if !name.is_empty() && name != "self" {
                        let offset = item.len() - item.trim_start().len();
                        out.push(CrateRef {
                            line: line_of(from + 1 + item_start + offset),
                            module: name.to_owned(),
                        });
                    }
                    item_start = i + 1;
                    if c == '}' {
                        break;
                    }
                }
            }
        } else {
            out.push(CrateRef {
                line: line_of(at),
                module: ident_at(rest).to_owned(),
            });
        }
    }
    out
}

/// How many inline modules (`mod tests { .. }`) enclose position `at` of
/// `code` (comments and strings blanked).
fn inline_mods_around(code: &str, at: usize) -> usize {
    let mut around = 0;
    let mut from = 0;
    while let Some(f) = code[from..at].find("mod ") {
        let start = from + f;
        from = start + "mod ".len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name = ident_at(&code[from..]);
        let rest = code[from + name.len()..].trim_start();
        if name.is_empty() || !rest.starts_with('{') {
            continue; // `mod x;`
        }
        let open = code.len() - rest.len();
        let mut depth = 0;
        let close = code[open..].char_indices().find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(open + i)
        });
        if close.is_some_and(|c| c > at) {
            around += 1;
        }
    }
    around
}

/// The modules that define the names `lib.rs` re-exports (`pub use m::X`).
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let code = code_only(lib);
    let mut names = BTreeMap::new();
    for stmt in code.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident_at(path).to_owned();
        let tail = &path[module.len()..];
        let items = match tail.find('{') {
            Some(at) => tail[at + 1..].trim_end_matches('}').to_owned(),
            None => tail.rsplit("::").next().unwrap_or("").to_owned(),
        };
        for item in items.split(',') {
            // `X as Y` is known at the root as `Y`.
            let name = item.rsplit(" as ").next().unwrap_or("");
            let name = ident_at(name.trim());
            if !name.is_empty() {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

/// The offences of one file of module `module` (its top-level name):
/// `path:line: message` each.
fn check_file(
    path: &str,
    module: &str,
    depth: usize,
    src: &str,
    roots: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut offences = Vec::new();
    let Some(mine) = layer_of(module) else {
        return vec![format!(
            "{path}: module `{module}` is in no layer: add it to LAYERS (and docs/design.md)"
        )];
    };
    for r in crate_refs(src, depth) {
        if r.module.is_empty() {
            offences.push(format!(
                "{path}:{}: a path to the crate root that names no module (or an alias of the crate)",
                r.line
            ));
            continue;
        }
        let target = if layer_of(&r.module).is_some() {
            r.module.clone()
        } else if let Some(m) = roots.get(&r.module) {
            m.clone()
        } else {
            offences.push(format!(
                "{path}:{}: `crate::{}` names no module of a layer",
                r.line, r.module
            ));
            continue;
        };
        let Some(theirs) = layer_of(&target) else {
            offences.push(format!(
                "{path}:{}: `crate::{}` is re-exported from `{target}`, which is in no layer",
                r.line, r.module
            ));
            continue;
        };
        if theirs > mine {
            offences.push(format!(
                "{path}:{}: `{module}` ({} layer) uses `crate::{}` ({} layer, above it)",
                r.line, LAYERS[mine].0, r.module, LAYERS[theirs].0
            ));
        }
    }
    if module != "loom" {
        for (i, line) in std_atomics(src) {
            offences.push(format!(
                "{path}:{i}: {line}: std atomics: take them from `crate::loom`"
            ));
        }
    }
    offences
}

/// The lines that take atomics from `std` or `core`: `sync::atomic` in any
/// path but the shim's (`loom::sync::atomic`), and `std::sync::{..}` or
/// `core::sync::{..}` groups that name `atomic`.
fn std_atomics(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    let mut found = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let mut from = 0;
        while let Some(f) = line[from..].find("sync::atomic") {
            let at = from + f;
            from = at + 1;
            if !line[..at].ends_with("loom::") {
                found.push((i + 1, line.trim().to_owned()));
                break;
            }
        }
    }
    for stmt_start in ["std::sync::{", "core::sync::{"] {
        let mut from = 0;
        while let Some(f) = code[from..].find(stmt_start) {
            let at = from + f;
            from = at + stmt_start.len();
            let end = code[from..].find(';').map_or(code.len(), |e| from + e);
            if code[from..end].contains("atomic") {
                let line = code[..at].matches('\n').count() + 1;
                found.push((line, stmt_start.to_owned()));
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read runtime/src") {
        let p = entry.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_layer_imports_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let roots = root_names(&fs::read_to_string(src.join("lib.rs")).expect("read lib.rs"));
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 10, "found the sources: {files:?}");
    let mut offences = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a path");
        let module = first
            .as_os_str()
            .to_str()
            .expect("UTF-8")
            .trim_end_matches(".rs");
        if module == "lib" {
            continue; // the root declares and re-exports every layer
        }
        // How many modules below the root the file is: `task.rs` and
        // `meta/mod.rs` one, `meta/table.rs` two.
        let parts = rel.components().count();
        let depth = if rel.ends_with("mod.rs") {
            parts - 1
        } else {
            parts
        };
        let text = fs::read_to_string(file).expect("read a source file");
        offences.extend(check_file(
            &rel.display().to_string(),
            module,
            depth,
            &text,
            &roots,
        ));
    }
    assert!(
        offences.is_empty(),
        "imports against the layers:\n{}",
        offences.join("\n")
    );
}

/// The checker itself, on planted sources: an upward import is caught in
/// each form it takes, and what is allowed passes.
#[test]
fn the_checker_catches_a_planted_upward_import() {
    let roots = root_names(
        "pub use id::TaskId;\npub use wait::Butex as Waitable;\npub use task::{spawn, JoinHandle};",
    );
    let check = |module: &str, depth: usize, src: &str| {
        check_file("planted.rs", module, depth, src, &roots)
    };

    assert_eq!(
        check("meta", 1, "use crate::sched::TaskGroup;\n"),
        ["planted.rs:1: `meta` (task state layer) uses `crate::sched` (scheduler layer, above it)"]
    );
    // In a group over several lines, inline, and through a root re-export
    // (under its alias).
    let grouped = "use crate::{\n    stack::TaskStack,\n    wait::{self, Butex},\n};\n";
    assert_eq!(
        check("sched", 1, grouped).len(),
        1,
        "{:?}",
        check("sched", 1, grouped)
    );
    assert!(check("sched", 1, grouped)[0].starts_with("planted.rs:3:"));
    assert_eq!(
        check("stack", 1, "fn f() { crate::task::spawn(|| ()); }").len(),
        1
    );
    assert_eq!(check("sched", 1, "fn f(b: &crate::Waitable) {}").len(), 1);
    assert_eq!(
        check(
            "meta",
            1,
            "use crate::TaskId;\nuse crate::loom::UnsafeCell;"
        )
        .len(),
        0
    );
    // With spaces around `::`, and through `super` chains that reach the
    // root (but not those that stay inside the module).
    assert_eq!(check("meta", 1, "use crate :: wait :: Butex;").len(), 1);
    assert_eq!(check("meta", 1, "use super::wait::Butex;").len(), 1);
    assert_eq!(
        check("meta", 2, "use super::super::sched::TaskGroup;").len(),
        1
    );
    assert!(check("meta", 2, "use super::TaskRef;").is_empty());
    assert!(check("id", 1, "mod tests {\n    use super::*;\n}").is_empty());
    assert_eq!(
        check("id", 1, "mod tests {\n    use super::super::wait::X;\n}").len(),
        1
    );
    // An alias of the crate, and a path that names nothing.
    assert_eq!(
        check("meta", 1, "use crate as c;\nfn f() { c::wait::x(); }").len(),
        1
    );
    assert_eq!(check("meta", 1, "use crate::{self as c};").len(), 1);
    // Comments, strings and other crates do not count.
    assert!(check(
        "meta",
        1,
        "/// See [`crate::sched::TaskGroup`].\n// crate::wait\n"
    )
    .is_empty());
    assert!(check(
        "meta",
        1,
        "/* crate::wait */ const S: &str = \"crate::wait // x\";"
    )
    .is_empty());
    assert!(check("meta", 1, "use spindle_crate::wait;\npub(crate) fn f() {}").is_empty());
    // Std atomics outside the shim, in each spelling.
    assert_eq!(
        check("sched", 1, "use std::sync::atomic::AtomicU32;").len(),
        1
    );
    assert_eq!(
        check("sched", 1, "use std::sync::{atomic::AtomicU32, Arc};").len(),
        1
    );
    assert_eq!(
        check("sched", 1, "use core::sync::atomic::Ordering;").len(),
        1
    );
    assert!(check("sched", 1, "use crate::loom::sync::atomic::AtomicU32;").is_empty());
    assert!(check("loom", 1, "pub(crate) use std::sync::atomic::AtomicU32;").is_empty());
    // A module outside every layer, and a root name nobody re-exports.
    assert_eq!(check("newthing", 1, "").len(), 1);
    assert_eq!(check("wait", 1, "use crate::Unknown;").len(), 1);
}

// ------------------------------------------------------------ import circles
//
// The second check works on files, not layers: a file imports another when
// one of its paths names a module that file defines (or an item of it). It
// follows the module tree from `lib.rs` (`mod x;`, `#[path = ...]`), reads
// each path of a `use` line or written inline from its root (`crate::`,
// `super::`, `self::`, or a child module's name), and counts a name that a
// module re-exports (`pub use x::Name`) as the file that defines it. Then
// no circle of imports may hold more than two files, nor any file of
// `sched/`: the scheduler is reached through the seam, and imports nothing
// that imports it back.

/// One file of the crate: where it is, the module it defines
/// (`["meta", "coro"]`; the root is `[]`) and its code (comments and
/// strings blanked).
struct SourceFile {
    path: String,
    module: Vec<String>,
    code: String,
}

/// The `mod name;` declarations of `src` (the raw source: a `#[path]`
/// attribute's string is read), each with the path its attribute gives.
fn file_mods(src: &str) -> Vec<(String, Option<String>)> {
    let mut mods = Vec::new();
    let mut path_attr = None;
    for line in src.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("#[path") {
            path_attr = rest.split('"').nth(1).map(str::to_owned);
            continue;
        }
        if line.starts_with("#[") {
            continue; // `#[cfg(..)]` between the attribute and its `mod`
        }
        let decl = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub(super) "))
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some(rest) = decl.strip_prefix("mod ") {
            let name = ident_at(rest);
            if !name.is_empty() && rest[name.len()..].trim_start().starts_with(';') {
                mods.push((name.to_owned(), path_attr.take()));
            }
        }
        path_attr = None;
    }
    mods
}

/// The files of the module tree under `lib.rs`, read with `read` (a path
/// relative to `src`, `None` if there is no such file).
fn module_tree(read: &dyn Fn(&str) -> Option<String>) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut todo = vec![("lib.rs".to_owned(), Vec::new())];
    while let Some((path, module)) = todo.pop() {
        let src = read(&path).unwrap_or_else(|| panic!("no file {path}"));
        // Where the files of its child modules are: beside `lib.rs` and
        // `mod.rs`, in a directory named after any other file.
        let (dir, stem) = match path.rsplit_once('/') {
            Some((dir, file)) => (format!("{dir}/"), file.trim_end_matches(".rs")),
            None => (String::new(), path.trim_end_matches(".rs")),
        };
        let children_dir = if stem == "lib" || stem == "mod" {
            dir.clone()
        } else {
            format!("{dir}{stem}/")
        };
        for (name, attr) in file_mods(&src) {
            let child = match attr {
                // The attribute is relative to the declaring file's directory.
                Some(p) => format!("{dir}{p}"),
                None => {
                    let flat = format!("{children_dir}{name}.rs");
                    if read(&flat).is_some() {
                        flat
                    } else {
                        format!("{children_dir}{name}/mod.rs")
                    }
                }
            };
            let mut m = module.clone();
            m.push(name);
            todo.push((child, m));
        }
        files.push(SourceFile {
            path,
            module,
            code: code_only(&src),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// The words of a path, `a::b::c` (up to whatever ends it: `<`, `(`, `!`, a
/// space...).
fn path_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = s;
    loop {
        let w = ident_at(rest);
        if w.is_empty() {
            break;
        }
        words.push(w.to_owned());
        match rest[w.len()..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    words
}

/// The paths of a use tree (`a::{b, c::{self, D}, e as f, *}`): each as its
/// words (`self` dropped, `*` kept) and the name it is known by here.
fn use_tree_paths(tree: &str) -> Vec<(Vec<String>, String)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(ident_at(a.trim()).to_owned())),
            None => (tree, None),
        };
        let mut words: Vec<String> = path
            .split("::")
            .map(|w| w.trim().to_owned())
            .filter(|w| !w.is_empty())
            .collect();
        if words.last().is_some_and(|w| w == "self") {
            words.pop();
        }
        let name = alias.or_else(|| words.last().cloned()).unwrap_or_default();
        return vec![(words, name)];
    };
    let prefix: Vec<String> = tree[..open]
        .split("::")
        .map(|w| w.trim().to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                let item = inner[start..i].trim();
                start = i + 1;
                if item.is_empty() {
                    continue;
                }
                for (words, name) in use_tree_paths(item) {
                    let mut full = prefix.clone();
                    full.extend(words);
                    let name = if name == "self" || name.is_empty() {
                        full.last().cloned().unwrap_or_default()
                    } else {
                        name
                    };
                    out.push((full, name));
                }
            }
            _ => {}
        }
    }
    out
}

/// A path of a file, made absolute from the module the file defines
/// (`here`), `inline` modules deep inside it: `crate::`, `super::` (out of
/// the inline modules first), `self::`, or a child module of the file's
/// own module. `None` for a path into another crate, and for one that
/// stays inside the file's inline modules.
fn absolute(
    words: &[String],
    here: &[String],
    inline: usize,
    children: &[String],
) -> Option<Vec<String>> {
    let first = words.first()?;
    let (base, rest): (Vec<String>, &[String]) = match first.as_str() {
        "crate" => (Vec::new(), &words[1..]),
        "self" if inline == 0 => (here.to_vec(), &words[1..]),
        "super" => {
            let ups = words.iter().take_while(|w| *w == "super").count();
            if ups <= inline {
                return None;
            }
            let ups = ups - inline;
            if ups > here.len() {
                return None;
            }
            (here[..here.len() - ups].to_vec(), &words[ups + inline..])
        }
        w if inline == 0 && children.iter().any(|c| c == w) => (here.to_vec(), words),
        _ => return None,
    };
    let mut out = base;
    out.extend(rest.iter().cloned());
    Some(out)
}

/// One path of a file: the line it is on and its words from the root.
struct FilePath {
    line: usize,
    words: Vec<String>,
}

/// The paths of a file into the crate, and the names it re-exports
/// (`pub use`): `name -> path`.
type FileImports = (Vec<FilePath>, BTreeMap<String, Vec<String>>);

/// The paths of `file` into the crate, and the names it re-exports.
fn file_paths(file: &SourceFile, children: &[String]) -> FileImports {
    let code = &file.code;
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let word_start = |at: usize| {
        !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':' || c == '$')
    };
    let mut paths = Vec::new();
    let mut reexports = BTreeMap::new();
    let mut in_use = Vec::new(); // the spans of `use` items, read as trees
    let mut from = 0;
    while let Some(f) = code[from..].find("use ") {
        let at = from + f;
        from = at + "use ".len();
        if !word_start(at) {
            continue;
        }
        let end = code[from..].find(';').map_or(code.len(), |e| from + e);
        in_use.push((at, end));
        let before = code[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let inline = inline_mods_around(code, at);
        for (words, name) in use_tree_paths(&code[from..end]) {
            let Some(abs) = absolute(&words, &file.module, inline, children) else {
                continue;
            };
            if public && inline == 0 && name != "*" {
                reexports.insert(name, abs.clone());
            }
            paths.push(FilePath {
                line: line_of(at),
                words: abs,
            });
        }
        from = end;
    }
    // Paths written inline: from `crate::`, `super::`, `self::` or a child
    // module's name.
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let c = rest.chars().next().expect("in bounds");
        if (c.is_alphabetic() || c == '_')
            && word_start(at)
            && !in_use.iter().any(|&(s, e)| s <= at && at < e)
        {
            let words = path_words(rest);
            if words.len() > 1 {
                let inline = inline_mods_around(code, at);
                if let Some(abs) = absolute(&words, &file.module, inline, children) {
                    paths.push(FilePath {
                        line: line_of(at),
                        words: abs,
                    });
                }
            }
            at += ident_at(rest).len().max(1);
        } else {
            at += c.len_utf8();
        }
    }
    (paths, reexports)
}

/// The crate's files and, for each, the files it imports: `(to, line)`
/// with the first line that does.
struct ImportGraph {
    files: Vec<String>,
    edges: Vec<BTreeMap<usize, usize>>,
}

fn import_graph(files: &[SourceFile]) -> ImportGraph {
    let children_of = |module: &[String]| -> Vec<String> {
        files
            .iter()
            .filter(|f| f.module.len() == module.len() + 1 && f.module.starts_with(module))
            .map(|f| f.module.last().expect("a child").clone())
            .collect()
    };
    let read: Vec<_> = files
        .iter()
        .map(|f| file_paths(f, &children_of(&f.module)))
        .collect();
    // The file a path names: the deepest module it goes through, or the
    // file a name re-exported there comes from.
    fn resolve(words: &[String], files: &[SourceFile], read: &[FileImports], hops: usize) -> usize {
        let mut module = 0;
        let mut file = files
            .iter()
            .position(|f| f.module.is_empty())
            .expect("lib.rs");
        while module < words.len() {
            let deeper = &words[..=module];
            match files.iter().position(|f| f.module == deeper) {
                Some(i) => {
                    file = i;
                    module += 1;
                }
                None => break,
            }
        }
        if module < words.len() && hops < 8 {
            if let Some(target) = read[file].1.get(&words[module]) {
                let mut through = target.clone();
                through.extend(words[module + 1..].iter().cloned());
                return resolve(&through, files, read, hops + 1);
            }
        }
        file
    }
    let mut edges = vec![BTreeMap::new(); files.len()];
    for (i, (paths, _)) in read.iter().enumerate() {
        for p in paths {
            let to = resolve(&p.words, files, &read, 0);
            if to != i {
                edges[i].entry(to).or_insert(p.line);
            }
        }
    }
    ImportGraph {
        files: files.iter().map(|f| f.path.clone()).collect(),
        edges,
    }
}

/// Circles the rule has not broken yet, each named by its files (as the
/// failure lists them) and why it stands. The test fails on a circle not
/// listed here, and on a listed one that no longer is as listed (a file
/// more or fewer): so the list only ever shrinks, by the change that
/// breaks a circle. None stands today.
const KNOWN_CIRCLES: &[(&[&str], &str)] = &[];

/// One circle of more than two files in the strongly connected component
/// `scc`, if it has one: an import `a -> b` not made back, closed by the
/// shortest way from `b` back to `a`; or, when every import in it is made
/// both ways, a ring of three or more such pairs.
fn long_circle(g: &ImportGraph, scc: &[usize]) -> Option<Vec<usize>> {
    let inside = |a: usize| g.edges[a].keys().copied().filter(|b| scc.contains(b));
    let shortest = |from: usize, to: usize, skip: Option<(usize, usize)>| {
        // Breadth first from `from`; `skip` is one import not to take.
        let mut came_from = BTreeMap::from([(from, from)]);
        let mut todo = std::collections::VecDeque::from([from]);
        while let Some(a) = todo.pop_front() {
            for b in inside(a) {
                if skip == Some((a, b)) || came_from.contains_key(&b) {
                    continue;
                }
                came_from.insert(b, a);
                if b == to {
                    let mut way = vec![to];
                    while *way.last().expect("not empty") != from {
                        way.push(came_from[way.last().expect("not empty")]);
                    }
                    way.reverse();
                    return Some(way);
                }
                todo.push_back(b);
            }
        }
        None
    };
    for &a in scc {
        for b in inside(a) {
            let one_way = !g.edges[b].contains_key(&a);
            // Both ways: a longer circle is a way back from `b` to `a` that
            // does not take the import straight back.
            let back = shortest(b, a, (!one_way).then_some((b, a)));
            if let Some(way) = back.filter(|w| w.len() >= 2 && (one_way || w.len() > 2)) {
                let mut circle = vec![a];
                circle.extend(way.iter().copied().take(way.len() - 1));
                return Some(circle);
            }
        }
    }
    None
}

/// The import circles that break the rule: each strongly connected
/// component of the graph that holds a circle of more than two files, or
/// any file of `sched/`, named with the imports that close it. A
/// component of two-file circles only (a file and several others, each
/// importing it back) holds no longer circle and passes.
fn bad_circles(g: &ImportGraph) -> Vec<(Vec<String>, String)> {
    let n = g.files.len();
    let mut reach = vec![vec![false; n]; n];
    for (i, out) in g.edges.iter().enumerate() {
        reach[i][i] = true;
        for &j in out.keys() {
            reach[i][j] = true;
        }
    }
    for k in 0..n {
        let via = reach[k].clone();
        for row in reach.iter_mut().filter(|row| row[k]) {
            for (to, &r) in row.iter_mut().zip(&via) {
                *to |= r;
            }
        }
    }
    let mut seen = vec![false; n];
    let mut out = Vec::new();
    for i in 0..n {
        if seen[i] {
            continue;
        }
        let scc: Vec<usize> = (0..n).filter(|&j| reach[i][j] && reach[j][i]).collect();
        for &j in &scc {
            seen[j] = true;
        }
        let through_sched = scc.iter().any(|&j| g.files[j].starts_with("sched/"));
        let long = long_circle(g, &scc);
        if long.is_some() || (scc.len() > 1 && through_sched) {
            let names: Vec<String> = scc.iter().map(|&j| g.files[j].clone()).collect();
            let mut imports = Vec::new();
            for &a in &scc {
                for (&b, &line) in &g.edges[a] {
                    if scc.contains(&b) {
                        imports.push(format!("  {}:{line} -> {}", g.files[a], g.files[b]));
                    }
                }
            }
            let circle = match &long {
                Some(c) => {
                    let mut files: Vec<&str> = c.iter().map(|&j| g.files[j].as_str()).collect();
                    files.push(files[0]);
                    format!(" (one circle: {})", files.join(" -> "))
                }
                None => String::new(),
            };
            out.push((
                names.clone(),
                format!(
                    "{} files{}{circle}: {}\n{}",
                    scc.len(),
                    if through_sched {
                        ", through sched/"
                    } else {
                        ""
                    },
                    names.join(", "),
                    imports.join("\n")
                ),
            ));
        }
    }
    out
}

/// The offences of graph `g` against the rule, but for the circles listed
/// in `known`; and a listed circle that is not there as listed.
fn circle_offences(g: &ImportGraph, known: &[(&[&str], &str)]) -> Vec<String> {
    let found = bad_circles(g);
    let mut offences: Vec<String> = found
        .iter()
        .filter(|(files, _)| !known.iter().any(|(k, _)| k == files))
        .map(|(_, what)| format!("an import circle of {what}"))
        .collect();
    for (k, _) in known {
        if !found.iter().any(|(files, _)| k == files) {
            offences.push(format!(
                "KNOWN_CIRCLES lists {k:?}, which is no longer a circle as listed: \
                 update the list"
            ));
        }
    }
    offences
}

#[test]
fn no_import_circle_of_more_than_two_files_nor_through_sched() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = module_tree(&|p: &str| fs::read_to_string(src.join(p)).ok());
    // The tree reaches every file (else a file's imports would go unseen).
    let mut on_disk = Vec::new();
    rust_files(&src, &mut on_disk);
    let mut on_disk: Vec<String> = on_disk
        .iter()
        .map(|p| {
            p.strip_prefix(&src)
                .expect("under src")
                .display()
                .to_string()
        })
        .collect();
    on_disk.sort();
    let in_tree: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(in_tree, on_disk, "the module tree and the files differ");
    let offences = circle_offences(&import_graph(&files), KNOWN_CIRCLES);
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

/// The circle check itself, on a planted crate.
#[test]
fn the_circle_check_catches_planted_circles() {
    let check = |sources: &[(&str, &str)]| {
        let files = module_tree(&|p: &str| {
            sources
                .iter()
                .find(|(path, _)| *path == p)
                .map(|(_, src)| (*src).to_owned())
        });
        circle_offences(&import_graph(&files), &[])
    };
    let lib = "mod a;\nmod b;\nmod c;\nmod sched;\npub use c::Z;\n";
    let sched = ("sched/mod.rs", "mod x;\n");
    let sched_x = ("sched/x.rs", "");
    // a -> b -> c -> a, in a `use` line, a group, and a path written inline
    // through a name re-exported at the root.
    let three = check(&[
        ("lib.rs", lib),
        ("a.rs", "use crate::b::X;\n"),
        ("b.rs", "use crate::{c::{self, Y}};\n"),
        ("c.rs", "pub struct Z;\nfn f() { crate::a::g(); }\n"),
        sched,
        sched_x,
    ]);
    assert_eq!(three.len(), 1, "{three:?}");
    assert!(three[0].contains("3 files"), "{three:?}");
    // Two-file circles around one file pass (`a <-> b`, `a <-> c`, through
    // `crate::` and `super::` paths).
    let pairs = check(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod sched;\n"),
        (
            "a.rs",
            "mod inner;\npub(crate) use inner::Z;\nuse crate::b::X;\nuse crate::c::Y;\n",
        ),
        ("a/inner.rs", "pub struct Z;\n"),
        ("b.rs", "fn g() { crate::a::f(); }\n"),
        ("c.rs", "fn h() { super::a::f(); }\n"),
        sched,
        sched_x,
    ]);
    assert!(pairs.is_empty(), "{pairs:?}");
    // `inner` imports nothing back: the re-export names it, not `a`.
    let through_reexport = check(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod sched;\n"),
        (
            "a.rs",
            "mod inner;\npub(crate) use inner::Z;\nfn f() { crate::b::g(); }\n",
        ),
        ("a/inner.rs", "pub struct Z;\nuse crate::c::Y;\n"),
        ("b.rs", "use crate::a::Z;\n"),
        ("c.rs", "fn f() { crate::b::h(); }\n"),
        sched,
        sched_x,
    ]);
    assert_eq!(through_reexport.len(), 1, "{through_reexport:?}");
    assert!(
        through_reexport[0].contains("a/inner.rs"),
        "{through_reexport:?}"
    );
    assert!(
        !through_reexport[0].contains("a.rs,"),
        "{through_reexport:?}"
    );
    // Any circle through sched/, even of two files, and through a
    // `#[path]` module.
    let sched_pair = check(&[
        ("lib.rs", "mod sched;\n"),
        (
            "sched/mod.rs",
            "mod x;\n#[cfg(test)]\n#[path = \"y_file.rs\"]\nmod y;\n",
        ),
        ("sched/x.rs", "use super::y::Q;\n"),
        ("sched/y_file.rs", "use super::x::P;\n"),
    ]);
    assert_eq!(sched_pair.len(), 1, "{sched_pair:?}");
    assert!(sched_pair[0].contains("through sched/"), "{sched_pair:?}");
    // A listed circle that is gone is reported too.
    let files = module_tree(&|p: &str| (p == "lib.rs").then(String::new));
    assert_eq!(
        circle_offences(
            &import_graph(&files),
            &[(&["a.rs", "b.rs", "c.rs"], "gone")]
        )
        .len(),
        1
    );
}
