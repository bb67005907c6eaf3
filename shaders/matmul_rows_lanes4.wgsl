// The lanes row loop (matmul_rows_lanes.wgsl) with 4 weight rows per thread
// (STRATA_WEBGPU_XLOAD=lanes4, and the output head at T = 2..8 under the default lanes loop):
// RB = 16 rows per workgroup, 4 groups of LANES = 16 threads, each group on 4 consecutive rows.
// A thread loads four quads of each of its 4 rows (16 loads in flight, as the lanes loop has 4),
// then each x row's 8 values once per quad for all 4 rows: x is read a quarter as often as in
// the lanes loop, which matters for T > 1 (each quad meets up to 8 rows of x). Each row's arithmetic is the lanes loop's: lane
// `lane` sums the row's quads lane, lane + 16, ... in increasing order, each adding
// dot(w_lo, x_lo) + dot(w_hi, x_hi), then the same halving tree over the 16 lane sums; so the
// two loops give the same bits.

const LANES: u32 = 16u;
const RPT: u32 = 4u;  // weight rows per thread
const GROUPS: u32 = WG / LANES;

// partial[(j * RPT + u) * WG + lid]: x row j, the thread's row u
// the folded SwiGLU (GLU) is the lanes loop's only (matmul_rows_lanes.wgsl); the includers set
// glu_off, unused here
var<private> glu_off: u32;

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

// The 8 x rows' accumulators: component u of a_j is the thread's row u against x row j.
struct Acc {
    a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
    a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>, a7: vec4<f32>,
}

// One quad of each of the 4 rows (w0..w3) against the nt rows of x at xb, xb + xs, ...
fn add_quads(acc: ptr<function, Acc>, w0: W8, w1: W8, w2: W8, w3: W8, xb: u32, xs: u32, nt: u32, xv: u32) {
    (*acc).a0 = (*acc).a0 + terms(w0, w1, w2, w3, xb, xv);
    if (nt > 1u) { (*acc).a1 = (*acc).a1 + terms(w0, w1, w2, w3, xb + xs, xv); }
    if (nt > 2u) { (*acc).a2 = (*acc).a2 + terms(w0, w1, w2, w3, xb + 2u * xs, xv); }
    if (nt > 3u) { (*acc).a3 = (*acc).a3 + terms(w0, w1, w2, w3, xb + 3u * xs, xv); }
    if (nt > 4u) { (*acc).a4 = (*acc).a4 + terms(w0, w1, w2, w3, xb + 4u * xs, xv); }
    if (nt > 5u) { (*acc).a5 = (*acc).a5 + terms(w0, w1, w2, w3, xb + 5u * xs, xv); }
    if (nt > 6u) { (*acc).a6 = (*acc).a6 + terms(w0, w1, w2, w3, xb + 6u * xs, xv); }
    if (nt > 7u) { (*acc).a7 = (*acc).a7 + terms(w0, w1, w2, w3, xb + 7u * xs, xv); }
}

fn rows_dot(lid: u32, buf: u32, base: u32, quads: u32, nr: u32, x0: u32, xs: u32, nt: u32, xv: u32) {
    let g = lid / LANES;
    let lane = lid % LANES;
    let r0 = g * RPT;
    let z = vec4<f32>(0.0);
    var acc = Acc(z, z, z, z, z, z, z, z);
    if (r0 < nr) {
        let wr = base + r0 * quads;
        let wr1 = wr + quads;
        let wr2 = wr + 2u * quads;
        let wr3 = wr + 3u * quads;
        let l1 = r0 + 1u < nr;
        let l2 = r0 + 2u < nr;
        let l3 = r0 + 3u < nr;
        var i = lane;
        // four quads of each row per iteration: the 16 loads are issued before their sums, which
        // are added quad after quad (i, i + LANES, ...: the order of the loop below and of the
        // lanes loop)
        for (; i + 3u * LANES < quads; i += 4u * LANES) {
            let i1 = i + LANES;
            let i2 = i + 2u * LANES;
            let i3 = i + 3u * LANES;
            let p0 = load_row(buf, wr, i, true);
            let p1 = load_row(buf, wr1, i, l1);
            let p2 = load_row(buf, wr2, i, l2);
            let p3 = load_row(buf, wr3, i, l3);
            let q0 = load_row(buf, wr, i1, true);
            let q1 = load_row(buf, wr1, i1, l1);
            let q2 = load_row(buf, wr2, i1, l2);
            let q3 = load_row(buf, wr3, i1, l3);
            let t0 = load_row(buf, wr, i2, true);
            let t1 = load_row(buf, wr1, i2, l1);
            let t2 = load_row(buf, wr2, i2, l2);
            let t3 = load_row(buf, wr3, i2, l3);
            let s0 = load_row(buf, wr, i3, true);
            let s1 = load_row(buf, wr1, i3, l1);
            let s2 = load_row(buf, wr2, i3, l2);
            let s3 = load_row(buf, wr3, i3, l3);
            add_quads(&acc, decode(p0), decode(p1), decode(p2), decode(p3), x0 + 8u * i, xs, nt, xv);
            add_quads(&acc, decode(q0), decode(q1), decode(q2), decode(q3), x0 + 8u * i1, xs, nt, xv);
            add_quads(&acc, decode(t0), decode(t1), decode(t2), decode(t3), x0 + 8u * i2, xs, nt, xv);
            add_quads(&acc, decode(s0), decode(s1), decode(s2), decode(s3), x0 + 8u * i3, xs, nt, xv);
        }
        for (; i < quads; i += LANES) {
            add_quads(&acc, decode(load_row(buf, wr, i, true)), decode(load_row(buf, wr1, i, l1)),
                      decode(load_row(buf, wr2, i, l2)), decode(load_row(buf, wr3, i, l3)), x0 + 8u * i, xs, nt, xv);
        }
    }
    for (var j = 0u; j < nt; j++) {
        var a = acc.a0;
        switch (j) {
            case 1u: { a = acc.a1; }
            case 2u: { a = acc.a2; }
            case 3u: { a = acc.a3; }
            case 4u: { a = acc.a4; }
            case 5u: { a = acc.a5; }
            case 6u: { a = acc.a6; }
            case 7u: { a = acc.a7; }
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
