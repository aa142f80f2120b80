//! llama-server's connection handling, as a real one does it: a streamed
//! response says `Keep-Alive: timeout=5, max=100`, and the server closes
//! the connection right after it anyway. A client that pooled the
//! connection finds it dead on its next request (the server never read
//! that request), which is the race `llmwatch`'s probe client must survive.
//!
//! [`ClosingListener`] hands axum connections that report end-of-input as
//! soon as a chunked body's last chunk (`0\r\n\r\n`) has been written: the
//! HTTP server then sees the client "gone" between requests and closes the
//! socket, without ever writing `Connection: close`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The end of a chunked body: the previous chunk's CRLF, the zero-length
/// chunk, the empty trailer.
const LAST_CHUNK: &[u8] = b"\r\n0\r\n\r\n";

/// Accepts TCP connections (with `TCP_NODELAY`, as [`crate::serve`]) that
/// close after their first streamed response.
pub(crate) struct ClosingListener {
    inner: TcpListener,
}

impl ClosingListener {
    pub(crate) fn new(inner: TcpListener) -> ClosingListener {
        ClosingListener { inner }
    }
}

impl axum::serve::Listener for ClosingListener {
    type Io = CloseAfterStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        (
            CloseAfterStream {
                stream,
                tail: Vec::with_capacity(LAST_CHUNK.len()),
                finished: false,
                reader: None,
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that reads as closed once a chunked body has ended.
pub(crate) struct CloseAfterStream {
    stream: TcpStream,
    /// The last bytes written, to find [`LAST_CHUNK`] across writes.
    tail: Vec<u8>,
    finished: bool,
    /// The task waiting to read: the server polls for the next request
    /// while the response is still streaming, so it must be woken to see
    /// the end of input.
    reader: Option<Waker>,
}

impl CloseAfterStream {
    fn wrote(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        let keep = LAST_CHUNK.len();
        if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
        if self.tail == LAST_CHUNK && !self.finished {
            self.finished = true;
            if let Some(reader) = self.reader.take() {
                reader.wake();
            }
        }
    }
}

impl AsyncRead for CloseAfterStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.finished {
            // End of input: the server drops the connection.
            return Poll::Ready(Ok(()));
        }
        self.reader = Some(cx.waker().clone());
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CloseAfterStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            self.wrote(&buf[..n]);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            let mut left = n;
            for b in bufs {
                if left == 0 {
                    break;
                }
                let take = left.min(b.len());
                self.wrote(&b[..take]);
                left -= take;
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
