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

/// Head rows written before version 2: fixed 12-byte pairs.
const VERSION_PAIRS: u8 = 1;
/// Head rows now: varint ids as deltas, integers as varints.
const VERSION: u8 = 2;
const PAIR_BYTES: usize = 12;
/// The first byte of a value stored as its 8 raw bytes (an integer's
/// varint always has its lowest bit clear).
const RAW_VALUE: u8 = 1;

/// Packs `(series_id, value)` pairs (a head row): the count, then each id
/// as the zigzag delta from the one before (a page's lines have
/// consecutive ids: one byte), then each value: an exact integer as a
/// varint of its zigzag shifted left one bit, anything else as
/// [`RAW_VALUE`] and its 8 bytes. A vLLM page (counters, buckets) takes
/// ≈ 4 bytes a sample instead of 12, so a head row fits in a page.
pub fn encode(pairs: &[(u32, f64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + pairs.len() * 5);
    out.push(VERSION);
    put_varint(&mut out, pairs.len() as u64);
    let mut last = 0u32;
    for (id, _) in pairs {
        put_signed(&mut out, i64::from(*id) - i64::from(last));
        last = *id;
    }
    for (_, value) in pairs {
        match small_integer(*value) {
            Some(n) => put_varint(&mut out, zigzag(n) << 1),
            None => {
                out.push(RAW_VALUE);
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
    }
    out
}

/// `value` as an integer that a varint keeps exactly (−0.0 is not one).
fn small_integer(value: f64) -> Option<i64> {
    const LIMIT: f64 = (1u64 << 52) as f64;
    let negative_zero = value == 0.0 && value.is_sign_negative();
    (value.fract() == 0.0 && value.abs() < LIMIT && !negative_zero).then_some(value as i64)
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

/// Unpacks what [`encode`] wrote (or a version 1 row); a blob of another
/// version or a torn length is an error, never a panic.
pub fn decode(blob: &[u8]) -> Result<Vec<(u32, f64)>, StoreError> {
    let mut out = Vec::new();
    for_each_pair(blob, |id, value| out.push((id, value)))?;
    Ok(out)
}

/// Calls `each` with every pair of a head row, in order.
pub(crate) fn for_each_pair(blob: &[u8], mut each: impl FnMut(u32, f64)) -> Result<(), StoreError> {
    let Some((&version, body)) = blob.split_first() else {
        return Err(StoreError::Corrupt("empty samples blob".into()));
    };
    match version {
        VERSION => for_each_varint_pair(body, each),
        VERSION_PAIRS => {
            if !body.len().is_multiple_of(PAIR_BYTES) {
                return Err(StoreError::Corrupt(format!(
                    "samples blob of {} bytes is not a whole number of {PAIR_BYTES}-byte pairs",
                    body.len()
                )));
            }
            for pair in body.chunks_exact(PAIR_BYTES) {
                let (id, value) = pair.split_at(4);
                let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
                let mut value_bytes = [0u8; 8];
                value_bytes.copy_from_slice(value);
                each(id, f64::from_le_bytes(value_bytes));
            }
            Ok(())
        }
        other => Err(StoreError::Corrupt(format!(
            "samples blob version {other}, expected {VERSION}"
        ))),
    }
}

fn for_each_varint_pair(body: &[u8], mut each: impl FnMut(u32, f64)) -> Result<(), StoreError> {
    let mut r = ByteReader { bytes: body };
    let count =
        usize::try_from(r.varint()?).map_err(|_| StoreError::Corrupt("head row count".into()))?;
    if count > body.len() {
        return Err(StoreError::Corrupt(format!(
            "head row of {count} samples in {} bytes",
            body.len()
        )));
    }
    let mut ids = Vec::with_capacity(count);
    let mut id = 0i64;
    for _ in 0..count {
        id = id.wrapping_add(r.signed()?);
        ids.push(u32::try_from(id).map_err(|_| StoreError::Corrupt(format!("series id {id}")))?);
    }
    for id in ids {
        let value = if r.bytes.first() == Some(&RAW_VALUE) {
            let bytes: [u8; 8] = r.take(9)?[1..]
                .try_into()
                .map_err(|_| StoreError::Corrupt("torn value".into()))?;
            f64::from_le_bytes(bytes)
        } else {
            let z = r.varint()? >> 1;
            (((z >> 1) as i64) ^ -((z & 1) as i64)) as f64
        };
        each(id, value);
    }
    if !r.bytes.is_empty() {
        return Err(StoreError::Corrupt(format!(
            "{} bytes after a head row's samples",
            r.bytes.len()
        )));
    }
    Ok(())
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

    /// Bits not yet read.
    #[inline]
    fn remaining(&self) -> usize {
        self.bytes.len() * 8 - self.pos
    }

    /// The next bits, most significant first, at least 57 of them valid
    /// (fewer at the end of the stream, where the rest are zero).
    #[inline]
    fn peek(&self) -> u64 {
        let first = self.pos / 8;
        let word = match self.bytes.get(first..first + 8) {
            // One unaligned load on the hot path.
            Some(bytes) => u64::from_be_bytes(bytes.try_into().unwrap_or([0; 8])),
            None => {
                let mut word = [0u8; 8];
                let tail = self.bytes.get(first..).unwrap_or(&[]);
                word[..tail.len()].copy_from_slice(tail);
                u64::from_be_bytes(word)
            }
        };
        word << (self.pos % 8)
    }

    #[inline]
    pub(crate) fn read(&mut self, bits: u32) -> Result<u64, StoreError> {
        if bits > 32 {
            let high = self.read(bits - 32)?;
            return Ok((high << 32) | self.read(32)?);
        }
        if bits == 0 {
            return Ok(0);
        }
        if bits as usize > self.remaining() {
            return Err(StoreError::Corrupt("value stream ends early".into()));
        }
        let word = self.peek();
        self.pos += bits as usize;
        Ok(word >> (64 - bits))
    }

    /// Moves past `bits` already peeked at; running off the end is an error.
    #[inline]
    fn advance(&mut self, bits: u32) -> Result<(), StoreError> {
        if bits as usize > self.remaining() {
            return Err(StoreError::Corrupt("value stream ends early".into()));
        }
        self.pos += bits as usize;
        Ok(())
    }

    pub(crate) fn bit(&mut self) -> Result<bool, StoreError> {
        Ok(self.read(1)? == 1)
    }

    /// Skips the run of zero bits ahead, at most `max`, and returns its
    /// length: in a value stream each is a scrape whose value did not change.
    #[inline]
    fn skip_zeros(&mut self, max: usize) -> usize {
        let mut skipped = 0;
        while skipped < max {
            let valid = self.remaining().min(57);
            let run = (self.peek().leading_zeros() as usize)
                .min(valid)
                .min(max - skipped);
            self.pos += run;
            skipped += run;
            if run < 57 {
                break;
            }
        }
        skipped
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

/// Reads one value's code (see the module's table) and updates `state`.
/// The delta codes (at most 40 bits) are read from one look at the stream.
fn read_value(r: &mut BitReader, state: &mut StreamState) -> Result<(), StoreError> {
    // The code's prefix is its count of leading ones: 0, 10, 110, 1110,
    // 11110, or 11111.
    let word = r.peek();
    let ones = word.leading_ones().min(5);
    match ones {
        0 => r.advance(1)?,
        1 => {
            // 10 cc delta
            let delta_bits = DELTA_CLASSES[((word << 2) >> 62) as usize];
            r.advance(4 + delta_bits)?;
            let delta = unzigzag((word << 4) >> (64 - delta_bits));
            let base = f64::from_bits(state.last) as i64;
            state.last = (base.wrapping_add(delta) as f64).to_bits();
            state.present = true;
        }
        2 => {
            // 110 ddd cc delta
            let places = ((word << 3) >> 61) as usize;
            if !(1..POW10.len()).contains(&places) {
                return Err(StoreError::Corrupt(format!("{places} decimal places")));
            }
            let delta_bits = DELTA_CLASSES[((word << 6) >> 62) as usize];
            r.advance(8 + delta_bits)?;
            let delta = unzigzag((word << 8) >> (64 - delta_bits));
            let base = (f64::from_bits(state.last) * POW10[places]).round() as i64;
            state.last = (base.wrapping_add(delta) as f64 / POW10[places]).to_bits();
            state.present = true;
        }
        3 => {
            r.advance(4)?;
            state.last ^= read_xor(r, state)?;
            state.present = true;
        }
        4 => {
            r.advance(5)?;
            state.present = false;
        }
        _ => {
            r.advance(5)?;
            state.present = true;
        }
    }
    Ok(())
}

fn read_xor(r: &mut BitReader, state: &mut StreamState) -> Result<u64, StoreError> {
    if !r.bit()? {
        let (wl, wt) = state
            .window
            .ok_or_else(|| StoreError::Corrupt("XOR window used before set".into()))?;
        return Ok(r.read(64 - wl - wt)? << wt);
    }
    let lead = r.read(6)? as u32;
    let len = r.read(6)? as u32 + 1;
    if lead + len > 64 {
        return Err(StoreError::Corrupt(format!(
            "XOR window of {lead} leading zeros and {len} bits"
        )));
    }
    let trail = 64 - lead - len;
    state.window = Some((lead, trail));
    Ok(r.read(len)? << trail)
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
    let mut out = Vec::with_capacity(count.min(1 << 20));
    decode_stream_into(stream, count, 0..count, &mut out)?;
    Ok(out)
}

/// Decodes the values at `positions` (ascending, each below `count`) of a
/// stream of `count` values, appending one to `out` per position. Decoding
/// stops after the last position asked, and a run of unchanged values
/// (one zero bit each) is skipped a machine word at a time.
pub fn decode_stream_at(
    stream: &[u8],
    count: usize,
    positions: &[u32],
    out: &mut Vec<Option<f64>>,
) -> Result<(), StoreError> {
    decode_stream_into(stream, count, positions.iter().map(|p| *p as usize), out)
}

fn decode_stream_into(
    stream: &[u8],
    count: usize,
    positions: impl Iterator<Item = usize>,
    out: &mut Vec<Option<f64>>,
) -> Result<(), StoreError> {
    let Some((&kind, body)) = stream.split_first() else {
        return Err(StoreError::Corrupt("empty value stream".into()));
    };
    match kind {
        STREAM_CONSTANT => {
            let bytes: [u8; 8] = body.try_into().map_err(|_| {
                StoreError::Corrupt(format!("constant stream of {} bytes", body.len()))
            })?;
            let value = Some(f64::from_bits(u64::from_le_bytes(bytes)));
            for position in positions {
                check_position(position, count)?;
                out.push(value);
            }
            Ok(())
        }
        STREAM_CODED => {
            let mut r = BitReader::new(body);
            let mut state = StreamState::START;
            // Values decoded so far: `state` holds the value at `decoded - 1`.
            let mut decoded = 0usize;
            for position in positions {
                check_position(position, count)?;
                if position + 1 < decoded {
                    return Err(StoreError::Corrupt(format!(
                        "value {position} asked after value {}",
                        decoded - 1
                    )));
                }
                while decoded <= position {
                    let same = r.skip_zeros(position + 1 - decoded);
                    decoded += same;
                    if decoded <= position {
                        read_value(&mut r, &mut state)?;
                        decoded += 1;
                    }
                }
                out.push(state.present.then_some(f64::from_bits(state.last)));
            }
            Ok(())
        }
        other => Err(StoreError::Corrupt(format!("value stream kind {other}"))),
    }
}

fn check_position(position: usize, count: usize) -> Result<(), StoreError> {
    if position >= count {
        return Err(StoreError::Corrupt(format!(
            "value {position} asked of a stream of {count}"
        )));
    }
    Ok(())
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
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, StoreError> {
        // One byte: ids a page apart, small counts and deltas.
        if let Some((&byte, rest)) = self.bytes.split_first() {
            if byte < 0x80 {
                self.bytes = rest;
                return Ok(u64::from(byte));
            }
        }
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

    #[inline]
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
        let blob = encode(&[(1, 1.0), (2, 0.25)]);
        for cut in 0..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = blob.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        assert!(decode(&[]).is_err());
        assert!(decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        // A version 1 row (written before) still reads; a torn one does not.
        let mut v1 = vec![VERSION_PAIRS];
        v1.extend_from_slice(&7u32.to_le_bytes());
        v1.extend_from_slice(&2.5f64.to_le_bytes());
        assert_eq!(decode(&v1).unwrap(), vec![(7, 2.5)]);
        v1.pop();
        assert!(decode(&v1).is_err());
    }

    #[test]
    fn head_rows_of_counters_are_small() {
        let pairs: Vec<(u32, f64)> = (0..400).map(|i| (1000 + i, f64::from(i * 977))).collect();
        let blob = encode(&pairs);
        assert!(blob.len() < 400 * 5, "{} bytes", blob.len());
        assert_eq!(decode(&blob).unwrap(), pairs);
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
        let mut out = Vec::new();
        assert!(decode_stream_at(&stream, values.len(), &[60], &mut out).is_err());
        assert!(decode_stream_at(&stream, values.len(), &[9, 3], &mut out).is_err());
    }

    #[test]
    fn long_runs_of_unchanged_values_are_skipped_exactly() {
        // Runs longer than one 57-bit peek, ending at and across byte edges.
        let mut values = Vec::new();
        for (run, value) in [
            (1, 1.0),
            (57, 2.0),
            (58, 3.0),
            (200, 4.0),
            (7, 5.0),
            (64, 6.0),
        ] {
            values.extend(std::iter::repeat_n(Some(value), run));
        }
        values.push(None);
        values.extend(std::iter::repeat_n(None, 130));
        values.push(Some(6.0));
        assert_round_trip(&values);
        let positions: Vec<u32> = (0..values.len() as u32).step_by(13).collect();
        let mut at = Vec::new();
        decode_stream_at(&encode_stream(&values), values.len(), &positions, &mut at).unwrap();
        let expected: Vec<Option<f64>> = positions.iter().map(|p| values[*p as usize]).collect();
        assert_eq!(bits(&at), bits(&expected));
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
        fn decoding_at_positions_agrees_with_decoding_all(
            values in prop::collection::vec(value(), 1..300),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            let stream = encode_stream(&values);
            let mut positions: Vec<u32> =
                picks.iter().map(|i| i.index(values.len()) as u32).collect();
            positions.sort_unstable();
            let mut at = Vec::new();
            decode_stream_at(&stream, values.len(), &positions, &mut at).unwrap();
            let expected: Vec<Option<f64>> =
                positions.iter().map(|p| values[*p as usize]).collect();
            prop_assert_eq!(bits(&at), bits(&expected));
        }

        #[test]
        fn head_rows_round_trip(pairs in prop::collection::vec((any::<u32>(), value()), 0..200)) {
            let pairs: Vec<(u32, f64)> =
                pairs.into_iter().map(|(id, v)| (id, v.unwrap_or(-0.0))).collect();
            let back = decode(&encode(&pairs)).unwrap();
            let as_bits = |p: &[(u32, f64)]| -> Vec<(u32, u64)> {
                p.iter().map(|(i, v)| (*i, v.to_bits())).collect()
            };
            prop_assert_eq!(as_bits(&back), as_bits(&pairs));
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), count in 0usize..100) {
            let _ = decode_stream(&bytes, count);
            let _ = decode(&bytes);
        }
    }
}
