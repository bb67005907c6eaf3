// The inner loop of every half-precision matmul with rows of whole vec4<u32> (included by
// matmul.wgsl and matmul_gathered.wgsl through the preprocessor's include step, as the file the
// ROWS define names, so each of their kernels computes a row with the same code, bit-identical
// by construction; matmul_rows_direct.wgsl is the unstaged alternative).
// The includer declares `x` (array<f32>, the inputs) and `fn load_w(b: u32, i: u32) -> vec4<u32>`
// (vec4 word i of weight buffer b), and the constants WG and TB.
//
// row_dot: one weight row (quads vec4 words from `base` of weight buffer `buf`: eight half
// values each) against nt <= TB rows of x (row j from x0 + j * xs). Step s stages the x values
// of quads s*WG .. s*WG+WG-1 of all nt rows in workgroup memory with coalesced loads (one float
// per thread per load), so every row of a window shares each weight load; then thread lid adds
// quad s*WG + lid of every row into that row's own accumulator. So thread lid sums quads lid,
// lid+WG, ... in increasing order whatever nt is, and the tree over the WG partials is fixed:
// a row's result never depends on how many rows share the pass. Afterwards partial[j] holds row
// j's dot product (j < nt) until the caller's next barrier.

var<workgroup> partial: array<f32, WG * TB>;
var<workgroup> xt: array<vec4<f32>, 2u * WG * TB>;  // [row][half][lane]: a lane's 8 values as two vec4

fn bf16_pair(word: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

fn pair(word: u32) -> vec2<f32> {
    if ({{BF16}}u == 1u) { return bf16_pair(word); }
    return unpack2x16float(word);
}

fn row_dot(lid: u32, buf: u32, base: u32, quads: u32, x0: u32, xs: u32, nt: u32) {
    var acc: array<f32, TB>;
    for (var j = 0u; j < TB; j++) { acc[j] = 0.0; }  // explicitly: naga hoists the zero-init out of loops
    let steps = (quads + WG - 1u) / WG;
    for (var s = 0u; s < steps; s++) {
        let q0 = s * WG;
        let i = q0 + lid;
        var q = vec4<u32>(0u);
        if (i < quads) { q = load_w(buf, base + i); }  // in flight while x is staged
        let nf = 8u * min(WG, quads - q0);  // values of each row in this step
        for (var j = 0u; j < nt; j++) {
            let src = x0 + j * xs + 8u * q0;
            for (var c = 0u; c < 8u; c++) {
                let f = c * WG + lid;
                if (f < nf) {
                    xt[j * 2u * WG + ((f >> 2u) & 1u) * WG + (f >> 3u)][f & 3u] = x[src + f];
                }
            }
        }
        workgroupBarrier();
        if (i < quads) {
            let a = pair(q.x);
            let b = pair(q.y);
            let c = pair(q.z);
            let d = pair(q.w);
            let w_lo = vec4<f32>(a.x, a.y, b.x, b.y);
            let w_hi = vec4<f32>(c.x, c.y, d.x, d.y);
            for (var j = 0u; j < nt; j++) {
                let x_lo = xt[j * 2u * WG + lid];
                let x_hi = xt[j * 2u * WG + WG + lid];
                acc[j] = acc[j] + (dot(w_lo, x_lo) + dot(w_hi, x_hi));
            }
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < TB; j++) { partial[lid * TB + j] = acc[j]; }
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            for (var j = 0u; j < nt; j++) {
                partial[lid * TB + j] = partial[lid * TB + j] + partial[(lid + s) * TB + j];
            }
        }
    }
    workgroupBarrier();
}
