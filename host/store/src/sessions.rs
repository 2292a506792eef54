//! Reading session summaries: the sessions browser's list, KPIs and facets, one user's
//! sessions and their token statistics (reference §6.1, §6.2, §4.14).
//!
//! Every filter value is bound, never spliced into the SQL; sort columns come from a closed
//! enum. Every order ends with `session_file`, so pages are stable (the reference had no
//! tiebreak).

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::clause::{like_literal, Where};
use crate::usage::SessionSummary;
use crate::{Store, StoreError};

/// Which sessions a list or KPI read covers (reference §6.1's shared filters).
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Sessions started at or after this time (sessions without a start are left out).
    pub since: Option<String>,
    /// Exact owner (`username`: e-mail, or directory name when no user matched).
    pub username: Option<String>,
    /// Exact owner id.
    pub user_id: Option<String>,
    /// Exact primary model.
    pub model: Option<String>,
    /// Only sessions with at least one failed tool call.
    pub only_errors: bool,
    /// Literal substring of the session id or the session file (`%` and `_` are not
    /// wildcards).
    pub q: Option<String>,
}

/// A column a session list can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionColumn {
    /// Start time.
    StartedAt,
    /// End time.
    EndedAt,
    /// Tool calls.
    ToolCalls,
    /// Failed tool calls.
    ToolErrors,
    /// Active time.
    ActiveSeconds,
    /// Owner.
    Username,
    /// Primary model.
    PrimaryModel,
}

impl SessionColumn {
    /// The documented names (reference §6.1); None for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "started_at" => Self::StartedAt,
            "ended_at" => Self::EndedAt,
            "tool_calls" => Self::ToolCalls,
            "tool_errors" => Self::ToolErrors,
            "active_seconds" => Self::ActiveSeconds,
            "username" => Self::Username,
            "primary_model" => Self::PrimaryModel,
            _ => return None,
        })
    }

    fn sql(self) -> &'static str {
        match self {
            Self::StartedAt => "started_at",
            Self::EndedAt => "ended_at",
            Self::ToolCalls => "tool_calls",
            Self::ToolErrors => "tool_errors",
            Self::ActiveSeconds => "active_seconds",
            Self::Username => "username",
            Self::PrimaryModel => "primary_model",
        }
    }
}

/// The order of a session list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionOrder {
    /// Sessions with failed calls first, then newest first (the default).
    #[default]
    ErrorsFirst,
    /// One column (nulls last either way).
    By {
        /// The column.
        column: SessionColumn,
        /// Largest first.
        descending: bool,
    },
}

impl SessionOrder {
    /// `<column>:<asc|desc>`; an unknown column or a missing sort means errors first, and
    /// the direction is ascending only when it says `asc`.
    pub fn parse(sort: Option<&str>) -> Self {
        let Some(sort) = sort else {
            return Self::ErrorsFirst;
        };
        let (name, dir) = sort.split_once(':').unwrap_or((sort, "desc"));
        match SessionColumn::parse(name.trim()) {
            Some(column) => Self::By {
                column,
                descending: !dir.trim().eq_ignore_ascii_case("asc"),
            },
            None => Self::ErrorsFirst,
        }
    }

    fn sql(self) -> String {
        match self {
            Self::ErrorsFirst => "(tool_errors > 0) DESC, (started_at IS NULL), started_at DESC, \
                                 session_file"
                .to_owned(),
            Self::By { column, descending } => {
                let c = column.sql();
                let dir = if descending { "DESC" } else { "ASC" };
                format!("({c} IS NULL), {c} {dir}, session_file")
            }
        }
    }
}

/// Headline numbers of the sessions under a filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionKpis {
    /// Sessions.
    pub sessions_total: i64,
    /// Distinct owners.
    pub distinct_users: i64,
    /// Sessions with at least one failed tool call.
    pub error_sessions: i64,
    /// Tool calls.
    pub tool_calls_total: i64,
    /// Failed tool calls.
    pub tool_errors_total: i64,
    /// `tool_errors_total / tool_calls_total`, 4 decimals (0 without calls).
    pub tool_error_rate: f64,
}

/// One value of a facet and its sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FacetCount {
    /// The value.
    pub value: String,
    /// Sessions with it.
    pub count: i64,
}

/// The filter options of a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionFacets {
    /// Top 50 owners by sessions (ties by name).
    pub users: Vec<FacetCount>,
    /// Top 30 primary models by sessions (ties by name).
    pub models: Vec<FacetCount>,
}

/// Tokens of one day, one model or in all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TokenCounts {
    /// Input tokens.
    pub input: i64,
    /// Output tokens.
    pub output: i64,
    /// Tokens read from the prompt cache.
    pub cache_read: i64,
    /// Tokens written to the prompt cache.
    pub cache_creation: i64,
    /// Sessions.
    pub sessions: i64,
    /// All four token counts added.
    pub total: i64,
}

impl TokenCounts {
    fn add(&mut self, s: &SessionSummary) {
        self.input += s.input_tokens;
        self.output += s.output_tokens;
        self.cache_read += s.cache_read_tokens;
        self.cache_creation += s.cache_creation_tokens;
        self.sessions += 1;
        self.total = self.input + self.output + self.cache_read + self.cache_creation;
    }
}

/// Tokens of one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayTokens {
    /// `YYYY-MM-DD` (UTC) of the sessions' start.
    pub day: String,
    /// Its tokens.
    #[serde(flatten)]
    pub tokens: TokenCounts,
}

/// Tokens of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelTokens {
    /// The sessions' primary model, or `(unknown)`.
    pub model: String,
    /// Its tokens.
    #[serde(flatten)]
    pub tokens: TokenCounts,
}

/// A user's token use over a window (reference §4.14).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TokenStats {
    /// Days in the window.
    pub days: u32,
    /// Per UTC day of the session start, oldest first (days without sessions left out).
    pub daily: Vec<DayTokens>,
    /// Per primary model (`(unknown)` when none), most tokens first.
    pub by_model: Vec<ModelTokens>,
    /// The ten sessions with the most tokens.
    pub top_sessions: Vec<SessionSummary>,
    /// The whole window.
    pub totals: TokenCounts,
}

/// The WHERE clause of a session filter.
fn where_of(f: &SessionFilter) -> Where {
    let mut w = Where::new();
    for (condition, value) in [
        ("started_at >= $?", &f.since),
        ("username = $?", &f.username),
        ("user_id = $?", &f.user_id),
        ("primary_model = $?", &f.model),
    ] {
        if let Some(v) = value {
            w.push(condition, v.clone());
        }
    }
    if f.only_errors {
        w.push_fixed("tool_errors > 0");
    }
    if let Some(q) = f.q.as_deref().filter(|q| !q.is_empty()) {
        w.push(
            "(session_id LIKE $? ESCAPE '\\' OR session_file LIKE $? ESCAPE '\\')",
            format!("%{}%", like_literal(q)),
        );
    }
    w
}

fn summary_of(r: &AnyRow) -> Result<SessionSummary, StoreError> {
    Ok(SessionSummary {
        session_file: r.try_get("session_file")?,
        session_id: r.try_get("session_id")?,
        username: r.try_get("username")?,
        user_id: r.try_get("user_id")?,
        started_at: r.try_get("started_at")?,
        ended_at: r.try_get("ended_at")?,
        active_seconds: r.try_get::<Option<i64>, _>("active_seconds")?.unwrap_or(0),
        wall_seconds: r.try_get::<Option<i64>, _>("wall_seconds")?.unwrap_or(0),
        user_messages: r.try_get("user_messages")?,
        assistant_messages: r.try_get("assistant_messages")?,
        tool_calls: r.try_get("tool_calls")?,
        tool_errors: r.try_get("tool_errors")?,
        skill_invocations: r.try_get("skill_invocations")?,
        subagent_dispatches: r.try_get("subagent_dispatches")?,
        mcp_calls: r.try_get("mcp_calls")?,
        slash_commands: r.try_get("slash_commands")?,
        distinct_tools: r.try_get("distinct_tools")?,
        distinct_skills: r.try_get("distinct_skills")?,
        input_tokens: r.try_get("input_tokens")?,
        output_tokens: r.try_get("output_tokens")?,
        cache_read_tokens: r.try_get("cache_read_tokens")?,
        cache_creation_tokens: r.try_get("cache_creation_tokens")?,
        primary_model: r.try_get("primary_model")?,
        processor_version: r.try_get("processor_version")?,
        extracted_at: r
            .try_get::<Option<String>, _>("extracted_at")?
            .unwrap_or_default(),
    })
}

/// Rounds a ratio to 4 decimals (0 for an empty whole).
fn rate(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 / whole as f64 * 10_000.0).round() / 10_000.0
    }
}

impl Store {
    /// A page of session summaries under a filter, and how many match in all.
    pub async fn list_sessions(
        &self,
        filter: &SessionFilter,
        order: SessionOrder,
        limit: usize,
        offset: usize,
    ) -> Result<(Vec<SessionSummary>, i64), StoreError> {
        let w = where_of(filter);
        let sql = format!(
            "SELECT * FROM usage_session_summary{} ORDER BY {} LIMIT {} OFFSET {}",
            w.sql,
            order.sql(),
            limit,
            offset
        );
        let mut q = sqlx::query(&sql);
        for b in &w.binds {
            q = q.bind(b.as_str());
        }
        let rows = q
            .fetch_all(self.pool())
            .await?
            .iter()
            .map(summary_of)
            .collect::<Result<Vec<_>, _>>()?;
        let count_sql = format!("SELECT COUNT(*) AS n FROM usage_session_summary{}", w.sql);
        let mut q = sqlx::query(&count_sql);
        for b in &w.binds {
            q = q.bind(b.as_str());
        }
        let total: i64 = q.fetch_one(self.pool()).await?.try_get("n")?;
        Ok((rows, total))
    }

    /// Headline numbers of the sessions under a filter.
    pub async fn session_kpis(&self, filter: &SessionFilter) -> Result<SessionKpis, StoreError> {
        let w = where_of(filter);
        let sql = format!(
            "SELECT COUNT(*) AS sessions, COUNT(DISTINCT username) AS users, \
             CAST(COALESCE(SUM(CASE WHEN tool_errors > 0 THEN 1 ELSE 0 END), 0) AS BIGINT) AS error_sessions, \
             CAST(COALESCE(SUM(tool_calls), 0) AS BIGINT) AS calls, \
             CAST(COALESCE(SUM(tool_errors), 0) AS BIGINT) AS errors \
             FROM usage_session_summary{}",
            w.sql
        );
        let mut q = sqlx::query(&sql);
        for b in &w.binds {
            q = q.bind(b.as_str());
        }
        let r = q.fetch_one(self.pool()).await?;
        let (calls, errors): (i64, i64) = (r.try_get("calls")?, r.try_get("errors")?);
        Ok(SessionKpis {
            sessions_total: r.try_get("sessions")?,
            distinct_users: r.try_get("users")?,
            error_sessions: r.try_get("error_sessions")?,
            tool_calls_total: calls,
            tool_errors_total: errors,
            tool_error_rate: rate(errors, calls),
        })
    }

    /// The owners (top 50) and primary models (top 30) of the sessions started since
    /// `since`, most sessions first, ties by value.
    pub async fn session_facets(&self, since: &str) -> Result<SessionFacets, StoreError> {
        let top = |column: &'static str, n: usize| {
            format!(
                "SELECT {column} AS value, COUNT(*) AS n FROM usage_session_summary \
                 WHERE started_at >= $1 AND {column} IS NOT NULL \
                 GROUP BY {column} ORDER BY n DESC, value LIMIT {n}"
            )
        };
        let mut facets = SessionFacets::default();
        for (sql, out) in [
            (top("username", 50), &mut facets.users),
            (top("primary_model", 30), &mut facets.models),
        ] {
            for r in sqlx::query(&sql).bind(since).fetch_all(self.pool()).await? {
                out.push(FacetCount {
                    value: r.try_get("value")?,
                    count: r.try_get("n")?,
                });
            }
        }
        Ok(facets)
    }

    /// One session file's summary, by its key `<user dir>/<file name>`.
    pub async fn session_summary(
        &self,
        session_file: &str,
    ) -> Result<Option<SessionSummary>, StoreError> {
        crate::fetch_opt(
            self,
            sqlx::query("SELECT * FROM usage_session_summary WHERE session_file = $1")
                .bind(session_file),
            summary_of,
        )
        .await
    }

    /// One user's token use in sessions started since `since` (`days` is reported back).
    pub async fn token_stats(
        &self,
        user_id: &str,
        since: &str,
        days: u32,
    ) -> Result<TokenStats, StoreError> {
        let sessions = crate::fetch_vec(
            self,
            sqlx::query(
                "SELECT * FROM usage_session_summary WHERE user_id = $1 AND started_at >= $2 \
                 ORDER BY started_at, session_file",
            )
            .bind(user_id)
            .bind(since),
            summary_of,
        )
        .await?;
        let mut stats = TokenStats {
            days,
            ..TokenStats::default()
        };
        let mut daily = std::collections::BTreeMap::<String, TokenCounts>::new();
        let mut models = std::collections::BTreeMap::<String, TokenCounts>::new();
        for s in &sessions {
            let day: String = s
                .started_at
                .as_deref()
                .unwrap_or_default()
                .chars()
                .take(10)
                .collect();
            daily.entry(day).or_default().add(s);
            let model = s
                .primary_model
                .clone()
                .unwrap_or_else(|| "(unknown)".into());
            models.entry(model).or_default().add(s);
            stats.totals.add(s);
        }
        stats.daily = daily
            .into_iter()
            .map(|(day, tokens)| DayTokens { day, tokens })
            .collect();
        stats.by_model = models
            .into_iter()
            .map(|(model, tokens)| ModelTokens { model, tokens })
            .collect();
        stats.by_model.sort_by(|a, b| {
            b.tokens
                .total
                .cmp(&a.tokens.total)
                .then_with(|| a.model.cmp(&b.model))
        });
        let tokens = |s: &SessionSummary| {
            s.input_tokens + s.output_tokens + s.cache_read_tokens + s.cache_creation_tokens
        };
        let mut top = sessions;
        top.sort_by(|a, b| {
            tokens(b)
                .cmp(&tokens(a))
                .then_with(|| a.session_file.cmp(&b.session_file))
        });
        top.truncate(10);
        stats.top_sessions = top;
        Ok(stats)
    }

    /// Every summary of one owner's files (keys under `<user dir>/`), newest first. Keys
    /// of that directory sort between `<dir>/` and `<dir>0` (`0` follows `/`), so the
    /// primary key answers this as a range.
    pub async fn sessions_of_dir(&self, user_dir: &str) -> Result<Vec<SessionSummary>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query(
                "SELECT * FROM usage_session_summary WHERE session_file > $1 AND session_file < $2 \
                 ORDER BY (started_at IS NULL), started_at DESC, session_file",
            )
            .bind(format!("{user_dir}/"))
            .bind(format!("{user_dir}0")),
            summary_of,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_parse_to_closed_columns_with_a_tiebreak() {
        assert_eq!(SessionOrder::parse(None), SessionOrder::ErrorsFirst);
        assert_eq!(
            SessionOrder::parse(Some("tool_calls:asc")),
            SessionOrder::By {
                column: SessionColumn::ToolCalls,
                descending: false
            }
        );
        assert_eq!(
            SessionOrder::parse(Some("username")),
            SessionOrder::By {
                column: SessionColumn::Username,
                descending: true
            }
        );
        // An unknown column (an injection attempt included) falls back to the default.
        assert_eq!(
            SessionOrder::parse(Some("1; DROP TABLE users:asc")),
            SessionOrder::ErrorsFirst
        );
        for order in [
            SessionOrder::ErrorsFirst,
            SessionOrder::parse(Some("ended_at:asc")),
        ] {
            assert!(order.sql().ends_with("session_file"), "{}", order.sql());
        }
    }
}
