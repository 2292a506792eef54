//! Which generated statements may run: exactly one read-only query over the telemetry
//! tables. The statement is parsed (the engine's own parser), not searched for keywords, so
//! a column named `read_count` or the word "update" in a string is fine, and a write or a
//! file read hidden behind odd spacing is still refused.

use svc_query::statement::parse_read_only;

/// The tables a generated statement may read: the telemetry events and the session
/// summaries, as the internal tables the engine serves.
pub const ALLOWED_TABLES: &[&str] = &["svc_telemetry", "svc_sessions"];

/// The statement to run, trimmed of whitespace and one trailing `;`, or why it is refused.
pub fn check(sql: &str) -> Result<String, String> {
    let text = sql.trim();
    let text = text.strip_suffix(';').unwrap_or(text).trim_end();
    if text.is_empty() {
        return Err("the SQL is empty".to_owned());
    }
    let parsed = parse_read_only(text).map_err(|e| e.0)?;
    if let Some(other) = parsed
        .tables
        .iter()
        .find(|t| !ALLOWED_TABLES.iter().any(|a| a.eq_ignore_ascii_case(t)))
    {
        return Err(format!(
            "the SQL reads '{other}'; only {} may be read",
            ALLOWED_TABLES.join(" and ")
        ));
    }
    if parsed.tables.is_empty() {
        return Err(format!(
            "the SQL reads no table; ask about {}",
            ALLOWED_TABLES.join(" or ")
        ));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn one_read_of_the_telemetry_tables_passes() {
        assert_eq!(
            check("  SELECT tool_name, count(*) FROM svc_telemetry GROUP BY 1; ").unwrap(),
            "SELECT tool_name, count(*) FROM svc_telemetry GROUP BY 1"
        );
        check("WITH t AS (SELECT * FROM svc_sessions) SELECT count(*) FROM t").unwrap();
        check("SELECT read_count, 'update' FROM svc_telemetry").unwrap();
    }

    #[test]
    fn writes_other_tables_files_and_second_statements_are_refused() {
        for (sql, why) in [
            ("DROP TABLE svc_telemetry", "not allowed"),
            ("SELECT * FROM users", "'users'"),
            ("SELECT * FROM svc_audit", "'svc_audit'"),
            ("SELECT * FROM read_parquet('/etc/passwd')", "read_parquet"),
            (
                "SELECT 1 FROM svc_telemetry; SELECT 2 FROM svc_telemetry",
                "2 statements",
            ),
            ("SELECT 1; DROP TABLE svc_sessions", "2 statements"),
            ("INSERT INTO svc_telemetry VALUES (1)", "not allowed"),
            ("COPY svc_telemetry TO '/tmp/x'", "not allowed"),
            ("SELECT 1", "no table"),
            ("this is not sql", "syntax"),
            (" ; ", "empty"),
        ] {
            let err = check(sql).expect_err(sql);
            assert!(err.contains(why), "{sql}: {err}");
        }
    }
}
