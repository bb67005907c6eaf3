// The lanes row loop (matmul_rows_lanes.wgsl) with 4 weight rows per thread
// (STRATA_WEBGPU_XLOAD=lanes4): RB = 16 rows per workgroup, 4 groups of LANES = 16 threads, each
// group on 4 consecutive rows. A thread loads its quad of each of its 4 rows, then each x row's 8
// values once for all 4: x is read a quarter as often as in the lanes loop, which matters for
// T > 1 (each quad meets up to 8 rows of x). Each row's arithmetic is the lanes loop's: lane
// `lane` sums the row's quads lane, lane + 16, ... in increasing order, each adding
// dot(w_lo, x_lo) + dot(w_hi, x_hi), then the same halving tree over the 16 lane sums; so the
// two loops give the same bits.

const LANES: u32 = 16u;
const RPT: u32 = 4u;  // weight rows per thread
const GROUPS: u32 = WG / LANES;

// partial[(j * RPT + u) * WG + lid]: x row j, the thread's row u
var<workgroup> partial: array<f32, WG * TB * RPT>;

{{include matmul_rows_pair.wgsl}}

// x again, as vec4 (binding 12, the same buffer as x), read so where xv = 1.
@group(0) @binding(12) var<storage, read_write> x4: array<vec4<f32>>;

struct W8 {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn decode(q: vec4<u32>) -> W8 {
    let a = pair(q.x);
    let b = pair(q.y);
    let c = pair(q.z);
    let d = pair(q.w);
    return W8(vec4<f32>(a.x, a.y, b.x, b.y), vec4<f32>(c.x, c.y, d.x, d.y));
}

// The four rows' terms for the x row at xb: component u is dot(w_u, x) as the lanes loop adds it.
fn terms(w0: W8, w1: W8, w2: W8, w3: W8, xb: u32, xv: u32) -> vec4<f32> {
    var x_lo: vec4<f32>;
    var x_hi: vec4<f32>;
    if (xv == 1u) {
        x_lo = x4[xb / 4u];
        x_hi = x4[xb / 4u + 1u];
    } else {
        x_lo = vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]);
        x_hi = vec4<f32>(x[xb + 4u], x[xb + 5u], x[xb + 6u], x[xb + 7u]);
    }
    return vec4<f32>(dot(w0.lo, x_lo) + dot(w0.hi, x_hi), dot(w1.lo, x_lo) + dot(w1.hi, x_hi),
                     dot(w2.lo, x_lo) + dot(w2.hi, x_hi), dot(w3.lo, x_lo) + dot(w3.hi, x_hi));
}

fn load_row(buf: u32, wr: u32, i: u32, live: bool) -> vec4<u32> {
    if (live) { return load_w(buf, wr + i); }
    return vec4<u32>(0u);
}

fn row_result(r: u32, j: u32) -> f32 {
    return partial[(j * RPT + r % RPT) * WG + (r / RPT) * LANES];
}

fn rows_dot(lid: u32, buf: u32, base: u32, quads: u32, nr: u32, x0: u32, xs: u32, nt: u32, xv: u32) {
    let g = lid / LANES;
    let lane = lid % LANES;
    let r0 = g * RPT;
    // accumulators by x row j, component u = the thread's row u
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var a4 = vec4<f32>(0.0);
    var a5 = vec4<f32>(0.0);
    var a6 = vec4<f32>(0.0);
    var a7 = vec4<f32>(0.0);
    if (r0 < nr) {
        let wr = base + r0 * quads;
        for (var i = lane; i < quads; i += LANES) {
            let w0 = decode(load_row(buf, wr, i, true));
            let w1 = decode(load_row(buf, wr + quads, i, r0 + 1u < nr));
            let w2 = decode(load_row(buf, wr + 2u * quads, i, r0 + 2u < nr));
            let w3 = decode(load_row(buf, wr + 3u * quads, i, r0 + 3u < nr));
            let xb = x0 + 8u * i;
            a0 = a0 + terms(w0, w1, w2, w3, xb, xv);
            if (nt > 1u) { a1 = a1 + terms(w0, w1, w2, w3, xb + xs, xv); }
            if (nt > 2u) { a2 = a2 + terms(w0, w1, w2, w3, xb + 2u * xs, xv); }
            if (nt > 3u) { a3 = a3 + terms(w0, w1, w2, w3, xb + 3u * xs, xv); }
            if (nt > 4u) { a4 = a4 + terms(w0, w1, w2, w3, xb + 4u * xs, xv); }
            if (nt > 5u) { a5 = a5 + terms(w0, w1, w2, w3, xb + 5u * xs, xv); }
            if (nt > 6u) { a6 = a6 + terms(w0, w1, w2, w3, xb + 6u * xs, xv); }
            if (nt > 7u) { a7 = a7 + terms(w0, w1, w2, w3, xb + 7u * xs, xv); }
        }
    }
    for (var j = 0u; j < nt; j++) {
        var a = a0;
        switch (j) {
            case 1u: { a = a1; }
            case 2u: { a = a2; }
            case 3u: { a = a3; }
            case 4u: { a = a4; }
            case 5u: { a = a5; }
            case 6u: { a = a6; }
            case 7u: { a = a7; }
            default: {}
        }
        for (var u = 0u; u < RPT; u++) { partial[(j * RPT + u) * WG + lid] = a[u]; }
    }
    for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lane < s) {
            for (var j = 0u; j < nt * RPT; j++) {
                partial[j * WG + lid] = partial[j * WG + lid] + partial[j * WG + lid + s];
            }
        }
    }
    workgroupBarrier();
}
