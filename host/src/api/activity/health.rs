//! The activity health card (`GET /api/admin/activity/health`): four signals read from the
//! store, each coloured by a fixed rule, and one overall colour and sentence. Gathering reads
//! the store; assessing is a pure function of what was gathered, so the rules are tested
//! without a clock or a store.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use svc_core::clock::{format_ts, parse_ts};
use svc_store::audit::AuditFilter;
use svc_store::{Store, StoreError};

/// How long one assessment is served to every administrator.
pub(crate) const HEALTH_TTL: Duration = Duration::from_secs(30);

/// A signal's colour; the overall colour is the worst of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Color {
    Green,
    Yellow,
    Red,
}

/// One signal as the card shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Field {
    key: &'static str,
    /// What a person reads (`3m ago`, `12 ok / 0 fail`).
    value: String,
    /// The number behind it, for machines (null when there is none).
    raw: Value,
    color: Color,
}

/// The card.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Health {
    status: Color,
    fields: Vec<Field>,
    sentence: String,
    /// When the signals were read (the card is cached for [`HEALTH_TTL`]).
    checked_at: String,
}

/// The latest finished telemetry pipeline run.
#[derive(Debug, Clone)]
pub(crate) struct PipelineRun {
    finished_at: DateTime<Utc>,
    ok: bool,
}

/// What the rules look at.
#[derive(Debug, Clone)]
pub(crate) struct Signals {
    now: DateTime<Utc>,
    /// The last scheduled job run (`scheduler.run` row), if any.
    scheduler_last: Option<DateTime<Utc>>,
    /// Table syncs in the last 24 hours, and how many failed.
    syncs: i64,
    sync_failures: i64,
    /// Distinct users with an audit row since UTC midnight.
    active_users_today: i64,
    pipeline: Option<PipelineRun>,
}

/// `42s ago`, `5m ago`, `3h ago`, `2d ago`.
fn age_text(seconds: i64) -> String {
    match seconds.max(0) {
        s if s < 60 => format!("{s}s ago"),
        s if s < 3_600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3_600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// Green up to `yellow_after` seconds old, yellow up to `red_after`, red beyond.
fn age_color(seconds: i64, yellow_after: i64, red_after: i64) -> Color {
    if seconds > red_after {
        Color::Red
    } else if seconds > yellow_after {
        Color::Yellow
    } else {
        Color::Green
    }
}

/// The card for these signals.
pub(crate) fn assess(s: &Signals) -> Health {
    let age = |t: DateTime<Utc>| (s.now - t).num_seconds();
    let scheduler = match s.scheduler_last {
        None => Field {
            key: "scheduler",
            value: "never".into(),
            raw: Value::Null,
            color: Color::Yellow,
        },
        Some(t) => Field {
            key: "scheduler",
            value: age_text(age(t)),
            raw: age(t).into(),
            // The script job runs every minute by default: half an hour of silence is odd,
            // two hours means the scheduler is not running.
            color: age_color(age(t), 1_800, 7_200),
        },
    };
    let ok = s.syncs - s.sync_failures;
    let sync = Field {
        key: "sync_24h",
        value: format!("{ok} ok / {} fail", s.sync_failures),
        raw: json!({"ok": ok, "fail": s.sync_failures}),
        color: if s.syncs == 0 {
            Color::Yellow
        } else if s.sync_failures == 0 {
            Color::Green
        } else if ok as f64 / s.syncs as f64 >= 0.95 {
            Color::Yellow
        } else {
            Color::Red
        },
    };
    let users = Field {
        key: "active_users_today",
        value: s.active_users_today.to_string(),
        raw: s.active_users_today.into(),
        color: Color::Green,
    };
    let pipeline = match &s.pipeline {
        None => Field {
            key: "telemetry_pipeline",
            value: "never ran".into(),
            raw: Value::Null,
            color: Color::Yellow,
        },
        Some(run) => {
            let seconds = age(run.finished_at);
            Field {
                key: "telemetry_pipeline",
                value: format!(
                    "{} {}",
                    if run.ok { "ok" } else { "failed" },
                    age_text(seconds)
                ),
                raw: seconds.into(),
                // It runs every ten minutes by default and after each upload.
                color: if run.ok {
                    age_color(seconds, 3_600, 86_400)
                } else {
                    Color::Red
                },
            }
        }
    };
    let fields = vec![scheduler, sync, users, pipeline];
    let status = fields.iter().map(|f| f.color).max().unwrap_or(Color::Green);
    let sentence = if status == Color::Green {
        format!(
            "All systems nominal: {} active users today, last scheduler run {}, {} in 24 h, telemetry pipeline {}.",
            fields[2].value, fields[0].value, fields[1].value, fields[3].value
        )
    } else {
        let degraded: Vec<&str> = fields
            .iter()
            .filter(|f| f.color != Color::Green)
            .map(|f| f.key)
            .collect();
        format!(
            "Degraded: {}. Filter the activity timeline to these subsystems to investigate.",
            degraded.join(", ")
        )
    };
    Health {
        status,
        fields,
        sentence,
        checked_at: format_ts(s.now),
    }
}

/// Reads the signals from the store.
pub(crate) async fn gather(store: &Store) -> Result<Signals, StoreError> {
    let now = Utc::now();
    let scheduler = AuditFilter {
        action_in: vec!["scheduler.run".into()],
        ..AuditFilter::default()
    };
    let syncs = AuditFilter {
        action_in: vec!["sync.table".into()],
        since: Some(format_ts(now - chrono::Duration::hours(24))),
        ..AuditFilter::default()
    };
    let midnight = now
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or(now);
    let today = AuditFilter {
        since: Some(format_ts(midnight)),
        ..AuditFilter::default()
    };
    let (last_run, syncs, today, runs) = tokio::try_join!(
        store.audit_page(&scheduler, None, 1),
        store.audit_kpis(&syncs),
        store.audit_kpis(&today),
        store.telemetry_runs(10),
    )?;
    let pipeline = runs.iter().find_map(|r| {
        Some(PipelineRun {
            finished_at: parse_ts(r.finished_at.as_deref()?)?,
            ok: r.status.as_deref() == Some("ok"),
        })
    });
    Ok(Signals {
        now,
        scheduler_last: last_run
            .rows
            .first()
            .and_then(|r| parse_ts(&r.record.timestamp)),
        syncs: syncs.events_total,
        sync_failures: syncs.errors,
        active_users_today: today.active_users,
        pipeline,
    })
}

/// One card for every administrator, refreshed at most every [`HEALTH_TTL`].
#[derive(Debug, Default)]
pub(crate) struct HealthCache(Mutex<Option<(Instant, Value)>>);

impl HealthCache {
    /// The cached card, if still fresh.
    pub(crate) fn fresh(&self) -> Option<Value> {
        let cached = self.0.lock().expect("health cache");
        cached
            .as_ref()
            .filter(|(at, _)| at.elapsed() < HEALTH_TTL)
            .map(|(_, v)| v.clone())
    }

    /// Keeps `card` as the fresh one.
    pub(crate) fn keep(&self, card: Value) {
        *self.0.lock().expect("health cache") = Some((Instant::now(), card));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals() -> Signals {
        let now = Utc::now();
        Signals {
            now,
            scheduler_last: Some(now - chrono::Duration::seconds(90)),
            syncs: 40,
            sync_failures: 0,
            active_users_today: 7,
            pipeline: Some(PipelineRun {
                finished_at: now - chrono::Duration::minutes(5),
                ok: true,
            }),
        }
    }

    fn color(h: &Health, key: &str) -> Color {
        h.fields.iter().find(|f| f.key == key).unwrap().color
    }

    #[test]
    fn all_fresh_is_green_with_a_sentence_of_the_values() {
        let h = assess(&signals());
        assert_eq!(h.status, Color::Green);
        assert_eq!(
            h.sentence,
            "All systems nominal: 7 active users today, last scheduler run 1m ago, 40 ok / 0 fail in 24 h, telemetry pipeline ok 5m ago."
        );
    }

    #[test]
    fn each_rule_moves_its_field_and_the_worst_field_sets_the_status() {
        let now = Utc::now();
        let mut s = signals();
        s.scheduler_last = Some(now - chrono::Duration::seconds(1_801));
        let h = assess(&s);
        assert_eq!(color(&h, "scheduler"), Color::Yellow);
        assert_eq!(h.status, Color::Yellow);
        assert_eq!(
            h.sentence,
            "Degraded: scheduler. Filter the activity timeline to these subsystems to investigate."
        );
        s.scheduler_last = Some(now - chrono::Duration::seconds(7_201));
        assert_eq!(assess(&s).status, Color::Red);
        s.scheduler_last = None;
        assert_eq!(color(&assess(&s), "scheduler"), Color::Yellow);

        let mut s = signals();
        s.syncs = 0;
        assert_eq!(color(&assess(&s), "sync_24h"), Color::Yellow);
        s.syncs = 100;
        s.sync_failures = 5;
        assert_eq!(color(&assess(&s), "sync_24h"), Color::Yellow);
        s.sync_failures = 6;
        let h = assess(&s);
        assert_eq!(color(&h, "sync_24h"), Color::Red);
        assert_eq!(h.fields[1].value, "94 ok / 6 fail");

        let mut s = signals();
        s.pipeline = None;
        assert_eq!(color(&assess(&s), "telemetry_pipeline"), Color::Yellow);
        s.pipeline = Some(PipelineRun {
            finished_at: now,
            ok: false,
        });
        assert_eq!(color(&assess(&s), "telemetry_pipeline"), Color::Red);
        s.pipeline = Some(PipelineRun {
            finished_at: now - chrono::Duration::hours(2),
            ok: true,
        });
        assert_eq!(color(&assess(&s), "telemetry_pipeline"), Color::Yellow);
    }

    #[test]
    fn ages_read_in_the_largest_whole_unit() {
        assert_eq!(age_text(59), "59s ago");
        assert_eq!(age_text(60), "1m ago");
        assert_eq!(age_text(3_599), "59m ago");
        assert_eq!(age_text(7_200), "2h ago");
        assert_eq!(age_text(90_000), "1d ago");
    }
}
