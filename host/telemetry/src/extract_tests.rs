//! The labelled fixture (`fixtures/labelled.jsonl`), checked by hand line by line.

use super::*;
use svc_store::usage::AttributionRows;

fn rows(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

/// What a file yields, with its events in the order they were handed on.
#[derive(Debug)]
struct Run {
    x: Extracted,
    events: Vec<UsageEvent>,
    chunks: usize,
}

impl std::ops::Deref for Run {
    type Target = Extracted;
    fn deref(&self) -> &Extracted {
        &self.x
    }
}

fn run_in_chunks(text: &[u8], attribution: &Attribution, chunk: usize) -> Run {
    let owner = Owner {
        user_id: Some("u-1".into()),
        username: "ana@example.com".into(),
    };
    let cx = Context {
        session_file: "u-1/s.jsonl",
        owner: &owner,
        mtime: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        attribution,
        extracted_at: "2026-11-02T00:00:00.000000Z",
    };
    let (mut events, mut chunks) = (Vec::new(), 0);
    let x = extract_in_chunks(
        std::io::Cursor::new(text),
        &cx,
        chunk,
        |c: &[UsageEvent]| {
            chunks += 1;
            events.extend_from_slice(c);
            Ok::<_, ()>(())
        },
    )
    .unwrap();
    assert_eq!(x.events, events.len() as u64);
    Run { x, events, chunks }
}

fn run(text: &[u8], attribution: &Attribution) -> Run {
    run_in_chunks(text, attribution, CHUNK_EVENTS)
}

#[test]
fn the_labelled_fixture_yields_its_hand_checked_events_and_summary() {
    let attribution = Attribution::new(AttributionRows {
        skills: rows(&[("review", "flea", "ent-9")]),
        agents: rows(&[("planner", "curated", "mkt/planning")]),
        commands: rows(&[("/debug", "curated", "mkt/compound")]),
    });
    let x = run(include_bytes!("../fixtures/labelled.jsonl"), &attribution);
    let got: Vec<String> = x
        .events
        .iter()
        .map(|e| {
            format!(
                "{} {} tool={} skill={} agent={} cmd={} err={} {}:{} at={} model={}",
                e.event_type,
                e.event_uuid.as_deref().unwrap_or("-"),
                e.tool_name.as_deref().unwrap_or("-"),
                e.skill_name.as_deref().unwrap_or("-"),
                e.subagent_type.as_deref().unwrap_or("-"),
                e.command_name.as_deref().unwrap_or("-"),
                e.is_error,
                e.source,
                e.ref_id.as_deref().unwrap_or("-"),
                &e.occurred_at[11..19],
                e.model.as_deref().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            "slash_command u1 tool=- skill=- agent=- cmd=compound:debug err=false curated:mkt/compound at=10:00:00 model=-",
            "tool_use u3 tool=Bash skill=- agent=- cmd=- err=true builtin:- at=10:00:05 model=m1",
            "tool_use u3 tool=Skill skill=review agent=- cmd=- err=false flea:ent-9 at=10:00:05 model=m1",
            "mcp_call u3 tool=mcp__gh__search skill=- agent=- cmd=- err=false builtin:- at=10:00:05 model=m1",
            // The turn's timestamp does not parse: the file's last good time, never "now".
            "subagent u5 tool=Task skill=- agent=planner cmd=- err=true curated:mkt/planning at=10:00:10 model=m2",
            "subagent u5 tool=Agent skill=- agent=Agent cmd=- err=false builtin:- at=10:00:10 model=m2",
            "tool_use u10 tool=Read skill=- agent=- cmd=- err=false builtin:- at=10:20:20 model=m1",
            // Two identical tags in one turn are one event; prose "/notacommand" is none.
            "slash_command u11 tool=- skill=- agent=- cmd=clear err=false builtin:- at=10:20:30 model=-",
        ]
    );
    assert!(x.events.iter().all(|e| e.session_id == "S1"
        && e.username == "ana@example.com"
        && e.user_id.as_deref() == Some("u-1")
        && e.id.len() == 64));
    let s = &x.summary;
    assert_eq!(s.session_id, "S1");
    assert_eq!(
        (s.started_at.as_deref(), s.ended_at.as_deref()),
        (
            Some("2026-11-01T10:00:00.000000Z"),
            Some("2026-11-01T10:20:30.000000Z")
        )
    );
    assert_eq!((s.wall_seconds, s.active_seconds), (1230, 30));
    assert_eq!((s.user_messages, s.assistant_messages), (2, 3));
    assert_eq!((s.tool_calls, s.tool_errors), (6, 2));
    assert_eq!(
        (
            s.skill_invocations,
            s.subagent_dispatches,
            s.mcp_calls,
            s.slash_commands
        ),
        (1, 2, 1, 2)
    );
    assert_eq!((s.distinct_tools, s.distinct_skills), (6, 1));
    assert_eq!(
        (
            s.input_tokens,
            s.output_tokens,
            s.cache_read_tokens,
            s.cache_creation_tokens
        ),
        (11, 12, 100, 0)
    );
    assert_eq!(s.primary_model.as_deref(), Some("m1"));
    assert_eq!((x.lines, x.malformed), (12, 3));
    let problems: Vec<(u64, &str)> = x
        .problems
        .iter()
        .map(|p| (p.line, p.problem.split(':').next().unwrap()))
        .collect();
    assert_eq!(
        problems,
        [
            (6, "not a JSON object"),
            (7, "not a transcript line"),
            (
                12,
                "last line is cut short (the file may still be being written)"
            ),
        ]
    );
}

#[test]
fn identities_are_stable_and_keep_parallel_calls_apart() {
    let text = include_bytes!("../fixtures/labelled.jsonl");
    let a = run(text, &Attribution::default());
    let b = run(text, &Attribution::default());
    let ids: Vec<&str> = a.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        b.events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
    );
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    // The reference's formula, prefixed with the file's key.
    let want = hex::encode(Sha256::digest(b"u-1/s.jsonl|S1|u3|tu1|tool_use|Bash|"));
    assert_eq!(a.events[1].id, want);
}

#[test]
fn hostile_files_never_abort_and_count_every_bad_line() {
    let garbage: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let x = run(&garbage, &Attribution::default());
    assert!(x.events.is_empty());
    assert!(x.malformed >= 1 && x.malformed <= x.lines, "{x:?}");
    let empty = run(b"", &Attribution::default());
    assert_eq!(
        (
            empty.lines,
            empty.malformed,
            empty.events.len(),
            empty.chunks
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(
        empty.summary.session_id, "u-1/s.jsonl",
        "falls back to the file's key"
    );
    // A result without its call and a call without its result are both fine.
    let orphan = br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"nope","is_error":true}]}}
{"type":"assistant","timestamp":"2026-01-01T00:00:00Z","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash"}]}}
"#;
    let x = run(orphan, &Attribution::default());
    assert_eq!((x.events.len(), x.malformed), (1, 0));
    assert!(!x.events[0].is_error);
    assert_eq!(x.summary.tool_errors, 0);
    // No good timestamp anywhere: events take the file's mtime.
    let x = run(
        br#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash"}]}}"#,
        &Attribution::default(),
    );
    assert_eq!(x.events[0].occurred_at, "2023-11-14T22:13:20.000000Z");
}

#[test]
fn events_handed_on_early_are_the_events_of_a_whole_file() {
    let fixture = include_bytes!("../fixtures/labelled.jsonl");
    let attribution = Attribution::default();
    let whole = run(fixture, &attribution);
    for chunk in [1, 2, 3] {
        let early = run_in_chunks(fixture, &attribution, chunk);
        assert!(
            early.chunks > 1,
            "chunk size {chunk} hands on more than once"
        );
        assert_eq!(early.events, whole.events, "chunk size {chunk}");
        assert_eq!(early.summary, whole.summary, "chunk size {chunk}");
    }
    // A failure reported lines after its call, after the call's chunk was handed on; a
    // call before any session id or good time waits for them.
    let late = br#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t0","name":"Read"}]}}
{"type":"assistant","sessionId":"S9","timestamp":"2026-01-01T00:00:00Z","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash"}]}}
{"type":"assistant","timestamp":"2026-01-01T00:00:01Z","message":{"content":[{"type":"tool_use","id":"t2","name":"Grep"}]}}
{"type":"assistant","timestamp":"2026-01-01T00:00:02Z","message":{"content":[{"type":"tool_use","id":"t3","name":"Edit"}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","is_error":true}]}}
{"type":"tool_use_result","toolUseId":"t0","is_error":true}
"#;
    let x = run_in_chunks(late, &attribution, 1);
    assert_eq!(
        x.chunks, 3,
        "t0 and t1 wait for the session id and a time together"
    );
    let got: Vec<(&str, &str, bool, &str)> = x
        .events
        .iter()
        .map(|e| {
            (
                e.tool_name.as_deref().unwrap(),
                e.session_id.as_str(),
                e.is_error,
                &e.occurred_at[..19],
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("Read", "S9", true, "2026-01-01T00:00:00"),
            ("Bash", "S9", true, "2026-01-01T00:00:00"),
            ("Grep", "S9", false, "2026-01-01T00:00:01"),
            ("Edit", "S9", false, "2026-01-01T00:00:02"),
        ]
    );
    assert_eq!((x.summary.tool_calls, x.summary.tool_errors), (4, 2));
}

#[test]
fn a_sink_that_fails_stops_the_extraction() {
    let owner = Owner {
        user_id: None,
        username: "x".into(),
    };
    let attribution = Attribution::default();
    let cx = Context {
        session_file: "x/s.jsonl",
        owner: &owner,
        mtime: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        attribution: &attribution,
        extracted_at: "2026-11-02T00:00:00.000000Z",
    };
    let fixture = include_bytes!("../fixtures/labelled.jsonl");
    let result = extract(
        std::io::Cursor::new(&fixture[..]),
        &cx,
        |_: &[UsageEvent]| Err("disk full"),
    );
    assert!(matches!(result, Err(Failure::Sink("disk full"))));
}

#[test]
fn a_file_read_whole_or_streamed_yields_the_same() {
    let dir = svc_store::testing::TempDir::new();
    let path = dir.0.join("s.jsonl");
    let mut text = include_bytes!("../fixtures/labelled.jsonl").to_vec();
    let mut rng = crate::corpus::Rng::new(3);
    for index in 0..30 {
        crate::corpus::session(&mut text, &mut rng, index, 30).unwrap();
    }
    std::fs::write(&path, &text).unwrap();
    let owner = Owner {
        user_id: None,
        username: "u".into(),
    };
    let attribution = Attribution::default();
    let cx = Context {
        session_file: "u/s.jsonl",
        owner: &owner,
        mtime: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        attribution: &attribution,
        extracted_at: "2026-11-02T00:00:00.000000Z",
    };
    let mut buffer = b"left over from an earlier file".to_vec();
    let mut read = |whole_up_to: u64| {
        let mut events = Vec::new();
        let x = extract_path_up_to(
            &path,
            whole_up_to,
            &mut buffer,
            &cx,
            |c: &[UsageEvent]| {
                events.extend_from_slice(c);
                Ok::<_, ()>(())
            },
        )
        .unwrap();
        (x, events)
    };
    let (whole, whole_events) = read(u64::MAX / 4);
    let (streamed, streamed_events) = read(0);
    assert!(whole_events.len() > 100, "{} events", whole_events.len());
    assert_eq!(whole_events, streamed_events);
    assert_eq!(whole.summary, streamed.summary);
    assert_eq!(
        (whole.lines, whole.malformed, whole.bytes, &whole.hash),
        (
            streamed.lines,
            streamed.malformed,
            text.len() as u64,
            &streamed.hash
        )
    );
    assert_eq!(whole.hash, crate::files::hash_reader(&text[..]).unwrap().0);
}
