//! Arrow's layout of a binary or string column: the values one after another in a data
//! buffer, and `n + 1` offsets (32-bit, or 64-bit for the large types, in the machine's
//! byte order) where value `i` spans `offsets[i]..offsets[i + 1]`. The packed column is
//! written in it, so a column is packed without a copy (or a Python object) a row.

use crate::error::CoreError;
use std::ops::Range;

/// The bytes an offset takes.
fn width(wide: bool) -> usize {
    if wide {
        8
    } else {
        4
    }
}

/// Where rows `start..start + count` lie in the `data_len` bytes of values of a column
/// whose offsets are `offsets` (64-bit when `wide`).
///
/// # Errors
/// When the offsets do not hold that many rows, or one runs backwards or past the data:
/// the message names the row.
pub fn rows(
    data_len: usize,
    offsets: &[u8],
    wide: bool,
    start: usize,
    count: usize,
) -> Result<Vec<Range<usize>>, CoreError> {
    let width = width(wide);
    let needed = start.checked_add(count).and_then(|n| n.checked_add(1)).and_then(|n| n.checked_mul(width));
    let Some(held) = needed.and_then(|needed| offsets.get(start * width..needed)) else {
        let have = offsets.len() / width;
        return Err(CoreError::argument(format!(
            "offsets: {have} offsets hold no rows {start}..{}",
            start.saturating_add(count)
        )));
    };
    let at = |k: usize| -> i64 {
        let bytes = held.get(k * width..(k + 1) * width).unwrap_or_default();
        if wide {
            bytes.try_into().map_or(-1, i64::from_ne_bytes)
        } else {
            bytes.try_into().map_or(-1, |four| i64::from(i32::from_ne_bytes(four)))
        }
    };
    let mut out = Vec::with_capacity(count);
    let mut from = at(0);
    for row in 0..count {
        let to = at(row + 1);
        let span = usize::try_from(from).ok().zip(usize::try_from(to).ok()).map(|(f, t)| f..t);
        let Some(span) = span.filter(|span| span.start <= span.end && span.end <= data_len) else {
            return Err(CoreError::argument(format!(
                "offsets: row {} runs from {from} to {to}, backwards or outside the {data_len} bytes of data",
                start + row,
            )));
        };
        out.push(span);
        from = to;
    }
    Ok(out)
}

/// The offsets of a column whose values end at `ends` (from 0; 64-bit when `wide`).
///
/// # Errors
/// When the values pass 2 GiB, which 32-bit offsets cannot hold.
pub fn offsets(ends: &[usize], wide: bool) -> Result<Vec<u8>, CoreError> {
    let mut out = Vec::with_capacity((ends.len() + 1) * width(wide));
    for &end in std::iter::once(&0).chain(ends) {
        if wide {
            out.extend_from_slice(&i64::try_from(end).unwrap_or(i64::MAX).to_ne_bytes());
        } else {
            let Ok(end) = i32::try_from(end) else {
                return Err(CoreError::argument(
                    "the packed column passes 2 GiB, past 32-bit offsets: pass a large_string or large_binary column",
                ));
            };
            out.extend_from_slice(&end.to_ne_bytes());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn narrow(values: &[i32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn rows_are_read_where_the_offsets_say() {
        let wide: Vec<u8> = [0i64, 2, 2, 5, 8].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let expected = vec![0..2, 2..2, 2..5, 5..8];
        assert_eq!(rows(8, &wide, true, 0, 4).unwrap(), expected);
        assert_eq!(rows(8, &narrow(&[0, 2, 2, 5, 8]), false, 0, 4).unwrap(), expected);
        // A slice of a column: its rows start at its offset.
        assert_eq!(rows(8, &narrow(&[0, 2, 2, 5, 8]), false, 2, 2).unwrap(), &expected[2..]);
        assert_eq!(rows(8, &narrow(&[3]), false, 0, 0).unwrap(), Vec::<Range<usize>>::new());
    }

    #[test]
    fn bad_offsets_are_refused_naming_the_row() {
        let message = |offsets: &[i32], start: usize, count: usize| {
            rows(8, &narrow(offsets), false, start, count).unwrap_err().to_string()
        };
        let outside = |row: usize, from: i64, to: i64| {
            format!("offsets: row {row} runs from {from} to {to}, backwards or outside the 8 bytes of data")
        };
        assert_eq!(message(&[0, 2, 1], 0, 2), outside(1, 2, 1));
        assert_eq!(message(&[0, 9], 0, 1), outside(0, 0, 9));
        assert_eq!(message(&[-1, 2], 0, 1), outside(0, -1, 2));
        assert_eq!(message(&[5, 5, 3, 4], 1, 2), outside(1, 5, 3), "named by its row in the column");
        assert_eq!(message(&[0, 2], 0, 2), "offsets: 2 offsets hold no rows 0..2");
        assert_eq!(
            message(&[0, 2], usize::MAX, 2),
            format!("offsets: 2 offsets hold no rows {}..{}", usize::MAX, usize::MAX)
        );
        assert!(rows(8, &[0, 0, 0], false, 0, 0).is_err(), "an offsets buffer cut inside an offset");
    }

    #[test]
    fn offsets_are_written_from_the_ends() {
        assert_eq!(offsets(&[2, 2, 5], false).unwrap(), narrow(&[0, 2, 2, 5]));
        let wide: Vec<u8> = [0i64, 7].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(offsets(&[7], true).unwrap(), wide);
        assert!(offsets(&[1 << 31], false).is_err());
        assert!(offsets(&[1 << 31], true).is_ok());
    }
}
