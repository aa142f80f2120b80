//! The daemon's log output: every line passes through the URL sanitiser,
//! so a credential in a URL that an error message quotes never reaches the
//! log, whichever code path logged it.

use std::io::Write;

use llmwatch_core::redact::redact_urls_in;

/// Writes log lines to `inner` with every URL in them redacted.
pub struct RedactingWriter<W: Write> {
    inner: W,
}

impl<W: Write> RedactingWriter<W> {
    pub fn new(inner: W) -> Self {
        RedactingWriter { inner }
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter hands over one whole event per write.
        let text = String::from_utf8_lossy(buf);
        self.inner.write_all(redact_urls_in(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Installs the process-wide subscriber: `RUST_LOG` (default `info`) to
/// stderr, redacted.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactingWriter::new(std::io::stderr()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_redacted_and_the_whole_buffer_is_taken() {
        let mut out = Vec::new();
        let line = b"WARN scrape failed url=http://u:p@h:1/metrics error=boom\n";
        let written = RedactingWriter::new(&mut out).write(line).unwrap();
        assert_eq!(written, line.len());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "WARN scrape failed url=http://<redacted>@h:1/metrics error=boom\n"
        );
    }
}
