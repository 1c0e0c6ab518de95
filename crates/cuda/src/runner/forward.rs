//! The forward pass on the device: the op sequence of `tf_models::Model::forward`, each op a
//! kernel with the CPU's arithmetic.

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use tf_core::TokenId;
use tf_engine::runner::Row;
use tf_engine::{EngineError, NoiseKey, Pick};
use tf_models::ModelError;

use super::layout::{layout, RowLayout};
use super::scratch::{matmul, LOGIT_ROWS};
use super::{CudaRunner, Graph, GRAPH_ROWS};
use crate::{CudaError, Result};

/// What a call hands back for its rows with `logits: true`: the logits, each row's greedy id
/// (taken on the device, so only the ids are copied back), or each row's plain temperature
/// draw (decided from a shortlist found on the device, `keys` for the wanted rows in order).
pub enum Out<'a> {
    Logits(&'a mut Vec<f32>),
    Ids(&'a mut Vec<TokenId>),
    /// The logits left in the page-locked buffer, wanted rows first (at most `LOGIT_ROWS`).
    Pinned,
    Picks(&'a [NoiseKey], &'a mut Vec<Pick>),
}

impl Out<'_> {
    /// The same destination, for one more call.
    pub fn reborrow(&mut self) -> Out<'_> {
        match self {
            Out::Logits(v) => Out::Logits(v),
            Out::Ids(v) => Out::Ids(v),
            Out::Pinned => Out::Pinned,
            Out::Picks(k, p) => Out::Picks(k, p),
        }
    }
}

/// What a call needs on the device, built on the host: the embedding rows and the layout.
pub struct HostRows {
    /// Embedding rows, `d_model` values each.
    x: Vec<f32>,
    l: RowLayout,
}

impl CudaRunner {
    /// Checks the rows, looks up their embeddings and lays out what the kernels read.
    pub(super) fn prepare(&self, rows: &[Row]) -> std::result::Result<HostRows, EngineError> {
        let d = self.model.config.d_model;
        let embed = &self.model.weights().embed;
        let mut x = vec![0f32; rows.len() * d];
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
            let xr = &mut x[r * d..(r + 1) * d];
            tf_weights::dequantize_row(embed.dtype, bytes, xr);
            // The plan's embedding scale, the CPU's multiply (`LayerOps::embed`).
            if let Some(scale) = self.model.plan.embed_scale {
                xr.iter_mut().for_each(|v| *v *= scale);
            }
        }
        Ok(HostRows {
            x,
            l: layout(rows, self.blocks)?,
        })
    }

    /// Uploads `h`, runs the layers and the output head, and appends the wanted rows' logits
    /// or greedy ids to `out`.
    pub(super) fn run(&mut self, m: usize, h: &HostRows, mut out: Out) -> Result<()> {
        if self
            .s
            .reserve(&self.gpu, h.l.tables.len().max(1), h.l.remaps.len().max(1))?
        {
            self.graphs.clear();
        }
        let st = self.gpu.stream.clone();
        st.memcpy_htod(&h.x, &mut self.s.x)?;
        st.memcpy_htod(&h.l.pos, &mut self.s.pos)?;
        st.memcpy_htod(&h.l.slot, &mut self.s.slot)?;
        st.memcpy_htod(&h.l.meta, &mut self.s.meta)?;
        if !h.l.tables.is_empty() {
            st.memcpy_htod(&h.l.tables, &mut self.s.tables)?;
        }
        if !h.l.remaps.is_empty() {
            st.memcpy_htod(&h.l.remaps, &mut self.s.remaps)?;
        }
        if h.l.want.is_empty() {
            self.layers(m)?;
            self.gpu.sync()?;
            return Ok(());
        }
        if let Out::Logits(v) = &mut out {
            v.reserve(h.l.want.len() * self.model.config.vocab);
        }
        // Graphs bake in the attention form, which for few rows needs every row's keys to fit
        // the split partials.
        let split_ok = h.l.max_keys <= self.s.max_chunks * tf_kernels::attention::KEY_CHUNK;
        self.split_ok = split_ok;
        if self.use_graphs && m <= GRAPH_ROWS && !self.prof.on() && split_ok {
            // The graph computes logits for every row; the wanted ones are copied back.
            let all: Vec<i32> = (0..m as i32).collect();
            st.memcpy_htod(&all, &mut self.s.idx)?;
            if !self.graphs.contains_key(&m) {
                let g = self.capture(m)?;
                self.graphs.insert(m, g);
            }
            self.graphs[&m].0.launch()?;
            let (lo, hi) = (h.l.want[0] as usize, *h.l.want.last().unwrap() as usize + 1);
            let want = h.l.want.iter().map(|&r| r as usize);
            return self.take_rows(lo, hi, want, &mut out);
        }
        self.layers(m)?;
        for idx in h.l.want.chunks(LOGIT_ROWS) {
            st.memcpy_htod(idx, &mut self.s.idx)?;
            self.head(idx.len())?;
            self.take_rows(0, idx.len(), 0..idx.len(), &mut out)?;
        }
        self.gpu.sync()?;
        self.prof.flush();
        Ok(())
    }

    /// Appends rows `want` (ascending, within `lo..hi`) of `s.logits` to `out`: the logits, or
    /// the greedy id of each (`argmax_rows` over `lo..hi`, the ids copied back). Waits for the
    /// stream.
    fn take_rows(
        &mut self,
        lo: usize,
        hi: usize,
        want: impl IntoIterator<Item = usize>,
        out: &mut Out,
    ) -> Result<()> {
        let ids = match out {
            Out::Logits(v) => return self.append_logits(lo, hi, want, v),
            Out::Picks(keys, picks) => return self.append_picks(lo, hi, want, keys, picks),
            Out::Ids(ids) => ids,
            Out::Pinned => {
                let vocab = self.model.config.vocab;
                let src = self.s.logits.slice(lo * vocab..hi * vocab);
                let p = self
                    .pinned
                    .as_mut()
                    .expect("Out::Pinned without a pinned buffer");
                p.download(&self.gpu, &src)?;
                p.compact(vocab, want.into_iter().map(|r| r - lo));
                return Ok(());
            }
        };
        let vocab = self.model.config.vocab;
        let n = hi - lo;
        self.gpu
            .argmax_rows(&self.s.logits, vocab, lo, n, &mut self.s.ids)?;
        let mut got = [0i32; LOGIT_ROWS];
        self.gpu
            .stream
            .memcpy_dtoh(&self.s.ids.slice(0..n), &mut got[..n])?;
        self.gpu.sync()?;
        ids.extend(want.into_iter().map(|r| got[r - lo] as TokenId));
        Ok(())
    }

    /// Appends logit rows `want` (ascending, within `lo..hi`) of `s.logits` to `out`, through
    /// the pinned buffer when there is one (a pageable copy is several times slower), each row
    /// as soon as it has arrived. Waits for the stream.
    /// Appends the picks of rows `want` (ascending, within `lo..hi`) of `s.logits`: each row's
    /// greedy id and shortlist (`gumbel_shortlist`) come back, the host decides the token, and a
    /// row whose shortlist cannot decide comes back whole. Waits for the stream.
    fn append_picks(
        &mut self,
        lo: usize,
        hi: usize,
        want: impl IntoIterator<Item = usize>,
        keys: &[NoiseKey],
        picks: &mut Vec<Pick>,
    ) -> Result<()> {
        let vocab = self.model.config.vocab;
        let n = hi - lo;
        let want: Vec<usize> = want.into_iter().collect();
        let done = picks.len();
        if done + want.len() > keys.len() {
            return Err(CudaError::Usage(
                "picks: fewer keys than rows with logits".into(),
            ));
        }
        // Rows not wanted get a harmless key; their shortlists are never read.
        let mut kw = vec![0u32; 4 * n];
        let mut inv = vec![1.0f64; n];
        for (i, &r) in want.iter().enumerate() {
            let key = &keys[done + i];
            kw[4 * (r - lo)..4 * (r - lo + 1)].copy_from_slice(&crate::sample::key_words(key));
            inv[r - lo] = key.inv_temperature();
        }
        let st = self.gpu.stream.clone();
        st.memcpy_htod(&kw, &mut self.s.sl_keys)?;
        st.memcpy_htod(&inv, &mut self.s.sl_inv)?;
        self.gpu
            .argmax_rows(&self.s.logits, vocab, lo, n, &mut self.s.ids)?;
        self.gpu.gumbel_shortlist(
            &self.s.logits,
            vocab,
            lo,
            n,
            &self.s.ids,
            &self.s.sl_keys,
            &self.s.sl_inv,
            &mut self.s.sl_out,
        )?;
        let words = crate::sample::ROW_WORDS;
        let mut ids = [0i32; LOGIT_ROWS];
        let mut recs = vec![0u32; n * words];
        st.memcpy_dtoh(&self.s.ids.slice(0..n), &mut ids[..n])?;
        st.memcpy_dtoh(&self.s.sl_out.slice(0..n * words), &mut recs)?;
        self.gpu.sync()?;
        for (i, &r) in want.iter().enumerate() {
            let key = keys[done + i];
            let j = r - lo;
            let list =
                crate::sample::decode(&recs[j * words..(j + 1) * words], key, ids[j] as TokenId);
            picks.push(match list.token() {
                Some(t) => Pick::Token(key, t),
                None => {
                    let mut row = vec![0f32; vocab];
                    st.memcpy_dtoh(&self.s.logits.slice(r * vocab..(r + 1) * vocab), &mut row)?;
                    self.gpu.sync()?;
                    Pick::Logits(row)
                }
            });
        }
        Ok(())
    }

    fn append_logits(
        &mut self,
        lo: usize,
        hi: usize,
        want: impl IntoIterator<Item = usize>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let vocab = self.model.config.vocab;
        let src = self.s.logits.slice(lo * vocab..hi * vocab);
        let mut want = want.into_iter().peekable();
        let mut take = |i: usize, row: &[f32]| {
            if want.next_if_eq(&(lo + i)).is_some() {
                out.extend_from_slice(row);
            }
        };
        if let Some(p) = &mut self.pinned {
            return p.download_rows(&self.gpu, &src, vocab, take);
        }
        let n = (hi - lo) * vocab;
        self.pageable.resize(n, 0.0);
        self.gpu.stream.memcpy_dtoh(&src, &mut self.pageable[..n])?;
        self.gpu.sync()?;
        for (i, row) in self.pageable[..n].chunks_exact(vocab).enumerate() {
            take(i, row);
        }
        Ok(())
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

    /// Logits of the `n` rows listed in `s.idx` into `s.logits`.
    fn head(&mut self, n: usize) -> Result<()> {
        let tag = self.next_tag();
        let cfg = &self.model.config;
        let d = cfg.d_model;
        let gpu = self.gpu.clone();
        let s = &mut self.s;
        gpu.gather_rows(&s.x, &s.idx.slice(0..n), n, d, &mut s.xs)?;
        gpu.rms_norm(&s.xs, &self.w.norm, d, cfg.norm_eps, n, &mut s.hs, None)?;
        matmul(
            &gpu,
            &self.w.output,
            &s.hs,
            tag,
            n,
            &mut s.acts,
            &mut s.logits,
        )?;
        if let Some(cap) = self.model.plan.final_softcap {
            gpu.soft_cap(&mut s.logits, n * cfg.vocab, cap)?;
        }
        self.prof.mark(&gpu, "head");
        Ok(())
    }
}
