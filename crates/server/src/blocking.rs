//! CPU-heavy request work (chat-template rendering, tokenizing) runs here, off the async
//! workers, so that one huge request cannot stall every other client (`/health` included).
//! At most [`JOBS`] such jobs run at once; the rest wait their turn without holding a worker.

use std::sync::OnceLock;

use tokio::sync::Semaphore;

use crate::error::{ApiError, ApiResult};

/// Rendering and tokenizing jobs at once: the machine's cores are the engine's, so a few.
pub const JOBS: usize = 4;

fn permits() -> &'static Semaphore {
    static PERMITS: OnceLock<Semaphore> = OnceLock::new();
    PERMITS.get_or_init(|| Semaphore::new(JOBS))
}

/// Runs `job` on tokio's blocking pool, one of at most [`JOBS`].
pub async fn run<T: Send + 'static>(
    job: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let _permit = permits()
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the blocking pool is closed".to_string()))?;
    tokio::task::spawn_blocking(job)
        .await
        .map_err(|e| ApiError::internal(format!("a rendering job failed: {e}")))?
}
