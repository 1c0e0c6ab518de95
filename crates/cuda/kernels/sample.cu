// Gumbel shortlists for plain temperature draws (the engine's sampler/shortlist.rs): for each row,
// every token's score x + g with x = (z - m) * inv_t and g = -ln(-ln((word + 0.5) / 2^32)), the
// word from Philox4x32-10 keyed by the row's (seed, position) as the host's noise, in f64 with
// the device's own log. The host decides among the listed scores with its own arithmetic; these
// scores only have to be within far less than its slack of the host's (1e-9), so the order of
// reductions here is free.
//
// Grid (rows, SL_BLOCKS); a block scans every SL_BLOCKS-th group of 4 tokens (one Philox call
// per group). Each thread keeps its best (score, id, logit) and its second best score; the block
// writes its SL_KEEP best thread bests and, as `spill`, the highest score it leaves out (the
// next thread best, or any thread's second best). Record per (row, block), 32-bit words:
// spill (f64: low, high), the greedy token's logit m (NaN as -inf), then SL_KEEP x (score low,
// high, id or -1, logit bits).

#define SL_THREADS 256
#define SL_BLOCKS 16
#define SL_KEEP 4
#define SL_WORDS (3 + 4 * SL_KEEP)

__device__ __forceinline__ void philox4x32_10(unsigned (&c)[4], unsigned k0, unsigned k1) {
#pragma unroll
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const unsigned hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        const unsigned hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        const unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

// The block's highest `v` and the thread holding it (lowest thread on ties), in every thread.
__device__ __forceinline__ void sl_block_max(double v, double& best, int& who, double* sv,
                                             int* st) {
    int t = threadIdx.x;
    double bv = v;
    int bt = t;
    for (int o = 16; o > 0; o >>= 1) {
        const double ov = __shfl_down_sync(FULL_MASK, bv, o);
        const int ot = __shfl_down_sync(FULL_MASK, bt, o);
        if (ov > bv || (ov == bv && ot < bt)) {
            bv = ov;
            bt = ot;
        }
    }
    const int w = t >> 5, lane = t & 31;
    __syncthreads();  // the previous call is done with sv, st
    if (lane == 0) {
        sv[w] = bv;
        st[w] = bt;
    }
    __syncthreads();
    bv = sv[0];
    bt = st[0];
    for (int i = 1; i < SL_THREADS / 32; i++)
        if (sv[i] > bv) {
            bv = sv[i];
            bt = st[i];
        }
    best = bv;
    who = bt;
}

extern "C" __global__ void __launch_bounds__(SL_THREADS)
    gumbel_shortlist(const float* logits, int vocab, int first, const int* top,
                     const unsigned* keys, const double* inv_t, unsigned* out) {
    pdl_enter();
    const int r = blockIdx.x;
    const double neg_inf = __longlong_as_double(0xfff0000000000000ll);
    const float* z = logits + (size_t)(first + r) * vocab;
    float mz = z[top[r]];
    if (isnan(mz)) mz = __int_as_float(0xff800000);
    const double m = (double)mz, it = inv_t[r];
    const unsigned k0 = keys[4 * r], k1 = keys[4 * r + 1];
    const unsigned p0 = keys[4 * r + 2], p1 = keys[4 * r + 3];
    double s1 = neg_inf, s2 = neg_inf;
    int id1 = -1;
    float z1 = 0.0f;
    const int groups = (vocab + 3) / 4;
    for (int g = blockIdx.y * SL_THREADS + threadIdx.x; g < groups; g += SL_BLOCKS * SL_THREADS) {
        unsigned c[4] = {p0, p1, (unsigned)g, 0u};
        philox4x32_10(c, k0, k1);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int id = 4 * g + j;
            if (id >= vocab) break;
            const float zv = z[id];
            if (!(zv > __int_as_float(0xff800000))) continue;  // NaN or -inf: never drawn
            const double x = ((double)zv - m) * it;
            const double u = ((double)c[j] + 0.5) * (1.0 / 4294967296.0);
            const double s = x - log(-log(u));
            if (s > s1) {
                s2 = s1;
                s1 = s;
                id1 = id;
                z1 = zv;
            } else if (s > s2) {
                s2 = s;
            }
        }
    }
    __shared__ double sv[SL_THREADS / 32];
    __shared__ int st[SL_THREADS / 32];
    unsigned* rec = out + ((size_t)r * SL_BLOCKS + blockIdx.y) * SL_WORDS;
    double spill;
    int who;
    sl_block_max(s2, spill, who, sv, st);
    for (int q = 0; q <= SL_KEEP; q++) {
        double best;
        sl_block_max(s1, best, who, sv, st);
        if (q == SL_KEEP) {
            spill = fmax(spill, best);
        } else if (threadIdx.x == who) {
            unsigned* c = rec + 3 + 4 * q;
            c[0] = (unsigned)__double2loint(best);
            c[1] = (unsigned)__double2hiint(best);
            c[2] = best > neg_inf ? (unsigned)id1 : 0xffffffffu;
            c[3] = __float_as_uint(z1);
            s1 = neg_inf;  // taken
        }
    }
    if (threadIdx.x == 0) {
        rec[0] = (unsigned)__double2loint(spill);
        rec[1] = (unsigned)__double2hiint(spill);
        rec[2] = __float_as_uint(mz);
    }
}
