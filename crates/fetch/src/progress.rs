//! Progress bars, on stderr only.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Read/write granularity for streaming copies and hashing: large enough that per-call overhead
/// vanishes next to disk and network time, small enough that the bar moves smoothly.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// A byte-count bar on stderr, or a hidden one. indicatif draws nothing when stderr is not a
/// terminal, so logs and pipes stay clean even with `show` set.
pub(crate) fn bar(show: bool, total_bytes: u64, message: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("static template is valid")
        .progress_chars("=> "),
    );
    bar.set_message(message);
    // Keeps elapsed time and the message fresh while pip downloads a wheel and no bytes flow.
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}
