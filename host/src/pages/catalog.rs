//! `/catalog` and `/catalog/<table>`: what `GET /api/v2/catalog`, `/schema` and `/sample`
//! answer for the same user, audited the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use poem::web::{Data, Path};
use poem::{handler, Request, Response};
use serde_json::Value;
use svc_pages::views::{Bucket, CatalogEntry, CatalogPage, TablePage};
use svc_pages::Page;

use super::{pager, query, respond, session};
use crate::api::discovery::{CatalogRow, DiscoveryApi};
use crate::state::AppState;

fn api(state: &Arc<AppState>) -> DiscoveryApi {
    DiscoveryApi {
        state: state.clone(),
    }
}

/// `1234567` → `1.2 MB`.
pub(crate) fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn entry(row: &CatalogRow) -> CatalogEntry {
    let size = match (row.rows, row.size_bytes, row.rough_size_hint.as_deref()) {
        (Some(r), Some(b), _) => format!("{r} rows · {}", bytes(b)),
        (Some(r), None, _) => format!("{r} rows"),
        (None, Some(b), _) => bytes(b),
        (None, None, Some(hint)) => hint.replace('_', " "),
        _ => "—".into(),
    };
    let mode_hint = match row.query_mode.as_str() {
        "remote" => "Queried in the warehouse; use a snapshot for large reads",
        "materialized" => "A local copy refreshed on a schedule",
        "internal" => "System data; rows filtered per reader",
        _ => "Stored on this server",
    };
    CatalogEntry {
        id: row.id.clone(),
        description: row.description.clone(),
        mode: row.query_mode.clone(),
        mode_hint: mode_hint.into(),
        size,
        freshness: row.metadata_freshness.replace('_', " "),
    }
}

/// Business tables per page: a thousand-table catalog stays a light page.
const PAGE_TABLES: usize = 200;

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let search = q.text("q").unwrap_or_default();
    let page = q.page();
    let rows = match api(&state).catalog_for(&session.caller).await {
        Ok(rows) => rows,
        Err(e) => return respond::from_error(&state, &session, e.0),
    };
    let buckets_of = match state.access.registry().await {
        Ok(reg) => reg
            .rows()
            .iter()
            .map(|r| (r.id.clone(), r.bucket.clone()))
            .collect::<BTreeMap<_, _>>(),
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let needle = search.to_lowercase();
    let matches = |row: &CatalogRow| {
        needle.is_empty()
            || row.id.to_lowercase().contains(&needle)
            || row.description.to_lowercase().contains(&needle)
    };
    let mut business: Vec<(String, &CatalogRow)> = Vec::new();
    let mut internal = Vec::new();
    for row in rows.rows.iter().filter(|r| matches(r)) {
        if row.query_mode == "internal" {
            internal.push(entry(row));
            continue;
        }
        let bucket = buckets_of
            .get(&row.id)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "default".into());
        business.push((bucket, row));
    }
    // Pages cut the bucket-ordered list; a bucket split over two pages says how many
    // tables it holds in all.
    business.sort_by(|(ba, a), (bb, b)| ba.cmp(bb).then(a.id.cmp(&b.id)));
    let mut bucket_sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for (bucket, _) in &business {
        *bucket_sizes.entry(bucket.as_str()).or_default() += 1;
    }
    let mut buckets: Vec<Bucket> = Vec::new();
    for (bucket, row) in business
        .iter()
        .skip((page - 1) * PAGE_TABLES)
        .take(PAGE_TABLES)
    {
        match buckets.last_mut() {
            Some(b) if &b.name == bucket => b.tables.push(entry(row)),
            _ => buckets.push(Bucket {
                name: bucket.clone(),
                total: bucket_sizes[bucket.as_str()],
                tables: vec![entry(row)],
            }),
        }
    }
    let (prev_page, next_page) = pager(
        "/catalog",
        &[("q", &search)],
        page,
        PAGE_TABLES,
        business.len(),
    );
    respond::page(&CatalogPage {
        chrome: session.chrome(&state, Page::Catalog, "Catalog"),
        q: search.clone(),
        buckets,
        internal,
        business_count: business.len(),
        prev_page,
        next_page,
    })
}

/// A JSON value as a table cell.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[handler]
pub async fn table(req: &Request, table_id: Path<String>, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let api = api(&state);
    // The registry and access check come first (404 / 403 pages), as for the API.
    let row = match state
        .access
        .readable_table(&session.caller, &table_id)
        .await
    {
        Ok(row) => row,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let (columns, schema_error): (Vec<(String, String, bool)>, _) =
        match api.schema_for(&session.caller, &table_id).await {
            Ok(s) => (
                s.columns
                    .iter()
                    .map(|c| (c.name.clone(), c.data_type.clone(), c.nullable))
                    .collect(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e.0.to_string())),
        };
    // The schema's order (a JSON object's keys come back sorted).
    let mut sample_columns: Vec<String> = columns
        .iter()
        .map(|c: &(String, String, bool)| c.0.clone())
        .collect();
    let (mut sample_rows, mut sample_error) = (Vec::new(), None);
    match api.sample_for(&session.caller, &table_id, 10).await {
        Ok(sample) => {
            let body: Value = serde_json::from_slice(sample.body.bytes()).unwrap_or_default();
            let rows = body["rows"].as_array().cloned().unwrap_or_default();
            if let (true, Some(Value::Object(first))) = (sample_columns.is_empty(), rows.first()) {
                sample_columns = first.keys().cloned().collect();
            }
            sample_rows = rows
                .iter()
                .map(|r| sample_columns.iter().map(|c| cell(&r[c])).collect())
                .collect();
        }
        Err(e) => sample_error = Some(e.0.to_string()),
    }
    respond::page(&TablePage {
        chrome: session.chrome(&state, Page::Catalog, &row.id),
        id: row.id.clone(),
        description: row.description.clone().unwrap_or_default(),
        columns,
        schema_error,
        sample_columns,
        sample_rows,
        sample_error,
    })
}
