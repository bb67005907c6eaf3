// What gdn_fused.wgsl and gdn_conv_fused.wgsl share (included by both): gdn_step's workgroup
// layout and one row of the step with the inputs computed in the workgroup, then gdn_step's own
// row (gdn_step_row.wgsl). The includer defines `conv` (the row's q and k channels, read by
// gdn_inputs_value.wgsl), b_in, a_in, A, dt_bias, s0, state and Params with Dv, ld_ba, b_off,
// a_off, and includes gdn_inputs_value.wgsl first.
const CWG: u32 = {{CWG}}u;  // threads per workgroup
const DK: u32 = {{DK}}u;
const PARTS: u32 = {{PARTS}}u;
const CB: u32 = CWG / PARTS;  // columns per workgroup
const DP: u32 = DK / PARTS;   // rows of S per thread
var<workgroup> red: array<f32, CWG>;
var<workgroup> qs: array<f32, DK>;
var<workgroup> ks: array<f32, DK>;
var<workgroup> sums: array<f32, 4>;  // q and k sums of squares, decay, beta of the row

{{include gdn_step_row.wgsl}}

// the row's normalised k and scaled q, in workgroup memory (base: the thread's first row of S)
fn key_at(base: u32, i: u32) -> f32 { return ks[base + i]; }
fn query_at(base: u32, i: u32) -> f32 { return qs[base + i]; }

// Row t of value head h: q at conv[qb..], k at conv[kb..]; v is the column's value (0 where not
// live). gdn_inputs' values (norms, decay, beta) into workgroup memory, then gdn_step's
// arithmetic on the DP rows of S this thread holds (step_rows); returns S^T q summed over the parts.
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
    return step_rows(s, decay, beta, v, live, i0, lid, part, cc);
}
