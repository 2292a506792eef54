//! Reading a marketplace checkout: `marketplace.json` names the plugins (or, without a
//! list, every directory under `plugins/`), and each plugin directory holds
//! `skills/<dir>/SKILL.md`, `agents/*.md` and `commands/*.md` whose front matter names what
//! agents will invoke (falling back to the directory or file name).
//!
//! Nothing here follows a path out of the checkout: a plugin source that is absolute or
//! climbs with `..`, or a file or directory that is a symlink leading outside the plugin,
//! makes that plugin fail with the reason — the other plugins are still read.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use svc_store::marketplace::PluginRow;

/// The catalogue file at a marketplace's root.
pub const CATALOGUE: &str = "marketplace.json";

/// What a whole marketplace failed on (its previous data is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Deserialize)]
struct Catalogue {
    #[serde(default)]
    plugins: Option<Vec<Entry>>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    name: String,
    #[serde(default)]
    source: Option<serde_json::Value>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    author: Option<serde_json::Value>,
}

/// The `key: value` pairs of a file's front matter (the first `---` … `---` block); quotes
/// around a value are dropped, `#` lines skipped. A block that never closes or a line that
/// is not `key: value` is an error naming the line.
pub fn front_matter(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(l) if l.trim_end() == "---" => {}
        _ => return Ok(Vec::new()),
    }
    let mut pairs = Vec::new();
    for (n, line) in lines.enumerate() {
        let t = line.trim();
        if t == "---" {
            return Ok(pairs);
        }
        if t.is_empty() || t.starts_with('#') || line.starts_with([' ', '\t', '-']) {
            continue; // blank, comment, or a continuation of a multi-line value
        }
        let (k, v) = t
            .split_once(':')
            .ok_or_else(|| format!("front matter line {}: expected 'key: value'", n + 2))?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        pairs.push((k.trim().to_owned(), v.to_owned()));
    }
    Err("front matter is not closed by '---'".into())
}

/// A relative path that stays inside its base: no root, no `..`.
pub fn is_contained(rel: &Path) -> bool {
    rel.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// `path` resolved, if it lies inside `root` (resolved); symlinks leading out are refused.
fn inside(root: &Path, path: &Path) -> Result<PathBuf, String> {
    let real = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if real.starts_with(root) {
        Ok(real)
    } else {
        Err(format!("{} leads outside the plugin", path.display()))
    }
}

/// What a plugin directory provides to agents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginNames {
    /// Skill names.
    pub skills: Vec<String>,
    /// Agent names.
    pub agents: Vec<String>,
    /// Command names, without their `/`.
    pub commands: Vec<String>,
    /// Files that could not be read, each with the reason (they are skipped).
    pub problems: Vec<String>,
}

/// The names a plugin directory provides, and the problems met on the way; a path leading
/// out of the plugin fails it whole.
pub fn scan_plugin(dir: &Path) -> Result<PluginNames, String> {
    let root = dir
        .canonicalize()
        .map_err(|e| format!("plugin directory {}: {e}", dir.display()))?;
    let mut problems = Vec::new();
    let name_of = |file: &Path,
                   fallback: &str,
                   problems: &mut Vec<String>|
     -> Result<Option<String>, String> {
        let real = inside(&root, file)?;
        let text = match std::fs::read_to_string(&real) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{}: {e}", file.display()));
                return Ok(None);
            }
        };
        match front_matter(&text) {
            Ok(pairs) => Ok(Some(
                pairs
                    .into_iter()
                    .find(|(k, _)| k == "name")
                    .map(|(_, v)| v)
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| fallback.to_owned()),
            )),
            Err(e) => {
                let rel = file.strip_prefix(dir).unwrap_or(file);
                problems.push(format!("{}: {e}", rel.display()));
                Ok(None)
            }
        }
    };
    let sorted = |sub: &Path| -> Result<Vec<PathBuf>, String> {
        if !sub.exists() {
            return Ok(Vec::new());
        }
        inside(&root, sub)?;
        let mut entries: Vec<PathBuf> = std::fs::read_dir(sub)
            .map_err(|e| format!("{}: {e}", sub.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        Ok(entries)
    };
    let mut skills = Vec::new();
    for d in sorted(&dir.join("skills"))? {
        let file = d.join("SKILL.md");
        if file.exists() || std::fs::symlink_metadata(&file).is_ok() {
            let fallback = d.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            skills.extend(name_of(&file, fallback, &mut problems)?);
        }
    }
    let md = |sub: &str, problems: &mut Vec<String>| -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for f in sorted(&dir.join(sub))? {
            if f.extension().and_then(|e| e.to_str()) == Some("md") {
                let stem = f.file_stem().and_then(|n| n.to_str()).unwrap_or_default();
                names.extend(name_of(&f, stem, problems)?);
            }
        }
        Ok(names)
    };
    let agents = md("agents", &mut problems)?;
    let commands: Vec<String> = md("commands", &mut problems)?
        .into_iter()
        .map(|c| c.trim_start_matches('/').to_owned())
        .collect();
    Ok(PluginNames {
        skills,
        agents,
        commands,
        problems,
    })
}

/// Every plugin of the marketplace checked out at `root`, each with what it provides or
/// why it could not be read. Fails as a whole only when the catalogue is unreadable.
pub fn scan_marketplace(id: &str, root: &Path) -> Result<Vec<PluginRow>, LayoutError> {
    let catalogue_path = root.join(CATALOGUE);
    let text = std::fs::read_to_string(&catalogue_path)
        .map_err(|e| LayoutError(format!("{CATALOGUE}: {e}")))?;
    let catalogue: Catalogue = serde_json::from_str(&text)
        .map_err(|e| LayoutError(format!("{CATALOGUE} is not valid: {e}")))?;
    let entries = match catalogue.plugins {
        Some(list) => list,
        None => {
            let mut names: Vec<String> = std::fs::read_dir(root.join("plugins"))
                .map_err(|e| LayoutError(format!("plugins/: {e}")))?
                .filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect();
            names.sort();
            names
                .into_iter()
                .map(|name| Entry {
                    name,
                    source: None,
                    description: None,
                    version: None,
                    category: None,
                    author: None,
                })
                .collect()
        }
    };
    let root = root
        .canonicalize()
        .map_err(|e| LayoutError(format!("{}: {e}", root.display())))?;
    let mut seen = std::collections::BTreeSet::new();
    let mut plugins = Vec::new();
    for e in entries {
        let mut row = PluginRow {
            marketplace_id: id.to_owned(),
            ref_id: format!("{id}/{}", e.name),
            name: e.name.clone(),
            description: e.description,
            version: e.version,
            category: e.category,
            author: e.author.map(|a| match a {
                serde_json::Value::String(s) => s,
                other => other
                    .get("name")
                    .and_then(|n| n.as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| other.to_string()),
            }),
            ..PluginRow::default()
        };
        if e.name.is_empty() || !is_contained(Path::new(&e.name)) || e.name.contains('/') {
            row.error = Some(format!("plugin name '{}' is not a plain name", e.name));
            row.ref_id = format!("{id}/#invalid-{}", plugins.len());
            plugins.push(row);
            continue;
        }
        if !seen.insert(e.name.clone()) {
            continue; // a repeated entry: the first one stands
        }
        let source = match &e.source {
            None => format!("plugins/{}", e.name),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(_) => {
                row.error =
                    Some("source: only a relative path inside the repository is read".into());
                plugins.push(row);
                continue;
            }
        };
        let rel = Path::new(&source);
        let scanned = if is_contained(rel) {
            let dir = root.join(rel);
            inside(&root, &dir).and_then(|_| scan_plugin(&dir))
        } else {
            Err(format!("source '{source}' leaves the repository"))
        };
        match scanned {
            Ok(found) => {
                row.skills = found.skills;
                row.agents = found.agents;
                row.commands = found.commands;
                if !found.problems.is_empty() {
                    row.error = Some(found.problems.join("; "));
                }
            }
            Err(e) => row.error = Some(e),
        }
        plugins.push(row);
    }
    Ok(plugins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_reads_pairs_and_names_what_is_wrong() {
        let text = "---\nname: \"review\"\n# a comment\ndescription: Reviews code\n---\nbody";
        assert_eq!(
            front_matter(text).unwrap(),
            [
                ("name".to_string(), "review".to_string()),
                ("description".to_string(), "Reviews code".to_string())
            ]
        );
        assert!(front_matter("no front matter").unwrap().is_empty());
        assert!(front_matter("---\nname: x\n")
            .unwrap_err()
            .contains("not closed"));
        assert!(front_matter("---\njust words\n---\n")
            .unwrap_err()
            .contains("line 2"));
    }

    #[test]
    fn contained_paths_have_no_root_and_no_parent() {
        assert!(is_contained(Path::new("plugins/a")));
        assert!(is_contained(Path::new("./plugins/a")));
        assert!(!is_contained(Path::new("../a")));
        assert!(!is_contained(Path::new("/etc")));
        assert!(!is_contained(Path::new("plugins/../../a")));
    }
}

#[cfg(test)]
mod disk_tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("svc-layout-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_catalogue_that_is_not_json_fails_the_whole_marketplace() {
        let d = scratch("notjson");
        std::fs::write(d.join(CATALOGUE), "{ plugins: [").unwrap();
        let e = scan_marketplace("m", &d).unwrap_err();
        assert!(e.0.contains("not valid"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_symlink_out_of_the_plugin_fails_that_plugin_only() {
        let d = scratch("symlink");
        let outside = scratch("symlink-outside");
        std::fs::write(outside.join("secret.md"), "---\nname: stolen\n---\n").unwrap();
        std::fs::write(
            d.join(CATALOGUE),
            r#"{"plugins": [{"name": "sly"}, {"name": "fine"}]}"#,
        )
        .unwrap();
        std::fs::create_dir_all(d.join("plugins/sly/agents")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.md"), d.join("plugins/sly/agents/a.md"))
            .unwrap();
        std::fs::create_dir_all(d.join("plugins/fine/agents")).unwrap();
        std::fs::write(d.join("plugins/fine/agents/ok.md"), "---\nname: ok\n---\n").unwrap();
        let plugins = scan_marketplace("m", &d).unwrap();
        assert!(
            plugins[0].error.as_deref().unwrap().contains("outside"),
            "{plugins:?}"
        );
        assert!(
            plugins[0].agents.is_empty(),
            "nothing from outside is attributed"
        );
        assert_eq!(plugins[1].agents, ["ok"]);
        assert_eq!(plugins[1].error, None);
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&outside);
    }
}
