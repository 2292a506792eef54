//! Scans: one table, validated columns, `where`, `order_by` and row limit, rendered into
//! one SELECT the engine runs like any query — and the size guard on their estimates.

use serde_json::json;
use svc_core::{Error, ErrorKind, Result};
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::common::tree_node::{Transformed, TreeNode};
use svc_plugin_api::datafusion::common::{Column, DFSchema};
use svc_plugin_api::datafusion::logical_expr::Expr;
use svc_plugin_api::datafusion::prelude::SessionContext;
use svc_plugin_api::{ErrorKind as DriverErrorKind, ScanEstimate, ScanSpec};
use svc_store::registry::RegistryRow;

use super::engine::Engine;
use super::predicate;

/// What the caller asked for.
#[derive(Debug, Clone, Copy)]
pub struct ScanAsk<'a> {
    /// Registry id.
    pub table_id: &'a str,
    /// Columns; None means all.
    pub select: Option<&'a [String]>,
    /// Predicate text.
    pub predicate: Option<&'a str>,
    /// `column [ASC|DESC]` entries.
    pub order_by: Option<&'a [String]>,
    /// Rows wanted.
    pub limit: Option<u64>,
}

/// A scan whose every part has been checked against the table.
#[derive(Debug, Clone)]
pub struct ValidScan {
    table_id: String,
    columns: Option<Vec<String>>,
    predicate: Option<String>,
    order_by: Vec<(String, bool)>,
    /// Rows returned at most.
    pub limit: usize,
    /// Whether the server's cap lowered (or set) the limit.
    pub capped: bool,
}

impl ValidScan {
    /// Checks `ask` against the table's columns; `max_rows` is the server's cap.
    pub fn new(ask: ScanAsk<'_>, table_columns: &[String], max_rows: usize) -> Result<Self> {
        let columns = match ask.select {
            None => None,
            Some([]) => {
                return Err(Error::bad_request(
                    "`select` is empty; omit it to read every column",
                ))
            }
            Some(select) => {
                let unknown: Vec<&str> = select
                    .iter()
                    .filter(|c| !table_columns.contains(c))
                    .map(String::as_str)
                    .collect();
                if !unknown.is_empty() {
                    return Err(unknown_columns(ask.table_id, &unknown, table_columns));
                }
                Some(select.to_vec())
            }
        };
        let predicate = ask
            .predicate
            .map(|text| predicate::validate(text, ask.table_id, table_columns))
            .transpose()
            .map_err(|e| {
                Error::coded(
                    ErrorKind::BadRequest,
                    "invalid_where",
                    format!("`where` refused: {}", e.message),
                    json!({"reason": e.reason, "part": e.part}),
                )
            })?;
        let order_by = ask
            .order_by
            .unwrap_or_default()
            .iter()
            .map(|entry| order_entry(ask.table_id, entry, table_columns))
            .collect::<Result<Vec<_>>>()?;
        let wanted = ask
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        Ok(Self {
            table_id: ask.table_id.to_owned(),
            columns,
            predicate,
            order_by,
            limit: wanted.min(max_rows),
            capped: wanted > max_rows,
        })
    }

    /// The SELECT the engine runs (the row limit is the engine's).
    pub fn sql(&self) -> String {
        let columns = self.columns.as_ref().map_or_else(
            || "*".to_owned(),
            |c| c.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
        );
        let mut sql = format!("SELECT {columns} FROM {}", quote(&self.table_id));
        if let Some(p) = &self.predicate {
            sql.push_str(&format!(" WHERE {p}"));
        }
        if !self.order_by.is_empty() {
            let keys: Vec<String> = self
                .order_by
                .iter()
                .map(|(c, desc)| format!("{} {}", quote(c), if *desc { "DESC" } else { "ASC" }))
                .collect();
            sql.push_str(&format!(" ORDER BY {}", keys.join(", ")));
        }
        sql
    }

    /// The scan as drivers see it, for estimates: the predicate planned by DataFusion over
    /// the table's schema, with bare column names.
    pub fn spec(&self, schema: &SchemaRef) -> Result<ScanSpec> {
        let filter = match &self.predicate {
            None => None,
            Some(p) => {
                let df_schema = DFSchema::try_from_qualified_schema(self.table_id.as_str(), schema)
                    .map_err(Error::internal)?;
                let expr = SessionContext::new()
                    .parse_sql_expr(p, &df_schema)
                    .map_err(|e| Error::bad_request(format!("`where` refused: {e}")))?;
                Some(unqualified(expr)?)
            }
        };
        Ok(ScanSpec {
            columns: self.columns.clone(),
            filter,
            limit: (self.limit != usize::MAX).then_some(self.limit as u64),
        })
    }
}

fn unqualified(expr: Expr) -> Result<Expr> {
    expr.transform(|e| {
        Ok(match e {
            Expr::Column(c) if c.relation.is_some() => {
                Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))
            }
            other => Transformed::no(other),
        })
    })
    .map(|t| t.data)
    .map_err(Error::internal)
}

/// `"name"` with inner quotes doubled.
pub fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

fn unknown_columns(table: &str, unknown: &[&str], columns: &[String]) -> Error {
    Error::coded(
        ErrorKind::BadRequest,
        "unknown_column",
        format!(
            "'{table}' has no column(s) {}; its columns are: {}",
            unknown.join(", "),
            columns.join(", ")
        ),
        json!({"columns": unknown, "available": columns}),
    )
}

fn order_entry(table: &str, entry: &str, columns: &[String]) -> Result<(String, bool)> {
    let words: Vec<&str> = entry.split_whitespace().collect();
    let (name, desc) = match words.as_slice() {
        [c] => (*c, false),
        [c, d] if d.eq_ignore_ascii_case("asc") => (*c, false),
        [c, d] if d.eq_ignore_ascii_case("desc") => (*c, true),
        _ => {
            return Err(Error::bad_request(format!(
                "order_by entry '{entry}' is not `<column>` or `<column> ASC|DESC`"
            )))
        }
    };
    let name = name
        .strip_prefix('"')
        .and_then(|n| n.strip_suffix('"'))
        .unwrap_or(name);
    if !columns.iter().any(|c| c == name) {
        return Err(unknown_columns(table, &[name], columns));
    }
    Ok((name.to_owned(), desc))
}

impl Engine {
    /// The driver's estimate of `spec` over `row`; None when the source cannot estimate.
    pub async fn estimate(
        &self,
        row: &RegistryRow,
        spec: &ScanSpec,
    ) -> Result<Option<ScanEstimate>> {
        let Some(driver) = self.drivers().get(&row.source_type) else {
            return Ok(None);
        };
        match driver.estimate(&row.table_ref(), spec).await {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.kind == DriverErrorKind::Unsupported => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the metadata cache knows the table as a VIEW or MATERIALIZED VIEW.
    pub async fn is_view(&self, table_id: &str) -> bool {
        self.store()
            .all_metadata()
            .await
            .ok()
            .and_then(|m| m.get(table_id)?.metadata.entity_type.clone())
            .is_some_and(|t| t == "VIEW" || t == "MATERIALIZED VIEW")
    }

    /// The remote size guard for a read of these rows, each with what it reads: estimates the
    /// remote ones (local data needs no guard) and refuses the read when they pass a guard.
    pub async fn guard_remote(&self, reads: &[(&RegistryRow, ScanSpec)]) -> Result<()> {
        let mut found = Vec::new();
        for (row, spec) in reads {
            if !row.query_mode.is_remote() {
                continue;
            }
            if let Some(e) = self.estimate(row, spec).await? {
                found.push((row.id.as_str(), self.is_view(&row.id).await, e));
            }
        }
        let guarded: Vec<Guarded<'_>> = found
            .iter()
            .map(|(id, view, e)| Guarded {
                table_id: id,
                is_view: *view,
                estimate: e,
            })
            .collect();
        check_guard(&guarded)
    }
}

/// One table a guarded read touches.
#[derive(Debug, Clone)]
pub struct Guarded<'a> {
    /// Registry id.
    pub table_id: &'a str,
    /// Whether the metadata cache knows it as a VIEW or MATERIALIZED VIEW.
    pub is_view: bool,
    /// The driver's estimate.
    pub estimate: &'a ScanEstimate,
}

/// The remote size guard: refuses a read whose estimated bytes pass a source's guard, with
/// error kind `remote_scan_too_large`.
pub fn check_guard(tables: &[Guarded<'_>]) -> Result<()> {
    let Some(limit) = tables.iter().filter_map(|t| t.estimate.guard_bytes).min() else {
        return Ok(());
    };
    let total: u64 = tables.iter().map(|t| t.estimate.bytes).sum();
    svc_metrics::query::remote_estimate(total, total > limit);
    if total <= limit {
        return Ok(());
    }
    let ids: Vec<&str> = tables.iter().map(|t| t.table_id).collect();
    let views: Vec<&str> = tables
        .iter()
        .filter(|t| t.is_view)
        .map(|t| t.table_id)
        .collect();
    let first = ids.first().copied().unwrap_or("<table>");
    let suggestion = if views.is_empty() {
        format!(
            "Use `svc snapshot create {first} --select <cols> --where <predicate> --estimate` to materialize a filtered subset, then query the snapshot locally."
        )
    } else {
        format!(
            "Target(s) {} are VIEW or MATERIALIZED VIEW. The warehouse does not push `LIMIT` into the view body — `SELECT * FROM <view> LIMIT 1` still runs the full underlying scan. Use `svc snapshot create {} --select <cols> --where <predicate>` to bound the scan, then query the snapshot locally.",
            views.join(", "),
            views[0]
        )
    };
    Err(Error::coded(
        ErrorKind::BadRequest,
        "remote_scan_too_large",
        format!("This read would scan {total} bytes, above the {limit}-byte guard. {suggestion}"),
        json!({
            "scan_bytes": total,
            "limit_bytes": limit,
            "tables": ids,
            "view_targets": views,
            "suggestion": suggestion,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols() -> Vec<String> {
        ["id", "amount", "Name \"x\""]
            .into_iter()
            .map(String::from)
            .collect()
    }

    fn ask<'a>(select: Option<&'a [String]>, order: Option<&'a [String]>) -> ScanAsk<'a> {
        ScanAsk {
            table_id: "orders",
            select,
            predicate: Some("amount > 1 -- and drop"),
            order_by: order,
            limit: Some(50),
        }
    }

    #[test]
    fn scans_render_quoted_validated_sql() {
        let select = vec!["id".to_string(), "Name \"x\"".to_string()];
        let order = vec!["amount DESC".to_string(), "id".to_string()];
        let scan = ValidScan::new(ask(Some(&select), Some(&order)), &cols(), 10).unwrap();
        assert_eq!(
            scan.sql(),
            "SELECT \"id\", \"Name \"\"x\"\"\" FROM \"orders\" WHERE amount > 1 ORDER BY \"amount\" DESC, \"id\" ASC"
        );
        assert_eq!((scan.limit, scan.capped), (10, true));
        let uncapped = ValidScan::new(ask(None, None), &cols(), 100).unwrap();
        assert_eq!((uncapped.limit, uncapped.capped), (50, false));
    }

    #[test]
    fn unknown_parts_are_named() {
        let select = vec!["id".to_string(), "nope".to_string()];
        let err = ValidScan::new(ask(Some(&select), None), &cols(), 10).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let order = vec!["amount sideways".to_string()];
        assert!(ValidScan::new(ask(None, Some(&order)), &cols(), 10).is_err());
        let mut bad = ask(None, None);
        bad.predicate = Some("id = 1; DROP TABLE orders");
        let err = ValidScan::new(bad, &cols(), 10).unwrap_err();
        assert_eq!(err.body()["detail"]["error"], "invalid_where");
        assert_eq!(err.body()["detail"]["details"]["reason"], "multi_statement");
    }

    fn est(bytes: u64, guard: Option<u64>) -> ScanEstimate {
        ScanEstimate {
            bytes,
            rows: None,
            exact: false,
            guard_bytes: guard,
        }
    }

    #[test]
    fn the_guard_names_views_and_suggests_snapshots() {
        let small = est(10, Some(100));
        assert!(check_guard(&[Guarded {
            table_id: "t",
            is_view: false,
            estimate: &small
        }])
        .is_ok());
        let local = est(1 << 40, None);
        assert!(check_guard(&[Guarded {
            table_id: "t",
            is_view: false,
            estimate: &local
        }])
        .is_ok());

        let big = est(500, Some(100));
        let err = check_guard(&[Guarded {
            table_id: "events",
            is_view: false,
            estimate: &big,
        }])
        .unwrap_err();
        let d = &err.body()["detail"];
        assert_eq!(d["error"], "remote_scan_too_large");
        assert_eq!(
            (
                d["details"]["scan_bytes"].as_u64(),
                d["details"]["limit_bytes"].as_u64()
            ),
            (Some(500), Some(100))
        );
        assert_eq!(d["details"]["view_targets"], json!([]));
        assert!(d["details"]["suggestion"]
            .as_str()
            .unwrap()
            .contains("--estimate"));

        let err = check_guard(&[Guarded {
            table_id: "v_daily",
            is_view: true,
            estimate: &big,
        }])
        .unwrap_err();
        let d = &err.body()["detail"]["details"];
        assert_eq!(d["view_targets"], json!(["v_daily"]));
        let s = d["suggestion"].as_str().unwrap();
        assert!(s.contains("VIEW") && s.contains("LIMIT"), "{s}");
    }
}
