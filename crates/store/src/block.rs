//! Sealed blocks: a run of one target's scrapes, compressed.
//!
//! A block holds [`BLOCK_SCRAPES`] consecutive scrapes of a target. Its
//! health (time, up, duration, size, error, sample count per scrape) is one
//! blob; its samples are grouped by sample name, one row per name, each row
//! holding a directory of series ids and one value stream per series
//! (see [`crate::codec::encode_stream`]) over the block's *up* scrapes. A
//! query reads only the names it needs; a histogram's buckets come together.

use std::collections::{BTreeMap, HashMap};

use crate::codec::{self, put_signed, put_varint, ByteReader};
use crate::StoreError;

/// One series' values over a block's up scrapes (`None`: not on that page).
pub(crate) type SeriesValues = (u32, Vec<Option<f64>>);

/// Scrapes per sealed block: an hour at a 5 s interval. Big
/// enough that a block's per-series cost (directory entry, first value) is
/// small beside its samples; small enough that the head stays short.
pub const BLOCK_SCRAPES: usize = 720;

/// One scrape's health, in a block or a head row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Health {
    pub ts_ms: i64,
    pub up: bool,
    pub duration_ms: f64,
    pub body_bytes: u64,
    pub error: Option<String>,
    pub sample_count: u64,
}

const FLAG_UP: u8 = 1;
const FLAG_ERROR: u8 = 2;

/// Packs the health of a block's scrapes: times as deltas of deltas, sizes
/// and counts as deltas, durations as a value stream.
pub(crate) fn encode_health(entries: &[Health]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 6);
    put_varint(&mut out, entries.len() as u64);
    let (mut last_ts, mut last_delta, mut last_bytes, mut last_count) = (0i64, 0i64, 0i64, 0i64);
    for entry in entries {
        let delta = entry.ts_ms.wrapping_sub(last_ts);
        put_signed(&mut out, delta.wrapping_sub(last_delta));
        (last_ts, last_delta) = (entry.ts_ms, delta);
        let flags =
            if entry.up { FLAG_UP } else { 0 } | if entry.error.is_some() { FLAG_ERROR } else { 0 };
        out.push(flags);
        let bytes = i64::try_from(entry.body_bytes).unwrap_or(i64::MAX);
        put_signed(&mut out, bytes.wrapping_sub(last_bytes));
        let count = i64::try_from(entry.sample_count).unwrap_or(i64::MAX);
        put_signed(&mut out, count.wrapping_sub(last_count));
        (last_bytes, last_count) = (bytes, count);
        if let Some(error) = &entry.error {
            put_varint(&mut out, error.len() as u64);
            out.extend_from_slice(error.as_bytes());
        }
    }
    let durations: Vec<Option<f64>> = entries.iter().map(|e| Some(e.duration_ms)).collect();
    out.extend_from_slice(&codec::encode_stream(&durations));
    out
}

pub(crate) fn decode_health(blob: &[u8]) -> Result<Vec<Health>, StoreError> {
    let mut r = ByteReader { bytes: blob };
    let count = usize::try_from(r.varint()?)
        .map_err(|_| StoreError::Corrupt("block health count".into()))?;
    let mut entries = Vec::with_capacity(count.min(1 << 20));
    let (mut last_ts, mut last_delta, mut last_bytes, mut last_count) = (0i64, 0i64, 0i64, 0i64);
    for _ in 0..count {
        last_delta = last_delta.wrapping_add(r.signed()?);
        last_ts = last_ts.wrapping_add(last_delta);
        let flags = r.take(1)?[0];
        last_bytes = last_bytes.wrapping_add(r.signed()?);
        last_count = last_count.wrapping_add(r.signed()?);
        let error = if flags & FLAG_ERROR != 0 {
            let len = usize::try_from(r.varint()?)
                .map_err(|_| StoreError::Corrupt("error length".into()))?;
            Some(String::from_utf8_lossy(r.take(len)?).into_owned())
        } else {
            None
        };
        entries.push(Health {
            ts_ms: last_ts,
            up: flags & FLAG_UP != 0,
            duration_ms: 0.0,
            body_bytes: u64::try_from(last_bytes).unwrap_or(0),
            error,
            sample_count: u64::try_from(last_count).unwrap_or(0),
        });
    }
    let durations = codec::decode_stream(r.bytes, count)?;
    for (entry, duration) in entries.iter_mut().zip(durations) {
        entry.duration_ms = duration.unwrap_or(0.0);
    }
    Ok(entries)
}

/// Packs the series of one sample name: `(id, values over the block's up
/// scrapes)`, ids ascending.
pub(crate) fn encode_group(series: &[SeriesValues]) -> Vec<u8> {
    let streams: Vec<Vec<u8>> = series
        .iter()
        .map(|(_, values)| codec::encode_stream(values))
        .collect();
    let mut out = Vec::with_capacity(streams.iter().map(|s| s.len() + 4).sum());
    put_varint(&mut out, series.len() as u64);
    let mut last_id = 0u32;
    for ((id, _), stream) in series.iter().zip(&streams) {
        put_varint(&mut out, u64::from(id.wrapping_sub(last_id)));
        put_varint(&mut out, stream.len() as u64);
        last_id = *id;
    }
    for stream in &streams {
        out.extend_from_slice(stream);
    }
    out
}

/// Unpacks the series of [`encode_group`] that `wanted` accepts, each with
/// `positions` values.
pub(crate) fn decode_group(
    blob: &[u8],
    positions: usize,
    wanted: impl FnMut(u32) -> bool,
) -> Result<Vec<SeriesValues>, StoreError> {
    let mut out = Vec::new();
    for_each_stream(blob, wanted, |id, stream| {
        out.push((id, codec::decode_stream(stream, positions)?));
        Ok(())
    })?;
    Ok(out)
}

/// Like [`decode_group`], but only the values at `at` (ascending positions
/// of a block with `positions` up scrapes), one per position: a range query
/// at a coarse step reads a few of a block's scrapes.
pub(crate) fn decode_group_at(
    blob: &[u8],
    positions: usize,
    at: &[u32],
    wanted: impl FnMut(u32) -> bool,
) -> Result<Vec<SeriesValues>, StoreError> {
    let mut out = Vec::new();
    for_each_stream(blob, wanted, |id, stream| {
        let mut values = Vec::with_capacity(at.len());
        codec::decode_stream_at(stream, positions, at, &mut values)?;
        out.push((id, values));
        Ok(())
    })?;
    Ok(out)
}

/// Calls `each` with the id and value stream of every series of a group
/// blob that `wanted` accepts, in id order.
fn for_each_stream(
    blob: &[u8],
    mut wanted: impl FnMut(u32) -> bool,
    mut each: impl FnMut(u32, &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut r = ByteReader { bytes: blob };
    let count = usize::try_from(r.varint()?)
        .map_err(|_| StoreError::Corrupt("group series count".into()))?;
    let mut directory = Vec::with_capacity(count.min(1 << 16));
    let mut id = 0u32;
    for _ in 0..count {
        let delta = u32::try_from(r.varint()?)
            .map_err(|_| StoreError::Corrupt("series id delta".into()))?;
        id = id.wrapping_add(delta);
        let len = usize::try_from(r.varint()?)
            .map_err(|_| StoreError::Corrupt("stream length".into()))?;
        directory.push((id, len));
    }
    for (id, len) in directory {
        let stream = r.take(len)?;
        if wanted(id) {
            each(id, stream)?;
        }
    }
    Ok(())
}

/// A head row on its way into a block.
pub(crate) struct HeadRow {
    pub health: Health,
    pub samples: Option<Vec<u8>>,
}

/// A block ready to be inserted.
pub(crate) struct Sealed {
    pub first_ms: i64,
    pub last_ms: i64,
    pub last_up_ms: Option<i64>,
    pub scrape_count: usize,
    pub up_count: usize,
    pub sample_count: u64,
    pub health: Vec<u8>,
    /// Sample name → its group blob.
    pub groups: Vec<(String, Vec<u8>)>,
}

/// Builds a block from head rows (in time order). `name_of` names each
/// series id; an id it does not know is kept under the empty name.
pub(crate) fn seal<'n>(
    rows: &[HeadRow],
    name_of: impl Fn(u32) -> Option<&'n str>,
) -> Result<Sealed, StoreError> {
    let up_count = rows.iter().filter(|row| row.health.up).count();
    // Series id → its column; pages repeat their lines, so the column of
    // the line at the same place in the scrape before is tried first.
    let mut column_of: HashMap<u32, usize, rustc_hash::FxBuildHasher> = HashMap::default();
    let mut columns: Vec<SeriesValues> = Vec::new();
    let mut previous: Vec<usize> = Vec::new();
    let mut sample_count = 0u64;
    for (position, row) in rows.iter().filter(|row| row.health.up).enumerate() {
        let Some(blob) = &row.samples else { continue };
        let mut index = 0;
        codec::for_each_pair(blob, |id, value| {
            let column = match previous.get(index) {
                Some(&c) if columns[c].0 == id => c,
                _ => *column_of.entry(id).or_insert_with(|| {
                    columns.push((id, vec![None; up_count]));
                    columns.len() - 1
                }),
            };
            columns[column].1[position] = Some(value);
            if index < previous.len() {
                previous[index] = column;
            } else {
                previous.push(column);
            }
            index += 1;
        })?;
        sample_count += index as u64;
    }
    let mut by_name: BTreeMap<&str, Vec<SeriesValues>> = BTreeMap::new();
    for (id, values) in columns {
        by_name
            .entry(name_of(id).unwrap_or(""))
            .or_default()
            .push((id, values));
    }
    let groups = by_name
        .into_iter()
        .map(|(name, mut series)| {
            series.sort_unstable_by_key(|(id, _)| *id);
            (name.to_string(), encode_group(&series))
        })
        .collect();
    let health: Vec<Health> = rows.iter().map(|row| row.health.clone()).collect();
    Ok(Sealed {
        first_ms: rows.iter().map(|r| r.health.ts_ms).min().unwrap_or(0),
        last_ms: rows.iter().map(|r| r.health.ts_ms).max().unwrap_or(0),
        last_up_ms: rows
            .iter()
            .filter(|r| r.health.up)
            .map(|r| r.health.ts_ms)
            .max(),
        scrape_count: rows.len(),
        up_count,
        sample_count,
        health: encode_health(&health),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(ts_ms: i64, up: bool) -> Health {
        Health {
            ts_ms,
            up,
            duration_ms: 3.25 + ts_ms as f64 / 1e4,
            body_bytes: 40_000 + (ts_ms as u64 % 17),
            error: (!up).then(|| "connection refused".to_string()),
            sample_count: if up { 415 } else { 0 },
        }
    }

    #[test]
    fn health_round_trips() {
        let entries: Vec<Health> = (0..300)
            .map(|i| health(1_700_000_000_000 + i * 5000 + i % 3, i % 50 != 7))
            .collect();
        let blob = encode_health(&entries);
        assert_eq!(decode_health(&blob).unwrap(), entries);
        assert!(blob.len() < entries.len() * 16, "{} bytes", blob.len());
        assert!(decode_health(&blob[..blob.len() / 2]).is_err());
    }

    #[test]
    fn groups_round_trip_and_filter() {
        let series = vec![
            (3, vec![Some(1.0), None, Some(2.0)]),
            (9, vec![Some(f64::NAN), Some(0.0), Some(0.0)]),
            (400, vec![None, None, Some(-0.0)]),
        ];
        let blob = encode_group(&series);
        let all = decode_group(&blob, 3, |_| true).unwrap();
        let bits = |s: &[(u32, Vec<Option<f64>>)]| -> Vec<(u32, Vec<Option<u64>>)> {
            s.iter()
                .map(|(id, v)| (*id, v.iter().map(|x| x.map(f64::to_bits)).collect()))
                .collect()
        };
        assert_eq!(bits(&all), bits(&series));
        let one = decode_group(&blob, 3, |id| id == 400).unwrap();
        assert_eq!(bits(&one), bits(&series[2..]));
        let at = decode_group_at(&blob, 3, &[0, 2], |id| id != 3).unwrap();
        let picked = vec![
            (9, vec![Some(f64::NAN), Some(0.0)]),
            (400, vec![None, Some(-0.0)]),
        ];
        assert_eq!(bits(&at), bits(&picked));
    }

    #[test]
    fn sealing_keeps_every_sample_of_the_up_scrapes() {
        let rows: Vec<HeadRow> = (0..5)
            .map(|i| HeadRow {
                health: health(i * 1000, i != 2),
                samples: (i != 2).then(|| codec::encode(&[(1, i as f64), (2, 7.0)])),
            })
            .collect();
        let sealed = seal(&rows, |id| Some(if id == 1 { "a" } else { "b" })).unwrap();
        assert_eq!((sealed.scrape_count, sealed.up_count), (5, 4));
        assert_eq!(sealed.sample_count, 8);
        assert_eq!(sealed.last_up_ms, Some(4000));
        let a = &sealed.groups[0];
        assert_eq!(a.0, "a");
        let values = decode_group(&a.1, 4, |_| true).unwrap();
        assert_eq!(
            values,
            vec![(1, vec![Some(0.0), Some(1.0), Some(3.0), Some(4.0)])]
        );
    }
}
