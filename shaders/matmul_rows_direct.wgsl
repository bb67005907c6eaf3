// The inner loop of the half-precision matmuls (the default): x read straight from storage,
// one weight row per workgroup (the backend sets RB = 1), the loop these kernels had before
// matmul_rows.wgsl. matmul_rows.wgsl is the alternative STRATA_WEBGPU_XLOAD=staged selects (the
// kernels include whichever file the ROWS define names): the same interface, per-thread order
// and tree, so the two compute the same values; each is one code path for every T. On the H200
// (2026-12-03) this loop was 7x faster at T=1 than the staged one (8192 x 8192: 102 vs 753 us).
//
// rows_dot: nr <= RB consecutive weight rows (quads vec4 words each from `base` of weight buffer
// `buf`) against nt <= TB rows of x (row j from x0 + j * xs); thread lid sums quads lid, lid+WG,
// ... in increasing order, then a fixed tree; afterwards partial[r * TB + j] holds weight row r's
// dot product with x row j until the caller's next barrier.

// the folded SwiGLU (GLU) is the lanes loop's only (matmul_rows_lanes.wgsl); the includers set
// glu_off, unused here
var<private> glu_off: u32;

var<workgroup> partial: array<f32, WG * TB * RB>;

{{include matmul_rows_pair.wgsl}}

// weight row r's dot product with x row j, after rows_dot (lane 0's slot after the tree)
fn row_result(r: u32, j: u32) -> f32 { return partial[r * TB + j]; }

fn rows_dot(lid: u32, buf: u32, base: u32, quads: u32, nr: u32, x0: u32, xs: u32, nt: u32, xv: u32) {  // xv: unused here
    var acc: array<f32, TB * RB>;
    for (var a = 0u; a < TB * RB; a++) { acc[a] = 0.0; }
    for (var i = lid; i < quads; i += WG) {
        for (var r = 0u; r < nr; r++) {
            let q = load_w(buf, base + r * quads + i);
            let a = pair(q.x);
            let b = pair(q.y);
            let c = pair(q.z);
            let d = pair(q.w);
            let w_lo = vec4<f32>(a.x, a.y, b.x, b.y);
            let w_hi = vec4<f32>(c.x, c.y, d.x, d.y);
            for (var j = 0u; j < nt; j++) {
                let xb = x0 + j * xs + 8u * i;
                let x_lo = vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]);
                let x_hi = vec4<f32>(x[xb + 4u], x[xb + 5u], x[xb + 6u], x[xb + 7u]);
                acc[r * TB + j] = acc[r * TB + j] + (dot(w_lo, x_lo) + dot(w_hi, x_hi));
            }
        }
    }
{{include matmul_rows_tree.wgsl}}
}
