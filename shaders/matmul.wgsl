// y[t][col0 + n] = dot(x[t], W[n]) for one chunk of weight rows, weights f32 / f16 / bf16.
// Batch invariance: a workgroup owns one weight row; thread `lid` sums the words lid, lid+WG,
// ... of that row for every token in a fixed order, then a fixed tree over the WG partials.
// Tokens are processed in blocks of TB; each token's sum is its own accumulator, so skipping
// the absent tokens of the last block changes nothing: y[t] never depends on T.
// The `_v4` entry point reads four words (8 half values) per load and stages x in workgroup
// memory (matmul_rows.wgsl); the host picks it when a row is a whole number of 16-byte vectors.
// Either way one row's order is fixed.
struct Params {
    T: u32,          // rows of x
    K: u32,          // reduction length (columns of W)
    N: u32,          // weight rows in this chunk
    row_words: u32,  // u32 words per weight row (row_bytes / 4)
    x_stride: u32,   // floats between rows of x
    y_stride: u32,   // floats between rows of y
    col0: u32,       // first output column of this chunk
    groups_x: u32,   // workgroups along x (weight row = wid.y * groups_x + wid.x)
    x_off: u32,      // first float of x in its buffer
    y_off: u32,      // first float of y in its buffer
    x_vec4: u32,     // 1: x_off and x_stride are multiples of 4 (rows_dot may read x as vec4)
    slices: u32,     // matmul_half_v4: workgroups per RB weight rows, each on t_per rows of x
    t_per: u32,
    glu_off: u32,    // matmul_half_v4 with GLU = 1: x is silu(x) * (x glu_off floats on), a folded SwiGLU
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> w4: array<vec4<u32>>;

const WG: u32 = {{WG}}u;
const TB: u32 = {{TB}}u;
const RB: u32 = {{RB}}u;
{{include ROWS}}

fn load_w(b: u32, i: u32) -> vec4<u32> { return w4[i]; }

// The pad lane of an odd K reads as 0.
fn x_at(t: u32, k: u32) -> f32 {
    if (k < p.K) { return x[p.x_off + t * p.x_stride + k]; }
    return 0.0;
}

// Fixed-order tree over the WG partials of each token of the block, then one write per token.
fn reduce_and_store(lid: u32, n: u32, t0: u32, nt: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            for (var j = 0u; j < nt; j++) {
                partial[lid * TB + j] = partial[lid * TB + j] + partial[(lid + s) * TB + j];
            }
        }
    }
    workgroupBarrier();
    if (lid < nt) {
        y[p.y_off + (t0 + lid) * p.y_stride + p.col0 + n] = partial[lid];
    }
    workgroupBarrier();
}

@compute @workgroup_size({{WG}})
fn matmul_f32(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let n = wid.y * p.groups_x + wid.x;
    if (n >= p.N) { return; }
    let base = n * p.row_words;
    for (var t0 = 0u; t0 < p.T; t0 += TB) {
        let nt = min(TB, p.T - t0);
        var acc: array<f32, TB>;
        for (var j = 0u; j < TB; j++) { acc[j] = 0.0; }  // explicitly: naga hoists the zero-init out of the loop
        for (var k = lid; k < p.K; k += WG) {
            let wk = bitcast<f32>(w[base + k]);
            for (var j = 0u; j < nt; j++) { acc[j] = acc[j] + wk * x_at(t0 + j, k); }
        }
        for (var j = 0u; j < TB; j++) { partial[lid * TB + j] = acc[j]; }
        reduce_and_store(lid, n, t0, nt);
    }
}

// f16 and bf16 (BF16 = 1) rows, one word (two values) per load.
@compute @workgroup_size({{WG}})
fn matmul_half(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let n = wid.y * p.groups_x + wid.x;
    if (n >= p.N) { return; }
    let base = n * p.row_words;
    let pairs = (p.K + 1u) / 2u;  // an odd K's last word holds one value and a zero pad
    for (var t0 = 0u; t0 < p.T; t0 += TB) {
        let nt = min(TB, p.T - t0);
        var acc: array<f32, TB>;
        for (var j = 0u; j < TB; j++) { acc[j] = 0.0; }
        for (var i = lid; i < pairs; i += WG) {
            let wv = pair(w[base + i]);
            for (var j = 0u; j < nt; j++) {
                acc[j] = acc[j] + wv.x * x_at(t0 + j, 2u * i);
                acc[j] = acc[j] + wv.y * x_at(t0 + j, 2u * i + 1u);
            }
        }
        for (var j = 0u; j < TB; j++) { partial[lid * TB + j] = acc[j]; }
        reduce_and_store(lid, n, t0, nt);
    }
}

// f16 and bf16 rows of a whole number of vec4<u32> (K a multiple of 8): eight values per load,
// RB weight rows per workgroup, the row loop ROWS (shared with matmul_gathered.wgsl). Window-row
// split: `slices` consecutive workgroups share RB weight rows, workgroup s of them computing
// rows s * t_per .. of x (slices = 1, t_per = T: all of them). A narrow matrix (few row groups)
// so fills the GPU at T > 1; rows_dot sums each x row on its own, so a row's bits are the same
// in any slice.
@compute @workgroup_size({{WG}})
fn matmul_half_v4(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * p.groups_x + wid.x;
    let n0 = (g / p.slices) * RB;  // RB weight rows per workgroup
    if (n0 >= p.N) { return; }
    let nr = min(RB, p.N - n0);
    let quads = p.row_words / 4u;
    let t_lo = (g % p.slices) * p.t_per;
    let t_hi = min(p.T, t_lo + p.t_per);
    glu_off = p.glu_off;
    for (var t0 = t_lo; t0 < t_hi; t0 += TB) {
        let nt = min(TB, t_hi - t0);
        rows_dot(lid, 0u, n0 * quads, quads, nr, p.x_off + t0 * p.x_stride, p.x_stride, nt, p.x_vec4);
        for (var e = lid; e < nr * nt; e += WG) {  // RB * TB may exceed WG
            let r = e / nt;
            let j = e % nt;
            y[p.y_off + (t0 + j) * p.y_stride + p.col0 + n0 + r] = row_result(r, j);
        }
        workgroupBarrier();
    }
}
