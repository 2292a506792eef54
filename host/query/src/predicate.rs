//! The scan `where` validator: one expression over one table's columns, from an allow-list.
//!
//! The text is parsed as a single SQL expression (sqlparser, the parser DataFusion uses);
//! anything after it (`; DROP …`) is refused. Every node is checked against the allow-list
//! below, and what the scan runs is the validated tree rendered back to SQL — never the raw
//! text, so comments and trailing fragments cannot reach the engine.
//!
//! Allowed: comparisons, `AND`/`OR`/`NOT`, arithmetic and `||`, `IN (list)`, `BETWEEN`,
//! `LIKE`/`ILIKE`, `IS [NOT] NULL|TRUE|FALSE|DISTINCT FROM`, `CASE`, `CAST`/`TRY_CAST`/`::`,
//! `EXTRACT`, `SUBSTRING`, `TRIM`, `POSITION`, `CEIL`/`FLOOR`, typed literals
//! (`DATE '2026-01-01'`), intervals, number/string/boolean/NULL literals, the table's columns
//! (bare or qualified by the table id), and the functions of [`FUNCTIONS`].

use std::cell::Cell;

use svc_plugin_api::datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr,
    FunctionArguments, ObjectNamePart, UnaryOperator, Value,
};
use svc_plugin_api::datafusion::sql::sqlparser::dialect::GenericDialect;
use svc_plugin_api::datafusion::sql::sqlparser::parser::Parser;
use svc_plugin_api::datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// Longest `where` accepted, in bytes.
pub const MAX_WHERE_BYTES: usize = 16 * 1024;
/// Most tokens (names, literals, operators, parentheses) a `where` may hold; the syntax tree
/// has at most about as many nodes, so this bounds the work of every later step.
pub const MAX_WHERE_TOKENS: usize = 2_000;
/// Deepest nesting of a `where` (a chain `a OR b OR …` nests one level per term): the checks
/// recurse this deep on a request worker's stack.
pub const MAX_WHERE_DEPTH: usize = 128;

/// Scalar functions a `where` may call (lower case; DataFusion names).
pub const FUNCTIONS: &[&str] = &[
    // date and time
    "current_date",
    "current_time",
    "current_timestamp",
    "now",
    "date_trunc",
    "date_part",
    "date_bin",
    "to_date",
    "to_timestamp",
    "to_timestamp_seconds",
    "to_timestamp_millis",
    "make_date",
    "to_char",
    "to_unixtime",
    // strings
    "concat",
    "concat_ws",
    "length",
    "char_length",
    "character_length",
    "lower",
    "upper",
    "substr",
    "trim",
    "btrim",
    "ltrim",
    "rtrim",
    "replace",
    "starts_with",
    "ends_with",
    "strpos",
    "left",
    "right",
    "lpad",
    "rpad",
    "split_part",
    "regexp_like",
    "regexp_replace",
    "md5",
    // math
    "abs",
    "ceil",
    "floor",
    "round",
    "trunc",
    "power",
    "sqrt",
    "ln",
    "log",
    "log10",
    "log2",
    "exp",
    "signum",
    "greatest",
    "least",
    "isnan",
    // null handling
    "coalesce",
    "nullif",
    "nvl",
    "nvl2",
];

/// Why a `where` was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhereError {
    /// `parse_error`, `multi_statement`, `nested_select`, `cross_table_reference`,
    /// `unknown_function`, `unknown_column`, `disallowed_node`, `too_large` or `too_deep`.
    pub reason: &'static str,
    /// What to fix.
    pub message: String,
    /// The offending part, as written (shortened).
    pub part: Option<String>,
}

impl WhereError {
    fn new(reason: &'static str, message: impl Into<String>, part: Option<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            part,
        }
    }

    fn at(reason: &'static str, message: impl Into<String>, node: &Expr) -> Self {
        Self::new(reason, message, Some(shorten(&node.to_string())))
    }
}

fn shorten(s: &str) -> String {
    const MAX: usize = 120;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

/// Parses, checks and re-renders `text` as a predicate over `table`'s `columns`.
pub fn validate(text: &str, table: &str, columns: &[String]) -> Result<String, WhereError> {
    if text.trim().is_empty() {
        return Err(WhereError::new(
            "parse_error",
            "`where` is empty; omit it to read every row",
            None,
        ));
    }
    if text.len() > MAX_WHERE_BYTES {
        return Err(WhereError::new(
            "too_large",
            format!(
                "`where` is {} bytes; the most accepted is {MAX_WHERE_BYTES} (use IN (...) for long lists, or a query)",
                text.len()
            ),
            None,
        ));
    }
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text).tokenize().map_err(|e| {
        WhereError::new("parse_error", format!("`where` does not parse: {e}"), None)
    })?;
    let significant = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .count();
    if significant > MAX_WHERE_TOKENS {
        return Err(WhereError::new(
            "too_large",
            format!(
                "`where` has {significant} tokens; the most accepted is {MAX_WHERE_TOKENS} (use IN (...) for long lists, or a query)"
            ),
            None,
        ));
    }
    let mut parser = Parser::new(&dialect).with_tokens(tokens);
    let expr = parser.parse_expr().map_err(|e| {
        WhereError::new("parse_error", format!("`where` does not parse: {e}"), None)
    })?;
    let rest = parser.peek_token();
    match rest.token {
        Token::EOF => {}
        Token::SemiColon => {
            return Err(WhereError::new(
                "multi_statement",
                "`where` is one expression; `;` and anything after it are not allowed",
                Some(";".into()),
            ))
        }
        other => {
            return Err(WhereError::new(
                "parse_error",
                format!("`where` must be one expression; unexpected `{other}` after it"),
                Some(other.to_string()),
            ))
        }
    }
    Check {
        table,
        columns,
        depth: Cell::new(0),
    }
    .expr(&expr)?;
    Ok(expr.to_string())
}

struct Check<'a> {
    table: &'a str,
    columns: &'a [String],
    depth: Cell<usize>,
}

impl Check<'_> {
    fn all<'e>(&self, exprs: impl IntoIterator<Item = &'e Expr>) -> Result<(), WhereError> {
        exprs.into_iter().try_for_each(|e| self.expr(e))
    }

    fn expr(&self, e: &Expr) -> Result<(), WhereError> {
        let depth = self.depth.get() + 1;
        if depth > MAX_WHERE_DEPTH {
            return Err(WhereError::new(
                "too_deep",
                format!(
                    "`where` nests more than {MAX_WHERE_DEPTH} levels deep (a chain of operators counts one level per term); use IN (...) for long lists of alternatives"
                ),
                None,
            ));
        }
        self.depth.set(depth);
        let checked = self.node(e);
        self.depth.set(depth - 1);
        checked
    }

    fn node(&self, e: &Expr) -> Result<(), WhereError> {
        match e {
            Expr::Identifier(ident) => self.column(&ident.value, e),
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [t, c] if t.value == self.table => self.column(&c.value, e),
                _ => Err(WhereError::at(
                    "cross_table_reference",
                    format!(
                        "`where` may name only columns of '{}' (bare, or as {}.<column>)",
                        self.table, self.table
                    ),
                    e,
                )),
            },
            Expr::Value(v) => match &v.value {
                Value::Number(..) | Value::SingleQuotedString(_) | Value::Boolean(_) | Value::Null => {
                    Ok(())
                }
                _ => Err(WhereError::at(
                    "disallowed_node",
                    "only number, 'string', TRUE/FALSE and NULL literals are allowed",
                    e,
                )),
            },
            Expr::TypedString(_) => Ok(()),
            Expr::Interval(i) => self.expr(&i.value),
            Expr::Nested(inner) => self.expr(inner),
            Expr::BinaryOp { left, op, right } => {
                use BinaryOperator as B;
                match op {
                    B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo | B::StringConcat
                    | B::Gt | B::Lt | B::GtEq | B::LtEq | B::Eq | B::NotEq | B::And | B::Or => {
                        self.expr(left)?;
                        self.expr(right)
                    }
                    _ => Err(WhereError::at(
                        "disallowed_node",
                        format!("operator `{op}` is not allowed"),
                        e,
                    )),
                }
            }
            Expr::UnaryOp { op, expr } => match op {
                UnaryOperator::Not | UnaryOperator::Minus | UnaryOperator::Plus => {
                    self.expr(expr)
                }
                _ => Err(WhereError::at(
                    "disallowed_node",
                    format!("operator `{op}` is not allowed"),
                    e,
                )),
            },
            Expr::IsNull(x)
            | Expr::IsNotNull(x)
            | Expr::IsTrue(x)
            | Expr::IsNotTrue(x)
            | Expr::IsFalse(x)
            | Expr::IsNotFalse(x) => self.expr(x),
            Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => {
                self.expr(a)?;
                self.expr(b)
            }
            Expr::InList { expr, list, .. } => {
                self.expr(expr)?;
                self.all(list)
            }
            Expr::Between {
                expr, low, high, ..
            } => self.all([expr.as_ref(), low.as_ref(), high.as_ref()]),
            Expr::Like {
                any: false,
                expr,
                pattern,
                ..
            }
            | Expr::ILike {
                any: false,
                expr,
                pattern,
                ..
            } => {
                self.expr(expr)?;
                self.expr(pattern)
            }
            Expr::Cast {
                kind: CastKind::Cast | CastKind::TryCast | CastKind::DoubleColon,
                expr,
                array: false,
                format: None,
                ..
            } => {
                self.expr(expr)
            }
            Expr::Extract { expr, .. } | Expr::Ceil { expr, .. } | Expr::Floor { expr, .. } => {
                self.expr(expr)
            }
            Expr::Position { expr, r#in } => {
                self.expr(expr)?;
                self.expr(r#in)
            }
            Expr::Substring {
                expr,
                substring_from,
                substring_for,
                ..
            } => {
                self.expr(expr)?;
                self.all(substring_from.iter().map(|b| b.as_ref()))?;
                self.all(substring_for.iter().map(|b| b.as_ref()))
            }
            Expr::Trim {
                expr,
                trim_what,
                trim_characters,
                ..
            } => {
                self.expr(expr)?;
                self.all(trim_what.iter().map(|b| b.as_ref()))?;
                self.all(trim_characters.iter().flatten())
            }
            Expr::Case {
                operand,
                conditions,
                else_result,
                ..
            } => {
                self.all(operand.iter().map(|b| b.as_ref()))?;
                for when in conditions {
                    self.expr(&when.condition)?;
                    self.expr(&when.result)?;
                }
                self.all(else_result.iter().map(|b| b.as_ref()))
            }
            Expr::Function(f) => self.function(f, e),
            Expr::Subquery(_)
            | Expr::Exists { .. }
            | Expr::InSubquery { .. }
            | Expr::AnyOp { .. }
            | Expr::AllOp { .. } => Err(WhereError::at(
                "nested_select",
                "subqueries are not allowed in `where`",
                e,
            )),
            _ => Err(WhereError::at(
                "disallowed_node",
                "this kind of expression is not allowed in `where` (see the scan documentation for what is)",
                e,
            )),
        }
    }

    fn column(&self, name: &str, node: &Expr) -> Result<(), WhereError> {
        if self.columns.iter().any(|c| c == name) {
            return Ok(());
        }
        let hint = match self.columns.iter().find(|c| c.eq_ignore_ascii_case(name)) {
            Some(c) => format!("; did you mean \"{c}\"? (names are case-sensitive)"),
            None => format!("; columns: {}", self.columns.join(", ")),
        };
        Err(WhereError::at(
            "unknown_column",
            format!("'{}' has no column '{name}'{hint}", self.table),
            node,
        ))
    }

    fn function(
        &self,
        f: &svc_plugin_api::datafusion::sql::sqlparser::ast::Function,
        node: &Expr,
    ) -> Result<(), WhereError> {
        let name = match f.name.0.as_slice() {
            [ObjectNamePart::Identifier(i)] => i.value.to_ascii_lowercase(),
            _ => String::new(),
        };
        if !FUNCTIONS.contains(&name.as_str()) {
            return Err(WhereError::at(
                "unknown_function",
                format!(
                    "function '{}' is not allowed in `where`; allowed: {}",
                    f.name,
                    FUNCTIONS.join(", ")
                ),
                node,
            ));
        }
        let plain = !f.uses_odbc_syntax
            && matches!(f.parameters, FunctionArguments::None)
            && f.filter.is_none()
            && f.null_treatment.is_none()
            && f.over.is_none()
            && f.within_group.is_empty();
        let args = match &f.args {
            FunctionArguments::None if plain => return Ok(()),
            FunctionArguments::List(list)
                if plain
                    && list.clauses.is_empty()
                    && !matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct)) =>
            {
                &list.args
            }
            _ => {
                return Err(WhereError::at(
                    "disallowed_node",
                    "functions take plain arguments only (no DISTINCT, FILTER, OVER or subqueries)",
                    node,
                ))
            }
        };
        for arg in args {
            match arg {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => self.expr(x)?,
                _ => {
                    return Err(WhereError::at(
                        "disallowed_node",
                        "functions take plain positional arguments only",
                        node,
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols() -> Vec<String> {
        ["id", "amount", "status", "created_at", "Region"]
            .into_iter()
            .map(String::from)
            .collect()
    }

    fn ok(text: &str) -> String {
        validate(text, "orders", &cols()).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    fn reason(text: &str) -> &'static str {
        validate(text, "orders", &cols()).unwrap_err().reason
    }

    #[test]
    fn the_allow_list_passes_and_is_re_rendered() {
        assert_eq!(
            ok("amount > 10 AND status = 'paid'"),
            "amount > 10 AND status = 'paid'"
        );
        assert_eq!(ok("id IN (1, 2, 3) -- trailing comment"), "id IN (1, 2, 3)");
        assert_eq!(
            ok("/* c */ amount BETWEEN 1 AND 5"),
            "amount BETWEEN 1 AND 5"
        );
        ok("status LIKE 'p%' OR status ILIKE 'X%' OR status IS NULL");
        ok("NOT (amount < 0) AND orders.id <> 7");
        ok("created_at >= DATE '2026-01-01' AND created_at < now() - INTERVAL '1 day'");
        ok("lower(status) = 'paid' AND CAST(amount AS INT) % 2 = 0");
        ok("CASE WHEN amount > 5 THEN true ELSE false END");
        ok("coalesce(amount, 0) + abs(id) > 3 AND \"Region\" = 'EU'");
        ok("date_trunc('month', created_at) = TIMESTAMP '2026-01-01 00:00:00'");
    }

    #[test]
    fn injections_and_foreign_nodes_are_refused() {
        assert_eq!(reason("1=1; DROP TABLE orders"), "multi_statement");
        assert_eq!(
            reason("id = 1 UNION SELECT * FROM svc_audit"),
            "parse_error"
        );
        assert_eq!(reason("id IN (SELECT id FROM other)"), "nested_select");
        assert_eq!(reason("EXISTS (SELECT 1)"), "nested_select");
        assert_eq!(reason("(SELECT max(id) FROM orders) > 1"), "nested_select");
        assert_eq!(reason("other.id = 1"), "cross_table_reference");
        assert_eq!(reason("a.b.c = 1"), "cross_table_reference");
        assert_eq!(reason("nope = 1"), "unknown_column");
        assert_eq!(reason("region = 'EU'"), "unknown_column");
        assert_eq!(
            reason("read_parquet('/etc/passwd') IS NULL"),
            "unknown_function"
        );
        assert_eq!(reason("sum(amount) > 1"), "unknown_function");
        assert_eq!(reason("lower(DISTINCT status) = 'x'"), "disallowed_node");
        assert_eq!(reason("$1 = id"), "disallowed_node");
        assert_eq!(reason("   "), "parse_error");
        assert_eq!(reason("id = "), "parse_error");
        let e = validate("region = 'EU'", "orders", &cols()).unwrap_err();
        assert!(
            e.message.contains("did you mean \"Region\""),
            "{}",
            e.message
        );
        assert_eq!(e.part.as_deref(), Some("region"));
    }

    /// Generated predicates: no panic, and whatever is accepted re-renders to text that is
    /// accepted again unchanged and embeds as exactly one read-only statement over `orders`.
    #[test]
    fn fuzzed_predicates_never_panic_and_never_let_anything_through() {
        let pieces = [
            "id",
            "amount",
            "status",
            "orders.id",
            "x.id",
            "'a'",
            "'it''s'",
            "1",
            "-2.5",
            "NULL",
            "TRUE",
            "=",
            "<>",
            "<",
            ">=",
            "+",
            "*",
            "||",
            "AND",
            "OR",
            "NOT",
            "IN",
            "(",
            ")",
            ",",
            "BETWEEN",
            "LIKE",
            "IS",
            ";",
            "--",
            "/*",
            "*/",
            "SELECT",
            "FROM",
            "svc_audit",
            "DROP TABLE orders",
            "UNION",
            "lower(",
            "sum(",
            "read_parquet(",
            "EXISTS",
            "CASE",
            "WHEN",
            "THEN",
            "END",
            "CAST(",
            "AS INT",
            "\"",
            "é",
            "日本",
            "\\",
            "$1",
            "?",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut accepted = 0;
        for _ in 0..4000 {
            let n = 1 + (next() % 9) as usize;
            let text: Vec<&str> = (0..n)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            let text = text.join(" ");
            let Ok(rendered) = validate(&text, "orders", &cols()) else {
                continue;
            };
            accepted += 1;
            assert_eq!(
                validate(&rendered, "orders", &cols()).as_deref(),
                Ok(rendered.as_str()),
                "not stable: {text}"
            );
            let sql = format!("SELECT * FROM \"orders\" WHERE {rendered}");
            let parsed = super::super::statement::parse_read_only(&sql)
                .unwrap_or_else(|e| panic!("{text} → {sql}: {}", e.0));
            assert_eq!(parsed.tables, ["orders"], "{text} → {sql}");
        }
        assert!(
            accepted > 50,
            "the generator should produce valid predicates too ({accepted})"
        );
    }

    #[test]
    fn size_depth_and_token_limits_refuse_before_any_deep_work() {
        let chain = |n: usize| vec!["amount = 1"; n].join(" OR ");
        // Within every limit: accepted and re-rendered.
        assert!(validate(&chain(100), "orders", &cols()).is_ok());
        // Deeper than the checks recurse.
        assert_eq!(reason(&chain(MAX_WHERE_DEPTH + 1)), "too_deep");
        // Too many tokens, under the byte cap.
        let many = (0..1100)
            .map(|i| format!("{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(reason(&format!("amount IN ({many})")), "too_large");
        // The byte cap comes first: a 9 MiB OR chain is refused without being parsed.
        let huge = chain(900_000);
        assert!(huge.len() > 9 << 20);
        let e = validate(&huge, "orders", &cols()).unwrap_err();
        assert_eq!(e.reason, "too_large");
        assert!(e.message.contains("16384"), "{}", e.message);
    }
}
