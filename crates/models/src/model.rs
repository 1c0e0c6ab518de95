//! A loaded model: configuration, weights in place (mmap), the RoPE table, and the forward pass.

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::plan::Plan;
use crate::weights::{bind, Arena, Naming, Panels, Weights};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use tf_core::{BlockId, DType, SeqId, TokenId};
use tf_kernels::ops::RopeTable;
use tf_kernels::SimdLevel;
use tf_weights::{GgufFile, SafetensorsModel, TensorSource};

/// One row of a forward call: a token of some sequence at an absolute position.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    pub token: TokenId,
    pub pos: usize,
    /// The sequence the row belongs to (recurrent layers keep a state per sequence).
    pub seq: SeqId,
    /// The row's token is committed, and so is every earlier position of the sequence:
    /// recurrent layers advance the sequence's kept state over it. A guess leaves it alone.
    pub keep: bool,
    /// The sequence's KV block table (must cover `pos`).
    pub table: &'a [BlockId],
    /// Whether this row's logits are wanted.
    pub logits: bool,
    /// Tree-draft placement; `None` = this row's key and value go to slot `pos` and it reads
    /// position p from slot p.
    pub tree: Option<TreeRow<'a>>,
}

/// A tree-draft row: written to `slot`, reading positions from `remap.base` on through the remap.
#[derive(Clone, Copy, Debug)]
pub struct TreeRow<'a> {
    pub slot: usize,
    pub remap: tf_kernels::attention::KeyRemap<'a>,
}

impl Row<'_> {
    /// The KV slot this row writes.
    pub fn slot(&self) -> usize {
        self.tree.map_or(self.pos, |t| t.slot)
    }
}

/// Where the weights live.
pub enum Source {
    Gguf(Arc<GgufFile>),
    Hf(Arc<SafetensorsModel>),
}

pub struct Model {
    // Declared first so it is dropped before the storage it borrows from.
    pub(crate) weights: Weights<'static>,
    /// Weights relaid out at load, which `weights` may borrow (dropped after it).
    _arena: Box<Arena>,
    /// The matrices in panel layout for the CPU kernels, made on first CPU use.
    panels: OnceLock<Panels>,
    pub config: ModelConfig,
    /// The decoder as data, which the forward walks.
    pub plan: Plan,
    /// One table per [`Plan::ropes`] entry.
    pub(crate) ropes: Vec<RopeTable>,
    pub level: SimdLevel,
    source: Source,
    path: PathBuf,
}

/// Bytes of recurrent-state snapshots a model keeps for the prefix cache at most.
pub const SNAPSHOT_BYTES: usize = 512 << 20;

/// Positions covered by the precomputed RoPE table (beyond it, the same values are computed on
/// the fly).
const ROPE_TABLE_MAX: usize = 32768;

impl Model {
    /// Loads a GGUF file or a Hugging Face safetensors directory. The architecture and every tensor
    /// shape are checked before any weight is read.
    pub fn load(path: &Path) -> Result<Model> {
        if path.is_dir() {
            let st = Arc::new(SafetensorsModel::open(path)?);
            let cfg = ModelConfig::from_hf(st.config(), &path.display().to_string())?;
            Self::assemble(cfg, Source::Hf(st), path)
        } else {
            let g = Arc::new(GgufFile::open(path)?);
            let cfg = ModelConfig::from_gguf(&g)?;
            Self::assemble(cfg, Source::Gguf(g), path)
        }
    }

    /// A model from an already-parsed GGUF (e.g. one built in memory by a test).
    pub fn from_gguf(g: GgufFile) -> Result<Model> {
        let cfg = ModelConfig::from_gguf(&g)?;
        let path = g.path().to_path_buf();
        Self::assemble(cfg, Source::Gguf(Arc::new(g)), &path)
    }

    fn assemble(config: ModelConfig, source: Source, path: &Path) -> Result<Model> {
        let (src, naming): (&dyn TensorSource, Naming) = match &source {
            Source::Gguf(g) => (g.as_ref(), Naming::Gguf),
            Source::Hf(s) => (s.as_ref(), Naming::Hf),
        };
        // SAFETY: `weights` borrows from the mmaps owned (through an `Arc`) by `source`, which is
        // stored in the same `Model`, never replaced, and dropped after `weights`. Mmapped memory
        // does not move when the `Arc` moves.
        let src: &'static dyn TensorSource =
            unsafe { std::mem::transmute::<&dyn TensorSource, &'static dyn TensorSource>(src) };
        let arena = Box::<Arena>::default();
        // SAFETY: as for `src`: the arena is boxed (its address never changes), stored in the
        // same `Model` after `weights` (so dropped after it), and never replaced.
        let arena_ref: &'static Arena = unsafe { &*(arena.as_ref() as *const Arena) };
        let weights = bind(src, arena_ref, naming, &config)?;
        let plan = Plan::new(&config, weights.rope_freqs.as_deref());
        let table_len = config.context_len.min(ROPE_TABLE_MAX);
        let ropes = plan.ropes.iter().map(|r| r.table(table_len)).collect();
        Ok(Model {
            weights,
            _arena: arena,
            panels: OnceLock::new(),
            config,
            plan,
            ropes,
            level: tf_kernels::detect(),
            source,
            path: path.to_path_buf(),
        })
    }

    /// Makes the panel form of every quantized matrix that has one, for the CPU kernels (done
    /// once; the first CPU forward does it otherwise): every type with a panel form where the
    /// CPU has AVX-512 VNNI, Q4_0 and Q4_K where it has AVX2 (`matmul::packs_at`); with
    /// `TENSORFOLD_PANELS=0`, nothing. The panels hold the same integers, so results
    /// are the same bits either way; only speed changes.
    pub fn prepare_cpu(&self) {
        self.panels();
    }

    /// Like [`prepare_cpu`](Model::prepare_cpu), but with `panels: false` the matrices stay in
    /// their stored layout only (for comparing the two kernels' bits). Returns false when the
    /// choice was already made.
    pub fn prepare_cpu_with(&self, panels: bool) -> bool {
        let mut fresh = false;
        self.panels.get_or_init(|| {
            fresh = true;
            self.make_panels(panels)
        });
        fresh
    }

    pub(crate) fn panels(&self) -> &Panels {
        self.panels.get_or_init(|| self.make_panels(true))
    }

    fn make_panels(&self, wanted: bool) -> Panels {
        {
            let off = std::env::var("TENSORFOLD_PANELS").is_ok_and(|v| v == "0");
            if !wanted || off {
                return Panels::none(self.weights.layers.len());
            }
            let level = self.level;
            let p = Panels::pack_where(&self.weights, |d| tf_kernels::matmul::packs_at(level, d));
            if let Some(g) = self.gguf() {
                for m in p.packed_sources(&self.weights) {
                    g.drop_pages(m.data);
                }
            }
            p
        }
    }

    /// Output-head columns of a draft model pruned to its `keep` lowest token ids (byte-level
    /// BPE ids come in merge order, which roughly follows frequency: the few percent of a
    /// reply's tokens past 64K are mostly rare words) plus every control and user-defined
    /// token of a GGUF vocabulary (end of text, chat markers, tool-call tags), as ranges
    /// starting on 16-column panels. `keep >= vocab` keeps everything.
    pub fn pruned_head(&self, keep: usize) -> Vec<std::ops::Range<usize>> {
        let vocab = self.config.vocab;
        if keep >= vocab {
            return std::iter::once(0..vocab).collect();
        }
        let mut ranges: Vec<_> = std::iter::once(0..keep.next_multiple_of(16).min(vocab)).collect();
        let types = self
            .gguf()
            .and_then(|g| g.get_i32_array("tokenizer.ggml.token_type").ok())
            .unwrap_or_default();
        for (id, t) in types.iter().enumerate() {
            // 3: control, 4: user-defined (GGUF token types).
            if id >= vocab || !(*t == 3 || *t == 4) {
                continue;
            }
            let panel = id / 16 * 16;
            let last = ranges.last_mut().expect("one range at least");
            if panel < last.end {
                continue;
            }
            if panel == last.end {
                last.end = (panel + 16).min(vocab);
            } else {
                ranges.push(panel..(panel + 16).min(vocab));
            }
        }
        ranges
    }

    /// The bound weights (matrices in place in the mapped file), for other backends to upload.
    pub fn weights(&self) -> &Weights<'static> {
        &self.weights
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF file, when the model came from one (tokenizer and chat template live there).
    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.source {
            Source::Gguf(g) => Some(g),
            Source::Hf(_) => None,
        }
    }

    pub fn hf(&self) -> Option<&SafetensorsModel> {
        match &self.source {
            Source::Hf(s) => Some(s),
            Source::Gguf(_) => None,
        }
    }

    /// Bytes of weight data the model reads (the embedding counted once even when tied).
    pub fn weight_bytes(&self) -> usize {
        let w = &self.weights;
        let mut total = w.embed.data.len() + w.norm.len() * 4;
        if !w.tied_output {
            total += w.output.data.len();
        }
        for l in &w.layers {
            total += l.matrices().iter().map(|m| m.data.len()).sum::<usize>();
            total += (l.attn_norm.len() + l.ffn_norm.len()) * 4;
        }
        total
    }

    /// Bytes the weights occupy in memory on the CPU: [`weight_bytes`](Model::weight_bytes),
    /// twice over for a model held in memory (a requantized draft), whose panels cannot hand
    /// its stored bytes back to the OS the way a mapped file's pages are.
    pub fn resident_weight_bytes(&self) -> usize {
        let twice = self.gguf().is_some_and(|g| g.in_memory());
        self.weight_bytes() * if twice { 2 } else { 1 }
    }

    /// Bytes read from weights per decoded token (everything but the embedding table, of which one
    /// row is read).
    pub fn bytes_per_token(&self) -> usize {
        let w = &self.weights;
        let embed = if w.tied_output { 0 } else { w.embed.data.len() };
        // A token reads only its own experts: `used` of each layer's `experts`.
        let idle_experts: usize = match &self.config.moe {
            None => 0,
            Some(moe) => (w.layers.iter())
                .filter_map(|l| match &l.ffn {
                    crate::weights::Ffn::Moe(x) => Some(x),
                    _ => None,
                })
                .map(|x| {
                    let all: usize = x
                        .experts
                        .iter()
                        .map(|m| m.gate.data.len() + m.up.data.len() + m.down.data.len())
                        .sum();
                    all - all * moe.used / moe.experts
                })
                .sum(),
        };
        // The multi-token-prediction layer runs only when it drafts.
        let mtp: usize = (w.layers.iter().skip(self.plan.layers.len()))
            .map(|l| l.matrices().iter().map(|m| m.data.len()).sum::<usize>())
            .sum::<usize>()
            + w.mtp.as_ref().map_or(0, |m| m.eh_proj.data.len());
        self.weight_bytes() - embed - idle_experts - mtp
    }

    /// [`bytes_per_token`](Model::bytes_per_token) when the output head reads only the columns
    /// in `head` (a draft model's [`pruned_head`](Model::pruned_head)).
    pub fn bytes_per_token_with_head(&self, head: &[std::ops::Range<usize>]) -> usize {
        let vocab = self.config.vocab.max(1);
        let kept: usize = head.iter().map(|r| r.len()).sum::<usize>().min(vocab);
        let out = self.weights.output.data.len();
        self.bytes_per_token() - out + out * kept / vocab
    }

    pub fn tied_output(&self) -> bool {
        self.weights.tied_output
    }

    /// Counts of tensor types over the matrices (for `info`).
    pub fn tensor_types(&self) -> Vec<(DType, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        let w = &self.weights;
        let mut add = |d: DType| *counts.entry(d).or_insert(0) += 1;
        add(w.embed.dtype);
        if !w.tied_output {
            add(w.output.dtype);
        }
        for l in &w.layers {
            for m in l.matrices() {
                add(m.dtype);
            }
        }
        counts.into_iter().collect()
    }

    /// The state cache a model with recurrent layers needs beside a KV cache of `kv_blocks`
    /// blocks (`None` for a model without them): snapshots for at most that many blocks, and
    /// at most [`SNAPSHOT_BYTES`] of them.
    pub fn state_cache(&self, kv_blocks: usize) -> Option<crate::StateCache> {
        let sizes = self.plan.recurrent_sizes();
        if sizes.is_empty() {
            return None;
        }
        let cache = crate::StateCache::new(&sizes, 0);
        let per = cache.state_len() * 4;
        let snaps = (SNAPSHOT_BYTES / per.max(1)).clamp(4, kv_blocks.max(4));
        Some(crate::StateCache::new(&sizes, snaps))
    }

    /// Checks a row against the vocabulary and its block table's room (what `forward` checks).
    pub fn check_row(&self, row: &Row) -> Result<()> {
        if row.token as usize >= self.config.vocab {
            return Err(ModelError::InvalidToken {
                token: row.token,
                vocab: self.config.vocab,
            });
        }
        let cap = row.table.len() * tf_kernels::kv::BLOCK_SIZE;
        let max_slot = row.tree.map_or(row.pos, |t| {
            t.remap.slots.iter().copied().fold(t.slot, usize::max)
        });
        if max_slot >= cap {
            return Err(ModelError::PositionOutOfRange {
                pos: row.pos,
                context: cap,
            });
        }
        Ok(())
    }
}
