//! PostgreSQL's binary `COPY` format, decoded straight into the column builders.
//!
//! The stream is an 11-byte signature, a flags word and a header extension, then tuples
//! (a 16-bit field count, each field a 32-bit length — −1 for NULL — and that many bytes of
//! the type's binary send form), then a −1 trailer. Messages from the server need not align
//! with tuples, so an incomplete tail is carried to the next chunk; a tuple is checked whole
//! before any of it is appended, so the builders never hold half a row.

use svc_plugin_api::arrow::datatypes::i256;

use crate::columns::{Adjusted, Batch, Builder};

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Decodes a binary COPY stream, chunk by chunk.
#[derive(Debug, Default)]
pub(crate) struct CopyDecoder {
    carry: Vec<u8>,
    header_done: bool,
    /// Set once the trailer is read.
    pub finished: bool,
    /// What had to change to fit.
    pub adjusted: Adjusted,
}

impl CopyDecoder {
    /// Decodes every whole tuple in `chunk` (after what earlier chunks left) into `batch`.
    pub fn feed(&mut self, chunk: &[u8], batch: &mut Batch) -> Result<(), String> {
        if self.carry.is_empty() {
            let used = self.decode(chunk, batch)?;
            self.carry.extend_from_slice(&chunk[used..]);
        } else {
            self.carry.extend_from_slice(chunk);
            let carry = std::mem::take(&mut self.carry);
            let used = self.decode(&carry, batch)?;
            self.carry = carry;
            self.carry.drain(..used);
        }
        Ok(())
    }

    /// Whether the stream ended cleanly.
    pub fn check_end(&self) -> Result<(), String> {
        if self.finished && self.carry.is_empty() {
            Ok(())
        } else {
            Err("the COPY stream ended before its trailer".into())
        }
    }

    /// Decodes whole tuples from `buf`; answers the bytes used.
    fn decode(&mut self, buf: &[u8], batch: &mut Batch) -> Result<usize, String> {
        let mut at = 0;
        if !self.header_done {
            if buf.len() < SIGNATURE.len() + 8 {
                return Ok(0);
            }
            if &buf[..SIGNATURE.len()] != SIGNATURE {
                return Err("the COPY stream is not in binary format".into());
            }
            let ext = be_i32(&buf[SIGNATURE.len() + 4..]) as usize;
            if buf.len() < SIGNATURE.len() + 8 + ext {
                return Ok(0);
            }
            at = SIGNATURE.len() + 8 + ext;
            self.header_done = true;
        }
        let columns = batch.builders.len();
        while !self.finished {
            let Some(end) = tuple_end(buf, at, columns)? else {
                break;
            };
            if end == at + 2 {
                self.finished = true;
                at = end;
                break;
            }
            let mut p = at + 2;
            for b in &mut batch.builders {
                let len = be_i32(&buf[p..]);
                p += 4;
                if len < 0 {
                    b.append_null();
                } else {
                    let v = &buf[p..p + len as usize];
                    p += len as usize;
                    decode_value(b, v, &mut self.adjusted)?;
                }
            }
            batch.rows += 1;
            at = end;
        }
        Ok(at)
    }
}

/// Where the tuple starting at `at` ends: `None` when the buffer holds only part of it.
fn tuple_end(buf: &[u8], at: usize, columns: usize) -> Result<Option<usize>, String> {
    if buf.len() < at + 2 {
        return Ok(None);
    }
    let count = i16::from_be_bytes([buf[at], buf[at + 1]]);
    if count == -1 {
        return Ok(Some(at + 2));
    }
    if count as usize != columns {
        return Err(format!(
            "a COPY row has {count} fields where {columns} were asked for"
        ));
    }
    let mut p = at + 2;
    for _ in 0..columns {
        if buf.len() < p + 4 {
            return Ok(None);
        }
        let len = be_i32(&buf[p..]);
        p += 4;
        if len > 0 {
            p += len as usize;
        }
    }
    Ok((p <= buf.len()).then_some(p))
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_i64(b: &[u8]) -> i64 {
    i64::from_be_bytes(b[..8].try_into().expect("eight bytes"))
}

fn need(v: &[u8], n: usize, what: &str) -> Result<(), String> {
    if v.len() == n {
        Ok(())
    } else {
        Err(format!("a {what} value of {} bytes", v.len()))
    }
}

/// Appends one non-NULL value in its binary send form.
fn decode_value(b: &mut Builder, v: &[u8], adjusted: &mut Adjusted) -> Result<(), String> {
    match b {
        Builder::Bool(b) => {
            need(v, 1, "boolean")?;
            b.append_value(v[0] != 0);
        }
        Builder::I16(b) => {
            need(v, 2, "int2")?;
            b.append_value(i16::from_be_bytes([v[0], v[1]]));
        }
        Builder::I32(b) => {
            need(v, 4, "int4")?;
            b.append_value(be_i32(v));
        }
        Builder::I64(b) => match v.len() {
            8 => b.append_value(be_i64(v)),
            // oid: an unsigned 32-bit number, widened.
            4 => b.append_value(i64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))),
            n => return Err(format!("an integer value of {n} bytes")),
        },
        Builder::F32(b) => {
            need(v, 4, "float4")?;
            b.append_value(f32::from_bits(be_i32(v) as u32));
        }
        Builder::F64(b) => {
            need(v, 8, "float8")?;
            b.append_value(f64::from_bits(be_i64(v) as u64));
        }
        Builder::Text(b) => {
            if Builder::append_text(b, v) {
                adjusted.replaced_text += 1;
            }
        }
        Builder::Enum(b) => {
            b.append_value(String::from_utf8_lossy(v));
        }
        Builder::Uuid(b) => {
            need(v, 16, "uuid")?;
            b.append_value(uuid_text(v));
        }
        Builder::Bytes(b) => b.append_value(v),
        Builder::Date(b) => {
            need(v, 4, "date")?;
            // ±infinity are i32::MIN and i32::MAX; MAX, like any day past Arrow's range,
            // fails the shift.
            let day = Some(be_i32(v))
                .filter(|d| *d != i32::MIN)
                .and_then(|d| d.checked_add(EPOCH_DAYS));
            b.append_option(counted(day, adjusted));
        }
        Builder::Timestamp(b, _) => {
            need(v, 8, "timestamp")?;
            let at = Some(be_i64(v))
                .filter(|t| *t != i64::MIN)
                .and_then(|t| t.checked_add(EPOCH_MICROS));
            b.append_option(counted(at, adjusted));
        }
        Builder::Time(b) => {
            need(v, 8, "time")?;
            b.append_value(be_i64(v));
        }
        Builder::Decimal128(b, _, scale) => {
            let n = numeric(v, *scale)?.and_then(|n| n.to_i128());
            b.append_option(counted(n, adjusted));
        }
        Builder::Decimal256(b, _, scale) => {
            let n = numeric(v, *scale)?;
            b.append_option(counted(n, adjusted));
        }
        Builder::List {
            values,
            offsets,
            nulls,
            ..
        } => {
            if array(v, values, adjusted)? {
                adjusted.flattened += 1;
            }
            Builder::close_list(offsets, nulls, values);
        }
    }
    Ok(())
}

/// `value`, counting a `None` as a value with no Arrow form (it is stored as NULL).
fn counted<T>(value: Option<T>, adjusted: &mut Adjusted) -> Option<T> {
    if value.is_none() {
        adjusted.nulled += 1;
    }
    value
}

fn uuid_text(v: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for (i, byte) in v.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(HEX[usize::from(byte >> 4)] as char);
        out.push(HEX[usize::from(byte & 15)] as char);
    }
    out
}

/// A `numeric`'s value as an unscaled integer at `scale`; `None` for NaN, ±Infinity or a
/// value that does not fit 76 digits.
///
/// The send form is ndigits, weight, sign and dscale (16 bits each), then ndigits base-10000
/// digits, the first worth 10000^weight.
fn numeric(v: &[u8], scale: i8) -> Result<Option<i256>, String> {
    if v.len() < 8 {
        return Err(format!("a numeric value of {} bytes", v.len()));
    }
    let word = |i: usize| u16::from_be_bytes([v[2 * i], v[2 * i + 1]]);
    let ndigits = usize::from(word(0));
    let weight = i32::from(word(1) as i16);
    let sign = word(2);
    if v.len() != 8 + 2 * ndigits {
        return Err(format!(
            "a numeric value of {} bytes for {ndigits} digits",
            v.len()
        ));
    }
    let negative = match sign {
        0x0000 => false,
        0x4000 => true,
        _ => return Ok(None), // NaN, +Infinity, -Infinity
    };
    let mut acc = i256::ZERO;
    for i in 0..ndigits {
        let Some(next) = acc
            .checked_mul(i256::from_i128(10_000))
            .and_then(|a| a.checked_add(i256::from_i128(i128::from(word(4 + i)))))
        else {
            return Ok(None);
        };
        acc = next;
    }
    // The last digit is worth 10000^(weight - ndigits + 1); at `scale` that is 10^exponent.
    let exponent = 4 * (weight - ndigits as i32 + 1) + i32::from(scale);
    let ten = i256::from_i128(10);
    let scaled = if exponent >= 0 {
        ten.checked_pow(exponent as u32)
            .and_then(|p| acc.checked_mul(p))
    } else {
        // Only the zeros padding the last base-10000 digit fall below the scale.
        ten.checked_pow(exponent.unsigned_abs())
            .and_then(|p| acc.checked_div(p))
    };
    Ok(scaled.map(|n| if negative { n.wrapping_neg() } else { n }))
}

/// Appends an array's items to `values`; true when it had more than one dimension.
///
/// The send form: ndim, a has-nulls flag and the element type (32 bits each), a (length,
/// lower bound) pair per dimension, then the items, each with its length like a field.
fn array(v: &[u8], values: &mut Builder, adjusted: &mut Adjusted) -> Result<bool, String> {
    if v.len() < 12 {
        return Err(format!("an array value of {} bytes", v.len()));
    }
    let ndim = be_i32(v).max(0) as usize;
    let mut p = 12;
    let mut items: usize = if ndim == 0 { 0 } else { 1 };
    for _ in 0..ndim {
        if v.len() < p + 8 {
            return Err("an array value cut short".into());
        }
        items = items.saturating_mul(be_i32(&v[p..]).max(0) as usize);
        p += 8;
    }
    for _ in 0..items {
        if v.len() < p + 4 {
            return Err("an array value cut short".into());
        }
        let len = be_i32(&v[p..]);
        p += 4;
        if len < 0 {
            values.append_null();
            continue;
        }
        let end = p + len as usize;
        if v.len() < end {
            return Err("an array value cut short".into());
        }
        decode_value(values, &v[p..end], adjusted)?;
        p = end;
    }
    Ok(ndim > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [digits.len() as u16, weight as u16, sign, dscale] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    #[test]
    fn numerics_become_unscaled_integers_at_the_column_scale() {
        // 1234567890.12 = [12, 3456, 7890, 1200] with weight 2.
        let v = numeric_bytes(2, 0, 2, &[12, 3456, 7890, 1200]);
        assert_eq!(
            numeric(&v, 2).unwrap(),
            Some(i256::from_i128(123_456_789_012))
        );
        // -0.05 at scale 3 = -50: [500] with weight -1.
        let v = numeric_bytes(-1, 0x4000, 2, &[500]);
        assert_eq!(numeric(&v, 3).unwrap(), Some(i256::from_i128(-50)));
        // 100000 = [10] with weight 1 (trailing zero digits are dropped by the server).
        let v = numeric_bytes(1, 0, 0, &[10]);
        assert_eq!(numeric(&v, 0).unwrap(), Some(i256::from_i128(100_000)));
        assert_eq!(
            numeric(&numeric_bytes(0, 0, 0, &[]), 4).unwrap(),
            Some(i256::ZERO)
        );
        assert_eq!(numeric(&numeric_bytes(0, 0xC000, 0, &[]), 2).unwrap(), None);
        assert!(numeric(&[0, 1], 0).is_err());
    }

    #[test]
    fn uuids_print_canonically() {
        let v: Vec<u8> = (0..16).collect();
        assert_eq!(uuid_text(&v), "00010203-0405-0607-0809-0a0b0c0d0e0f");
    }

    #[test]
    fn a_tuple_split_across_chunks_is_decoded_once_whole() {
        use crate::columns::{schema, Column, Kind};
        let columns = vec![
            Column {
                name: "a".into(),
                source_type: "int4".into(),
                kind: Kind::I32,
                as_text: false,
            },
            Column {
                name: "b".into(),
                source_type: "text".into(),
                kind: Kind::Text,
                as_text: false,
            },
        ];
        let mut batch = Batch::new(&columns, schema(&columns));
        let mut stream = SIGNATURE.to_vec();
        stream.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        for (a, b) in [
            (Some(7), Some(&b"hi"[..])),
            (None, Some(&b"\xff"[..])),
            (Some(-1), None),
        ] {
            stream.extend_from_slice(&2i16.to_be_bytes());
            match a {
                Some(a) => {
                    stream.extend_from_slice(&4i32.to_be_bytes());
                    stream.extend_from_slice(&i32::to_be_bytes(a));
                }
                None => stream.extend_from_slice(&(-1i32).to_be_bytes()),
            }
            match b {
                Some(b) => {
                    stream.extend_from_slice(&(b.len() as i32).to_be_bytes());
                    stream.extend_from_slice(b);
                }
                None => stream.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        stream.extend_from_slice(&(-1i16).to_be_bytes());
        let mut decoder = CopyDecoder::default();
        for chunk in stream.chunks(5) {
            decoder.feed(chunk, &mut batch).unwrap();
        }
        decoder.check_end().unwrap();
        assert_eq!(batch.rows, 3);
        assert_eq!(decoder.adjusted.replaced_text, 1);
        let out = batch.finish().unwrap();
        assert_eq!(out.num_rows(), 3);
        assert_eq!(out.column(0).null_count(), 1);
        assert_eq!(out.column(1).null_count(), 1);
    }
}
