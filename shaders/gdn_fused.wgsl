// gdn_inputs and gdn_step in one dispatch (the backend's gdn_inputs_step, where the step's
// inputs are scratch): the workgroups of gdn.wgsl's gdn_step, (value head, block of CWG / PARTS
// columns), each computing the inputs it reads itself, with gdn_inputs_value.wgsl (the text
// gdn_inputs uses), per row: its key head's q and k sums of squares (one thread each, in
// gdn_inputs' order), decay and beta of its head, then the normalised q and k of the head into
// workgroup memory. The step's arithmetic is gdn_step's, so out and the state equal the two
// ops' bit for bit; every workgroup of a key head redoes its norms (redundant work, no read of
// another workgroup's values). The step inputs are not written.
struct Params {
    T: u32,
    Hk: u32,
    Hv: u32,
    Dk: u32,
    Dv: u32,
    ld_ba: u32,
    b_off: u32,  // first float of b in b_in, of a in a_in (the projection rows, where they lie)
    a_off: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> conv: array<f32>;
@group(0) @binding(2) var<storage, read_write> b_in: array<f32>;
@group(0) @binding(3) var<storage, read_write> a_in: array<f32>;
@group(0) @binding(4) var<storage, read_write> A: array<f32>;
@group(0) @binding(5) var<storage, read_write> dt_bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> s0: array<f32>;
@group(0) @binding(7) var<storage, read_write> state: array<f32>;
@group(0) @binding(8) var<storage, read_write> out: array<f32>;

{{include gdn_inputs_value.wgsl}}

{{include gdn_fused_row.wgsl}}

@compute @workgroup_size({{CWG}})
fn gdn_inputs_step(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let kh = h / (p.Hv / p.Hk);
    let key_dim = p.Hk * DK;
    let conv_dim = 2u * key_dim + p.Hv * p.Dv;
    let sbase = h * DK * p.Dv;
    let part = lid / CB;
    let cc = lid % CB;
    let col = wid.y * CB + cc;
    let live = col < p.Dv;
    let i0 = part * DP;
    var s: array<f32, DP>;
    load_rows(&s, sbase, i0, col, live);
    for (var t = 0u; t < p.T; t++) {
        // the row's inputs (gdn_inputs' values; the previous row's reads ended in sum_parts)
        let qb = t * conv_dim + kh * DK;
        var v = 0.0;
        if (live) { v = conv[t * conv_dim + 2u * key_dim + h * p.Dv + col]; }
        let o = fused_row(&s, t, h, qb, qb + key_dim, v, live, lid, part, cc);
        if (live && part == 0u) { out[(t * p.Hv + h) * p.Dv + col] = o; }
    }
    store_rows(&s, sbase, i0, col, live);
}
