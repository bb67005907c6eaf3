// causal_conv, gdn_inputs and gdn_step in one dispatch (the backend's conv_gdn_inputs_step,
// where the conv output and the step inputs are scratch): gdn_fused.wgsl's workgroups, which
// per row first compute the conv values they read with conv_value.wgsl (the text causal_conv
// uses): their key head's q and k channels into workgroup memory (named `conv`, so
// gdn_inputs_value.wgsl reads them as gdn_inputs reads the conv rows) and each column's v, then
// go on as gdn_fused.wgsl. Every workgroup of a key head redoes its q and k channels (redundant
// work, no read of another workgroup's values); out and the state equal the three ops'.
struct Params {
    T: u32,
    Hk: u32,
    Hv: u32,
    Dk: u32,
    Dv: u32,
    ld_ba: u32,
    b_off: u32,  // first float of b in b_in, of a in a_in (the projection rows, where they lie)
    a_off: u32,
    C: u32,      // conv channels (2 * Hk * Dk + Hv * Dv)
    Kc: u32,
    x_off: u32,  // the conv input rows (the projection rows, where they lie): x_off + t * ldx
    ldx: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> hist: array<f32>;
@group(0) @binding(4) var<storage, read_write> b_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> a_in: array<f32>;
@group(0) @binding(6) var<storage, read_write> A: array<f32>;
@group(0) @binding(7) var<storage, read_write> dt_bias: array<f32>;
@group(0) @binding(8) var<storage, read_write> s0: array<f32>;
@group(0) @binding(9) var<storage, read_write> state: array<f32>;
@group(0) @binding(10) var<storage, read_write> out: array<f32>;

{{include conv_value.wgsl}}
{{include gdn_inputs_value.wgsl}}

{{include gdn_fused_row.wgsl}}
var<workgroup> conv: array<f32, {{DK2}}>;  // the row's q then k channels of the key head
var<workgroup> vc: array<f32, CB>;         // the row's v of each column

@compute @workgroup_size({{CWG}})
fn conv_gdn_inputs_step(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let kh = h / (p.Hv / p.Hk);
    let key_dim = p.Hk * DK;
    let sbase = h * DK * p.Dv;
    let part = lid / CB;
    let cc = lid % CB;
    let col = wid.y * CB + cc;
    let live = col < p.Dv;
    let i0 = part * DP;
    var s: array<f32, DP>;
    load_rows(&s, sbase, i0, col, live);
    for (var t = 0u; t < p.T; t++) {
        // the row's conv values (the previous row's reads of them ended before its last barrier)
        for (var d = lid; d < 2u * DK; d += CWG) {
            var c = kh * DK + d;
            if (d >= DK) { c = key_dim + kh * DK + (d - DK); }
            conv[d] = conv_silu_at(c, t);
        }
        if (live && part == 0u) { vc[cc] = conv_silu_at(2u * key_dim + h * p.Dv + col, t); }
        workgroupBarrier();
        // the row's inputs (gdn_inputs' values) and the step
        var v = 0.0;
        if (live) { v = vc[cc]; }
        let o = fused_row(&s, t, h, 0u, DK, v, live, lid, part, cc);
        if (live && part == 0u) { out[(t * p.Hv + h) * p.Dv + col] = o; }
    }
    store_rows(&s, sbase, i0, col, live);
}
