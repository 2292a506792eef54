//! What a query request may run: one read-only statement, and the tables it names.
//!
//! The SQL is parsed (with the parser DataFusion uses) instead of searched for keywords, so
//! a table name inside a string literal or a comment is not a reference, and a write hidden
//! behind odd spacing or casing is still a write.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use svc_plugin_api::datafusion::sql::parser::{DFParser, Statement as DfStatement};
use svc_plugin_api::datafusion::sql::sqlparser::ast::{
    Expr, ObjectName, Query, Statement, Visit, Visitor,
};

/// Why a statement is refused (a 400 with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Deepest expression nesting accepted. A chain `a + b + c …` or `x = 1 OR x = 2 …` nests
/// one level per term; parentheses and subqueries are bounded tighter by the parser's own
/// recursion limit. Statements are parsed and planned on the query runtime's threads, whose
/// stack is sized for this depth (see `runtime::STACK_BYTES`; tested together).
pub const MAX_EXPR_DEPTH: usize = 1_000;

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
    if query.visit(&mut names).is_break() {
        return Err(Refused(format!(
            "The statement nests expressions more than {MAX_EXPR_DEPTH} levels deep (a long \
             chain of operators counts one level per term); use IN (...) for long lists of \
             alternatives, or split the expression"
        )));
    }
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

/// Collects relation names and CTE names, and stops at [`MAX_EXPR_DEPTH`].
#[derive(Default)]
struct Names {
    relations: BTreeSet<String>,
    ctes: BTreeSet<String>,
    depth: usize,
}

impl Visitor for Names {
    type Break = ();

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.depth += 1;
        if self.depth > MAX_EXPR_DEPTH {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

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

    /// Generated statements that hide internal ids and backing-table names in literals,
    /// comments and quoted aliases: never a panic, never a reference found in text, and every
    /// real reference found.
    #[test]
    fn fuzzed_statements_find_exactly_the_real_references() {
        let hidden = [
            "svc_audit",
            "audit_log",
            "svc_sessions",
            "usage_events",
            "svc_telemetry",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for i in 0..3000 {
            let word = hidden[next(hidden.len())];
            let real = ["orders", "events", "svc_audit", "\"Mixed Case\""][next(4)];
            let hide = match next(6) {
                0 => format!("'{word}'"),
                1 => format!("'it''s {word}; DROP TABLE x'"),
                2 => format!("1 -- {word}\n"),
                3 => format!("1 /* {word} */"),
                4 => format!("'{{}}' || '{word}'"),
                _ => format!("'{}'", "x".repeat(next(40))),
            };
            let sql = match next(4) {
                0 => format!("SELECT {hide} AS c FROM {real}"),
                1 => format!("SELECT * FROM {real} WHERE name = {hide}"),
                2 => format!("WITH {word} AS (SELECT * FROM {real}) SELECT {hide} FROM {word}"),
                _ => format!("/* {word} */ SELECT count(*) FROM {real} t WHERE t.x <> {hide}"),
            };
            let found = match parse_read_only(&sql) {
                Ok(q) => q.tables,
                Err(Refused(msg)) => panic!("case {i}: {sql}: {msg}"),
            };
            let expected = real.trim_matches('"');
            if sql.starts_with("WITH") && word == expected {
                // A CTE shadowing the table it reads: no table is registered, so the engine
                // refuses the statement (fails closed).
                assert!(found.is_empty(), "case {i}: {sql}");
            } else {
                assert_eq!(found, [expected], "case {i}: {sql}");
            }
        }
        // Garbage never panics.
        let alphabet: Vec<char> = "SELECT FROM;'\"-/*()svc_audit\n é日".chars().collect();
        for _ in 0..2000 {
            let len = next(60);
            let text: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            let _ = parse_read_only(&text);
        }
    }
}
