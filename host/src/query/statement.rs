//! What a query request may run: one read-only statement, and the tables it names.
//!
//! The SQL is parsed (with the parser DataFusion uses) instead of searched for keywords, so
//! a table name inside a string literal or a comment is not a reference, and a write hidden
//! behind odd spacing or casing is still a write.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use svc_plugin_api::datafusion::sql::parser::{DFParser, Statement as DfStatement};
use svc_plugin_api::datafusion::sql::sqlparser::ast::{
    ObjectName, Query, Statement, Visit, Visitor,
};

/// Why a statement is refused (a 400 with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

const ALLOWED: &str =
    "Only one read-only query is allowed: SELECT (with WITH, JOIN, UNION …) or EXPLAIN of one";

/// A statement that may run, with the table names it references.
#[derive(Debug, Clone)]
pub struct ReadOnlyQuery {
    /// Referenced table names as written (CTE names excluded), without duplicates, in order
    /// of name. Multi-part names keep their dots (`schema.table`).
    pub tables: Vec<String>,
}

/// Parses `sql` (DataFusion's own parser, so its extensions such as `CREATE EXTERNAL TABLE`
/// and `COPY … TO` are recognised and refused by name) and accepts exactly one query, or
/// EXPLAIN of one.
pub fn parse_read_only(sql: &str) -> Result<ReadOnlyQuery, Refused> {
    let mut statements =
        DFParser::parse_sql(sql).map_err(|e| Refused(format!("SQL syntax error: {e}")))?;
    let statement = match statements.len() {
        0 => return Err(Refused("Empty SQL: send one SELECT statement".into())),
        1 => statements.pop_front().expect("one statement"),
        n => {
            return Err(Refused(format!(
                "{n} statements sent; {ALLOWED}, one per request"
            )))
        }
    };
    let query = query_inside(&statement)?;
    let mut names = Names::default();
    let _ = query.visit(&mut names);
    let tables = names
        .relations
        .into_iter()
        .filter(|t| !names.ctes.contains(&t.to_ascii_lowercase()))
        .collect();
    Ok(ReadOnlyQuery { tables })
}

/// The query a statement runs, or why it is refused.
fn query_inside(statement: &DfStatement) -> Result<&Statement, Refused> {
    let refuse = |kind: &str| Refused(format!("{kind} statements are not allowed. {ALLOWED}"));
    match statement {
        DfStatement::Statement(s) => match s.as_ref() {
            Statement::Query(_) => Ok(s),
            Statement::Explain { statement, .. } if matches!(**statement, Statement::Query(_)) => {
                Ok(s)
            }
            Statement::Explain { statement, .. } => Err(refuse(&first_word(statement))),
            other => Err(refuse(&first_word(other))),
        },
        DfStatement::Explain(explain) => query_inside(&explain.statement),
        DfStatement::CreateExternalTable(_) => Err(refuse("CREATE EXTERNAL TABLE")),
        DfStatement::CopyTo(_) => Err(refuse("COPY")),
        DfStatement::Reset(_) => Err(refuse("RESET")),
    }
}

fn first_word(statement: &Statement) -> String {
    statement
        .to_string()
        .split_whitespace()
        .next()
        .unwrap_or("this")
        .to_uppercase()
}

/// Collects relation names and CTE names.
#[derive(Default)]
struct Names {
    relations: BTreeSet<String>,
    ctes: BTreeSet<String>,
}

impl Visitor for Names {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.ctes.insert(cte.alias.name.value.to_ascii_lowercase());
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
        let name = relation
            .0
            .iter()
            .map(|part| part.to_string().trim_matches('"').to_owned())
            .collect::<Vec<_>>()
            .join(".");
        self.relations.insert(name);
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(sql: &str) -> Vec<String> {
        parse_read_only(sql).unwrap().tables
    }

    #[test]
    fn references_come_from_the_syntax_tree_not_from_text() {
        assert_eq!(
            tables("SELECT * FROM orders o JOIN customers c ON o.cid = c.id WHERE note = 'FROM audit_log'"),
            ["customers", "orders"]
        );
        assert_eq!(
            tables("-- svc_audit\nSELECT 1 FROM /* audit_log */ events"),
            ["events"]
        );
        assert_eq!(
            tables("WITH recent AS (SELECT * FROM events) SELECT * FROM recent UNION ALL SELECT * FROM \"Events2\""),
            ["Events2", "events"]
        );
        assert_eq!(
            tables("SELECT * FROM (SELECT id FROM a) x WHERE id IN (SELECT id FROM b)"),
            ["a", "b"]
        );
        assert_eq!(tables("EXPLAIN SELECT * FROM a"), ["a"]);
        assert!(tables("SELECT 1 + 1").is_empty());
    }

    #[test]
    fn anything_but_one_query_is_refused_with_what_is_allowed() {
        for (sql, kind) in [
            ("DROP TABLE orders", "DROP"),
            ("insert into orders values (1)", "INSERT"),
            (
                "  CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '/etc'",
                "CREATE",
            ),
            ("COPY orders TO '/tmp/x.parquet'", "COPY"),
            ("SET datafusion.execution.batch_size = 1", "SET"),
            ("EXPLAIN ANALYZE INSERT INTO orders VALUES (1)", "INSERT"),
        ] {
            let Refused(msg) = parse_read_only(sql).unwrap_err();
            assert!(msg.starts_with(kind), "{sql}: {msg}");
            assert!(msg.contains("Only one read-only query"), "{msg}");
        }
        let Refused(msg) = parse_read_only("SELECT 1; SELECT 2").unwrap_err();
        assert!(msg.starts_with("2 statements"), "{msg}");
        let Refused(msg) = parse_read_only("   ").unwrap_err();
        assert!(msg.starts_with("Empty SQL"), "{msg}");
        let Refused(msg) = parse_read_only("SELEC 1").unwrap_err();
        assert!(msg.starts_with("SQL syntax error"), "{msg}");
    }
}
