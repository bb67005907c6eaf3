// Activation rows to int8 blocks exactly as the CPU backend makes them (included by
// matmul_quant.wgsl's quantize_rows and by norm_quant.wgsl's producers that quantize the rows
// they write): ggml's quantize_row_q8_0 / q8_1 for 32-blocks, its Q8_K reference for
// 256-blocks, the divisions through div_rn and the f16 rounding through integer code. The
// including file declares WG, the `xq` binding (array<u32>) and `fn act(i: u32) -> f32`, the
// value i of the array the rows are read from.

const ABLK: u32 = {{ABLK}}u;  // activation block: 32 or 256
const SUMS: u32 = {{SUMS}}u;  // 1: 32-blocks carry ggml's Q8_1 sum (the Q5_1 partner)

// ---- exact scalar helpers --------------------------------------------------------------------

// f16 bits -> f32, exact (subnormal halves too), without relying on unpack2x16float's handling
// of subnormals.
fn half_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // m * 2^-24 is exact in f32
        let v = f32(m) * 5.9604644775390625e-8;
        return bitcast<f32>(sign | bitcast<u32>(v));
    }
    if (e == 31u) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// f32 -> f16 bits, round to nearest even, overflow to infinity (the CPU's float_to_half).
fn f32_to_half(f: f32) -> u32 {
    let u = bitcast<u32>(f);
    let sign = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u; }
    if (a >= 0x47800000u) { return sign | 0x7c00u; }
    if (a < 0x38800000u) {  // a subnormal half (or zero): rne(|f| * 2^24)
        let e = a >> 23u;
        if (e == 0u) { return sign; }
        let mant = (a & 0x7fffffu) | 0x800000u;
        let shift = 126u - e;  // |f| * 2^24 = mant * 2^-shift, shift >= 14
        if (shift > 24u) { return sign; }
        var h = mant >> shift;
        let rem = mant & ((1u << shift) - 1u);
        let halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u) == 1u)) { h = h + 1u; }
        return sign | h;
    }
    let mant = a & 0x7fffffu;
    let rem = mant & 0x1fffu;
    var h = (((a >> 23u) - 112u) << 10u) | (mant >> 13u);
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u)) { h = h + 1u; }
    return sign | h;
}

// a / b correctly rounded (round to nearest even) for normal, finite a and b whose quotient is
// normal: long division of the 24-bit significands. Anything else takes WGSL's `/` (inputs the
// CPU would turn into infinities or zeros there anyway).
fn div_rn(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let ea = i32((ua >> 23u) & 0xffu);
    let eb = i32((ub >> 23u) & 0xffu);
    if (ea == 0 || ea == 255 || eb == 0 || eb == 255) { return a / b; }
    var ma = (ua & 0x7fffffu) | 0x800000u;
    let mb = (ub & 0x7fffffu) | 0x800000u;
    var e = ea - eb + 127;
    if (ma < mb) {
        ma = ma << 1u;
        e = e - 1;
    }
    // ma / mb in [1, 2): 24 quotient bits and a round bit; the remainder says what lies beyond
    var r = ma;
    var q = 0u;
    for (var i = 0u; i < 25u; i++) {
        q = q << 1u;
        if (r >= mb) {
            r = r - mb;
            q = q | 1u;
        }
        r = r << 1u;
    }
    let round_bit = q & 1u;
    q = q >> 1u;
    if (round_bit == 1u && (r != 0u || (q & 1u) == 1u)) { q = q + 1u; }
    if (q == 0x1000000u) {
        q = q >> 1u;
        e = e + 1;
    }
    if (e <= 0 || e >= 255) { return a / b; }
    return bitcast<f32>(((ua ^ ub) & 0x80000000u) | (u32(e) << 23u) | (q & 0x7fffffu));
}

// ---- activation rows to int8 blocks -------------------------------------------------------------

// A workgroup quantizes QB blocks (2 of 32 values, 1 of 256), each thread VPT values of one
// block (1 or 4): the largest magnitude and the first place it occurs by fixed trees (max and
// min are exact, so any order gives the CPU's values), the scale by one thread, then each thread
// its codes. What a block gets is a function of that block of x alone.
const VPT: u32 = {{VPT}}u;  // values per thread: max(1, ABLK / WG)
const TPB: u32 = ABLK / VPT;            // threads per block
const QB: u32 = WG / TPB;               // blocks per workgroup
var<workgroup> q_red: array<f32, WG>;
var<workgroup> q_sum: array<i32, WG>;
var<workgroup> q_code: array<u32, WG>;
var<workgroup> q_scale: array<vec3<f32>, WG>;  // per block: mul, d, d32

// The trees over a block's tpb threads (lt: the thread's place in its block), by every thread of
// the workgroup: the largest (or smallest) of their v, the sum of their sum over groups of `per`
// threads; and the block's scale made by its first thread (d written to xq[d_at] for a live
// block) and shared. A place in a block (< 256) is exact as f32, so one tree serves both.
fn block_tree(lid: u32, lt: u32, tpb: u32, v: f32, smallest: bool) -> f32 {
    workgroupBarrier();  // the last tree's result may still be read
    q_red[lid] = v;
    for (var s = tpb / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lt < s) { q_red[lid] = select(max(q_red[lid], q_red[lid + s]), min(q_red[lid], q_red[lid + s]), smallest); }
    }
    workgroupBarrier();
    return q_red[lid - lt];
}

fn group_sum(lid: u32, lt: u32, per: u32, sum: i32) -> i32 {
    q_sum[lid] = sum;
    for (var s = per / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lt % per < s) { q_sum[lid] = q_sum[lid] + q_sum[lid + s]; }
    }
    workgroupBarrier();
    return q_sum[lid];
}

fn shared_scale(lid: u32, lt: u32, tpb: u32, amax: f32, first: u32, at: u32, live: bool, d_at: u32) -> vec3<f32> {
    if (lt == 0u) {
        let sc = block_scale(amax, first, at);
        q_scale[lid / tpb] = sc;
        if (live) { xq[d_at] = bitcast<u32>(sc.y); }
    }
    workgroupBarrier();
    return q_scale[lid / tpb];
}

// A block's (mul, d, d32) from its largest magnitude and the first place it occurs (`first`
// values after act(at)): ggml's Q8_0 / Q8_1 scale (d rounded to f16) or its Q8_K one.
fn block_scale(amax: f32, first: u32, at: u32) -> vec3<f32> {
    var mul = 0.0;
    var d = 0.0;
    var d32 = 0.0;
    if (ABLK == 32u) {
        d32 = div_rn(amax, 127.0);
        if (amax != 0.0) { mul = div_rn(127.0, amax); }
        d = half_to_f32(f32_to_half(d32));
    } else if (amax > 0.0 && first < ABLK) {
        mul = div_rn(-127.0, act(at + first));
        d = div_rn(1.0, mul);
    }
    return vec3<f32>(mul, d, d32);
}

// The per-32 sum's word: the i32 code sum (256-blocks) or ggml's Q8_1 block sum s (f16-rounded).
fn sum_word(sum: i32, d32: f32) -> u32 {
    if (ABLK == 256u) { return bitcast<u32>(sum); }
    return bitcast<u32>(half_to_f32(f32_to_half(d32 * f32(sum))));
}

// This thread's part of block b of row t (block g = t * K / ABLK + b of the activations; the
// row's values start at act(row0)), into xq: codes [T][K/4], scales from word d_off, per-32
// sums from e_off. Every thread of the workgroup calls it (it has barriers); `live` false: the
// thread's block is past the end and writes nothing.
fn quantize_block(lid: u32, g: u32, t: u32, b: u32, live: bool, row0: u32, K: u32, d_off: u32, e_off: u32) {
    let lt = lid % TPB;  // thread in its block
    let x0 = row0 + b * ABLK + lt * VPT;
    var v: array<f32, VPT>;
    var amax = 0.0;
    for (var i = 0u; i < VPT; i++) {
        v[i] = 0.0;
        if (live) { v[i] = act(x0 + i); }
        amax = max(amax, abs(v[i]));
    }
    amax = block_tree(lid, lt, TPB, amax, false);
    // the first value of largest magnitude, as ggml's scan (256-blocks)
    var first = ABLK;
    for (var i = VPT; i > 0u; i--) {
        if (abs(v[i - 1u]) == amax) { first = lt * VPT + i - 1u; }
    }
    first = u32(block_tree(lid, lt, TPB, f32(first), true));
    let sc = shared_scale(lid, lt, TPB, amax, first, row0 + b * ABLK, live, d_off + g);
    var word = 0u;
    var sum = 0i;
    for (var i = 0u; i < VPT; i++) {
        let q = i32(clamp(round(v[i] * sc.x), -127.0, 127.0));
        sum = sum + q;
        word = word | ((u32(q) & 0xffu) << (8u * i));
    }
    q_code[lid] = word;
    // the code sum of each 32 values: a tree over the 32 / VPT threads that hold them
    let per32 = 32u / VPT;
    let sum32 = group_sum(lid, lt, per32, sum);
    if (live) {
        let qword = t * (K / 4u) + (b * ABLK + lt * VPT) / 4u;
        if (VPT == 4u) {
            xq[qword] = word;
        } else if (lt % 4u == 0u) {  // one value per thread: four threads' codes make a word
            xq[qword] = q_code[lid] | (q_code[lid + 1u] << 8u) | (q_code[lid + 2u] << 16u) | (q_code[lid + 3u] << 24u);
        }
        if (lt % per32 == 0u && (ABLK == 256u || SUMS == 1u)) {
            xq[e_off + t * (K / 32u) + (b * ABLK + lt * VPT) / 32u] = sum_word(sum32, sc.z);
        }
    }
}

// Row t's blocks all at once where they fit (the producers' version of quantize_rows): a block's
// codes, scale and sums do not depend on which threads compute them (its largest magnitude and
// first place are exact, the sums are integers, the scale is block_scale), so here each block
// gets tpb threads of ABLK / tpb contiguous values, tpb the largest power of two (at most
// ABLK / 4) that lets every block of the row run side by side: one block's latency per row
// instead of a pass per QB blocks. The values are read from act() twice instead of held.
fn quantize_row_wide(lid: u32, t: u32, row0: u32, K: u32, d_off: u32, e_off: u32) {
    let nbk = K / ABLK;
    var tpb = ABLK / 4u;
    while (tpb > 1u && nbk * tpb > WG) { tpb = tpb / 2u; }
    let vpt = ABLK / tpb;  // a multiple of 4
    let lt = lid % tpb;
    for (var b0 = 0u; b0 < nbk; b0 += WG / tpb) {
        let b = b0 + lid / tpb;
        let live = b < nbk;
        let x0 = row0 + b * ABLK + lt * vpt;
        var amax = 0.0;
        if (live) {
            for (var i = 0u; i < vpt; i++) { amax = max(amax, abs(act(x0 + i))); }
        }
        amax = block_tree(lid, lt, tpb, amax, false);
        var first = ABLK;
        if (live) {
            for (var i = vpt; i > 0u; i--) {
                if (abs(act(x0 + i - 1u)) == amax) { first = lt * vpt + i - 1u; }
            }
        }
        first = u32(block_tree(lid, lt, tpb, f32(first), true));
        let sc = shared_scale(lid, lt, tpb, amax, first, row0 + b * ABLK, live, d_off + t * nbk + b);
        let sums = live && (ABLK == 256u || SUMS == 1u);
        var sum = 0i;
        for (var i = 0u; i < vpt; i += 4u) {
            var word = 0u;
            for (var j = 0u; j < 4u; j++) {
                let q = i32(clamp(round(act(x0 + i + j) * sc.x), -127.0, 127.0));
                sum = sum + q;
                word = word | ((u32(q) & 0xffu) << (8u * j));
            }
            if (live) { xq[t * (K / 4u) + (b * ABLK + lt * vpt + i) / 4u] = word; }
            if (vpt >= 32u && (i + 4u) % 32u == 0u) {  // a whole 32 in this thread
                if (sums) { xq[e_off + t * (K / 32u) + (b * ABLK + lt * vpt + i) / 32u] = sum_word(sum, sc.z); }
                sum = 0i;
            }
        }
        // fewer than 32 values per thread: the code sum of each 32 by a tree over its threads
        let per32 = max(1u, 32u / vpt);
        let sum32 = group_sum(lid, lt, per32, sum);
        if (vpt < 32u && sums && lt % per32 == 0u) {
            xq[e_off + t * (K / 32u) + (b * ABLK + lt * vpt) / 32u] = sum_word(sum32, sc.z);
        }
        workgroupBarrier();  // the next pass reuses the workgroup arrays
    }
}
