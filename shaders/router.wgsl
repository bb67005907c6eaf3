// MoE router: softmax over the E expert logits of a row, then the top-k experts (ties go to the
// lower index) and their probabilities, renormalised over the chosen k when asked. One workgroup
// per row with fixed-order reductions: a row's choice never depends on the other rows.
//
// Everything after one read of the logits works in workgroup memory: a dependent chain of
// global loads per round cost ~180 us per call on the H200 (2026-12-03 profile). Selection is a
// tournament: each thread keeps the best of its own experts, a tree finds the round's winner,
// and only the winner's owner rescans its experts; k rounds give the k best in order.
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
var<workgroup> prob: array<f32, MAX_E>;  // the row's logits, then its probabilities (-1: chosen)

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

    // the row into workgroup memory, and its max
    var m = -3.4e38;
    for (var e = lid; e < p.E; e += WG) {
        let l = logits[base + e];
        prob[e] = l;
        m = max(m, l);
    }
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
    for (var e = lid; e < p.E; e += WG) { acc = acc + exp(prob[e] - m); }
    red_v[lid] = acc;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red_v[lid] = red_v[lid] + red_v[lid + s]; }
    }
    workgroupBarrier();
    let total = red_v[0];
    // probabilities (each thread its own experts), and each thread's best
    var bv = 0.0;
    var bi = NONE;
    for (var e = lid; e < p.E; e += WG) {
        let v = exp(prob[e] - m) / total;  // ranked by probability, like the reference
        prob[e] = v;
        if (beats(v, e, bv, bi)) { bv = v; bi = e; }
    }

    var chosen_sum = 0.0;
    for (var j = 0u; j < p.k; j++) {
        workgroupBarrier();
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
        let pr = red_v[0];
        chosen_sum = chosen_sum + pr;
        if (lid == 0u) {
            ids[t * p.k + j] = e;
            weights[t * p.k + j] = pr;
        }
        if (e != NONE && e % WG == lid) {  // the winner's owner: its next best
            prob[e] = -1.0;
            bv = 0.0;
            bi = NONE;
            for (var f = lid; f < p.E; f += WG) {
                let v = prob[f];
                if (v >= 0.0 && beats(v, f, bv, bi)) { bv = v; bi = f; }
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u && p.renormalize != 0u) {
        for (var j = 0u; j < p.k; j++) { weights[t * p.k + j] = weights[t * p.k + j] / chosen_sum; }
    }
}
