//! The recurrent layers' state of each sequence, beside the KV cache: per Gated DeltaNet layer,
//! the short convolution's last inputs and the delta rule's matrix of each value head.
//!
//! A position's state is one arithmetic however it is reached (`tf_kernels::deltanet`), so the
//! cache keeps only what that arithmetic needs, and rows say what they are:
//!
//! - a row with `keep` holds a committed token: the sequence's *committed* state advances over
//!   it in place. Its position says that every earlier position is committed too: the
//!   speculative rows of earlier calls at those positions (accepted guesses) are replayed from
//!   their logged inputs first, the same steps as when they ran.
//! - a row without `keep` is a guess: it runs from a copy of the committed state (its parent is
//!   the committed end) or continues the previous row of the call (its parent is that row: a
//!   chain, or a tree branch), and logs its inputs under its KV slot. Nothing it does reaches
//!   the committed state, so rejecting it costs nothing; accepting it costs a replay of the
//!   recurrence only (no matmul) at the next call.
//!
//! Snapshots: the committed state after the last position of a full block is kept for the
//! prefix cache under that block's id (every [`StateCache::stride`]-th block, and the last one
//! a call's committed rows cross), so that a sequence resumed from cached blocks restores it.
//! A snapshot is dropped when a row writes into its block again (the block went to another
//! prefix), and least recently made ones go when the store passes its budget. A missing
//! snapshot only makes a resumed prefix shorter, never a token different.

use crate::error::{ModelError, Result};
use crate::model::Row;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use tf_core::{BlockId, SeqId};
use tf_kernels::kv::BLOCK_SIZE;

/// Where one recurrent layer's parts sit in a sequence's state and in a row's logged inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerPart {
    /// The convolution's last `kernel - 1` inputs (oldest first, channel contiguous).
    pub conv: Range<usize>,
    /// The delta rule's `v_heads x dk x dv` matrices.
    pub delta: Range<usize>,
    /// A row's inputs: the projected channels before the convolution, then the gate inputs.
    pub log: Range<usize>,
}

/// Sizes of one recurrent layer: convolution channels and kernel, the recurrence's state, and
/// the per-row gate inputs it reads besides the channels (Gated DeltaNet: `a` and `b` per value
/// head; Mamba-2: `dt` per head).
#[derive(Clone, Copy, Debug)]
pub struct LayerSize {
    pub channels: usize,
    pub kernel: usize,
    pub delta: usize,
    pub gates: usize,
}

/// How a row's state is reached, decided once per call for every layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum From {
    /// A committed row: the committed state advances.
    Committed,
    /// A guess whose parent is the committed end: from a copy of the committed state.
    Fresh,
    /// A guess whose parent is the call's previous row of the sequence.
    Previous,
}

pub(crate) struct RowPlan {
    /// Index into [`CallPlan::seqs`].
    pub seq: usize,
    pub from: From,
    /// Keep the committed state after this row as this block's snapshot.
    pub snap: Option<BlockId>,
}

pub(crate) struct SeqPlan {
    pub id: SeqId,
    /// Logged rows to replay into the committed state before this call's rows, in position
    /// order, each with the block whose snapshot the state after it makes (if any).
    pub replay: Vec<(Vec<f32>, Option<BlockId>)>,
}

/// What [`StateCache::begin`] decided for one forward call.
pub(crate) struct CallPlan {
    pub rows: Vec<RowPlan>,
    pub seqs: Vec<SeqPlan>,
    /// Snapshots made during the call, stored when it ends.
    pub snaps: HashMap<BlockId, Vec<f32>>,
}

struct SeqState {
    /// The position the committed state follows; `None` before position 0.
    at: Option<usize>,
    committed: Vec<f32>,
    /// The running guess chain's state.
    work: Vec<f32>,
    /// The last call's guesses' inputs, by KV slot.
    log: HashMap<usize, Vec<f32>>,
}

/// Kept snapshots by block, and the order they were made in (oldest first).
#[derive(Default)]
struct Snapshots {
    by_block: HashMap<BlockId, (u64, Vec<f32>)>,
    order: BTreeMap<u64, BlockId>,
    tick: u64,
}

pub struct StateCache {
    parts: Vec<LayerPart>,
    state_len: usize,
    log_len: usize,
    seqs: HashMap<SeqId, SeqState>,
    snaps: Snapshots,
    /// Snapshots kept at most.
    max_snaps: usize,
    /// Blocks between the snapshots a long prefill keeps (besides the last block it crosses).
    pub stride: usize,
    pub(crate) call: Option<CallPlan>,
}

impl StateCache {
    /// A cache for recurrent layers of `sizes` (in layer order), keeping at most `max_snaps`
    /// block snapshots.
    pub fn new(sizes: &[LayerSize], max_snaps: usize) -> StateCache {
        let (mut s, mut l) = (0, 0);
        let parts = sizes
            .iter()
            .map(|z| {
                let conv = s..s + (z.kernel - 1) * z.channels;
                let delta = conv.end..conv.end + z.delta;
                s = delta.end;
                let log = l..l + z.channels + z.gates;
                l = log.end;
                LayerPart { conv, delta, log }
            })
            .collect();
        StateCache {
            parts,
            state_len: s,
            log_len: l,
            seqs: HashMap::new(),
            snaps: Snapshots::default(),
            max_snaps,
            stride: 8,
            call: None,
        }
    }

    /// Floats of one sequence's state (all recurrent layers).
    pub fn state_len(&self) -> usize {
        self.state_len
    }

    /// Bytes a running sequence holds: its committed and working states.
    pub fn bytes_per_seq(&self) -> usize {
        2 * self.state_len * 4
    }

    pub fn part(&self, layer: usize) -> &LayerPart {
        &self.parts[layer]
    }

    /// Forgets sequence `id` (finished, or sent back to wait: it starts again from a snapshot
    /// or from position 0).
    pub fn release(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }

    /// Whether the state after block `b`'s last position is kept.
    pub fn has_snapshot(&self, b: BlockId) -> bool {
        self.snaps.by_block.contains_key(&b)
    }

    /// The snapshot of block `b`, if kept.
    pub fn snapshot(&self, b: BlockId) -> Option<&[f32]> {
        self.snaps.by_block.get(&b).map(|(_, s)| s.as_slice())
    }

    /// Stores `state` as block `b`'s snapshot (a disk-tier load); false if its length is wrong.
    pub fn put_snapshot(&mut self, b: BlockId, state: &[f32]) -> bool {
        if state.len() != self.state_len {
            return false;
        }
        self.keep_snapshot(b, state.to_vec());
        true
    }

    /// Drops block `b`'s snapshot (its KV is being replaced).
    pub fn drop_snapshot(&mut self, b: BlockId) {
        if let Some((t, _)) = self.snaps.by_block.remove(&b) {
            self.snaps.order.remove(&t);
        }
    }

    fn keep_snapshot(&mut self, b: BlockId, state: Vec<f32>) {
        self.drop_snapshot(b);
        if self.max_snaps == 0 {
            return;
        }
        while self.snaps.by_block.len() >= self.max_snaps {
            let Some((_, old)) = self.snaps.order.pop_first() else {
                break;
            };
            self.snaps.by_block.remove(&old);
        }
        self.snaps.tick += 1;
        self.snaps.order.insert(self.snaps.tick, b);
        self.snaps.by_block.insert(b, (self.snaps.tick, state));
    }

    /// Moves accepted tree rows' logged inputs from their slots to their positions, as the KV
    /// cache moves their keys and values.
    pub fn move_slots(&mut self, id: SeqId, moves: &[(usize, usize)]) {
        if let Some(s) = self.seqs.get_mut(&id) {
            for &(from, to) in moves {
                if let Some(entry) = s.log.remove(&from) {
                    s.log.insert(to, entry);
                }
            }
        }
    }

    /// Plans a forward call over `rows`: where each row's state comes from, the accepted guesses
    /// to replay, the snapshots to make. Restores a sequence that starts at a block boundary
    /// from that block's snapshot. Fails, touching nothing, when a row's parent state is not
    /// there (an engine error).
    pub(crate) fn begin(&mut self, rows: &[Row]) -> Result<()> {
        let mut seqs: Vec<SeqPlan> = Vec::new();
        let mut index: HashMap<SeqId, usize> = HashMap::new();
        // Per sequence of the call: the position its committed state will follow, and the slot
        // of its previous row.
        let mut at: Vec<Option<usize>> = Vec::new();
        let mut prev_slot: Vec<Option<usize>> = Vec::new();
        let mut restores: Vec<(SeqId, Option<(usize, BlockId)>)> = Vec::new();
        let mut plans = Vec::with_capacity(rows.len());
        let mut snap_rows: Vec<Vec<(usize, usize)>> = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            let si = match index.get(&row.seq) {
                Some(&i) => i,
                None => {
                    let i = seqs.len();
                    index.insert(row.seq, i);
                    let known = self.seqs.get(&row.seq);
                    let first_parent = row.pos.checked_sub(1);
                    let mut replay = Vec::new();
                    let mut now = known.and_then(|s| s.at);
                    let mut restore = None;
                    let usable = |now: Option<usize>| match (now, first_parent) {
                        (None, p) => p.is_none(),
                        (Some(a), Some(p)) => a <= p,
                        (Some(_), None) => false,
                    };
                    // A sequence unknown here, or behind what it can reach, starts from a
                    // block's snapshot or from nothing.
                    let reach = |now: Option<usize>| {
                        let from = now.map_or(0, |a| a + 1);
                        (from..row.pos).all(|p| known.is_some_and(|s| s.log.contains_key(&p)))
                    };
                    if known.is_none() || !usable(now) || !reach(now) {
                        now = None;
                        if row.pos > 0 {
                            let b = row.pos / BLOCK_SIZE;
                            let block = row.table.get(b.wrapping_sub(1)).copied();
                            match block.filter(|&blk| {
                                row.pos.is_multiple_of(BLOCK_SIZE) && self.has_snapshot(blk)
                            }) {
                                Some(blk) => {
                                    now = Some(row.pos - 1);
                                    restore = Some((row.pos - 1, blk));
                                }
                                None => {
                                    return Err(ModelError::StateUnavailable {
                                        seq: row.seq,
                                        pos: row.pos,
                                    })
                                }
                            }
                        }
                        restores.push((row.seq, restore));
                    }
                    // Accepted guesses between the committed state and this row.
                    let from = now.map_or(0, |a| a + 1);
                    if restore.is_none() {
                        for p in from..row.pos {
                            let entry = known.and_then(|s| s.log.get(&p)).cloned();
                            replay.push((entry.expect("checked by reach"), None));
                        }
                    }
                    let end = row.pos.checked_sub(1);
                    // Snapshots along the replay (the last block it crosses).
                    if let (Some(end), true) = (end, !replay.is_empty()) {
                        let first = from;
                        if let Some(e) = last_boundary(first, end) {
                            let idx = e - first;
                            replay[idx].1 = row.table.get(e / BLOCK_SIZE).copied();
                        }
                    }
                    seqs.push(SeqPlan {
                        id: row.seq,
                        replay,
                    });
                    at.push(end);
                    prev_slot.push(end);
                    snap_rows.push(Vec::new());
                    i
                }
            };
            let slot = row.slot();
            let parent = parent_slot(row);
            let from = if row.keep {
                if parent != at[si] {
                    return Err(ModelError::StateUnavailable {
                        seq: row.seq,
                        pos: row.pos,
                    });
                }
                at[si] = Some(row.pos);
                From::Committed
            } else if parent.is_some() && parent == prev_slot[si] && parent != at[si] {
                From::Previous
            } else if parent == at[si] {
                From::Fresh
            } else {
                return Err(ModelError::StateUnavailable {
                    seq: row.seq,
                    pos: row.pos,
                });
            };
            if from == From::Committed && (row.pos + 1).is_multiple_of(BLOCK_SIZE) {
                snap_rows[si].push((r, row.pos));
            }
            prev_slot[si] = Some(slot);
            plans.push(RowPlan {
                seq: si,
                from,
                snap: None,
            });
        }
        // Committed rows keep every stride-th block's state and the last block they cross.
        for list in &snap_rows {
            let last = list.len().saturating_sub(1);
            for (i, &(r, pos)) in list.iter().enumerate() {
                let block = pos / BLOCK_SIZE;
                if i == last || (block + 1).is_multiple_of(self.stride.max(1)) {
                    plans[r].snap = rows[r].table.get(block).copied();
                }
            }
        }
        // Everything checked: apply.
        for (id, restore) in restores {
            let s = self.seqs.entry(id).or_insert_with(|| SeqState {
                at: None,
                committed: Vec::new(),
                work: Vec::new(),
                log: HashMap::new(),
            });
            s.committed.clear();
            s.committed.resize(self.state_len, 0.0);
            s.at = None;
            s.log.clear();
            if let Some((at, blk)) = restore {
                let (_, snap) = &self.snaps.by_block[&blk];
                s.committed.copy_from_slice(snap);
                s.at = Some(at);
            }
        }
        for (sp, at) in seqs.iter().zip(&at) {
            let s = self.seqs.get_mut(&sp.id).expect("restored or known");
            s.log.clear();
            s.work.resize(self.state_len, 0.0);
            s.at = *at;
        }
        for row in rows {
            let b = row.slot() / BLOCK_SIZE;
            if let Some(&blk) = row.table.get(b) {
                self.drop_snapshot(blk);
            }
        }
        self.call = Some(CallPlan {
            rows: plans,
            seqs,
            snaps: HashMap::new(),
        });
        Ok(())
    }

    /// The committed and working states of a sequence of the call.
    pub(crate) fn states(&mut self, id: SeqId) -> (&mut [f32], &mut [f32]) {
        let s = self.seqs.get_mut(&id).expect("planned sequences are known");
        (&mut s.committed, &mut s.work)
    }

    /// The log entry of a guess at `slot` (created zeroed at the call's first layer).
    pub(crate) fn log_entry(&mut self, id: SeqId, slot: usize) -> &mut [f32] {
        let len = self.log_len;
        let s = self.seqs.get_mut(&id).expect("planned sequences are known");
        s.log.entry(slot).or_insert_with(|| vec![0.0; len])
    }

    /// Ends the call: its snapshots are stored.
    pub(crate) fn end(&mut self) {
        if let Some(call) = self.call.take() {
            for (b, state) in call.snaps {
                self.keep_snapshot(b, state);
            }
        }
    }

    /// Drops a call that failed part-way: its sequences' states are no longer sound.
    pub(crate) fn abort(&mut self) {
        if let Some(call) = self.call.take() {
            for sp in call.seqs {
                self.seqs.remove(&sp.id);
            }
        }
    }
}

/// The slot of a row's parent (the position before it, through a tree row's remap).
fn parent_slot(row: &Row) -> Option<usize> {
    let p = row.pos.checked_sub(1)?;
    Some(match row.tree {
        Some(t) if p >= t.remap.base => t.remap.slots[p - t.remap.base],
        _ => p,
    })
}

/// The last position `e` in `first..=end` that ends a block.
fn last_boundary(first: usize, end: usize) -> Option<usize> {
    let e = (end + 1) / BLOCK_SIZE * BLOCK_SIZE;
    (e > first && e > 0).then(|| e - 1)
}
