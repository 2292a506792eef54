//! The rewritten plans answer exactly as DataFusion's own aggregate does, on the same data.

use std::sync::Arc;

use svc_plugin_api::arrow::array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, StringArray, StringViewArray,
};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Int32Type, Schema};
use svc_plugin_api::arrow::util::pretty::pretty_format_batches;
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::datafusion::execution::SessionStateBuilder;
use svc_plugin_api::datafusion::physical_plan::displayable;
use svc_plugin_api::datafusion::prelude::{SessionConfig, SessionContext};
use svc_plugin_api::RecordBatch;

use super::StringKeyAggregation;

/// `partitions` × `batches` × `rows`; key `k` cycles through `distinct` values (every 37th
/// row null, odd ones longer than an inline view), `v` has nulls, `u` is `k` as plain Utf8,
/// `d` is `k` dictionary-encoded. As parquet does, a partition's batches share one dictionary,
/// except its last batch, which brings an equal copy; the partitions' dictionaries list the
/// values in different orders.
fn table(partitions: usize, rows: usize, distinct: usize) -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8View, true),
        Field::new("u", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new_dictionary("d", DataType::Int32, DataType::Utf8, true),
    ]));
    let name = |n: usize| {
        if n % 2 == 1 {
            format!("a key longer than a view holds, number {n}")
        } else {
            format!("k{n}")
        }
    };
    let code = |i: usize| (!i.is_multiple_of(37)).then_some((i * 7919) % distinct);
    let data = (0..partitions)
        .map(|p| {
            // Partition p's dictionary lists value n at position (n + p) % distinct.
            let dictionary = || -> ArrayRef {
                Arc::new(StringArray::from_iter_values(
                    (0..distinct).map(|pos| name((pos + distinct - p % distinct) % distinct)),
                ))
            };
            let shared = dictionary();
            (0..3)
                .map(|b| {
                    let ids: Vec<usize> = (0..rows).map(|r| (p * 3 + b) * rows + r).collect();
                    let keys: Vec<Option<String>> =
                        ids.iter().map(|&i| code(i).map(name)).collect();
                    let values = if b < 2 {
                        Arc::clone(&shared)
                    } else {
                        dictionary()
                    };
                    let codes = Int32Array::from_iter(
                        ids.iter()
                            .map(|&i| code(i).map(|n| ((n + p) % distinct) as i32)),
                    );
                    let columns: Vec<ArrayRef> = vec![
                        Arc::new(StringViewArray::from_iter(keys.clone())),
                        Arc::new(StringArray::from_iter(keys)),
                        Arc::new(Int64Array::from_iter(
                            ids.iter()
                                .map(|&i| (!i.is_multiple_of(11)).then_some(i as i64 % 1000)),
                        )),
                        Arc::new(DictionaryArray::<Int32Type>::try_new(codes, values).unwrap()),
                    ];
                    RecordBatch::try_new(schema.clone(), columns).unwrap()
                })
                .collect()
        })
        .collect();
    MemTable::try_new(schema, data).unwrap()
}

fn context(with_rule: bool, config: SessionConfig) -> SessionContext {
    let mut state = SessionStateBuilder::new()
        .with_config(config.with_target_partitions(2))
        .with_default_features();
    if with_rule {
        state = state.with_physical_optimizer_rule(Arc::new(StringKeyAggregation));
    }
    SessionContext::new_with_state(state.build())
}

/// The result as text, and whether the plan used the rewritten operator.
async fn run(ctx: &SessionContext, table: MemTable, sql: &str) -> (String, bool) {
    ctx.register_table("t", Arc::new(table)).unwrap();
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let rewritten = displayable(plan.as_ref())
        .indent(true)
        .to_string()
        .contains("StringKeyAggregateExec");
    let batches = svc_plugin_api::datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    (
        pretty_format_batches(&batches).unwrap().to_string(),
        rewritten,
    )
}

/// Runs `sql` with and without the rule; returns whether the rule rewrote it after checking
/// both gave the same answer.
async fn compare(
    sql: &str,
    make: impl Fn() -> MemTable,
    config: impl Fn() -> SessionConfig,
) -> bool {
    let (expected, plain) = run(&context(false, config()), make(), sql).await;
    assert!(!plain);
    let (got, rewritten) = run(&context(true, config()), make(), sql).await;
    assert_eq!(got, expected, "{sql}");
    rewritten
}

#[tokio::test]
async fn string_key_group_bys_answer_as_datafusion_does() {
    let queries = [
        "SELECT k, count(*) AS n, count(v) AS c, sum(v) AS s, avg(v) AS a, min(v) AS lo, max(v) AS hi, max(u) AS mu FROM t GROUP BY k ORDER BY k",
        "SELECT DISTINCT k FROM t ORDER BY k",
        "SELECT k, count(*) AS n FROM t WHERE v > 500 GROUP BY k HAVING count(*) > 3 ORDER BY n DESC, k",
        "SELECT upper(k) AS key, sum(v) AS s FROM t GROUP BY k ORDER BY key",
        "SELECT d, count(*) AS n, sum(v) AS s, min(u) AS mu FROM t GROUP BY d ORDER BY d",
        "SELECT d, count(*) AS n FROM t WHERE v < 300 GROUP BY d HAVING count(*) > 2 ORDER BY n DESC, d",
        // The filter keeps each batch's dictionary whole; the values it removed are no group.
        "SELECT d, count(*) AS n, sum(v) AS s FROM t WHERE u LIKE 'k1%' GROUP BY d ORDER BY d",
        // avg of integers without their cast: a group with no value is NULL, not NaN.
        "SELECT k, avg(CASE WHEN k = 'k2' THEN NULL ELSE v END) AS a, avg(CAST(v AS INT)) AS a32, avg(v * 2) AS a2 FROM t GROUP BY k ORDER BY k",
    ];
    for sql in queries {
        let rewritten = compare(sql, || table(2, 4000, 60), SessionConfig::new).await;
        assert!(rewritten, "not rewritten: {sql}");
    }
}

#[tokio::test]
async fn unique_keys_pass_through_with_the_same_answer() {
    // Nearly every row its own group: after the probe the partitions stop aggregating. The
    // dictionaries, far longer than a batch, are read row by row.
    let probe_early = || {
        let mut config = SessionConfig::new();
        config
            .options_mut()
            .execution
            .skip_partial_aggregation_probe_rows_threshold = 1000;
        config
    };
    for sql in [
        "SELECT k, count(*) AS n, sum(v) AS s, avg(v) AS a FROM t GROUP BY k ORDER BY k",
        "SELECT d, count(*) AS n, sum(v) AS s FROM t GROUP BY d ORDER BY d",
    ] {
        assert!(compare(sql, || table(2, 4000, 1_000_000), probe_early).await);
    }
}

#[tokio::test]
async fn other_group_bys_keep_datafusion_aggregate() {
    let queries = [
        "SELECT k, v, count(*) AS n FROM t GROUP BY k, v ORDER BY k, v",
        "SELECT u, count(*) AS n FROM t GROUP BY u ORDER BY u",
        "SELECT lower(k) AS key, count(*) AS n FROM t GROUP BY lower(k) ORDER BY key",
    ];
    for sql in queries {
        let rewritten = compare(sql, || table(2, 2000, 60), SessionConfig::new).await;
        assert!(!rewritten, "rewritten: {sql}");
    }
}

#[tokio::test]
async fn only_avg_of_an_integer_cast_is_fused() {
    use svc_plugin_api::datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
    use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;

    fn partial(plan: &Arc<dyn ExecutionPlan>) -> Option<&AggregateExec> {
        match plan.downcast_ref::<AggregateExec>() {
            Some(agg) if *agg.mode() == AggregateMode::Partial => Some(agg),
            _ => plan.children().into_iter().find_map(partial),
        }
    }
    let ctx = context(false, SessionConfig::new());
    ctx.register_table("t", Arc::new(table(1, 10, 3))).unwrap();
    let plan = ctx
        .sql("SELECT k, avg(v), avg(CAST(v + 1 AS SMALLINT)), avg(length(k) * 1.5), sum(v) FROM t GROUP BY k")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let agg = partial(&plan).expect("a partial aggregate");
    let fused: Vec<bool> = agg
        .aggr_expr()
        .iter()
        .map(|a| super::integer_avg::fuse(a, &agg.input_schema()).is_some())
        .collect();
    assert_eq!(fused, [true, true, false, false]);
}
