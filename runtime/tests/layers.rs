//! Holds the runtime crate's layers: a module may use only modules of its
//! own layer or of the layers below it (docs/design.md, "Layers").
//!
//! The test reads every file under `runtime/src`, finds each path that
//! starts with `crate::` in code (in `use` lines, `use crate::{..}` groups
//! over several lines, and paths written inline), and fails naming every
//! line where a lower layer reaches a higher one. Names re-exported at the
//! crate root (`crate::TaskId`) count as the module that defines them.
//! It also holds that protocol code takes its atomics from the crate's loom
//! shim: no `std::sync::atomic` outside `loom.rs`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom to top: each module's top-level name.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["loom", "error", "id"]),
    ("stacks", &["stack"]),
    ("task state", &["meta"]),
    ("scheduler", &["sched"]),
    ("wait", &["wait"]),
    ("public", &["runtime", "sync", "task", "time"]),
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

/// The source with comments blanked out (line breaks kept), so that doc
/// links and prose never count as imports.
fn code_only(src: &str) -> String {
    src.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every `crate::` path in `src`, with the names of a `crate::{..}` group
/// one by one.
fn crate_refs(src: &str) -> Vec<CrateRef> {
    let code = code_only(src);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        // `spindle_crate::`, say, is not us.
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
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
                    if !name.is_empty() && name != "self" {
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
            let name = ident_at(rest);
            if !name.is_empty() {
                out.push(CrateRef {
                    line: line_of(at),
                    module: name.to_owned(),
                });
            }
        }
    }
    out
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
            let name = ident_at(item.trim());
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
    src: &str,
    roots: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut offences = Vec::new();
    let Some(mine) = layer_of(module) else {
        return vec![format!(
            "{path}: module `{module}` is in no layer: add it to LAYERS (and docs/design.md)"
        )];
    };
    for r in crate_refs(src) {
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
        let theirs = layer_of(&target).expect("checked above");
        if theirs > mine {
            offences.push(format!(
                "{path}:{}: `{module}` ({} layer) uses `crate::{}` ({} layer, above it)",
                r.line, LAYERS[mine].0, r.module, LAYERS[theirs].0
            ));
        }
    }
    if module != "loom" {
        for (i, line) in code_only(src).lines().enumerate() {
            if line.contains("std::sync::atomic") {
                offences.push(format!(
                    "{path}:{}: std atomics: take them from `crate::loom`",
                    i + 1
                ));
            }
        }
    }
    offences
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
        let text = fs::read_to_string(file).expect("read a source file");
        offences.extend(check_file(
            &rel.display().to_string(),
            module,
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
    let roots =
        root_names("pub use id::TaskId;\npub use wait::Butex;\npub use task::{spawn, JoinHandle};");
    let check = |module: &str, src: &str| check_file("planted.rs", module, src, &roots);

    assert_eq!(
        check("meta", "use crate::sched::TaskGroup;\n"),
        ["planted.rs:1: `meta` (task state layer) uses `crate::sched` (scheduler layer, above it)"]
    );
    // In a group over several lines, inline, and through a root re-export.
    let grouped = "use crate::{\n    stack::TaskStack,\n    wait::{self, Butex},\n};\n";
    assert_eq!(
        check("sched", grouped).len(),
        1,
        "{:?}",
        check("sched", grouped)
    );
    assert!(check("sched", grouped)[0].starts_with("planted.rs:3:"));
    assert_eq!(
        check("stack", "fn f() { crate::task::spawn(|| ()); }").len(),
        1
    );
    assert_eq!(check("sched", "fn f(b: &crate::Butex) {}").len(), 1);
    assert_eq!(
        check("meta", "use crate::TaskId;\nuse crate::loom::UnsafeCell;").len(),
        0
    );
    // Comments and other crates do not count.
    assert!(check(
        "meta",
        "/// See [`crate::sched::TaskGroup`].\n// crate::wait\n"
    )
    .is_empty());
    assert!(check("meta", "use spindle_crate::wait;\n").is_empty());
    // Std atomics outside the shim.
    assert_eq!(check("sched", "use std::sync::atomic::AtomicU32;").len(), 1);
    assert!(check("loom", "pub(crate) use std::sync::atomic::AtomicU32;").is_empty());
    // A module outside every layer, and a root name nobody re-exports.
    assert_eq!(check("newthing", "").len(), 1);
    assert_eq!(check("wait", "use crate::Unknown;").len(), 1);
}
