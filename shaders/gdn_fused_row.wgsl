// What gdn_fused.wgsl and gdn_conv_fused.wgsl share (included by both): gdn_step's workgroup
// layout and one row of the step with the inputs computed in the workgroup. The includer defines
// `conv` (the row's q and k channels, read by gdn_inputs_value.wgsl), b_in, a_in, A, dt_bias, s0,
// state and Params with Dv, ld_ba, b_off, a_off, and includes gdn_inputs_value.wgsl first.
const CWG: u32 = {{CWG}}u;  // threads per workgroup
const DK: u32 = {{DK}}u;
const PARTS: u32 = {{PARTS}}u;
const CB: u32 = CWG / PARTS;  // columns per workgroup
const DP: u32 = DK / PARTS;   // rows of S per thread
var<workgroup> red: array<f32, CWG>;
var<workgroup> qs: array<f32, DK>;
var<workgroup> ks: array<f32, DK>;
var<workgroup> sums: array<f32, 4>;  // q and k sums of squares, decay, beta of the row

{{include gdn_sum_parts.wgsl}}

// Row t of value head h: q at conv[qb..], k at conv[kb..]; v is the column's value (0 where not
// live). gdn_inputs' values (norms, decay, beta) into workgroup memory, then gdn_step's
// arithmetic on the DP rows of S this thread holds; returns S^T q summed over the parts.
fn fused_row(s: ptr<function, array<f32, DP>>, t: u32, h: u32, qb: u32, kb: u32, v: f32, live: bool,
             lid: u32, part: u32, cc: u32) -> f32 {
    let qscale = 1.0 / sqrt(f32(p.Dk));  // as gdn_inputs computes it (not a constant)
    let i0 = part * DP;
    if (lid == 0u) { sums[0] = gdn_sum_sq(qb, DK); }
    if (lid == 1u) { sums[1] = gdn_sum_sq(kb, DK); }
    if (lid == 2u) { sums[2] = gdn_decay(A[h], a_in[p.a_off + t * p.ld_ba + h], dt_bias[h]); }
    if (lid == 3u) { sums[3] = gdn_beta(b_in[p.b_off + t * p.ld_ba + h]); }
    workgroupBarrier();
    let iq = gdn_inv_norm(sums[0]);
    let ik = gdn_inv_norm(sums[1]);
    for (var d = lid; d < DK; d += CWG) {
        qs[d] = (conv[qb + d] * iq) * qscale;
        ks[d] = conv[kb + d] * ik;
    }
    let decay = sums[2];
    let beta = sums[3];
    workgroupBarrier();
    var kv = 0.0;
    for (var c = 0u; c < DP; c++) {
        (*s)[c] = (*s)[c] * decay;
        kv = kv + (*s)[c] * ks[i0 + c];
    }
    kv = sum_parts(lid, part, cc, kv);
    var delta = 0.0;
    if (live) { delta = (v - kv) * beta; }
    var o = 0.0;
    for (var c = 0u; c < DP; c++) {
        (*s)[c] = (*s)[c] + ks[i0 + c] * delta;
        o = o + (*s)[c] * qs[i0 + c];
    }
    return sum_parts(lid, part, cc, o);
}

// The DP rows of S from i0 of column col of the head at sbase: from s0 (zeros where not live),
// and back into `state` after the window's last row.
fn load_rows(s: ptr<function, array<f32, DP>>, sbase: u32, i0: u32, col: u32, live: bool) {
    for (var c = 0u; c < DP; c++) { (*s)[c] = 0.0; }
    if (live) {
        for (var c = 0u; c < DP; c++) { (*s)[c] = s0[sbase + (i0 + c) * p.Dv + col]; }
    }
}

fn store_rows(s: ptr<function, array<f32, DP>>, sbase: u32, i0: u32, col: u32, live: bool) {
    if (live) {
        for (var c = 0u; c < DP; c++) { state[sbase + (i0 + c) * p.Dv + col] = (*s)[c]; }
    }
}
