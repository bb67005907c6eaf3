// The inner loop of the half-precision matmuls (the default): RB = 4 consecutive weight rows per
// workgroup, LANES = WG / RB = 16 threads per row, x read from storage. The other row files
// (matmul_rows_direct.wgsl: one row per workgroup, 64 threads per row; matmul_rows.wgsl: x
// staged) are what STRATA_WEBGPU_XLOAD=direct|staged select; they share one arithmetic with each
// other, and this file has its own (16 partial sums per row instead of 64), so switching between
// this loop and those changes the last bits of a result. Within one loop a row's value never
// depends on T or on the other rows.
//
// rows_dot: nr <= RB consecutive weight rows (quads vec4 words each from `base` of weight buffer
// `buf`) against nt <= TB rows of x (row j from x0 + j * xs; xv = 1: x0 and xs are multiples of
// 4, x may be read as vec4). Thread lid works on weight row
// lid / LANES: lane lid % LANES sums the row's quads lane, lane + LANES, ... in increasing order
// (four loads issued before their four sums, which keeps that order), each quad adding
// dot(w_lo, x_lo) + dot(w_hi, x_hi) to each x row's own accumulator (fixed registers, no array);
// then a fixed halving tree over the row's LANES sums. Afterwards row_result(r, j) holds weight
// row r's dot product with x row j until the caller's next barrier.
//
// Why: with one 64-thread workgroup per row (the direct loop), a 512-wide expert row gives each
// thread one load and a six-level tree of barriers; here each thread issues four loads, the tree
// has four levels and serves four rows, and the accumulators stay in registers.

const LANES: u32 = WG / RB;

// partial[j * WG + lid]: consecutive threads on consecutive words (no bank conflicts in the tree)
var<workgroup> partial: array<f32, WG * TB>;

{{include matmul_rows_pair.wgsl}}

struct Acc {
    a: vec4<f32>,  // x rows 0..3
    b: vec4<f32>,  // x rows 4..7
}

// x again, as vec4 (binding 12, the same buffer as x): where every row of x starts on a 16-byte
// boundary (xv = 1) a quad's 8 values of x are two loads instead of eight; the same values.
@group(0) @binding(12) var<storage, read_write> x4: array<vec4<f32>>;

// GLU = 1 (a SwiGLU folded into the matmul that reads its output): the value of x at index i is
// silu(x[i]) * x[i + glu_off], computed as elementwise.wgsl's `swiglu` writes it (the same
// expression, f32), so the product is the same bits as the swiglu dispatch followed by this
// matmul, one dispatch fewer. The includer sets glu_off before rows_dot. GLU = 0: the code
// below is the plain loop (the constant branch folds away).
const GLU: u32 = {{GLU}}u;
var<private> glu_off: u32;

fn glu(g: f32, u: f32) -> f32 { return g / (1.0 + exp(-g)) * u; }

fn glu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(glu(g.x, u.x), glu(g.y, u.y), glu(g.z, u.z), glu(g.w, u.w));
}

fn xdot(w_lo: vec4<f32>, w_hi: vec4<f32>, xb: u32, xv: u32) -> f32 {
    var x_lo: vec4<f32>;
    var x_hi: vec4<f32>;
    if (GLU == 1u) {
        let ub = xb + glu_off;
        if (xv == 1u) {
            x_lo = glu4(x4[xb / 4u], x4[ub / 4u]);
            x_hi = glu4(x4[xb / 4u + 1u], x4[ub / 4u + 1u]);
        } else {
            x_lo = glu4(vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]),
                        vec4<f32>(x[ub], x[ub + 1u], x[ub + 2u], x[ub + 3u]));
            x_hi = glu4(vec4<f32>(x[xb + 4u], x[xb + 5u], x[xb + 6u], x[xb + 7u]),
                        vec4<f32>(x[ub + 4u], x[ub + 5u], x[ub + 6u], x[ub + 7u]));
        }
        return dot(w_lo, x_lo) + dot(w_hi, x_hi);
    }
    if (xv == 1u) {
        x_lo = x4[xb / 4u];
        x_hi = x4[xb / 4u + 1u];
    } else {
        x_lo = vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]);
        x_hi = vec4<f32>(x[xb + 4u], x[xb + 5u], x[xb + 6u], x[xb + 7u]);
    }
    return dot(w_lo, x_lo) + dot(w_hi, x_hi);
}

// One weight quad (8 values) against the nt rows of x at xb, xb + xs, ...
fn add_quad(acc: ptr<function, Acc>, q: vec4<u32>, xb: u32, xs: u32, nt: u32, xv: u32) {
    let a = pair(q.x);
    let b = pair(q.y);
    let c = pair(q.z);
    let d = pair(q.w);
    let w_lo = vec4<f32>(a.x, a.y, b.x, b.y);
    let w_hi = vec4<f32>(c.x, c.y, d.x, d.y);
    (*acc).a.x = (*acc).a.x + xdot(w_lo, w_hi, xb, xv);
    if (nt > 1u) { (*acc).a.y = (*acc).a.y + xdot(w_lo, w_hi, xb + xs, xv); }
    if (nt > 2u) { (*acc).a.z = (*acc).a.z + xdot(w_lo, w_hi, xb + 2u * xs, xv); }
    if (nt > 3u) { (*acc).a.w = (*acc).a.w + xdot(w_lo, w_hi, xb + 3u * xs, xv); }
    if (nt > 4u) { (*acc).b.x = (*acc).b.x + xdot(w_lo, w_hi, xb + 4u * xs, xv); }
    if (nt > 5u) { (*acc).b.y = (*acc).b.y + xdot(w_lo, w_hi, xb + 5u * xs, xv); }
    if (nt > 6u) { (*acc).b.z = (*acc).b.z + xdot(w_lo, w_hi, xb + 6u * xs, xv); }
    if (nt > 7u) { (*acc).b.w = (*acc).b.w + xdot(w_lo, w_hi, xb + 7u * xs, xv); }
}

fn acc_at(acc: Acc, j: u32) -> f32 {
    if (j < 4u) { return acc.a[j]; }
    return acc.b[j - 4u];
}

fn row_result(r: u32, j: u32) -> f32 { return partial[j * WG + r * LANES]; }

fn rows_dot(lid: u32, buf: u32, base: u32, quads: u32, nr: u32, x0: u32, xs: u32, nt: u32, xv: u32) {
    let r = lid / LANES;
    let lane = lid % LANES;
    var acc = Acc(vec4<f32>(0.0), vec4<f32>(0.0));
    if (r < nr) {
        let wr = base + r * quads;
        var i = lane;
        for (; i + 3u * LANES < quads; i += 4u * LANES) {
            let q0 = load_w(buf, wr + i);
            let q1 = load_w(buf, wr + i + LANES);
            let q2 = load_w(buf, wr + i + 2u * LANES);
            let q3 = load_w(buf, wr + i + 3u * LANES);
            add_quad(&acc, q0, x0 + 8u * i, xs, nt, xv);
            add_quad(&acc, q1, x0 + 8u * (i + LANES), xs, nt, xv);
            add_quad(&acc, q2, x0 + 8u * (i + 2u * LANES), xs, nt, xv);
            add_quad(&acc, q3, x0 + 8u * (i + 3u * LANES), xs, nt, xv);
        }
        for (; i < quads; i += LANES) {
            add_quad(&acc, load_w(buf, wr + i), x0 + 8u * i, xs, nt, xv);
        }
    }
    for (var j = 0u; j < nt; j++) { partial[j * WG + lid] = acc_at(acc, j); }
    for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lane < s) {
            for (var j = 0u; j < nt; j++) {
                partial[j * WG + lid] = partial[j * WG + lid] + partial[j * WG + lid + s];
            }
        }
    }
    workgroupBarrier();
}
