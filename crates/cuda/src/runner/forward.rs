//! The forward pass on the device: the op sequence of `tf_models::Model::forward`, each op a
//! kernel with the CPU's arithmetic.

use std::collections::HashMap;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use tf_engine::runner::Row;
use tf_engine::EngineError;
use tf_models::ModelError;

use super::scratch::{matmul, LOGIT_ROWS};
use super::{CudaRunner, Graph, GRAPH_ROWS};
use crate::rowops::{AttnDims, AttnKeys};
use crate::{CudaError, Result};

/// What a call needs on the device, built on the host.
pub struct HostRows {
    /// Embedding rows, `d_model` values each.
    x: Vec<f32>,
    pos: Vec<i32>,
    /// Cache index each row's key and value go to.
    slot: Vec<i32>,
    /// Per row: table offset, key count, remap base (-1: none), remap offset.
    meta: Vec<i32>,
    tables: Vec<i32>,
    remaps: Vec<i32>,
    /// Rows whose logits are wanted.
    want: Vec<i32>,
}

impl CudaRunner {
    /// Checks the rows and lays out what the kernels read.
    pub(super) fn prepare(&self, rows: &[Row]) -> std::result::Result<HostRows, EngineError> {
        let cfg = &self.model.config;
        let d = cfg.d_model;
        let embed = &self.model.weights().embed;
        let mut h = HostRows {
            x: vec![0f32; rows.len() * d],
            pos: Vec::with_capacity(rows.len()),
            slot: Vec::with_capacity(rows.len()),
            meta: Vec::with_capacity(4 * rows.len()),
            tables: Vec::new(),
            remaps: Vec::new(),
            want: Vec::new(),
        };
        let mut table_at: HashMap<(usize, usize), i32> = HashMap::new();
        for (r, row) in rows.iter().enumerate() {
            self.model.check_row(row)?;
            if row.pos >= self.rope_positions {
                return Err(ModelError::PositionOutOfRange {
                    pos: row.pos,
                    context: self.rope_positions,
                }
                .into());
            }
            let bytes = embed
                .row(row.token as usize)
                .expect("token checked against vocab");
            tf_weights::dequantize_row(embed.dtype, bytes, &mut h.x[r * d..(r + 1) * d]);
            h.pos.push(row.pos as i32);
            h.slot.push(self.cache_index(row.table, row.slot())?);
            let key = (row.table.as_ptr() as usize, row.table.len());
            let toff = match table_at.get(&key) {
                Some(&o) => o,
                None => {
                    let o = h.tables.len() as i32;
                    for &b in row.table {
                        if b as usize >= self.blocks {
                            return Err(EngineError::InvalidRequest(format!(
                                "KV block {b} beyond the cache's {} blocks",
                                self.blocks
                            )));
                        }
                        h.tables.push(b as i32);
                    }
                    table_at.insert(key, o);
                    o
                }
            };
            let (base, roff) = match row.tree {
                Some(t) => {
                    if t.remap.base > row.pos + 1 || t.remap.slots.len() < row.pos + 1 - t.remap.base
                    {
                        return Err(EngineError::InvalidRequest(
                            "tree row remap does not cover its keys".into(),
                        ));
                    }
                    let o = h.remaps.len() as i32;
                    h.remaps
                        .extend(t.remap.slots.iter().map(|&s| s as i32));
                    (t.remap.base as i32, o)
                }
                None => (-1, 0),
            };
            h.meta.extend([toff, row.pos as i32 + 1, base, roff]);
            if row.logits {
                h.want.push(r as i32);
            }
        }
        Ok(h)
    }

    /// Uploads `h`, runs the layers and the output head, and returns the wanted logits.
    pub(super) fn run(&mut self, m: usize, h: &HostRows) -> Result<Vec<f32>> {
        if self
            .s
            .reserve(&self.gpu, h.tables.len().max(1), h.remaps.len().max(1))?
        {
            self.graphs.clear();
        }
        let st = self.gpu.stream.clone();
        st.memcpy_htod(&h.x, &mut self.s.x)?;
        st.memcpy_htod(&h.pos, &mut self.s.pos)?;
        st.memcpy_htod(&h.slot, &mut self.s.slot)?;
        st.memcpy_htod(&h.meta, &mut self.s.meta)?;
        if !h.tables.is_empty() {
            st.memcpy_htod(&h.tables, &mut self.s.tables)?;
        }
        if !h.remaps.is_empty() {
            st.memcpy_htod(&h.remaps, &mut self.s.remaps)?;
        }
        let vocab = self.model.config.vocab;
        if h.want.is_empty() {
            self.layers(m)?;
            self.gpu.sync()?;
            return Ok(Vec::new());
        }
        let mut out = vec![0f32; h.want.len() * vocab];
        if self.use_graphs && m <= GRAPH_ROWS && !self.prof.on() {
            // The graph computes logits for every row; the wanted ones are copied back.
            let all: Vec<i32> = (0..m as i32).collect();
            st.memcpy_htod(&all, &mut self.s.idx)?;
            if !self.graphs.contains_key(&m) {
                let g = self.capture(m)?;
                self.graphs.insert(m, g);
            }
            self.graphs[&m].0.launch()?;
            let (lo, hi) = (h.want[0] as usize, *h.want.last().unwrap() as usize + 1);
            let mut span = vec![0f32; (hi - lo) * vocab];
            st.memcpy_dtoh(&self.s.logits.slice(lo * vocab..hi * vocab), &mut span)?;
            self.gpu.sync()?;
            for (j, &r) in h.want.iter().enumerate() {
                let r = r as usize - lo;
                out[j * vocab..(j + 1) * vocab].copy_from_slice(&span[r * vocab..(r + 1) * vocab]);
            }
            return Ok(out);
        }
        self.layers(m)?;
        for (b, idx) in h.want.chunks(LOGIT_ROWS).enumerate() {
            st.memcpy_htod(idx, &mut self.s.idx)?;
            self.head(idx.len())?;
            let at = b * LOGIT_ROWS * vocab;
            st.memcpy_dtoh(
                &self.s.logits.slice(0..idx.len() * vocab),
                &mut out[at..at + idx.len() * vocab],
            )?;
        }
        self.gpu.sync()?;
        Ok(out)
    }

    fn capture(&mut self, m: usize) -> Result<Graph> {
        let st = self.gpu.stream.clone();
        st.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let body = self.layers(m).and_then(|_| self.head(m));
        let graph = st.end_capture(CUgraphInstantiate_flags(0));
        body?;
        let graph = graph?.ok_or_else(|| CudaError::Driver("empty graph captured".into()))?;
        graph.upload()?;
        Ok(Graph(graph))
    }

    fn next_tag(&mut self) -> u64 {
        self.tag += 1;
        self.tag
    }

    /// Every layer over the `m` rows in `s.x` (positions, slots and keys already uploaded).
    fn layers(&mut self, m: usize) -> Result<()> {
        let cfg = self.model.config.clone();
        let (d, qd, kvd, f) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let eps = cfg.norm_eps;
        let dims = AttnDims {
            rows: m,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
        };
        let gpu = self.gpu.clone();
        let mut prof = std::mem::take(&mut self.prof);
        prof.start(&gpu);
        for li in 0..self.w.layers.len() {
            // Four matmul inputs per layer: h (q/k/v), att, h (gate/up), act.
            let t = self.tag;
            self.tag += 4;
            let lw = &self.w.layers[li];
            let s = &mut self.s;
            gpu.rms_norm(&s.x, &lw.attn_norm, d, eps, m, &mut s.h)?;
            prof.mark(&gpu, "norm");
            let tag = t + 1;
            matmul(&gpu, &lw.wq, &s.h, tag, m, &mut s.acts, &mut s.q)?;
            matmul(&gpu, &lw.wk, &s.h, tag, m, &mut s.acts, &mut s.k)?;
            matmul(&gpu, &lw.wv, &s.h, tag, m, &mut s.acts, &mut s.v)?;
            prof.mark(&gpu, "qkv");
            if let Some(b) = &lw.bq {
                gpu.add_bias(&mut s.q, b, m, qd)?;
            }
            if let Some(b) = &lw.bk {
                gpu.add_bias(&mut s.k, b, m, kvd)?;
            }
            if let Some(b) = &lw.bv {
                gpu.add_bias(&mut s.v, b, m, kvd)?;
            }
            prof.mark(&gpu, "bias");
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                let hd = cfg.head_dim;
                gpu.rms_norm(&s.q, qn, hd, eps, m * cfg.n_heads, &mut s.tmp)?;
                gpu.stream
                    .memcpy_dtod(&s.tmp.slice(0..m * qd), &mut s.q.slice_mut(0..m * qd))?;
                gpu.rms_norm(&s.k, kn, hd, eps, m * cfg.n_kv_heads, &mut s.tmp)?;
                gpu.stream
                    .memcpy_dtod(&s.tmp.slice(0..m * kvd), &mut s.k.slice_mut(0..m * kvd))?;
            }
            let (hd, rd, style) = (cfg.head_dim, cfg.rope_dim, cfg.rope_style);
            gpu.rope(&mut s.q, &s.pos, m, cfg.n_heads, hd, rd, style, &self.rope_cs)?;
            gpu.rope(&mut s.k, &s.pos, m, cfg.n_kv_heads, hd, rd, style, &self.rope_cs)?;
            prof.mark(&gpu, "rope");
            let (kc, vc) = (&mut self.kc[li], &mut self.vc[li]);
            gpu.kv_write(&s.k, &s.v, &s.slot, m, kvd, kc, vc)?;
            prof.mark(&gpu, "kv");
            let keys = AttnKeys {
                meta: &s.meta,
                tables: &s.tables,
                remaps: &s.remaps,
            };
            gpu.attention(dims, &s.q, kc, vc, &keys, &mut s.att)?;
            prof.mark(&gpu, "attn");
            let tag = t + 2;
            matmul(&gpu, &lw.wo, &s.att, tag, m, &mut s.acts, &mut s.o)?;
            prof.mark(&gpu, "wo");
            gpu.add_into(&mut s.x, &s.o, m * d)?;
            prof.mark(&gpu, "add");

            gpu.rms_norm(&s.x, &lw.ffn_norm, d, eps, m, &mut s.h)?;
            prof.mark(&gpu, "norm");
            let tag = t + 3;
            matmul(&gpu, &lw.w_gate, &s.h, tag, m, &mut s.acts, &mut s.gate)?;
            matmul(&gpu, &lw.w_up, &s.h, tag, m, &mut s.acts, &mut s.up)?;
            prof.mark(&gpu, "gate_up");
            gpu.swiglu(&s.gate, &s.up, m * f, &mut s.act)?;
            prof.mark(&gpu, "swiglu");
            let tag = t + 4;
            matmul(&gpu, &lw.w_down, &s.act, tag, m, &mut s.acts, &mut s.o)?;
            prof.mark(&gpu, "down");
            gpu.add_into(&mut s.x, &s.o, m * d)?;
            prof.mark(&gpu, "add");
        }
        self.prof = prof;
        Ok(())
    }

    /// Logits of the `n` rows listed in `s.idx` into `s.logits`.
    fn head(&mut self, n: usize) -> Result<()> {
        let tag = self.next_tag();
        let cfg = &self.model.config;
        let d = cfg.d_model;
        let gpu = self.gpu.clone();
        let s = &mut self.s;
        gpu.gather_rows(&s.x, &s.idx, n, d, &mut s.xs)?;
        gpu.rms_norm(&s.xs, &self.w.norm, d, cfg.norm_eps, n, &mut s.hs)?;
        matmul(&gpu, &self.w.output, &s.hs, tag, n, &mut s.acts, &mut s.logits)?;
        self.prof.mark(&gpu, "head");
        Ok(())
    }
}
