//! The packed form of one scrape's samples: a version byte, then
//! `(series_id: u32 LE, value: f64 LE)` pairs. Twelve bytes a sample, no
//! per-sample row, no per-sample index entry.

use crate::StoreError;

const VERSION: u8 = 1;
const PAIR_BYTES: usize = 12;

/// Packs `(series_id, value)` pairs.
pub fn encode(pairs: &[(u32, f64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + pairs.len() * PAIR_BYTES);
    out.push(VERSION);
    for (series_id, value) in pairs {
        out.extend_from_slice(&series_id.to_le_bytes());
        out.extend_from_slice(&value.to_le_bytes());
    }
    out
}

/// Unpacks what [`encode`] wrote; a blob of another version or a torn length is
/// an error, never a panic.
pub fn decode(blob: &[u8]) -> Result<Vec<(u32, f64)>, StoreError> {
    let Some((&version, body)) = blob.split_first() else {
        return Err(StoreError::Corrupt("empty samples blob".into()));
    };
    if version != VERSION {
        return Err(StoreError::Corrupt(format!(
            "samples blob version {version}, expected {VERSION}"
        )));
    }
    if !body.len().is_multiple_of(PAIR_BYTES) {
        return Err(StoreError::Corrupt(format!(
            "samples blob of {} bytes is not a whole number of {PAIR_BYTES}-byte pairs",
            body.len()
        )));
    }
    Ok(body
        .chunks_exact(PAIR_BYTES)
        .map(|pair| {
            let (id, value) = pair.split_at(4);
            let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
            let mut value_bytes = [0u8; 8];
            value_bytes.copy_from_slice(value);
            (id, f64::from_le_bytes(value_bytes))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_special_values() {
        let pairs = vec![(1, 0.5), (7, f64::INFINITY), (u32::MAX, -3e300), (2, 0.0)];
        assert_eq!(decode(&encode(&pairs)).unwrap(), pairs);
        let nan = decode(&encode(&[(3, f64::NAN)])).unwrap();
        assert!(nan[0].1.is_nan());
    }

    #[test]
    fn rejects_torn_and_foreign_blobs() {
        let mut blob = encode(&[(1, 1.0)]);
        blob.pop();
        assert!(decode(&blob).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
