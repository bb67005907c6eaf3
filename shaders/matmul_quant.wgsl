// Matmuls over the GGUF block formats (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_XS), in the CPU
// backend's scheme (engine_ext/cpu/quant/dot_int8.cpp), so that both compute the same numbers:
//
// 1. `quantize_rows`: each input row is quantized to int8 per block of ABLK values exactly as the
//    CPU does it (ggml's quantize_row_q8_0 / q8_1 for 32-blocks, its Q8_K reference for
//    256-blocks): the same scale, the same round-half-even, the same f16 rounding of the 32-block
//    scale. The divisions go through div_rn (WGSL's `/` may be 2.5 ulp off; these must be the
//    correctly rounded quotients the CPU gets), and the f16 rounding through integer code. A
//    workgroup takes one 256-block (4 values per thread) or two 32-blocks (1 per thread).
// 2. `matmul_quant`: integer dot products of weight codes x activation codes, exact in i32 (so
//    their order is free), then the f32 steps in the CPU's order: a thread is one of the CPU's
//    float lanes (LANES = 8 for the 256-blocks; 32 = 4 groups of 8 for the 32-blocks, block b in
//    group b % 4), adds its lane's `fma(f32(isum), dw * dx, acc)` block after block, and the
//    lanes are summed by the CPU's fixed tree; the K-quants' min term (and Q5_1's) is a separate
//    sum in block order, as on the CPU. A row is one group of LANES threads whatever T is, and
//    each window row has its own accumulators: y[t] never depends on T or the other rows.
//
// Weights are the GGUF blocks repacked on upload (engine_ext/webgpu/quant_layout.cpp) into u32
// words: Q4_K, Q5_K, Q5_1 and IQ4_XS blocks are already whole words and stay as GGUF lays them out; Q8_0,
// Q5_0 and Q6_K blocks lose their f16 scale `d`, which moves to a region of f16 pairs after the
// row's blocks (word D_REGION + b / 2 of the row), so every block starts on a word.
//
// The quantized activations (one buffer of words, written by quantize_rows, read by
// matmul_quant): codes [T][K/4] (four int8 per word, element 4i + k in byte k), then the block
// scales [T][K/ABLK] (f32), then per 32 values [T][K/32]: the i32 code sum (256-blocks, the
// K-quants' min term) or the Q8_1 block sum s (f32, Q5_1).

struct Params {
    T: u32,          // rows of x
    K: u32,          // reduction length
    N: u32,          // weight rows in this chunk (matmul) / unused (quantize)
    row_words: u32,  // u32 words per device weight row
    x_off: u32,      // quantize: first float of x; matmul: unused
    x_stride: u32,   // quantize: floats between rows of x
    y_off: u32,      // matmul: first float of y
    y_stride: u32,   // matmul: floats between rows of y
    col0: u32,       // matmul: first output column of this chunk
    groups_x: u32,   // workgroups along x
    d_off: u32,      // word of the activation scales in xq
    e_off: u32,      // word of the per-32 sums in xq
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;
// weights in up to four buffers (the routed kernel reaches a MoE layer's experts through them;
// the one-matrix kernel binds its chunk to all four)
@group(0) @binding(3) var<storage, read> w0: array<u32>;
@group(0) @binding(4) var<storage, read> w1: array<u32>;
@group(0) @binding(5) var<storage, read> w2: array<u32>;
@group(0) @binding(6) var<storage, read> w3: array<u32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;
const TB: u32 = {{TB}}u;

fn act(i: u32) -> f32 { return x[i]; }

{{include quant_act.wgsl}}

// ---- 1. activation rows to int8 blocks: QB blocks per workgroup ---------------------------------

@compute @workgroup_size({{WG}})
fn quantize_rows(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let nbk = p.K / ABLK;
    let g = (wid.y * p.groups_x + wid.x) * QB + lid / TPB;  // this thread's block
    let t = g / nbk;
    quantize_block(lid, g, t, g % nbk, g < p.T * nbk, p.x_off + t * p.x_stride, p.K, p.d_off, p.e_off);
}

// ---- 2. the matmul -------------------------------------------------------------------------------

const FMT: u32 = {{FMT}}u;  // 0 Q8_0, 1 Q5_0, 2 Q5_1, 3 Q4_K, 4 Q5_K, 5 Q6_K, 6 IQ4_XS
const LANES: u32 = {{LANES}}u;  // 32 for the 32-blocks, 8 for the 256-blocks
const BW: u32 = {{BW}}u;  // payload words per weight block
const D_REGION: u32 = {{D_REGION}}u;  // 1: the blocks' f16 scales follow the row's blocks
const RPW: u32 = WG / LANES;  // weight rows per workgroup

var<workgroup> lanes_part: array<f32, WG * TB>;
var<workgroup> extra_part: array<f32, RPW * TB>;

// sum of products of the four signed bytes of a and b
fn dot4(a: u32, b: u32) -> i32 {
    let av = vec4<i32>(i32(a << 24u), i32(a << 16u), i32(a << 8u), i32(a)) >> vec4<u32>(24u);
    let bv = vec4<i32>(i32(b << 24u), i32(b << 16u), i32(b << 8u), i32(b)) >> vec4<u32>(24u);
    return dot(av, bv);
}

var<private> wbuf: u32;  // which weight binding the current row lies in

fn w(i: u32) -> u32 {
    switch wbuf {
        case 1u: { return w1[i]; }
        case 2u: { return w2[i]; }
        case 3u: { return w3[i]; }
        default: { return w0[i]; }
    }
}

// f16 scale `d` of block b of the row at `base` (Q8_0, Q5_0, Q6_K: in the row's scale region)
fn block_d(base: u32, nb: u32, b: u32) -> f32 {
    return half_to_f32((w(base + nb * BW + b / 2u) >> (16u * (b % 2u))) & 0xffffu);
}

// where the quantized activations lie (set by each entry point from its parameters)
var<private> act_k: u32;
var<private> act_doff: u32;
var<private> act_eoff: u32;
fn act_q(t: u32, word: u32) -> u32 { return xq[t * (act_k / 4u) + word]; }
fn act_d(t: u32, blk: u32) -> f32 { return bitcast<f32>(xq[act_doff + t * (act_k / ABLK) + blk]); }
fn act_e(t: u32, g32: u32) -> u32 { return xq[act_eoff + t * (act_k / 32u) + g32]; }

// IQ4_XS's 16 levels (ggml's kvalues_iq4nl: -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69
// 89 113) as signed bytes, four to a word; iq4_codes: the int8 weights of the four nibbles of `n`
// (element i in nibble i and byte i)
fn iq4_level(n: u32) -> u32 {
    let word = select(select(0xbfad9881u, 0xf6eaddcfu, n >= 4u), select(0x26190d01u, 0x71594535u, n >= 12u), n >= 8u);
    return (word >> (8u * (n & 3u))) & 0xffu;
}
fn iq4_codes(n: u32) -> u32 {
    return iq4_level(n & 0xfu) | (iq4_level((n >> 8u) & 0xfu) << 8u) | (iq4_level((n >> 16u) & 0xfu) << 16u) |
           (iq4_level(n >> 24u) << 24u);
}

// The five-bit codes of elements 4l..4l+3 of a Q5_0 / Q5_1 block: qh (bit i: element i's fifth
// bit) and the nibble words qs[0..3] (elements 0-15 low nibbles, 16-31 high nibbles).
fn q5_codes(qh: u32, qs_word: u32, l: u32) -> u32 {
    let lo = select((qs_word >> 4u) & 0x0f0f0f0fu, qs_word & 0x0f0f0f0fu, l < 4u);
    let hb = (qh >> (4u * l)) & 0xfu;
    let hi = ((hb & 1u) | ((hb & 2u) << 7u) | ((hb & 4u) << 14u) | ((hb & 8u) << 21u)) << 4u;
    return lo | hi;
}

// Weight row `base` (in binding wbuf; live: a row of this chunk) against activation rows t0 ..
// t0 + nt - 1 (nt <= TB): each thread's lane sums go to lanes_part, the min terms to
// extra_part; after a barrier, combined() gives the row's results. One code path for the
// one-matrix and the routed kernel, so their rows are the same bit for bit.
fn row_dots(lid: u32, live: bool, base: u32, nb: u32, t0: u32, nt: u32) {
    let rw = lid / LANES;
    let lane = lid % LANES;
    var acc: array<f32, TB>;
    var ext: array<f32, TB>;  // the min term (K-quants, subtracted; Q5_1, added)
    for (var j = 0u; j < TB; j++) {
        acc[j] = 0.0;
        ext[j] = 0.0;
    }
    if (live && LANES == 32u) {
        let grp = lane / 8u;
        let l = lane % 8u;
        for (var b = grp; b < nb; b += 4u) {
            let blk = base + b * BW;
            var wq = 0u;
            var dw = 0.0;
            var off = 0i;  // codes are stored unsigned: subtract off * (sum of x)
            if (FMT == 0u) {
                wq = w(blk + l);
                dw = block_d(base, nb, b);
            } else if (FMT == 1u) {
                wq = q5_codes(w(blk), w(blk + 1u + l % 4u), l);
                dw = block_d(base, nb, b);
                off = 16i;
            } else {
                wq = q5_codes(w(blk + 1u), w(blk + 2u + l % 4u), l);
                dw = half_to_f32(w(blk) & 0xffffu);
            }
            for (var j = 0u; j < nt; j++) {
                let xw = act_q(t0 + j, b * 8u + l);
                let isum = dot4(wq, xw) - off * dot4(0x01010101u, xw);
                acc[j] = fma(f32(isum), dw * act_d(t0 + j, b), acc[j]);
            }
        }
        if (FMT == 2u && lane == 0u) {  // Q5_1: m * s, block after block
            for (var b = 0u; b < nb; b++) {
                let mw = half_to_f32(w(base + b * BW) >> 16u);
                for (var j = 0u; j < nt; j++) {
                    ext[j] = ext[j] + mw * bitcast<f32>(act_e(t0 + j, b));
                }
            }
        }
    } else if (live) {
        let l = lane;
        for (var s = 0u; s < nb; s++) {
            let blk = base + s * BW;
            var wq: array<u32, 8>;
            var sc: array<i32, 8>;
            var mn: array<i32, 8>;
            var dw = 0.0;
            var dmin = 0.0;
            if (FMT == 5u) {  // Q6_K: ql words 0-31, qh 32-47, int8 scales 48-51; each word loaded once
                var ql: array<u32, 4>;
                for (var c = 0u; c < 4u; c++) { ql[c] = w(blk + 8u * c + l); }  // (half, qd % 2) = (c / 2, c % 2)
                let qh0 = w(blk + 32u + l);
                let qh1 = w(blk + 40u + l);
                var sw: array<u32, 4>;
                for (var c = 0u; c < 4u; c++) { sw[c] = w(blk + 48u + c); }
                for (var k = 0u; k < 8u; k++) {
                    let hb6 = k / 4u;
                    let qd = k % 4u;
                    let lo = (ql[2u * hb6 + qd % 2u] >> (4u * (qd / 2u))) & 0x0f0f0f0fu;
                    let hi = (select(qh0, qh1, hb6 == 1u) >> (2u * qd)) & 0x03030303u;
                    wq[k] = lo | (hi << 4u);
                    let si = (128u * hb6 + 32u * qd) / 16u + select(1u, 0u, l < 4u);
                    sc[k] = i32(sw[si / 4u] << (24u - 8u * (si % 4u))) >> 24u;
                }
                dw = block_d(base, nb, s);
            } else if (FMT == 6u) {  // IQ4_XS: d, scales_h (word 0), scales_l (word 1), 128 bytes of nibbles
                // sub-block k's 32 weights: bytes 16k..16k+15, low nibbles first then high ones; lane l
                // takes elements 4l..4l+3: the low (l < 4) or high nibbles of the word 2 + 4k + l % 4
                let h = w(blk) >> 16u;
                let sl = w(blk + 1u);
                for (var k = 0u; k < 8u; k++) {
                    let q = w(blk + 2u + 4u * k + l % 4u);
                    wq[k] = iq4_codes(select((q >> 4u) & 0x0f0f0f0fu, q & 0x0f0f0f0fu, l < 4u));
                    let ls = ((sl >> (4u * k)) & 0xfu) | (((h >> (2u * k)) & 3u) << 4u);
                    sc[k] = i32(ls) - 32i;
                }
                dw = half_to_f32(w(blk) & 0xffffu);
            } else {  // Q4_K / Q5_K: d, dmin, 12 scale bytes, (Q5_K: 32 bytes of fifth bits), nibbles
                let qs = select(4u, 12u, FMT == 4u);
                let qh = select(0u, w(blk + 4u + l), FMT == 4u);
                // the eight 6-bit scales and mins from the 12 bytes at words 1-3 (the CPU's k_scales_mins)
                let a0 = w(blk + 1u);
                let a1 = w(blk + 2u);
                let a2 = w(blk + 3u);
                let s03 = a0 & 0x3f3f3f3fu;
                let m03 = a1 & 0x3f3f3f3fu;
                let s47 = (a2 & 0x0f0f0f0fu) | (((a0 >> 6u) & 0x03030303u) << 4u);
                let m47 = ((a2 >> 4u) & 0x0f0f0f0fu) | (((a1 >> 6u) & 0x03030303u) << 4u);
                for (var g = 0u; g < 4u; g++) {
                    let q = w(blk + qs + 8u * g + l);
                    wq[2u * g] = q & 0x0f0f0f0fu;
                    wq[2u * g + 1u] = (q >> 4u) & 0x0f0f0f0fu;
                }
                for (var k = 0u; k < 8u; k++) {
                    if (FMT == 4u) { wq[k] = wq[k] | (((qh >> k) & 0x01010101u) << 4u); }
                    let sh = 8u * (k % 4u);
                    sc[k] = i32((select(s47, s03, k < 4u) >> sh) & 0xffu);
                    mn[k] = i32((select(m47, m03, k < 4u) >> sh) & 0xffu);
                }
                dw = half_to_f32(w(blk) & 0xffffu);
                dmin = half_to_f32(w(blk) >> 16u);
            }
            for (var j = 0u; j < nt; j++) {
                var isum = 0i;
                for (var k = 0u; k < 8u; k++) {
                    let xw = act_q(t0 + j, s * 64u + 8u * k + l);
                    var dk = dot4(wq[k], xw);
                    if (FMT == 5u) { dk = dk - 32i * dot4(0x01010101u, xw); }
                    isum = isum + dk * sc[k];
                }
                let dx = act_d(t0 + j, s);
                acc[j] = fma(f32(isum), dw * dx, acc[j]);
                if (FMT != 5u && FMT != 6u && l == 0u) {
                    var msum = 0i;
                    for (var k = 0u; k < 8u; k++) { msum = msum + mn[k] * bitcast<i32>(act_e(t0 + j, s * 8u + k)); }
                    ext[j] = ext[j] + (dmin * dx) * f32(msum);
                }
            }
        }
    }
    for (var j = 0u; j < TB; j++) { lanes_part[lid * TB + j] = acc[j]; }
    if (lane == 0u) {
        for (var j = 0u; j < TB; j++) { extra_part[rw * TB + j] = ext[j]; }
    }
}

// Row rw's result for activation row j of the last row_dots (the CPU's lane tree, then the min term).
fn combined(rw: u32, j: u32) -> f32 {
    var h: array<f32, 8>;
    let r0 = rw * LANES;
    for (var i = 0u; i < 8u; i++) {
        if (LANES == 32u) {  // the four groups per lane: (g0 + g2) + (g1 + g3)
            h[i] = (lanes_part[(r0 + i) * TB + j] + lanes_part[(r0 + 16u + i) * TB + j]) +
                   (lanes_part[(r0 + 8u + i) * TB + j] + lanes_part[(r0 + 24u + i) * TB + j]);
        } else {
            h[i] = lanes_part[(r0 + i) * TB + j];
        }
    }
    // the CPU's 8-lane tree: (i + i+4), then pairs, then the last two
    let sum = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
    if (FMT == 2u) { return sum + extra_part[rw * TB + j]; }
    if (FMT == 3u || FMT == 4u) { return sum - extra_part[rw * TB + j]; }
    return sum;
}

@compute @workgroup_size({{WG}})
fn matmul_quant(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let rw = lid / LANES;  // this thread's weight row in the workgroup
    let n = (wid.y * p.groups_x + wid.x) * RPW + rw;
    let live = n < p.N;
    wbuf = 0u;
    act_k = p.K;
    act_doff = p.d_off;
    act_eoff = p.e_off;
    let nb = p.K / select(256u, 32u, LANES == 32u);  // weight blocks per row
    for (var t0 = 0u; t0 < p.T; t0 += TB) {
        let nt = min(TB, p.T - t0);
        row_dots(lid, live, n * p.row_words, nb, t0, nt);
        workgroupBarrier();
        if (live && lid % LANES == 0u) {
            for (var j = 0u; j < nt; j++) { y[p.y_off + (t0 + j) * p.y_stride + p.col0 + n] = combined(rw, j); }
        }
        workgroupBarrier();
    }
}

// The routed experts of a MoE layer (the f16/bf16 matmul_half_v4_routed's scheme): for each
// (token, rank) pair p, its expert e = ids[ids_off + p] and e's matrix from `table` ((weight
// binding, first word) per expert and matrix: gate, up, down). A workgroup computes RPW rows of
// one pair's matrix against the pair's activation row (token p / k, or p with x_per_pair), each
// row through row_dots as in matmul_quant, so equal to the host-grouped path bit for bit.
struct RoutedParams {
    K: u32,
    row_words: u32,
    groups_x: u32,
    total_groups: u32,   // workgroups: pairs * rows_per_pair / RPW
    rows_per_pair: u32,
    half_rows: u32,      // rows of matrix mat0; the rest are rows of matrix mat0 + 1
    mat0: u32,           // 0: gate (and up), 2: down
    k: u32,              // pairs per token
    x_per_pair: u32,     // 1: activation row p, 0: row p / k
    y_off: u32,
    y_off2: u32,
    y_stride: u32,
    ids_off: u32,
    n_experts: u32,
    log_ids: u32,        // 1: write each pair's expert to ids_log
    d_off: u32,          // as Params: the activation scales and sums in xq
    e_off: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
@group(0) @binding(0) var<uniform> rp: RoutedParams;
@group(0) @binding(8) var<storage, read_write> ids: array<u32>;
@group(0) @binding(9) var<storage, read> table: array<vec2<u32>>;
@group(0) @binding(10) var<storage, read_write> ids_log: array<u32>;

@compute @workgroup_size({{WG}})
fn matmul_quant_routed(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * rp.groups_x + wid.x;
    if (g >= rp.total_groups) { return; }
    let q = routed_rows(g, RPW);
    wbuf = q.at.x;
    act_k = rp.K;
    act_doff = rp.d_off;
    act_eoff = rp.e_off;
    let rw = lid / LANES;
    row_dots(lid, true, q.at.y + (q.n0 + rw) * rp.row_words, rp.K / select(256u, 32u, LANES == 32u), q.t, 1u);
    workgroupBarrier();
    if (lid % LANES == 0u) { y[q.y0 + q.p * rp.y_stride + q.n0 + rw] = combined(rw, 0u); }
    if (lid == 0u && rp.log_ids == 1u && q.r0 == 0u) { ids_log[q.p] = q.e; }
}

{{include matmul_routed_pair.wgsl}}

// matmul_quant of several matrices of one format and width over one quantized x (q/k/v, a
// shared expert's gate and up) in one dispatch. Entry i is one weight chunk: workgroups
// first .. of the dispatch compute its rows, RPW per workgroup, through row_dots and combined as
// matmul_quant does (the same rows, the same code), writing row n for x row t to
// y[y_off + t * y_stride + col0 + n]. Workgroup g takes the last entry whose first is <= g.
struct GatherEntry {
    w: vec4<u32>,  // (first workgroup, rows, weight binding, first word of the chunk)
    y: vec4<u32>,  // (y_off, y_stride, col0, -)
}
struct GatherParams {
    T: u32,
    K: u32,
    row_words: u32,
    groups_x: u32,
    total_groups: u32,
    n_entries: u32,
    d_off: u32,
    e_off: u32,
    entries: array<GatherEntry, {{MAX_JOBS}}>,
}
@group(0) @binding(0) var<uniform> gp: GatherParams;

@compute @workgroup_size({{WG}})
fn matmul_quant_gathered(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * gp.groups_x + wid.x;
    if (g >= gp.total_groups) { return; }
    var i = 0u;
    for (var k = 1u; k < gp.n_entries; k++) {
        if (gp.entries[k].w.x <= g) { i = k; }
    }
    let e = gp.entries[i];
    let rw = lid / LANES;
    let n = (g - e.w.x) * RPW + rw;
    let live = n < e.w.y;
    wbuf = e.w.z;
    act_k = gp.K;
    act_doff = gp.d_off;
    act_eoff = gp.e_off;
    let nb = gp.K / select(256u, 32u, LANES == 32u);
    for (var t0 = 0u; t0 < gp.T; t0 += TB) {
        let nt = min(TB, gp.T - t0);
        row_dots(lid, live, e.w.w + n * gp.row_words, nb, t0, nt);
        workgroupBarrier();
        if (live && lid % LANES == 0u) {
            for (var j = 0u; j < nt; j++) { y[e.y.x + (t0 + j) * e.y.y + e.y.z + n] = combined(rw, j); }
        }
        workgroupBarrier();
    }
}
