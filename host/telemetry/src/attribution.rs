//! Which marketplace plugin or store entity a skill, agent or command belongs to
//! (reference §4.6), with names normalised so they actually match.
//!
//! Transcripts name things as the agent saw them: commands as `name` or `plugin:name`
//! (the `/` is stripped by the extractor), skills as `name` or `plugin:name`. The tables may
//! hold `/name` for commands. Both sides are normalised — leading `/` dropped, then matched
//! whole or, for `plugin:name`, by `name` preferring the plugin the prefix names — so a
//! plugin's skill is attributed whichever way it was invoked. Curated rows beat flea rows.

use std::collections::HashMap;

use svc_store::usage::AttributionRows;

/// `(source, ref_id)` of an attribution.
pub type Attributed = (String, String);

/// The source of everything not attributed to a plugin or entity.
pub const BUILTIN: &str = "builtin";

/// The attribution maps, loaded once per pipeline run.
#[derive(Debug, Clone, Default)]
pub struct Attribution {
    skills: HashMap<String, Vec<Attributed>>,
    agents: HashMap<String, Vec<Attributed>>,
    commands: HashMap<String, Vec<Attributed>>,
}

fn normalize(name: &str) -> &str {
    name.trim().trim_start_matches('/')
}

fn index(rows: Vec<(String, String, String)>) -> HashMap<String, Vec<Attributed>> {
    let mut map: HashMap<String, Vec<Attributed>> = HashMap::new();
    for (name, source, ref_id) in rows {
        let name = normalize(&name);
        if !name.is_empty() {
            map.entry(name.to_owned())
                .or_default()
                .push((source, ref_id));
        }
    }
    // Curated before flea, then by ref_id: the first candidate is the stable winner.
    for hits in map.values_mut() {
        hits.sort_by(|a, b| (a.0 != "curated", &a.0, &a.1).cmp(&(b.0 != "curated", &b.0, &b.1)));
        hits.dedup();
    }
    map
}

/// Whether a ref id names plugin `plugin` (`<marketplace>/<plugin>` or the entity itself).
fn names_plugin(ref_id: &str, plugin: &str) -> bool {
    ref_id == plugin || ref_id.rsplit('/').next() == Some(plugin)
}

fn find(map: &HashMap<String, Vec<Attributed>>, raw: &str) -> Option<Attributed> {
    let name = normalize(raw);
    if let Some(hits) = map.get(name) {
        return hits.first().cloned();
    }
    let (plugin, bare) = name.split_once(':')?;
    let hits = map.get(bare)?;
    hits.iter()
        .find(|(_, r)| names_plugin(r, plugin))
        .or_else(|| hits.first())
        .cloned()
}

impl Attribution {
    /// Maps over the store's attribution rows.
    pub fn new(rows: AttributionRows) -> Self {
        Self {
            skills: index(rows.skills),
            agents: index(rows.agents),
            commands: index(rows.commands),
        }
    }

    /// The first match of skill, then agent, then command; `(builtin, None)` otherwise.
    pub fn attribute(
        &self,
        skill: Option<&str>,
        agent: Option<&str>,
        command: Option<&str>,
    ) -> (String, Option<String>) {
        skill
            .and_then(|s| find(&self.skills, s))
            .or_else(|| agent.and_then(|a| find(&self.agents, a)))
            .or_else(|| command.and_then(|c| find(&self.commands, c)))
            .map_or_else(|| (BUILTIN.to_owned(), None), |(s, r)| (s, Some(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        v.iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect()
    }

    #[test]
    fn names_match_with_or_without_slash_and_plugin_prefix() {
        let a = Attribution::new(AttributionRows {
            skills: rows(&[
                ("review", "flea", "ent-9"),
                ("review", "curated", "mkt/code-tools"),
                ("review", "curated", "mkt/other"),
            ]),
            agents: rows(&[("planner", "flea", "ent-2")]),
            commands: rows(&[("/debug", "curated", "mkt/compound")]),
        });
        let got = |s, ag, c| a.attribute(s, ag, c);
        assert_eq!(
            got(Some("review"), None, None),
            ("curated".into(), Some("mkt/code-tools".into()))
        );
        assert_eq!(
            got(Some("other:review"), None, None),
            ("curated".into(), Some("mkt/other".into()))
        );
        assert_eq!(
            got(Some("unknown:review"), None, None).1,
            Some("mkt/code-tools".into())
        );
        assert_eq!(
            got(None, Some("planner"), None),
            ("flea".into(), Some("ent-2".into()))
        );
        assert_eq!(
            got(None, None, Some("debug")).1,
            Some("mkt/compound".into())
        );
        assert_eq!(
            got(None, None, Some("compound:debug")).1,
            Some("mkt/compound".into())
        );
        assert_eq!(
            got(None, None, Some("/debug")).1,
            Some("mkt/compound".into())
        );
        assert_eq!(got(None, None, Some("clear")), ("builtin".into(), None));
        assert_eq!(
            got(Some("nope"), Some("general-purpose"), None),
            ("builtin".into(), None)
        );
    }
}
