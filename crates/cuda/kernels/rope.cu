// RoPE (`ops::RopeTable::apply`): per head, pairs (a, b) rotate by the position's angle:
// a' = x0*c - x1*s, b' = x0*s + x1*c (no FMA). `cs` holds (cos, sin) per (position, pair),
// computed on the host exactly as the CPU's table. In place; row r has position pos[r].
// style 0: interleaved pairs (2i, 2i+1); 1: Neox pairs (i, i + rot_dim/2).
extern "C" __global__ void rope(float* x, const int* pos, int rows, int n_heads, int head_dim,
                                int rot_dim, int style, const float* cs) {
    pdl_enter();
    int half = rot_dim / 2;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * n_heads * half) return;
    int i = t % half;
    int h = (t / half) % n_heads;
    int r = t / (half * n_heads);
    float* head = x + ((size_t)r * n_heads + h) * head_dim;
    const float* p = cs + ((size_t)pos[r] * half + i) * 2;
    float c = p[0], s = p[1];
    int a = style == 0 ? 2 * i : i;
    int b = style == 0 ? 2 * i + 1 : i + half;
    float x0 = head[a], x1 = head[b];
    head[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    head[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}
