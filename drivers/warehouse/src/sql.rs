//! Rendering DataFusion expressions as warehouse (GoogleSQL) text, for filter push-down.
//!
//! Only forms whose meaning is the same on both sides are rendered: comparisons, AND/OR/NOT,
//! IS [NOT] NULL, IN lists and BETWEEN over plain columns and typed literals. Everything else
//! answers `None` and stays with DataFusion. Literals are written by this module alone, with
//! escaping, so user text never reaches the warehouse as SQL.

use svc_plugin_api::arrow::datatypes::Schema;
use svc_plugin_api::arrow::temporal_conversions::date32_to_datetime;
use svc_plugin_api::datafusion::common::ScalarValue;
use svc_plugin_api::datafusion::logical_expr::expr::InList;
use svc_plugin_api::datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

/// A column reference in backticks, or `None` when the name cannot be quoted safely.
pub fn column(name: &str) -> Option<String> {
    let safe = !name.is_empty()
        && !name
            .chars()
            .any(|c| c == '`' || c == '\\' || c.is_control());
    safe.then(|| format!("`{name}`"))
}

/// A filter as GoogleSQL, when it renders with the same meaning.
pub fn filter(e: &Expr, schema: &Schema) -> Option<String> {
    match e {
        Expr::Column(c) => {
            schema.field_with_name(&c.name).ok()?;
            column(&c.name)
        }
        Expr::Literal(v, _) => literal(v),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let op = match op {
                Operator::Eq => "=",
                Operator::NotEq => "!=",
                Operator::Lt => "<",
                Operator::LtEq => "<=",
                Operator::Gt => ">",
                Operator::GtEq => ">=",
                Operator::And => "AND",
                Operator::Or => "OR",
                _ => return None,
            };
            Some(format!(
                "({} {op} {})",
                filter(left, schema)?,
                filter(right, schema)?
            ))
        }
        Expr::Not(inner) => Some(format!("(NOT {})", filter(inner, schema)?)),
        Expr::IsNull(inner) => Some(format!("({} IS NULL)", filter(inner, schema)?)),
        Expr::IsNotNull(inner) => Some(format!("({} IS NOT NULL)", filter(inner, schema)?)),
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) if !list.is_empty() => {
            let items = list
                .iter()
                .map(|i| filter(i, schema))
                .collect::<Option<Vec<_>>>()?;
            let not = if *negated { "NOT " } else { "" };
            Some(format!(
                "({} {not}IN ({}))",
                filter(expr, schema)?,
                items.join(", ")
            ))
        }
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => {
            let not = if *negated { "NOT " } else { "" };
            Some(format!(
                "({} {not}BETWEEN {} AND {})",
                filter(expr, schema)?,
                filter(low, schema)?,
                filter(high, schema)?
            ))
        }
        _ => None,
    }
}

/// A typed literal. Nulls are not rendered: `x = NULL` must stay DataFusion's to judge.
fn literal(v: &ScalarValue) -> Option<String> {
    Some(match v {
        ScalarValue::Boolean(Some(b)) => if *b { "TRUE" } else { "FALSE" }.to_owned(),
        ScalarValue::Int8(Some(n)) => n.to_string(),
        ScalarValue::Int16(Some(n)) => n.to_string(),
        ScalarValue::Int32(Some(n)) => n.to_string(),
        ScalarValue::Int64(Some(n)) => n.to_string(),
        ScalarValue::UInt8(Some(n)) => n.to_string(),
        ScalarValue::UInt16(Some(n)) => n.to_string(),
        ScalarValue::UInt32(Some(n)) => n.to_string(),
        ScalarValue::UInt64(Some(n)) if i64::try_from(*n).is_ok() => n.to_string(),
        // Debug is the shortest text that reads back as the same f64; a cast keeps its type.
        ScalarValue::Float64(Some(f)) if f.is_finite() => format!("CAST('{f:?}' AS FLOAT64)"),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => string(s)?,
        ScalarValue::Date32(Some(d)) => {
            format!("DATE '{}'", date32_to_datetime(*d)?.date())
        }
        ScalarValue::TimestampMicrosecond(Some(us), _) => format!("TIMESTAMP_MICROS({us})"),
        _ => return None,
    })
}

/// A quoted string literal; control characters other than the common escapes are refused.
fn string(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => return None,
            c => out.push(c),
        }
    }
    out.push('\'');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_plugin_api::arrow::datatypes::{DataType, Field};
    use svc_plugin_api::datafusion::prelude::{col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ])
    }

    #[test]
    fn comparisons_and_logic_render() {
        let s = schema();
        let e = col("id").gt(lit(5i64)).and(col("name").eq(lit("a")));
        assert_eq!(filter(&e, &s).unwrap(), "((`id` > 5) AND (`name` = 'a'))");
        let e = col("name").in_list(vec![lit("x"), lit("y")], true);
        assert_eq!(filter(&e, &s).unwrap(), "(`name` NOT IN ('x', 'y'))");
        let e = col("id").between(lit(1i64), lit(3i64));
        assert_eq!(filter(&e, &s).unwrap(), "(`id` BETWEEN 1 AND 3)");
        let e = col("score").is_null().or(col("score").lt_eq(lit(0.5f64)));
        assert_eq!(
            filter(&e, &s).unwrap(),
            "((`score` IS NULL) OR (`score` <= CAST('0.5' AS FLOAT64)))"
        );
    }

    #[test]
    fn quotes_are_escaped_and_unknown_forms_refused() {
        let s = schema();
        let e = col("name").eq(lit("it's \\ here"));
        assert_eq!(filter(&e, &s).unwrap(), r"(`name` = 'it\'s \\ here')");
        assert!(filter(&col("name").like(lit("a%")), &s).is_none());
        assert!(filter(&col("missing").eq(lit(1i64)), &s).is_none());
        assert!(filter(&col("name").eq(lit("bell\u{7}")), &s).is_none());
        assert!(filter(&col("score").eq(lit(f64::NAN)), &s).is_none());
        assert!(column("a`b").is_none());
    }
}
