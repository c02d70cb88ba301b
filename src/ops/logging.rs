//! Log output on stderr: `log_format = "text"` (colour only when stderr is
//! a terminal and `NO_COLOR` is unset) or `"json"` (one object per line, fields flattened,
//! for journald and log shippers). The level filter comes from `APPLIANCE_LOG` (default
//! `info`).
//!
//! Access log lines (target `appliance::access`, one per request) are gathered in memory
//! and written in batches ([`BATCH_BYTES`], at the latest [`BATCH_MAX_DELAY`] after they
//! were logged) instead of one `write(2)` each; every other line is written at once, after
//! the access lines gathered before it, so stderr keeps the order lines were logged in
//! (docs/decisions.md, Operations).

use std::io::{IsTerminal, Write};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

use crate::config::LogFormat;

/// Installs the global subscriber (first call only; later calls are ignored).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("APPLIANCE_LOG")
        .unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(use_colour(std::io::stderr().is_terminal()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// Colour only on a terminal, and never with `NO_COLOR` set (https://no-color.org).
fn use_colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Gathered access lines are written once they hold this many bytes (about 200 lines)...
pub const BATCH_BYTES: usize = 32 * 1024;

/// ... or at the latest this long after they were logged (a timer, not a wake-up per
/// line). A `kill -9` loses at most this much of the access log; a clean stop loses
/// nothing ([`flush`]).
pub const BATCH_MAX_DELAY: Duration = Duration::from_millis(50);

/// Access lines logged and not yet written, in the order they were logged; at most
/// [`BATCH_BYTES`] and one line.
static PENDING: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The thread that writes gathered access lines every [`BATCH_MAX_DELAY`], started with
/// the first access line (a command that serves no HTTP never starts it).
static FLUSHER: OnceLock<()> = OnceLock::new();

fn pending() -> MutexGuard<'static, Vec<u8>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes the gathered access lines to stderr now (the server calls it as it stops).
pub fn flush() {
    let _ = write_out(&mut pending(), &mut std::io::stderr());
}

/// Writes `lines` to `out` and empties it (also when the write fails: a log that cannot
/// be written must not grow without bound).
fn write_out(lines: &mut Vec<u8>, out: &mut impl Write) -> std::io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let r = out.write_all(lines);
    lines.clear();
    r
}

/// Gathers an access line in `lines`, writing them all to `out` once they reach
/// [`BATCH_BYTES`]. True when lines are left waiting (for the timer).
fn gather(lines: &mut Vec<u8>, line: &[u8], out: &mut impl Write) -> std::io::Result<bool> {
    lines.extend_from_slice(line);
    if lines.len() >= BATCH_BYTES {
        write_out(lines, out)?;
        return Ok(false);
    }
    Ok(true)
}

/// Writes any other line to `out` at once, after the access lines gathered before it.
fn pass(lines: &mut Vec<u8>, line: &[u8], out: &mut impl Write) -> std::io::Result<()> {
    let earlier = write_out(lines, out);
    let this = out.write_all(line);
    earlier.and(this)
}

fn start_flusher() {
    FLUSHER.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(|| loop {
                std::thread::sleep(BATCH_MAX_DELAY);
                flush();
            });
        if let Err(e) = spawned {
            // Without the timer, lines still go out with the next batch or the next other
            // line; say why they may lag.
            let _ = writeln!(
                std::io::stderr(),
                "could not start the access log writer thread: {e}"
            );
        }
    });
}

/// The subscriber's writer: stderr, with access lines gathered ([`Line`]).
struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { access: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Line {
        Line {
            access: meta.target() == super::access::TARGET,
        }
    }
}

/// One formatted line on its way to stderr (the subscriber writes a line with one
/// `write_all`).
struct Line {
    access: bool,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let mut lines = pending();
        if !self.access {
            return pass(&mut lines, buf, &mut std::io::stderr());
        }
        let waiting = gather(&mut lines, buf, &mut std::io::stderr())?;
        drop(lines);
        if waiting {
            start_flusher();
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_lines_wait_for_a_batch_and_other_lines_keep_the_order() {
        let (mut lines, mut out) = (Vec::new(), Vec::new());
        assert!(gather(&mut lines, b"access 1\n", &mut out).unwrap());
        assert!(gather(&mut lines, b"access 2\n", &mut out).unwrap());
        assert!(out.is_empty(), "gathered, not written");
        pass(&mut lines, b"warning\n", &mut out).unwrap();
        assert_eq!(out, b"access 1\naccess 2\nwarning\n");
        assert!(lines.is_empty());
        // A full batch goes out at once, and nothing is left waiting.
        out.clear();
        let long = vec![b'x'; BATCH_BYTES - 1];
        assert!(gather(&mut lines, &long, &mut out).unwrap());
        assert!(!gather(&mut lines, b"\n", &mut out).unwrap());
        assert_eq!(out.len(), BATCH_BYTES);
        assert!(lines.is_empty());
        write_out(&mut lines, &mut out).unwrap();
        assert_eq!(out.len(), BATCH_BYTES, "nothing written twice");
    }
}
