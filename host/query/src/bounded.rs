//! Functions whose output can dwarf their input, checked before they build it.
//!
//! DataFusion's memory pool sees the buffers of sorts, joins and aggregates, but not what a
//! scalar function allocates: `repeat('x', 1e9)` or `lpad(s, 1e9)` used to ask the allocator
//! for gigabytes at once, and an allocation that fails aborts the process. Each function here
//! is replaced, in every query's context, by a wrapper that first computes how many bytes the
//! call would build for the whole batch from its arguments, and refuses the call with
//! `ResourcesExhausted` (503 `resources_exhausted`) above the per-call budget. Everything
//! else — signature, coercion, simplification, ordering — is the original function's.
//!
//! The string operator `||` is planned as a call of [`StringConcat`], so a large value
//! broadcast against a whole batch is checked the same way.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use svc_plugin_api::arrow::array::{Array, ArrayRef, AsArray};
use svc_plugin_api::arrow::compute::cast;
use svc_plugin_api::arrow::compute::kernels::concat_elements::concat_elements_dyn;
use svc_plugin_api::arrow::datatypes::{DataType, FieldRef, IntervalUnit, TimeUnit};
use svc_plugin_api::datafusion::common::{plan_err, DFSchema, ExprSchema, Result, ScalarValue};
use svc_plugin_api::datafusion::error::DataFusionError;
use svc_plugin_api::datafusion::execution::FunctionRegistry;
use svc_plugin_api::datafusion::logical_expr::planner::{
    ExprPlanner, PlannerResult, RawBinaryExpr,
};
use svc_plugin_api::datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use svc_plugin_api::datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use svc_plugin_api::datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ExprSchemable, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use svc_plugin_api::datafusion::prelude::SessionContext;
use svc_plugin_api::datafusion::sql::sqlparser::ast::BinaryOperator;

/// How a wrapped function's output size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(s, n)`: `len(s) × n`.
    Repeat,
    /// `lpad/rpad(s, n [, fill])`: `n` characters of up to 4 bytes.
    Pad,
    /// `concat(a, b, …)`: the sum of the arguments (a scalar counts once per row).
    Concat,
    /// `concat_ws(sep, a, b, …)`: the arguments and a separator between each.
    ConcatWs,
    /// `replace(s, from, to)`: each occurrence of `from` becomes `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement [, flags])`: every match (possibly empty, so
    /// one per character) becomes the replacement; each back-reference adds at most `len(s)`.
    RegexpReplace,
    /// `array_repeat(element, n)`: `n` copies of the element.
    ArrayRepeat,
    /// `array_resize(array, n [, value])`: `n` elements of about 16 bytes.
    ArrayResize,
    /// `range/generate_series([start,] stop [, step])` as arrays: one element per step.
    Series,
    /// `encode(value, 'hex' | 'base64')`: at most twice its input (hex).
    Encode,
    /// `make_array`, `array_concat`, `array_append`, `array_prepend`: the sum of the
    /// arguments (a scalar counts once per row). Nested, each doubles what it is given.
    Arrays,
    /// `arrow_cast(value, type)`: free, except into the 64-bit-offset types (`LargeUtf8`,
    /// `LargeBinary`, `LargeList`), which are refused when planned. A 32-bit-offset array that would grow
    /// past 2 GiB fails before allocating (503); a large one asks the allocator for the whole
    /// size at once, which is how a value broadcast through a join could abort the process.
    Cast,
}

/// The wrapped functions, by DataFusion name.
const GUARDED: &[(&str, Growth)] = &[
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("concat", Growth::Concat),
    ("concat_ws", Growth::ConcatWs),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("range", Growth::Series),
    ("generate_series", Growth::Series),
    ("encode", Growth::Encode),
    ("make_array", Growth::Arrays),
    ("array_concat", Growth::Arrays),
    ("array_append", Growth::Arrays),
    ("array_prepend", Growth::Arrays),
    ("arrow_cast", Growth::Cast),
];

/// Replaces the growing functions of `ctx` with checked wrappers; one call may build at most
/// `budget` bytes. `||` is checked through [`planner`].
pub fn install(ctx: &SessionContext, budget: usize) {
    // Every context starts from DataFusion's defaults, so the wrappers are built once (per
    // budget) and each query registers clones of them.
    static WRAPPED: std::sync::Mutex<Option<(usize, Vec<ScalarUDF>)>> = std::sync::Mutex::new(None);
    let wrapped = {
        let mut cached = WRAPPED.lock().expect("wrapped functions lock");
        match cached.as_ref() {
            Some((b, udfs)) if *b == budget => udfs.clone(),
            _ => {
                let udfs: Vec<ScalarUDF> = GUARDED
                    .iter()
                    // A function this build lacks needs no guard.
                    .filter_map(|(name, growth)| {
                        let inner = ctx.udf(name).ok()?;
                        Some(ScalarUDF::new_from_impl(Bounded {
                            inner,
                            growth: *growth,
                            budget,
                        }))
                    })
                    .collect();
                *cached = Some((budget, udfs.clone()));
                udfs
            }
        }
    };
    for udf in wrapped {
        ctx.register_udf(udf);
    }
}

/// The planner that turns `a || b` over strings into [`StringConcat`]; first in the list so
/// it sees the operator before DataFusion's own (which keeps `||` over arrays).
pub fn planner(budget: usize) -> Arc<dyn ExprPlanner> {
    Arc::new(ConcatPlanner { budget })
}

/// A growing function behind its size check.
#[derive(Debug)]
struct Bounded {
    inner: Arc<ScalarUDF>,
    growth: Growth,
    budget: usize,
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.budget == other.budget
    }
}

impl Eq for Bounded {}

impl Hash for Bounded {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.budget.hash(state);
    }
}

/// Delegates to the original function, except that `invoke_with_args` checks the size
/// first and `simplify` keeps the call as it is.
impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.inner().name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.inner().aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.inner().signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        if self.growth == Growth::Cast {
            let target = args
                .scalar_arguments
                .get(1)
                .copied()
                .flatten()
                .and_then(|v| v.try_as_str().flatten());
            if let Some(target) = target.filter(|t| t.contains("Large")) {
                return plan_err!(
                    "arrow_cast to {target} is not allowed; cast to the ordinary type \
                     (Utf8, Binary, List), which holds the same values"
                );
            }
        }
        self.inner.inner().return_field_from_args(args)
    }

    #[allow(deprecated)]
    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        self.inner.inner().is_nullable(args, schema)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = estimate(self.growth, &args.args, args.number_rows)?;
        check(self.inner.inner().name(), bytes, self.budget)?;
        self.inner.inner().invoke_with_args(args)
    }

    /// Not delegated (but for `arrow_cast`): `concat`'s and `concat_ws`'s simplifications
    /// rebuild the call around DataFusion's own (unchecked) `concat`, which would step
    /// around the check.
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        match self.growth {
            // `arrow_cast` only runs as the cast it simplifies to; its target was vetted.
            Growth::Cast => self.inner.inner().simplify(args, info),
            _ => Ok(ExprSimplifyResult::Original(args)),
        }
    }

    fn short_circuits(&self) -> bool {
        self.inner.inner().short_circuits()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.inner().output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.inner().preserves_lex_ordering(inputs)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.inner().documentation()
    }
}

/// Refuses a call that would build more than `budget` bytes.
fn check(name: &str, bytes: u128, budget: usize) -> Result<()> {
    if bytes > budget as u128 {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "{name}() would build about {bytes} bytes for one batch; one call may build at \
             most {budget} bytes (an eighth of SVC_QUERY_MEMORY_MB)"
        )));
    }
    Ok(())
}

/// A per-row figure of one argument.
enum PerRow {
    Same(u128),
    Each(Vec<u128>),
}

impl PerRow {
    fn at(&self, row: usize) -> u128 {
        match self {
            Self::Same(v) => *v,
            Self::Each(v) => v.get(row).copied().unwrap_or(0),
        }
    }
}

/// Bytes the call would build for `rows` rows.
fn estimate(growth: Growth, args: &[ColumnarValue], rows: usize) -> Result<u128> {
    let arg = |i: usize| args.get(i);
    let per_row = |f: &dyn Fn(usize) -> u128| -> u128 { (0..rows.max(1)).map(f).sum() };
    Ok(match growth {
        Growth::Repeat => {
            let (s, n) = (lengths(arg(0))?, counts(arg(1))?);
            per_row(&|r| s.at(r) * n.at(r))
        }
        Growth::Pad => {
            let (s, n) = (lengths(arg(0))?, counts(arg(1))?);
            let wide = match arg(2) {
                Some(fill) => !is_ascii(fill),
                None => false,
            };
            let width = if wide { 4 } else { 1 };
            per_row(&|r| s.at(r) + n.at(r) * width)
        }
        Growth::Concat | Growth::ConcatWs => {
            let parts = args
                .iter()
                .map(|a| lengths(Some(a)))
                .collect::<Result<Vec<_>>>()?;
            let seps = if growth == Growth::ConcatWs {
                parts.len().saturating_sub(2) as u128
            } else {
                0
            };
            per_row(&|r| {
                let sep = if seps > 0 { parts[0].at(r) * seps } else { 0 };
                parts.iter().map(|p| p.at(r)).sum::<u128>() + sep
            })
        }
        Growth::Replace => {
            let (s, from, to) = (lengths(arg(0))?, lengths(arg(1))?, lengths(arg(2))?);
            per_row(&|r| s.at(r) + (s.at(r) / from.at(r).max(1) + 1) * to.at(r))
        }
        Growth::RegexpReplace => {
            let (s, replacement) = (lengths(arg(0))?, lengths(arg(2))?);
            let refs = back_references(arg(2))?;
            per_row(&|r| {
                let matches = s.at(r) + 1;
                s.at(r) + matches * replacement.at(r) + refs.at(r) * s.at(r)
            })
        }
        Growth::ArrayRepeat => {
            let (element, n) = (element_bytes(arg(0)), counts(arg(1))?);
            per_row(&|r| element * n.at(r))
        }
        Growth::ArrayResize => {
            let n = counts(arg(1))?;
            per_row(&|r| 16 * n.at(r))
        }
        Growth::Series => series_elements(args, rows)? * 8,
        Growth::Encode => {
            let input = lengths(arg(0))?;
            per_row(&|r| 2 * input.at(r))
        }
        Growth::Arrays => {
            let parts: Vec<u128> = args.iter().map(|a| element_bytes(Some(a))).collect();
            parts.iter().sum::<u128>() * rows.max(1) as u128
        }
        // Checked when planned (see `return_field_from_args`); a cast builds nothing more.
        Growth::Cast => 0,
    })
}

/// Byte length of a string or binary argument at each row (0 for NULL); other types count
/// as their printed width (at most 40 bytes).
fn lengths(arg: Option<&ColumnarValue>) -> Result<PerRow> {
    let Some(arg) = arg else {
        return Ok(PerRow::Same(0));
    };
    Ok(match arg {
        ColumnarValue::Scalar(s) => PerRow::Same(match s {
            ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
                v.as_ref().map_or(0, |v| v.len() as u128)
            }
            ScalarValue::Binary(v) | ScalarValue::LargeBinary(v) | ScalarValue::BinaryView(v) => {
                v.as_ref().map_or(0, |v| v.len() as u128)
            }
            ScalarValue::Dictionary(_, inner) => {
                return lengths(Some(&ColumnarValue::Scalar((**inner).clone())))
            }
            _ => 40,
        }),
        ColumnarValue::Array(a) => PerRow::Each(array_lengths(a)),
    })
}

fn array_lengths(a: &ArrayRef) -> Vec<u128> {
    let each = |len: &dyn Fn(usize) -> usize| -> Vec<u128> {
        (0..a.len())
            .map(|i| if a.is_null(i) { 0 } else { len(i) as u128 })
            .collect()
    };
    match a.data_type() {
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            each(&|i| s.value_length(i) as usize)
        }
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            each(&|i| s.value_length(i) as usize)
        }
        DataType::Utf8View => {
            let s = a.as_string_view();
            each(&|i| s.value(i).len())
        }
        DataType::Binary => {
            let s = a.as_binary::<i32>();
            each(&|i| s.value_length(i) as usize)
        }
        DataType::LargeBinary => {
            let s = a.as_binary::<i64>();
            each(&|i| s.value_length(i) as usize)
        }
        DataType::BinaryView => {
            let s = a.as_binary_view();
            each(&|i| s.value(i).len())
        }
        DataType::Dictionary(_, _) => match cast(a, &DataType::LargeUtf8) {
            Ok(strings) => array_lengths(&strings),
            Err(_) => vec![40; a.len()],
        },
        _ => vec![40; a.len()],
    }
}

/// A count argument (repetitions, width, length) at each row; negative and NULL count 0.
fn counts(arg: Option<&ColumnarValue>) -> Result<PerRow> {
    let Some(arg) = arg else {
        return Ok(PerRow::Same(0));
    };
    Ok(match arg {
        ColumnarValue::Scalar(s) => PerRow::Same(match s.cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(n)) => n.max(0) as u128,
            _ => 0,
        }),
        ColumnarValue::Array(a) => {
            let ints = cast(a, &DataType::Int64)?;
            let ints = ints.as_primitive::<svc_plugin_api::arrow::datatypes::Int64Type>();
            PerRow::Each(
                (0..ints.len())
                    .map(|i| {
                        if ints.is_null(i) {
                            0
                        } else {
                            ints.value(i).max(0) as u128
                        }
                    })
                    .collect(),
            )
        }
    })
}

/// Back-references (`\1`, `$1`, `${name}`) in a replacement, at each row.
fn back_references(arg: Option<&ColumnarValue>) -> Result<PerRow> {
    let count = |s: &str| s.matches(['\\', '$']).count() as u128;
    Ok(match arg {
        None => PerRow::Same(0),
        Some(ColumnarValue::Scalar(s)) => PerRow::Same(match s {
            ScalarValue::Utf8(Some(v))
            | ScalarValue::LargeUtf8(Some(v))
            | ScalarValue::Utf8View(Some(v)) => count(v),
            _ => 0,
        }),
        Some(ColumnarValue::Array(a)) => {
            let strings = cast(a, &DataType::LargeUtf8)?;
            let strings = strings.as_string::<i64>();
            PerRow::Each(
                (0..strings.len())
                    .map(|i| {
                        if strings.is_null(i) {
                            0
                        } else {
                            count(strings.value(i))
                        }
                    })
                    .collect(),
            )
        }
    })
}

fn is_ascii(arg: &ColumnarValue) -> bool {
    match arg {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => s.is_ascii(),
        ColumnarValue::Scalar(_) => true,
        ColumnarValue::Array(_) => false,
    }
}

/// Bytes of one value of an argument: a scalar's size, an array's average per row.
fn element_bytes(arg: Option<&ColumnarValue>) -> u128 {
    match arg {
        None => 8,
        Some(ColumnarValue::Scalar(s)) => s.size() as u128,
        Some(ColumnarValue::Array(a)) => {
            (a.get_array_memory_size() / a.len().max(1)).max(1) as u128
        }
    }
}

/// Elements `range`/`generate_series` would produce over all rows: `(stop - start) / step`
/// each, with dates and timestamps in nanoseconds and a month counted as 28 days (so the
/// estimate never falls short).
fn series_elements(args: &[ColumnarValue], rows: usize) -> Result<u128> {
    let (start, stop, step) = match args {
        [stop] => (None, stop, None),
        [start, stop] => (Some(start), stop, None),
        [start, stop, step, ..] => (Some(start), stop, Some(step)),
        [] => return Ok(0),
    };
    let start = match start {
        Some(s) => instants(s, rows)?,
        None => vec![Some(0); rows.max(1)],
    };
    let stop = instants(stop, rows)?;
    let step = match step {
        Some(s) => steps(s, rows)?,
        None => vec![Some(1); rows.max(1)],
    };
    let mut total: u128 = 0;
    for r in 0..rows.max(1) {
        let (Some(a), Some(b), Some(s)) = (
            start.get(r).copied().flatten(),
            stop.get(r).copied().flatten(),
            step.get(r).copied().flatten(),
        ) else {
            continue;
        };
        let span = (b as i128 - a as i128).unsigned_abs();
        total += span / u128::from(s.unsigned_abs().max(1)) + 1;
    }
    Ok(total)
}

/// Integers as they are; dates and timestamps as nanoseconds.
fn instants(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<i64>>> {
    let array = arg.to_array(rows.max(1))?;
    let as_int = match array.data_type() {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
            let ns = cast(&array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
            cast(&ns, &DataType::Int64)?
        }
        _ => cast(&array, &DataType::Int64)?,
    };
    let ints = as_int.as_primitive::<svc_plugin_api::arrow::datatypes::Int64Type>();
    Ok((0..ints.len())
        .map(|i| (!ints.is_null(i)).then(|| ints.value(i)))
        .collect())
}

/// Steps: integers as they are; intervals in nanoseconds.
fn steps(arg: &ColumnarValue, rows: usize) -> Result<Vec<Option<i64>>> {
    let array = arg.to_array(rows.max(1))?;
    if !matches!(array.data_type(), DataType::Interval(_)) {
        return instants(arg, rows);
    }
    let mdn = cast(&array, &DataType::Interval(IntervalUnit::MonthDayNano))?;
    let mdn = mdn.as_primitive::<svc_plugin_api::arrow::datatypes::IntervalMonthDayNanoType>();
    const DAY: i128 = 86_400_000_000_000;
    Ok((0..mdn.len())
        .map(|i| {
            (!mdn.is_null(i)).then(|| {
                let v = mdn.value(i);
                let ns = v.months as i128 * 28 * DAY + v.days as i128 * DAY + v.nanoseconds as i128;
                ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64
            })
        })
        .collect())
}

/// Plans `a || b` over non-array operands as [`StringConcat`].
#[derive(Debug)]
struct ConcatPlanner {
    budget: usize,
}

impl ExprPlanner for ConcatPlanner {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if expr.op != BinaryOperator::StringConcat {
            return Ok(PlannerResult::Original(expr));
        }
        let is_list = |e: &Expr| {
            matches!(
                e.get_type(schema),
                Ok(DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _))
            )
        };
        if is_list(&expr.left) || is_list(&expr.right) {
            return Ok(PlannerResult::Original(expr));
        }
        let udf = ScalarUDF::new_from_impl(StringConcat::new(self.budget));
        Ok(PlannerResult::Planned(
            udf.call(vec![expr.left, expr.right]),
        ))
    }
}

/// `a || b` for strings (NULL if either is NULL), checked for size like the functions above.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StringConcat {
    signature: Signature,
    budget: usize,
}

impl StringConcat {
    fn new(budget: usize) -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
            budget,
        }
    }
}

impl ScalarUDFImpl for StringConcat {
    fn name(&self) -> &str {
        "svc_string_concat"
    }

    /// Named like the operator, so result columns read `a || b` as before.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [a, b] => Ok(format!("{} || {}", a.schema_name(), b.schema_name())),
            _ => plan_err!("|| takes two operands"),
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(concat_type(arg_types))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = estimate(Growth::Concat, &args.args, args.number_rows)?;
        check("||", bytes, self.budget)?;
        let types: Vec<DataType> = args.args.iter().map(|a| a.data_type()).collect();
        let out = concat_type(&types);
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_scalar { 1 } else { args.number_rows };
        let [a, b] = args.args.as_slice() else {
            return plan_err!("|| takes two operands");
        };
        let a = cast(&a.to_array(rows)?, &out)?;
        let b = cast(&b.to_array(rows)?, &out)?;
        let joined = concat_elements_dyn(&a, &b)?;
        if all_scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &joined, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(joined))
        }
    }
}

/// The string type `||` yields: LargeUtf8 if either side is large, Utf8View if both are
/// views, else Utf8.
fn concat_type(types: &[DataType]) -> DataType {
    if types.contains(&DataType::LargeUtf8) {
        DataType::LargeUtf8
    } else if !types.is_empty() && types.iter().all(|t| *t == DataType::Utf8View) {
        DataType::Utf8View
    } else {
        DataType::Utf8
    }
}
