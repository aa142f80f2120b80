//! Streaming a run's records to a file as JSON Lines, off the measuring
//! thread: a long run keeps none of them in memory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use thiserror::Error;

use crate::load::RecordSink;
use crate::record::ProbeRecord;

/// Records waiting for the writer at most (a few MB): past that the run
/// waits for the disk rather than grow.
const QUEUE: usize = 4096;

/// The records file could not be written.
#[derive(Debug, Error)]
pub enum RecordFileError {
    #[error("cannot write the records file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the records writer thread stopped unexpectedly")]
    WriterGone,
}

/// A thread writing every record it receives as one JSON line, with URLs
/// redacted (error messages may quote a URL with its credentials).
pub struct RecordWriter {
    sink: RecordSink,
    thread: JoinHandle<Result<u64, RecordFileError>>,
}

impl RecordWriter {
    /// Creates (truncates) `path` and starts the writer.
    pub fn create(path: &Path) -> Result<RecordWriter, RecordFileError> {
        let io = |source| RecordFileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::create(path).map_err(io)?;
        let (sink, rx) = RecordSink::channel(QUEUE);
        let owned = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("llmwatch-records".into())
            .spawn(move || write_all(rx, std::io::BufWriter::new(file), &owned))
            .map_err(io)?;
        Ok(RecordWriter { sink, thread })
    }

    /// Where the run sends its records.
    pub fn sink(&self) -> RecordSink {
        self.sink.clone()
    }

    /// Waits for every record sent so far (drop every other sink first)
    /// and returns how many lines were written.
    pub fn finish(self) -> Result<u64, RecordFileError> {
        drop(self.sink);
        self.thread
            .join()
            .map_err(|_| RecordFileError::WriterGone)?
    }
}

fn write_all(
    rx: Receiver<ProbeRecord>,
    mut out: impl Write,
    path: &Path,
) -> Result<u64, RecordFileError> {
    let io = |source| RecordFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut lines = 0;
    for rec in rx {
        let json = serde_json::to_string(&rec).map_err(|e| io(e.into()))?;
        let line = llmwatch_core::redact::redact_urls_in(&json);
        out.write_all(line.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
        lines += 1;
    }
    out.flush().map_err(io)?;
    Ok(lines)
}

/// Writes `result` as one JSON document at `out` with its `records` read
/// back, line by line, from the JSON Lines file `records` (as a
/// [`RecordWriter`] wrote it): the document a run that kept its records
/// would have written (records in the order they ended, not by number),
/// assembled without holding them. URLs in the
/// summary are redacted (the lines already are).
pub fn write_result_json(
    result: &crate::RunResult,
    records: &Path,
    out: &Path,
) -> Result<(), RecordFileError> {
    use std::io::BufRead;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecordFileError::Io {
            path: path.clone(),
            source,
        }
    };
    let mut summary = serde_json::to_value(result).map_err(|e| io(out)(e.into()))?;
    if let Some(map) = summary.as_object_mut() {
        map.remove("records");
    }
    let head = llmwatch_core::redact::redact_urls_in(&summary.to_string());
    let head = head.strip_suffix('}').unwrap_or(&head);
    let lines = std::io::BufReader::new(std::fs::File::open(records).map_err(io(records))?);
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).map_err(io(out))?);
    let sep = if head.ends_with('{') { "" } else { "," };
    write!(w, "{head}{sep}\"records\":[").map_err(io(out))?;
    for (k, line) in lines.lines().enumerate() {
        let line = line.map_err(io(records))?;
        let comma = if k == 0 { "" } else { "," };
        write!(w, "{comma}\n{line}").map_err(io(out))?;
    }
    w.write_all(b"\n]}\n").map_err(io(out))?;
    w.flush().map_err(io(out))
}
