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
        &["net", "runtime", "scope", "sync", "task", "time"],
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
