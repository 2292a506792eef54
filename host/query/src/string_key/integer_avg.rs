//! `avg` over an integer argument without its cast to Float64.
//!
//! DataFusion's `avg` takes only floats, so `avg(quantity)` over an integer column plans as
//! `avg(CAST(quantity AS Float64))`: every batch's values are first copied into a new float
//! array, then summed. [`IntegerAvg`] reads the integers and converts each one as it adds it,
//! the same conversion and the same additions in the same order, so its sums are exactly
//! those of DataFusion's accumulator, and its state (count, sum) is the one the unchanged
//! final stage merges.

use std::sync::Arc;

use svc_plugin_api::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Float64Array, UInt64Array,
};
use svc_plugin_api::arrow::buffer::NullBuffer;
use svc_plugin_api::arrow::datatypes::{
    DataType, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, Schema, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use svc_plugin_api::datafusion::error::Result;
use svc_plugin_api::datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use svc_plugin_api::datafusion::physical_expr::expressions::CastExpr;
use svc_plugin_api::datafusion::physical_expr::PhysicalExpr;
use svc_plugin_api::datafusion::physical_plan::udaf::AggregateFunctionExpr;

/// The integer argument of `aggregate` and an accumulator for it, when `aggregate` is `avg`
/// of an integer cast to Float64.
pub(super) fn fuse(
    aggregate: &AggregateFunctionExpr,
    input: &Schema,
) -> Option<(Arc<dyn PhysicalExpr>, Box<dyn GroupsAccumulator>)> {
    if aggregate.fun().name() != "avg" || aggregate.is_distinct() {
        return None;
    }
    let [argument] = aggregate.expressions().try_into().ok()?;
    let cast = argument.downcast_ref::<CastExpr>()?;
    if cast.cast_type() != &DataType::Float64 {
        return None;
    }
    let inner = Arc::clone(cast.expr());
    let accumulator: Box<dyn GroupsAccumulator> = match inner.data_type(input).ok()? {
        DataType::Int8 => Box::new(IntegerAvg::<Int8Type>::default()),
        DataType::Int16 => Box::new(IntegerAvg::<Int16Type>::default()),
        DataType::Int32 => Box::new(IntegerAvg::<Int32Type>::default()),
        DataType::Int64 => Box::new(IntegerAvg::<Int64Type>::default()),
        DataType::UInt8 => Box::new(IntegerAvg::<UInt8Type>::default()),
        DataType::UInt16 => Box::new(IntegerAvg::<UInt16Type>::default()),
        DataType::UInt32 => Box::new(IntegerAvg::<UInt32Type>::default()),
        DataType::UInt64 => Box::new(IntegerAvg::<UInt64Type>::default()),
        _ => return None,
    };
    Some((inner, accumulator))
}

/// The integers' conversion to Float64, as Arrow's cast does it (`as`: nearest value).
trait ToF64: Copy {
    fn to_f64(self) -> f64;
}

macro_rules! to_f64 {
    ($($t:ty),*) => {$(
        impl ToF64 for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
to_f64!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Whether an aggregate's FILTER keeps `row` (a null filter value does not).
fn kept(filter: Option<&BooleanArray>, row: usize) -> bool {
    filter.is_none_or(|f| f.is_valid(row) && f.value(row))
}

/// One group's non-null values: their sum as Float64 and how many. Side by side, so a row's
/// update touches one place.
#[derive(Clone, Copy, Default)]
struct Group {
    sum: f64,
    count: u64,
}

/// Per group, a [`Group`]. A group with no value has count 0 and is null in the state, as in
/// DataFusion's `AvgGroupsAccumulator`.
struct IntegerAvg<T> {
    groups: Vec<Group>,
    _input: std::marker::PhantomData<T>,
}

impl<T> Default for IntegerAvg<T> {
    fn default() -> Self {
        Self {
            groups: Vec::new(),
            _input: std::marker::PhantomData,
        }
    }
}

/// The emitted groups' counts, sums, and nulls where a group has seen no value (None when
/// every group has).
fn columns(groups: Vec<Group>) -> (Vec<u64>, Vec<f64>, Option<NullBuffer>) {
    let counts: Vec<u64> = groups.iter().map(|g| g.count).collect();
    let sums = groups.iter().map(|g| g.sum).collect();
    let nulls = counts
        .contains(&0)
        .then(|| NullBuffer::from_iter(counts.iter().map(|&c| c > 0)));
    (counts, sums, nulls)
}

impl<T> GroupsAccumulator for IntegerAvg<T>
where
    T: ArrowPrimitiveType + Send,
    T::Native: ToF64,
{
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = values[0].as_primitive::<T>();
        self.groups.resize(total_num_groups, Group::default());
        let groups = &mut self.groups[..];
        let valid = |row: usize| values.is_valid(row) && kept(opt_filter, row);
        if values.null_count() == 0 && opt_filter.is_none() {
            for (&group, &value) in group_indices.iter().zip(values.values()) {
                let g = &mut groups[group];
                g.sum += value.to_f64();
                g.count += 1;
            }
        } else {
            for (row, (&group, &value)) in group_indices.iter().zip(values.values()).enumerate() {
                if valid(row) {
                    let g = &mut groups[group];
                    g.sum += value.to_f64();
                    g.count += 1;
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (counts, sums, nulls) = columns(emit_to.take_needed(&mut self.groups));
        let averages: Vec<f64> = sums
            .iter()
            .zip(&counts)
            .map(|(&sum, &count)| if count == 0 { 0.0 } else { sum / count as f64 })
            .collect();
        Ok(Arc::new(Float64Array::new(averages.into(), nulls)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (counts, sums, nulls) = columns(emit_to.take_needed(&mut self.groups));
        Ok(vec![
            Arc::new(UInt64Array::new(counts.into(), nulls.clone())),
            Arc::new(Float64Array::new(sums.into(), nulls)),
        ])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let counts = values[0].as_primitive::<UInt64Type>();
        let sums = values[1].as_primitive::<Float64Type>();
        self.groups.resize(total_num_groups, Group::default());
        for (row, &group) in group_indices.iter().enumerate() {
            if counts.is_valid(row) {
                let g = &mut self.groups[group];
                g.count += counts.value(row);
                g.sum += sums.value(row);
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let values = values[0].as_primitive::<T>();
        let nulls = NullBuffer::union(
            values.nulls(),
            opt_filter
                .map(|f| NullBuffer::from_iter((0..f.len()).map(|row| kept(Some(f), row))))
                .as_ref(),
        );
        let sums: Vec<f64> = values.values().iter().map(|v| v.to_f64()).collect();
        Ok(vec![
            Arc::new(UInt64Array::new(
                vec![1; values.len()].into(),
                nulls.clone(),
            )),
            Arc::new(Float64Array::new(sums.into(), nulls)),
        ])
    }

    fn size(&self) -> usize {
        self.groups.capacity() * size_of::<Group>()
    }
}
