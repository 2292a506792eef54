//! Distinct counts of text columns, taken over the values' 64-bit hashes.
//!
//! Why: DataFusion counts distinct integers per group with a vectorised accumulator, but
//! distinct strings with one set per group fed a few rows at a time, and a grouped page over
//! a month of events (every tool's distinct sessions) spent most of its time there. Two
//! different values share an xxh3-64 hash with probability about n²/2⁶⁵ for n values (under
//! 10⁻⁷ for a million sessions), so the counts are exact in practice.

use std::sync::{Arc, OnceLock};

use svc_plugin_api::arrow::array::{Array, AsArray, UInt64Array};
use svc_plugin_api::arrow::datatypes::DataType;
use svc_plugin_api::datafusion::common::{exec_err, Result};
use svc_plugin_api::datafusion::functions_aggregate::expr_fn::count_distinct;
use svc_plugin_api::datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use svc_plugin_api::datafusion::prelude::Expr;
use xxhash_rust::xxh3::xxh3_64;

/// `count(DISTINCT text)`, counted over hashes.
pub fn count_distinct_text(text: Expr) -> Expr {
    static HASH: OnceLock<Arc<ScalarUDF>> = OnceLock::new();
    let hash = HASH.get_or_init(|| Arc::new(ScalarUDF::new_from_impl(Hash64::new())));
    count_distinct(hash.call(vec![text]))
}

/// `svc_hash64(text) → UInt64`, NULL for NULL; never registered where users write SQL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Hash64 {
    signature: Signature,
}

impl Hash64 {
    fn new() -> Self {
        Self {
            signature: Signature::uniform(
                1,
                vec![DataType::Utf8, DataType::Utf8View, DataType::LargeUtf8],
                Volatility::Immutable,
            ),
        }
    }
}

fn hashed<'a>(values: impl Iterator<Item = Option<&'a str>>) -> UInt64Array {
    values.map(|v| v.map(|s| xxh3_64(s.as_bytes()))).collect()
}

impl ScalarUDFImpl for Hash64 {
    fn name(&self) -> &str {
        "svc_hash64"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("svc_hash64 takes one argument");
        };
        let array = arg.to_array(args.number_rows)?;
        let out = match array.data_type() {
            DataType::Utf8 => hashed(array.as_string::<i32>().iter()),
            DataType::LargeUtf8 => hashed(array.as_string::<i64>().iter()),
            DataType::Utf8View => hashed(array.as_string_view().iter()),
            other => return exec_err!("svc_hash64 takes text, not {other}"),
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_plugin_api::arrow::array::StringArray;
    use svc_plugin_api::arrow::datatypes::{Field, Schema};
    use svc_plugin_api::datafusion::prelude::{col, SessionContext};
    use svc_plugin_api::RecordBatch;

    #[tokio::test]
    async fn distinct_counts_over_hashes_match_distinct_counts_over_text() {
        let groups = StringArray::from(vec!["a", "a", "a", "b", "b", "c", "c"]);
        let values = StringArray::from(vec![
            Some("s1"),
            Some("s2"),
            Some("s1"),
            Some("s1"),
            None,
            None,
            None,
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(groups), Arc::new(values)]).unwrap();
        let ctx = SessionContext::new();
        let df = ctx
            .read_batch(batch)
            .unwrap()
            .aggregate(
                vec![col("g")],
                vec![
                    count_distinct_text(col("v")).alias("hashed"),
                    count_distinct(col("v")).alias("plain"),
                ],
            )
            .unwrap()
            .sort(vec![col("g").sort(true, false)])
            .unwrap();
        let batches = df.collect().await.unwrap();
        let column = |name: &str| -> Vec<i64> {
            batches
                .iter()
                .flat_map(|b| {
                    b.column_by_name(name)
                        .unwrap()
                        .as_primitive::<svc_plugin_api::arrow::datatypes::Int64Type>()
                        .values()
                        .to_vec()
                })
                .collect()
        };
        assert_eq!(column("hashed"), [2, 1, 0]);
        assert_eq!(column("plain"), column("hashed"));
    }
}
