//! The engine on its own thread, and the handle the rest of the program talks to it through:
//! `submit` returns a per-request event stream; dropping that stream cancels the request (the
//! engine notices within one step and frees its blocks).

use crate::engine::Engine;
use crate::error::EngineError;
use crate::request::{Event, Request};
use std::sync::mpsc;
use std::thread::JoinHandle;
use tf_core::SeqId;
use tokio::sync::{mpsc as tmpsc, oneshot};

enum Command {
    Submit(
        Request,
        tmpsc::UnboundedSender<Event>,
        oneshot::Sender<Result<SeqId, EngineError>>,
    ),
    Cancel(SeqId),
    StopAt(SeqId, usize),
    Stats(oneshot::Sender<EngineStats>),
    SpillAll(oneshot::Sender<usize>),
}

/// A snapshot of the engine's load.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    /// Blocks a new request could get (free, or cached and evictable).
    pub free_blocks: usize,
    /// Of those, blocks holding a cached prefix.
    pub cached_blocks: usize,
    pub cache: crate::blocks::CacheStats,
    /// The prefix cache's disk tier, if it has one.
    pub spill: Option<crate::spill::SpillStats>,
    /// Prompt rows run and reply tokens sent since the engine started.
    pub prefilled_tokens: u64,
    pub generated_tokens: u64,
}

/// Cheap to clone; the engine thread stops when every handle is gone and it is idle (after
/// writing its cached blocks to the disk tier, if it has one: `Engine::spill_all`).
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
}

/// A request's events, in order (`Tokens`…, then `Done`).
pub type EventStream = tmpsc::UnboundedReceiver<Event>;

impl EngineHandle {
    /// Starts `engine` on its own thread.
    pub fn spawn(engine: Engine) -> (EngineHandle, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel();
        let join = std::thread::Builder::new()
            .name("tf-engine".into())
            .spawn(move || run(engine, rx))
            .expect("spawning the engine thread");
        (EngineHandle { tx }, join)
    }

    /// Queues a request; invalid requests are refused here, before any work.
    pub fn submit(&self, req: Request) -> Result<(SeqId, EventStream), EngineError> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let (rtx, rrx) = oneshot::channel();
        self.tx
            .send(Command::Submit(req, etx, rtx))
            .map_err(|_| EngineError::Stopped)?;
        let id = rrx.blocking_recv().map_err(|_| EngineError::Stopped)??;
        Ok((id, erx))
    }

    /// Like [`submit`](Self::submit), for async callers.
    pub async fn submit_async(&self, req: Request) -> Result<(SeqId, EventStream), EngineError> {
        let (etx, erx) = tmpsc::unbounded_channel();
        let (rtx, rrx) = oneshot::channel();
        self.tx
            .send(Command::Submit(req, etx, rtx))
            .map_err(|_| EngineError::Stopped)?;
        let id = rrx.await.map_err(|_| EngineError::Stopped)??;
        Ok((id, erx))
    }

    pub fn cancel(&self, id: SeqId) {
        let _ = self.tx.send(Command::Cancel(id));
    }

    /// Ends request `id`'s reply after its first `keep` tokens (a stop string matched there):
    /// its receipt covers exactly those.
    pub fn stop_at(&self, id: SeqId, keep: usize) {
        let _ = self.tx.send(Command::StopAt(id, keep));
    }

    pub fn stats(&self) -> Option<EngineStats> {
        let (rtx, rrx) = oneshot::channel();
        self.tx.send(Command::Stats(rtx)).ok()?;
        rrx.blocking_recv().ok()
    }

    /// Writes every cached KV block not on disk yet to the disk tier (`Engine::spill_all`),
    /// e.g. before the process exits; the number written (0 without a disk tier), or None if
    /// the engine has stopped. Runs between steps.
    pub fn spill_all(&self) -> Option<usize> {
        let (rtx, rrx) = oneshot::channel();
        self.tx.send(Command::SpillAll(rtx)).ok()?;
        rrx.blocking_recv().ok()
    }
}

impl EngineHandle {
    /// Like [`stats`](Self::stats), for async callers.
    pub async fn stats_async(&self) -> Option<EngineStats> {
        let (rtx, rrx) = oneshot::channel();
        self.tx.send(Command::Stats(rtx)).ok()?;
        rrx.await.ok()
    }

    /// Like [`spill_all`](Self::spill_all), for async callers.
    pub async fn spill_all_async(&self) -> Option<usize> {
        let (rtx, rrx) = oneshot::channel();
        self.tx.send(Command::SpillAll(rtx)).ok()?;
        rrx.await.ok()
    }
}

fn run(mut engine: Engine, rx: mpsc::Receiver<Command>) {
    loop {
        // Idle: block for the next command; busy: take what has arrived and keep stepping.
        let first = if engine.is_idle() {
            match rx.recv() {
                Ok(c) => Some(c),
                Err(_) => {
                    engine.spill_all();
                    return;
                }
            }
        } else {
            None
        };
        let mut disconnected = false;
        let handle = |c: Command, engine: &mut Engine| match c {
            Command::Submit(req, events, reply) => {
                let _ = reply.send(engine.submit(req, events));
            }
            Command::Cancel(id) => engine.cancel(id),
            Command::StopAt(id, keep) => engine.stop_at(id, keep),
            Command::Stats(reply) => {
                let _ = reply.send(EngineStats {
                    running: engine.running(),
                    waiting: engine.waiting(),
                    free_blocks: engine.free_blocks(),
                    cached_blocks: engine.cached_blocks(),
                    cache: engine.cache_stats(),
                    spill: engine.spill_stats(),
                    prefilled_tokens: engine.token_totals().0,
                    generated_tokens: engine.token_totals().1,
                });
            }
            Command::SpillAll(reply) => {
                let _ = reply.send(engine.spill_all());
            }
        };
        if let Some(c) = first {
            handle(c, &mut engine);
        }
        loop {
            match rx.try_recv() {
                Ok(c) => handle(c, &mut engine),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    disconnected = true;
                    break;
                }
            }
        }
        // A failed forward is reported to its requests; the engine keeps serving the others.
        let _ = engine.step();
        if disconnected && engine.is_idle() {
            engine.spill_all();
            return;
        }
    }
}
