// An inner loop of the half-precision matmuls with rows of whole vec4<u32>, selected by
// STRATA_WEBGPU_XLOAD=staged (included by matmul.wgsl and matmul_gathered.wgsl through the
// preprocessor's include step, as the file the ROWS define names, so each of their kernels
// computes a row with the same code, bit-identical by construction). Not the default: on the
// H200 (2026-12-03) it was 7x slower at T=1 than matmul_rows_direct.wgsl (8192 x 8192 f16: 753
// vs 102 us; cost(8)/cost(1) 3.37 vs 5.59), likely its per-thread arrays (q, acc) and the
// dynamic vec4 component stores into xt; unexamined.
// The includer declares `x` (array<f32>, the inputs) and `fn load_w(b: u32, i: u32) -> vec4<u32>`
// (vec4 word i of weight buffer b), and the constants WG and TB.
//
// rows_dot: nr <= RB consecutive weight rows (quads vec4 words each, eight half values per
// word, from `base` of weight buffer `buf`) against nt <= TB rows of x (row j from x0 + j * xs).
// Step s stages the x values of quads s*WG .. s*WG+WG-1 of all nt rows in workgroup memory with
// coalesced loads (one float per thread per load) while each thread's weight loads are in
// flight, so every weight row and every x row of the pass share them; then thread lid adds quad
// s*WG + lid of each weight row times each x row into that pair's own accumulator. So thread
// lid sums quads lid, lid+WG, ... in increasing order whatever nr and nt are, and the tree over
// the WG partials is fixed: a result never depends on how many rows share the pass. Afterwards
// partial[r * TB + j] holds weight row r's dot product with x row j until the caller's next
// barrier.

// the folded SwiGLU (GLU) is the lanes loop's only (matmul_rows_lanes.wgsl); the includers set
// glu_off, unused here
var<private> glu_off: u32;

var<workgroup> partial: array<f32, WG * TB * RB>;
var<workgroup> xt: array<vec4<f32>, 2u * WG * TB>;  // [row][half][lane]: a lane's 8 values as two vec4

{{include matmul_rows_pair.wgsl}}

// weight row r's dot product with x row j, after rows_dot (lane 0's slot after the tree)
fn row_result(r: u32, j: u32) -> f32 { return partial[r * TB + j]; }

fn rows_dot(lid: u32, buf: u32, base: u32, quads: u32, nr: u32, x0: u32, xs: u32, nt: u32, xv: u32) {  // xv: unused here
    var acc: array<f32, TB * RB>;  // [weight row][x row]
    for (var a = 0u; a < TB * RB; a++) { acc[a] = 0.0; }  // explicitly: naga hoists the zero-init out of loops
    let steps = (quads + WG - 1u) / WG;
    for (var s = 0u; s < steps; s++) {
        let q0 = s * WG;
        let i = q0 + lid;
        var q: array<vec4<u32>, RB>;
        for (var r = 0u; r < RB; r++) {
            q[r] = vec4<u32>(0u);
            if (r < nr && i < quads) { q[r] = load_w(buf, base + r * quads + i); }  // in flight while x is staged
        }
        let nf = 8u * min(WG, quads - q0);  // values of each x row in this step
        for (var j = 0u; j < TB; j++) {
            if (j < nt) {
                let src = x0 + j * xs + 8u * q0;
                for (var c = 0u; c < 8u; c++) {
                    let f = c * WG + lid;
                    if (f < nf) {
                        xt[j * 2u * WG + ((f >> 2u) & 1u) * WG + (f >> 3u)][f & 3u] = x[src + f];
                    }
                }
            }
        }
        workgroupBarrier();
        if (i < quads) {
            for (var r = 0u; r < RB; r++) {
                if (r < nr) {
                    let a = pair(q[r].x);
                    let b = pair(q[r].y);
                    let c = pair(q[r].z);
                    let d = pair(q[r].w);
                    let w_lo = vec4<f32>(a.x, a.y, b.x, b.y);
                    let w_hi = vec4<f32>(c.x, c.y, d.x, d.y);
                    for (var j = 0u; j < TB; j++) {
                        if (j < nt) {
                            let x_lo = xt[j * 2u * WG + lid];
                            let x_hi = xt[j * 2u * WG + WG + lid];
                            acc[r * TB + j] = acc[r * TB + j] + (dot(w_lo, x_lo) + dot(w_hi, x_hi));
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }
{{include matmul_rows_tree.wgsl}}
}
