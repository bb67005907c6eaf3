// MoE router: softmax over the E expert logits of a row, then the top-k experts (ties go to the
// lower index) and their probabilities, renormalised over the chosen k when asked. One workgroup
// per row with fixed-order reductions: a row's choice never depends on the other rows.
struct Params {
    T: u32,
    E: u32,
    k: u32,
    renormalize: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;

const WG: u32 = {{WG}}u;
const MAX_E: u32 = {{MAX_E}}u;
const NONE: u32 = 0xffffffffu;
var<workgroup> red_v: array<f32, WG>;
var<workgroup> red_i: array<u32, WG>;
var<workgroup> taken: array<u32, MAX_E>;

// (value, index) a beats b: larger value, then lower index; NONE never wins.
fn beats(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    if (ia == NONE) { return false; }
    if (ib == NONE) { return true; }
    return va > vb || (va == vb && ia < ib);
}

@compute @workgroup_size({{WG}})
fn router_topk(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let t = wid.x;
    if (t >= p.T) { return; }
    let base = t * p.E;

    // max
    var m = -3.4e38;
    for (var e = lid; e < p.E; e += WG) { m = max(m, logits[base + e]); taken[e] = 0u; }
    red_v[lid] = m;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red_v[lid] = max(red_v[lid], red_v[lid + s]); }
    }
    workgroupBarrier();
    m = red_v[0];
    workgroupBarrier();
    // sum of exp
    var acc = 0.0;
    for (var e = lid; e < p.E; e += WG) { acc = acc + exp(logits[base + e] - m); }
    red_v[lid] = acc;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red_v[lid] = red_v[lid] + red_v[lid + s]; }
    }
    workgroupBarrier();
    let total = red_v[0];

    var chosen_sum = 0.0;
    for (var j = 0u; j < p.k; j++) {
        workgroupBarrier();
        var bv = 0.0;
        var bi = NONE;
        for (var e = lid; e < p.E; e += WG) {
            let v = exp(logits[base + e] - m) / total;  // ranked by probability, like the reference
            if (taken[e] == 0u && beats(v, e, bv, bi)) { bv = v; bi = e; }
        }
        red_v[lid] = bv;
        red_i[lid] = bi;
        for (var s = WG / 2u; s > 0u; s = s / 2u) {
            workgroupBarrier();
            if (lid < s && beats(red_v[lid + s], red_i[lid + s], red_v[lid], red_i[lid])) {
                red_v[lid] = red_v[lid + s];
                red_i[lid] = red_i[lid + s];
            }
        }
        workgroupBarrier();
        let e = red_i[0];
        let prob = red_v[0];
        chosen_sum = chosen_sum + prob;
        if (lid == 0u) {
            ids[t * p.k + j] = e;
            weights[t * p.k + j] = prob;
            taken[e] = 1u;
        }
    }
    workgroupBarrier();
    if (lid == 0u && p.renormalize != 0u) {
        for (var j = 0u; j < p.k; j++) { weights[t * p.k + j] = weights[t * p.k + j] / chosen_sum; }
    }
}
