//! The crate's shape, checked: every module sits on a layer, imports only from its own layer or
//! those below, and no files import each other in a circle. `docs/architecture.md` draws the
//! same layers. The check reads the code's own imports (`crate::…`, `super::…`, and a parent's
//! bare paths into its child modules) outside comments and `#[cfg(test)]` items, so a new
//! import that runs up, or closes a circle, fails `cargo test`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, from the ground up; a module is named by its first path segment.
const LAYERS: &[&[&str]] = &[
    // Vocabulary: lock operations, error kinds, counters, configuration as plain data.
    &["lockop", "error", "counters", "config", "endpoint"],
    // The wire: every RESP encoder and decoder.
    &["wire"],
    // One pipelined connection per master, and TLS towards it.
    &["backend", "tls"],
    // The fan-out and the majority rule, with deadlines.
    &["quorum"],
    // The lock engine: per-key order, scripts and their analyser, accounts, pub/sub.
    &["keylock", "lua", "scripts", "acl", "pubsub"],
    // The state every connection shares.
    &["proxy"],
    // Typed commands, dispatch, session state.
    &["command"],
    // One client connection.
    &["client"],
    // Start-up, the accept loop, telemetry, local masters, logs.
    &["bootstrap", "server", "reload", "metrics", "dev", "logging"],
];

/// A file's module path, from `src/`: `src/command/set.rs` is `["command", "set"]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without `#[cfg(test)]` items.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            // Skip the item that follows: to its `;`, or to the brace that closes it.
            let mut depth = 0i32;
            let mut opened = false;
            for next in lines.by_ref() {
                let next = next.split("//").next().unwrap_or("");
                depth += next.matches('{').count() as i32 - next.matches('}').count() as i32;
                opened |= next.contains('{');
                if (opened && depth <= 0) || (!opened && next.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// Splits `a::b::{c, d::e}` style paths that start at `at` into whole paths.
fn paths_at(code: &str, at: usize) -> Vec<Vec<String>> {
    let rest = &code[at..];
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{'))
        .unwrap_or(rest.len());
    let head = &rest[..end];
    let mut base: Vec<String> = head
        .split("::")
        .filter(|s| !s.is_empty() && *s != "{")
        .map(|s| s.trim_end_matches('{').to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut out = vec![base.clone()];
    if head.ends_with('{') {
        let group = &rest[end..];
        let close = group.find('}').unwrap_or(group.len());
        for item in group[..close].split(',') {
            let item = item.split(" as ").next().unwrap_or("").trim();
            if item.is_empty() || item == "self" {
                continue;
            }
            let mut path = base.clone();
            path.extend(item.split("::").map(|s| s.trim().to_string()));
            out.push(path);
        }
        base.clear();
    }
    out
}

/// The import graph between files: file -> files it imports.
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !f.ends_with("main.rs"));
    let by_module: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let resolve = |path: &[String]| -> Option<PathBuf> {
        (0..=path.len())
            .rev()
            .find_map(|n| by_module.get(&path[..n]).cloned())
    };
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for file in &files {
        let me = module_of(src, file);
        let code = code_of(&std::fs::read_to_string(file).expect("a readable file"));
        let mut found = BTreeSet::new();
        let bytes = code.as_bytes();
        for (i, _) in code.match_indices("::") {
            // The identifier this `::` follows, when it starts a path.
            let mut start = i;
            while start > 0
                && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_')
            {
                start -= 1;
            }
            if start == i || code[..start].ends_with("::") {
                continue;
            }
            let first = &code[start..i];
            let rest_from = i + 2;
            let tail = paths_at(&code, rest_from);
            let prefix: Vec<String> = match first {
                "crate" => Vec::new(),
                "super" => me[..me.len().saturating_sub(1)].to_vec(),
                name => {
                    // A parent's bare path into one of its own child modules.
                    let mut child = me.clone();
                    child.push(name.to_string());
                    if by_module.contains_key(&child) {
                        me.clone()
                    } else {
                        continue;
                    }
                }
            };
            for t in tail {
                let mut whole = prefix.clone();
                if !matches!(first, "crate" | "super") {
                    whole.push(first.to_string());
                }
                let mut t = t.into_iter().peekable();
                // `super::super::x`
                while t.peek().is_some_and(|s| s == "super") {
                    t.next();
                    whole.pop();
                }
                whole.extend(t);
                if let Some(target) = resolve(&whole)
                    && &target != file
                {
                    found.insert(target);
                }
            }
        }
        edges.insert(file.clone(), found);
    }
    edges
}

/// The layer of a file, by its module's first segment.
fn layer_of(src: &Path, file: &Path) -> Option<usize> {
    let module = module_of(src, file);
    let first = module.first()?;
    LAYERS.iter().position(|l| l.contains(&first.as_str()))
}

/// Files that import each other in a circle (strongly connected components of two or more).
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    // Kosaraju: order by finish time, then walk the reversed graph.
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for start in edges.keys() {
        if seen.contains(start) {
            continue;
        }
        let mut stack = vec![(start.clone(), false)];
        while let Some((node, done)) = stack.pop() {
            if done {
                order.push(node);
                continue;
            }
            if !seen.insert(node.clone()) {
                continue;
            }
            stack.push((node.clone(), true));
            for next in edges.get(&node).into_iter().flatten() {
                if !seen.contains(next) {
                    stack.push((next.clone(), false));
                }
            }
        }
    }
    let mut reversed: BTreeMap<&PathBuf, Vec<&PathBuf>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reversed.entry(to).or_default().push(from);
        }
    }
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for node in order.iter().rev() {
        if placed.contains(node) {
            continue;
        }
        let mut component = Vec::new();
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            if !placed.insert(n.clone()) {
                continue;
            }
            component.push(n.clone());
            stack.extend(reversed.get(n).into_iter().flatten().copied());
        }
        if component.len() > 1 {
            component.sort();
            out.push(component);
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let edges = graph(&src());
    let found = circles(&edges);
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn every_module_has_a_layer_and_imports_only_its_own_or_lower_ones() {
    let src = src();
    let edges = graph(&src);
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        let Some(mine) = layer_of(&src, from) else {
            if !from.ends_with("lib.rs") && !from.ends_with("layering.rs") {
                wrong.push(format!("{} has no layer in LAYERS", from.display()));
            }
            continue;
        };
        for to in tos {
            if layer_of(&src, to).is_some_and(|theirs| theirs > mine) {
                wrong.push(format!(
                    "{} imports {} above it",
                    from.display(),
                    to.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_check_sees_an_import_that_runs_up_and_a_circle() {
    // The negative control: a made-up tree where a vocabulary module imports a command, and
    // two files import each other.
    let dir = std::env::temp_dir().join(format!("redlock-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("command")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod config;\npub mod command;\n").unwrap();
    std::fs::write(
        dir.join("config.rs"),
        "// crate::command in a comment does not count\nuse crate::command::set::Set;\n",
    )
    .unwrap();
    std::fs::write(dir.join("command/mod.rs"), "pub mod set;\nuse set::Set;\n").unwrap();
    std::fs::write(
        dir.join("command/set.rs"),
        "use super::{helper};\npub struct Set;\n#[cfg(test)]\nmod tests {\n    use crate::config;\n}\n",
    )
    .unwrap();
    let edges = graph(&dir);
    let config = dir.join("config.rs");
    let set = dir.join("command/set.rs");
    let parent = dir.join("command/mod.rs");
    assert!(edges[&config].contains(&set), "{edges:#?}");
    assert!(edges[&set].contains(&parent), "{edges:#?}");
    assert!(!edges[&set].contains(&config), "test code is not an import");
    assert_eq!(circles(&edges), vec![vec![parent, set]]);
    assert!(layer_of(&dir, &config) < layer_of(&dir, &dir.join("command/set.rs")));
    let _ = std::fs::remove_dir_all(&dir);
}
