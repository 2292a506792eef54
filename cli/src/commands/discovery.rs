//! `svc catalog`, `schema`, `sample`, `describe`.

use serde_json::{json, Value};

use super::{seg, Ctx};
use crate::exit::Result;
use crate::render::{self, cell};

/// `svc catalog`.
pub fn catalog(ctx: &Ctx, json: bool) -> Result<()> {
    let cat = ctx.authed()?.get("/api/v2/catalog")?;
    if json {
        render::print_json(&cat);
        return Ok(());
    }
    let headers = [
        "ID",
        "SOURCE",
        "MODE",
        "ENTITY",
        "SIZE",
        "FRESHNESS",
        "NAME",
    ]
    .map(String::from);
    let rows: Vec<Vec<String>> = cat["tables"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let or_dash = |v: &Value| if v.is_null() { "-".to_owned() } else { cell(v) };
            vec![
                cell(&t["id"]),
                cell(&t["source_type"]),
                cell(&t["query_mode"]),
                or_dash(&t["entity_type"]),
                or_dash(&t["rough_size_hint"]),
                or_dash(&t["metadata_freshness"]),
                cell(&t["name"]),
            ]
        })
        .collect();
    render::table(&headers, &rows);
    Ok(())
}

fn print_schema(schema: &Value) {
    println!(
        "Table: {}  ({}; {} SQL)",
        cell(&schema["table_id"]),
        cell(&schema["source_type"]),
        cell(&schema["sql_flavor"])
    );
    let headers = ["COLUMN", "TYPE", "NULL", "DESCRIPTION"].map(String::from);
    let rows: Vec<Vec<String>> = schema["columns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            vec![
                cell(&c["name"]),
                cell(&c["type"]),
                if c["nullable"] == true { "yes" } else { "no" }.to_owned(),
                cell(&c["description"]),
            ]
        })
        .collect();
    render::table(&headers, &rows);
    if !schema["partition_by"].is_null() {
        println!("partitioned by: {}", cell(&schema["partition_by"]));
    }
    if let Some(c) = schema["clustered_by"].as_array().filter(|c| !c.is_empty()) {
        println!(
            "clustered by: {}",
            c.iter().map(cell).collect::<Vec<_>>().join(", ")
        );
    }
}

/// Sample rows (objects) under `columns`, or under the first row's keys when none are given.
fn print_sample(sample: &Value, columns: Vec<String>) {
    let columns = if columns.is_empty() {
        sample["rows"][0]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    } else {
        columns
    };
    let rows: Vec<Vec<String>> = sample["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| columns.iter().map(|c| cell(&r[c.as_str()])).collect())
        .collect();
    render::table(&columns, &rows);
}

fn column_names(schema: &Value) -> Vec<String> {
    schema["columns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| cell(&c["name"]))
        .collect()
}

/// `svc schema`.
pub fn schema(ctx: &Ctx, id: &str, json: bool) -> Result<()> {
    let schema = ctx.authed()?.get(&format!("/api/v2/schema/{}", seg(id)))?;
    if json {
        render::print_json(&schema);
    } else {
        print_schema(&schema);
    }
    Ok(())
}

/// `svc sample`.
pub fn sample(ctx: &Ctx, id: &str, n: u32, json: bool) -> Result<()> {
    let sample = ctx
        .authed()?
        .get(&format!("/api/v2/sample/{}?n={n}", seg(id)))?;
    if json {
        render::print_json(&sample);
    } else {
        print_sample(&sample, Vec::new());
    }
    Ok(())
}

/// `svc describe`: schema and sample together.
pub fn describe(ctx: &Ctx, id: &str, n: u32, json: bool) -> Result<()> {
    let client = ctx.authed()?;
    let schema = client.get(&format!("/api/v2/schema/{}", seg(id)))?;
    let sample = client.get(&format!("/api/v2/sample/{}?n={n}", seg(id)))?;
    if json {
        render::print_json(&json!({"schema": schema, "sample": sample}));
    } else {
        print_schema(&schema);
        println!();
        print_sample(&sample, column_names(&schema));
    }
    Ok(())
}
