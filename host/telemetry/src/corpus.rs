//! A deterministic generator of Claude-Code-style session transcripts, for benchmarks and
//! tests: user prompts and assistant turns with parallel `tool_use` blocks, tool results
//! (some errors), `Skill`/`Task`/`Agent`/`mcp__*` calls, slash-command tags, plugin-namespaced
//! names, token usage, long tool outputs, and a few malformed lines.

use std::io::Write;

use serde_json::json;

/// A small, fast, seeded generator (SplitMix64): the same seed gives the same corpus.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const TOOLS: &[&str] = &[
    "Bash",
    "Read",
    "Edit",
    "Write",
    "Grep",
    "Glob",
    "TodoWrite",
    "WebFetch",
];
const MCP: &[&str] = &[
    "mcp__github__search_issues",
    "mcp__linear__create_issue",
    "mcp__db__query",
];
const SKILLS: &[&str] = &[
    "review",
    "code-tools:review",
    "pdf",
    "compound:plan",
    "sql-helper",
];
const AGENTS: &[&str] = &[
    "general-purpose",
    "planner",
    "code-reviewer",
    "compound:researcher",
];
const COMMANDS: &[&str] = &["clear", "compact", "compound:debug", "review-pr", "init"];
const MODELS: &[&str] = &["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"];

/// What one generated file holds, for checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generated {
    /// Lines written.
    pub lines: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Events the extractor should find (tool calls and slash commands).
    pub events: u64,
    /// Malformed lines written on purpose.
    pub malformed: u64,
}

impl std::ops::AddAssign for Generated {
    fn add_assign(&mut self, o: Self) {
        self.lines += o.lines;
        self.bytes += o.bytes;
        self.events += o.events;
        self.malformed += o.malformed;
    }
}

/// Writes one session file of at least `target_bytes` to `out`: sessions of 60 lines each,
/// numbered from `first_index` so that files made with different indices never share ids.
pub fn file(
    out: &mut impl Write,
    rng: &mut Rng,
    first_index: u64,
    target_bytes: u64,
) -> std::io::Result<Generated> {
    let mut g = Generated::default();
    let mut index = first_index;
    while g.bytes < target_bytes.max(1) {
        g += session(out, rng, index, 60)?;
        index += 1;
    }
    Ok(g)
}

/// Writes one session of about `turns` lines to `out`, two hours after the previous index's.
pub fn session(
    out: &mut impl Write,
    rng: &mut Rng,
    index: u64,
    turns: u64,
) -> std::io::Result<Generated> {
    write_session(out, rng, index, turns, None)
}

/// Writes one session of about `turns` lines to `out`, starting at `start` (Unix seconds).
pub fn session_at(
    out: &mut impl Write,
    rng: &mut Rng,
    index: u64,
    turns: u64,
    start: i64,
) -> std::io::Result<Generated> {
    write_session(out, rng, index, turns, Some(start))
}

fn write_session(
    out: &mut impl Write,
    rng: &mut Rng,
    index: u64,
    turns: u64,
    start: Option<i64>,
) -> std::io::Result<Generated> {
    let session_id = format!(
        "{:08x}-{:04x}-4000-8000-{:012x}",
        index,
        rng.below(0xffff),
        rng.next_u64() >> 16
    );
    let mut g = Generated::default();
    let mut t =
        start.unwrap_or_else(|| 1_760_000_000 + index as i64 * 7_200 + rng.below(3_600) as i64);
    let mut parent = String::new();
    let line =
        |out: &mut dyn Write, v: &serde_json::Value, g: &mut Generated| -> std::io::Result<()> {
            let text = v.to_string();
            out.write_all(text.as_bytes())?;
            out.write_all(b"\n")?;
            g.lines += 1;
            g.bytes += text.len() as u64 + 1;
            Ok(())
        };
    let stamp = |t: i64| {
        chrono::DateTime::from_timestamp(t, 0)
            .unwrap_or_default()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    };
    let mut n = 0;
    while n < turns {
        t += rng.below(90) as i64 + 1;
        let uuid = format!("{session_id}-{n}");
        // A user prompt, sometimes with a slash command.
        let mut prompt = "Please look at the failing build and fix what you find. "
            .repeat(1 + rng.below(4) as usize);
        if rng.below(8) == 0 {
            prompt = format!(
                "<command-name>/{}</command-name>\n<command-message>run</command-message> {prompt}",
                rng.pick(COMMANDS)
            );
            g.events += 1;
        }
        line(
            out,
            &json!({"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": session_id,
            "cwd": "/home/dev/project", "timestamp": stamp(t), "version": "2.0.14",
            "message": {"role": "user", "content": prompt}}),
            &mut g,
        )?;
        parent = uuid;
        n += 1;
        // An assistant turn with one to four parallel tool calls.
        let calls = 1 + rng.below(4);
        let mut blocks = vec![json!({"type": "text", "text": "Let me check that."})];
        let mut ids = Vec::new();
        for c in 0..calls {
            let id = format!("toolu_{:016x}{c}", rng.next_u64());
            let (name, input) = match rng.below(20) {
                0 => ("Skill".to_owned(), json!({"skill": rng.pick(SKILLS)})),
                1 => (
                    "Task".to_owned(),
                    json!({"subagent_type": rng.pick(AGENTS), "prompt": "investigate"}),
                ),
                2 => (
                    "Agent".to_owned(),
                    json!({"subagent_type": rng.pick(AGENTS)}),
                ),
                3 | 4 => (
                    rng.pick(MCP).to_owned(),
                    json!({"query": "is:open label:bug"}),
                ),
                _ => (
                    rng.pick(TOOLS).to_owned(),
                    json!({"command": "cargo test --workspace", "file_path": "/home/dev/project/src/main.rs"}),
                ),
            };
            blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            ids.push(id);
            g.events += 1;
        }
        t += rng.below(30) as i64 + 1;
        let uuid = format!("{session_id}-{n}");
        line(
            out,
            &json!({"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": session_id,
            "cwd": "/home/dev/project", "timestamp": stamp(t),
            "message": {"role": "assistant", "model": rng.pick(MODELS), "content": blocks,
                "usage": {"input_tokens": rng.below(5000), "output_tokens": rng.below(2000),
                          "cache_read_input_tokens": rng.below(100_000), "cache_creation_input_tokens": rng.below(10_000)}}}),
            &mut g,
        )?;
        parent = uuid;
        n += 1;
        // Their results, in one user turn; long outputs, some errors.
        let results: Vec<serde_json::Value> = ids
            .iter()
            .map(|id| {
                let output = "test result: ok. 42 passed; 0 failed\n".repeat(10 + rng.below(60) as usize);
                json!({"type": "tool_result", "tool_use_id": id, "is_error": rng.below(12) == 0, "content": output})
            })
            .collect();
        t += rng.below(20) as i64 + 1;
        let uuid = format!("{session_id}-{n}");
        line(
            out,
            &json!({"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": session_id,
            "timestamp": stamp(t), "message": {"role": "user", "content": results}}),
            &mut g,
        )?;
        parent = uuid;
        n += 1;
        if rng.below(50) == 0 {
            out.write_all(b"{\"type\": \"assistant\", \"message\": {\"content\": [\n")?;
            g.lines += 1;
            g.malformed += 1;
            n += 1;
        }
        if rng.below(40) == 0 {
            line(
                out,
                &json!({"type": "progress", "data": {"step": n}, "timestamp": stamp(t)}),
                &mut g,
            )?;
            n += 1;
        }
    }
    Ok(g)
}
