//! Encodings of stored samples.
//!
//! - **Head rows** ([`encode`], [`decode`]): the samples of one scrape not yet
//!   sealed into a block, as `(series_id: u32 LE, value: f64 LE)` pairs
//!   behind a version byte. Written as is, so a scrape is durable the moment
//!   its batch commits; at most one block's worth per target lives here.
//! - **Value streams** ([`encode_stream`], [`decode_stream`]): one series'
//!   values over the up scrapes of a sealed block, each coded against the one
//!   before (Gorilla-style, plus an integer-delta code for counters):
//!
//!   | code | meaning |
//!   | --- | --- |
//!   | `0` | same as the scrape before (absent stays absent) |
//!   | `10` cc bits | present, integer delta from the last value; `cc` picks 6/13/20/32 bits of zigzag delta |
//!   | `110` ddd cc bits | present, delta in units of 10^-d (`ddd` = d, 1–6) between two values that are exact decimals of d places, as exporters print them (`245.123000`) |
//!   | `1110` … | present, XOR with the last value's bits: `0` + bits in the last window, or `1` + 6 bits leading zeros + 6 bits (length − 1) + the bits |
//!   | `11110` | absent (the series was not on this page) |
//!   | `11111` | present again with exactly the last value |
//!
//!   A series that never changes costs one bit a scrape, and a stream that is
//!   one value throughout is stored as that value alone. Every value is kept
//!   bit for bit: NaN payloads (the staleness marker), ±Inf, −0.0.

use crate::StoreError;

const VERSION: u8 = 1;
const PAIR_BYTES: usize = 12;

/// Packs `(series_id, value)` pairs (a head row).
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

/// Writes bits most significant first.
#[derive(Debug, Default)]
pub(crate) struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    pending: u32,
}

impl BitWriter {
    /// Appends the low `bits` bits of `value` (`bits` ≤ 64).
    pub(crate) fn write(&mut self, value: u64, bits: u32) {
        if bits > 32 {
            self.write(value >> 32, bits - 32);
            self.write(value & 0xffff_ffff, 32);
            return;
        }
        if bits == 0 {
            return;
        }
        // pending < 8 here, so pending + bits ≤ 40 fits the accumulator.
        self.acc = (self.acc << bits) | (value & ((1u64 << bits) - 1));
        self.pending += bits;
        while self.pending >= 8 {
            self.pending -= 8;
            self.out.push((self.acc >> self.pending) as u8);
        }
    }

    pub(crate) fn bit(&mut self, set: bool) {
        self.write(u64::from(set), 1);
    }

    /// The bytes, the last one padded with zero bits.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        if self.pending > 0 {
            self.out.push((self.acc << (8 - self.pending)) as u8);
        }
        self.out
    }
}

/// Reads what [`BitWriter`] wrote; running off the end is an error.
pub(crate) struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> BitReader<'a> {
        BitReader { bytes, pos: 0 }
    }

    pub(crate) fn read(&mut self, bits: u32) -> Result<u64, StoreError> {
        if bits > 32 {
            let high = self.read(bits - 32)?;
            return Ok((high << 32) | self.read(32)?);
        }
        if bits == 0 {
            return Ok(0);
        }
        let end = self.pos + bits as usize;
        if end > self.bytes.len() * 8 {
            return Err(StoreError::Corrupt("value stream ends early".into()));
        }
        let first = self.pos / 8;
        let mut word = [0u8; 8];
        let available = (self.bytes.len() - first).min(8);
        word[..available].copy_from_slice(&self.bytes[first..first + available]);
        let word = u64::from_be_bytes(word) << (self.pos % 8);
        self.pos = end;
        Ok(word >> (64 - bits))
    }

    pub(crate) fn bit(&mut self) -> Result<bool, StoreError> {
        Ok(self.read(1)? == 1)
    }
}

/// Bits of the zigzag delta for each size class of the `10` code.
const DELTA_CLASSES: [u32; 4] = [6, 13, 20, 32];
/// Integers up to 2^53 are exact in an f64.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// The coder's memory of a stream: the last value seen (kept while the series
/// is absent) and the XOR window in use.
#[derive(Debug, Clone, Copy)]
struct StreamState {
    last: u64,
    present: bool,
    /// (leading zeros, trailing zeros) of the last new XOR window.
    window: Option<(u32, u32)>,
}

impl StreamState {
    const START: StreamState = StreamState {
        last: 0,
        present: false,
        window: None,
    };
}

/// Powers of ten for the decimal code (index = decimal places).
const POW10: [f64; 7] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6];

/// `x` as `n / 10^places`, when that division gives `x` back bit for bit.
fn scaled(x: f64, places: usize) -> Option<i64> {
    let n = (x * POW10[places]).round();
    if n.abs() > EXACT_INT {
        return None;
    }
    // Through the integer, as the decoder goes: −0.0 does not come back.
    let n = n as i64;
    ((n as f64 / POW10[places]).to_bits() == x.to_bits()).then_some(n)
}

/// The size class of a zigzag delta, and the delta.
fn class_of(delta: i64) -> Option<(u32, u64)> {
    let zigzag = ((delta << 1) ^ (delta >> 63)) as u64;
    DELTA_CLASSES
        .iter()
        .position(|bits| zigzag < (1u64 << bits))
        .map(|class| (class as u32, zigzag))
}

fn unzigzag(zigzag: u64) -> i64 {
    ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64)
}

/// The zigzag integer delta from `last` to `cur` when both are exact
/// integers and adding it back gives `cur` bit for bit (−0.0 does not).
fn integer_delta(last: u64, cur: u64) -> Option<(u32, u64)> {
    let (a, b) = (f64::from_bits(last), f64::from_bits(cur));
    if !(a.abs() <= EXACT_INT && b.abs() <= EXACT_INT && a.fract() == 0.0 && b.fract() == 0.0) {
        return None;
    }
    let delta = (b as i64).checked_sub(a as i64)?;
    if ((a as i64 + delta) as f64).to_bits() != cur {
        return None;
    }
    class_of(delta)
}

/// The fewest decimal places (1–6) in which both values are exact, and the
/// sized delta between them in that unit.
fn decimal_delta(last: u64, cur: u64) -> Option<(usize, u32, u64)> {
    let (a, b) = (f64::from_bits(last), f64::from_bits(cur));
    if !(a.is_finite() && b.is_finite()) {
        return None;
    }
    let places = (1..POW10.len()).find(|&d| scaled(b, d).is_some())?;
    let places =
        (places..POW10.len()).find(|&d| scaled(a, d).is_some() && scaled(b, d).is_some())?;
    let (na, nb) = (scaled(a, places)?, scaled(b, places)?);
    let (class, zigzag) = class_of(nb.checked_sub(na)?)?;
    Some((places, class, zigzag))
}

fn write_value(w: &mut BitWriter, state: &mut StreamState, cur: Option<u64>) {
    let Some(bits) = cur else {
        if state.present {
            w.write(0b11110, 5);
            state.present = false;
        } else {
            w.bit(false);
        }
        return;
    };
    if bits == state.last {
        if state.present {
            w.bit(false);
        } else {
            w.write(0b11111, 5);
            state.present = true;
        }
        return;
    }
    state.present = true;
    if let Some((class, zigzag)) = integer_delta(state.last, bits) {
        w.write(0b10, 2);
        w.write(u64::from(class), 2);
        w.write(zigzag, DELTA_CLASSES[class as usize]);
    } else if let Some((places, class, zigzag)) = decimal_delta(state.last, bits) {
        w.write(0b110, 3);
        w.write(places as u64, 3);
        w.write(u64::from(class), 2);
        w.write(zigzag, DELTA_CLASSES[class as usize]);
    } else {
        w.write(0b1110, 4);
        let xor = state.last ^ bits;
        let (lead, trail) = (xor.leading_zeros(), xor.trailing_zeros());
        match state.window {
            Some((wl, wt)) if lead >= wl && trail >= wt => {
                w.bit(false);
                w.write(xor >> wt, 64 - wl - wt);
            }
            _ => {
                let len = 64 - lead - trail;
                w.bit(true);
                w.write(u64::from(lead), 6);
                w.write(u64::from(len - 1), 6);
                w.write(xor >> trail, len);
                state.window = Some((lead, trail));
            }
        }
    }
    state.last = bits;
}

fn read_delta(r: &mut BitReader) -> Result<i64, StoreError> {
    let class = r.read(2)? as usize;
    Ok(unzigzag(r.read(DELTA_CLASSES[class])?))
}

fn read_value(r: &mut BitReader, state: &mut StreamState) -> Result<Option<u64>, StoreError> {
    if !r.bit()? {
        return Ok(state.present.then_some(state.last));
    }
    if !r.bit()? {
        let delta = read_delta(r)?;
        let base = f64::from_bits(state.last) as i64;
        state.last = (base.wrapping_add(delta) as f64).to_bits();
    } else if !r.bit()? {
        let places = r.read(3)? as usize;
        if !(1..POW10.len()).contains(&places) {
            return Err(StoreError::Corrupt(format!("{places} decimal places")));
        }
        let delta = read_delta(r)?;
        let base = (f64::from_bits(state.last) * POW10[places]).round() as i64;
        state.last = (base.wrapping_add(delta) as f64 / POW10[places]).to_bits();
    } else if !r.bit()? {
        let xor = if !r.bit()? {
            let (wl, wt) = state
                .window
                .ok_or_else(|| StoreError::Corrupt("XOR window used before set".into()))?;
            r.read(64 - wl - wt)? << wt
        } else {
            let lead = r.read(6)? as u32;
            let len = r.read(6)? as u32 + 1;
            if lead + len > 64 {
                return Err(StoreError::Corrupt(format!(
                    "XOR window of {lead} leading zeros and {len} bits"
                )));
            }
            let trail = 64 - lead - len;
            state.window = Some((lead, trail));
            r.read(len)? << trail
        };
        state.last ^= xor;
    } else if !r.bit()? {
        state.present = false;
        return Ok(None);
    }
    state.present = true;
    Ok(Some(state.last))
}

/// Stream kinds (the first byte of a stream).
const STREAM_CODED: u8 = 0;
const STREAM_CONSTANT: u8 = 1;

/// Encodes one series' values over consecutive scrapes (`None`: not on that
/// page). A stream whose every value is present and identical is the value
/// alone.
pub fn encode_stream(values: &[Option<f64>]) -> Vec<u8> {
    if let Some(Some(first)) = values.first() {
        let bits = first.to_bits();
        if values.iter().all(|v| v.map(f64::to_bits) == Some(bits)) {
            let mut out = Vec::with_capacity(9);
            out.push(STREAM_CONSTANT);
            out.extend_from_slice(&bits.to_le_bytes());
            return out;
        }
    }
    let mut w = BitWriter::default();
    w.out.push(STREAM_CODED);
    let mut state = StreamState::START;
    for value in values {
        write_value(&mut w, &mut state, value.map(f64::to_bits));
    }
    w.finish()
}

/// Decodes `count` values written by [`encode_stream`].
pub fn decode_stream(stream: &[u8], count: usize) -> Result<Vec<Option<f64>>, StoreError> {
    let Some((&kind, body)) = stream.split_first() else {
        return Err(StoreError::Corrupt("empty value stream".into()));
    };
    match kind {
        STREAM_CONSTANT => {
            let bytes: [u8; 8] = body.try_into().map_err(|_| {
                StoreError::Corrupt(format!("constant stream of {} bytes", body.len()))
            })?;
            Ok(vec![Some(f64::from_bits(u64::from_le_bytes(bytes))); count])
        }
        STREAM_CODED => {
            let mut r = BitReader::new(body);
            let mut state = StreamState::START;
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                out.push(read_value(&mut r, &mut state)?.map(f64::from_bits));
            }
            Ok(out)
        }
        other => Err(StoreError::Corrupt(format!("value stream kind {other}"))),
    }
}

/// Appends `value` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(crate) fn put_signed(out: &mut Vec<u8>, value: i64) {
    put_varint(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Reads varints from a byte slice, failing on a torn one.
pub(crate) struct ByteReader<'a> {
    pub(crate) bytes: &'a [u8],
}

impl<'a> ByteReader<'a> {
    pub(crate) fn varint(&mut self) -> Result<u64, StoreError> {
        let mut value = 0u64;
        for (i, byte) in self.bytes.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Ok(value);
            }
        }
        Err(StoreError::Corrupt("torn varint".into()))
    }

    pub(crate) fn signed(&mut self) -> Result<i64, StoreError> {
        let z = self.varint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], StoreError> {
        if len > self.bytes.len() {
            return Err(StoreError::Corrupt(format!(
                "{len} bytes wanted, {} left",
                self.bytes.len()
            )));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The staleness marker Prometheus writes when a series disappears.
    const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

    fn bits(values: &[Option<f64>]) -> Vec<Option<u64>> {
        values.iter().map(|v| v.map(f64::to_bits)).collect()
    }

    fn assert_round_trip(values: &[Option<f64>]) {
        let stream = encode_stream(values);
        let back = decode_stream(&stream, values.len()).unwrap();
        assert_eq!(bits(&back), bits(values), "stream {stream:?}");
    }

    #[test]
    fn head_rows_round_trip_special_values() {
        let pairs = vec![
            (1, 0.5),
            (7, f64::INFINITY),
            (u32::MAX, -3e300),
            (2, -0.0),
            (3, f64::from_bits(STALE_NAN)),
        ];
        let back = decode(&encode(&pairs)).unwrap();
        let as_bits = |p: &[(u32, f64)]| -> Vec<(u32, u64)> {
            p.iter().map(|(i, v)| (*i, v.to_bits())).collect()
        };
        assert_eq!(as_bits(&back), as_bits(&pairs));
    }

    #[test]
    fn head_rows_reject_torn_and_foreign_blobs() {
        let mut blob = encode(&[(1, 1.0)]);
        blob.pop();
        assert!(decode(&blob).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn every_special_value_round_trips_bit_for_bit() {
        let specials = [
            f64::NAN,
            -f64::NAN,
            f64::from_bits(STALE_NAN),
            f64::from_bits(0x7ff8_dead_beef_0001),
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            f64::MAX,
            f64::MIN,
            EXACT_INT,
            -EXACT_INT,
            EXACT_INT * 2.0,
        ];
        let mut values: Vec<Option<f64>> = Vec::new();
        for a in specials {
            for b in specials {
                values.extend([Some(a), Some(b), None, Some(b), Some(a), Some(a)]);
            }
        }
        assert_round_trip(&values);
    }

    #[test]
    fn counters_with_resets_round_trip_and_stay_small() {
        // A counter that advances, resets to 0 (a restart), and advances again.
        let mut values = Vec::new();
        let mut counter = 0.0;
        for i in 0..240u32 {
            counter = if i == 120 {
                0.0
            } else {
                counter + f64::from(i % 7 * 300)
            };
            values.push(Some(counter));
        }
        assert_round_trip(&values);
        let stream = encode_stream(&values);
        assert!(stream.len() < 240 * 3, "{} bytes", stream.len());
    }

    #[test]
    fn an_unchanged_series_is_nearly_free() {
        let values = vec![Some(1.7e9); 240];
        assert_eq!(encode_stream(&values).len(), 9);
        assert_round_trip(&values);
        // One change in the middle: still one bit a scrape.
        let mut values = vec![Some(0.0); 240];
        values[100] = Some(3.0);
        assert!(encode_stream(&values).len() < 40);
        assert_round_trip(&values);
    }

    #[test]
    fn exporter_decimals_round_trip_and_beat_xor() {
        // dcgm-exporter prints floats with six decimals.
        let values: Vec<Option<f64>> = (0..240)
            .map(|i| {
                let watts = 70.0 + 630.0 * (f64::from(i) / 17.0).sin().abs();
                Some(format!("{watts:.6}").parse().unwrap())
            })
            .collect();
        assert_round_trip(&values);
        assert!(
            encode_stream(&values).len() < 240 * 5,
            "{}",
            encode_stream(&values).len()
        );
        assert_round_trip(&[
            Some(0.1),
            Some(0.2),
            Some(-0.3),
            Some(1e300),
            Some(0.123456),
            Some(-0.0),
            Some(0.5),
        ]);
    }

    #[test]
    fn appearing_and_disappearing_series_round_trip() {
        assert_round_trip(&[None, None, Some(0.0), None, Some(0.0), Some(-0.0), None]);
        assert_round_trip(&[None; 10]);
        assert_round_trip(&[]);
    }

    #[test]
    fn torn_streams_are_errors_not_panics() {
        let values: Vec<Option<f64>> = (0..50).map(|i| Some(f64::from(i) * 0.37)).collect();
        let stream = encode_stream(&values);
        for cut in 0..stream.len() - 1 {
            let _ = decode_stream(&stream[..cut], values.len());
        }
        assert!(decode_stream(&stream[..stream.len() / 2], values.len()).is_err());
        assert!(decode_stream(&[7, 1, 2], 3).is_err());
        assert!(decode_stream(&[STREAM_CONSTANT, 1, 2], 3).is_err());
    }

    #[test]
    fn varints_round_trip() {
        let mut out = Vec::new();
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            put_signed(&mut out, v);
        }
        let mut r = ByteReader { bytes: &out };
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(r.signed().unwrap(), v);
        }
        assert!(r.varint().is_err());
    }

    /// Values as they come: arbitrary bits (any NaN payload), integers
    /// (counters), repeats, and absences.
    fn value() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            any::<u64>().prop_map(|b| Some(f64::from_bits(b))),
            (-1_000_000i64..1_000_000).prop_map(|i| Some(i as f64)),
            (-1_000_000_000i64..1_000_000_000, 1usize..7)
                .prop_map(|(n, d)| Some(n as f64 / POW10[d])),
            prop::sample::select(vec![
                Some(0.0),
                Some(-0.0),
                Some(f64::INFINITY),
                Some(f64::NEG_INFINITY),
                Some(f64::from_bits(STALE_NAN)),
                None,
            ]),
        ]
    }

    proptest! {
        #[test]
        fn decode_of_encode_is_identity(values in prop::collection::vec(value(), 0..300)) {
            let back = decode_stream(&encode_stream(&values), values.len()).unwrap();
            prop_assert_eq!(bits(&back), bits(&values));
        }

        #[test]
        fn counters_round_trip(start in 0u64..1 << 40, steps in prop::collection::vec(0u64..5_000_000, 1..300)) {
            let mut v = start;
            let values: Vec<Option<f64>> = steps.iter().map(|s| { v += s; Some(v as f64) }).collect();
            let back = decode_stream(&encode_stream(&values), values.len()).unwrap();
            prop_assert_eq!(bits(&back), bits(&values));
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), count in 0usize..100) {
            let _ = decode_stream(&bytes, count);
        }
    }
}
