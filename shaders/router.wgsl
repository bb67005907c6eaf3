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
var<workgroup> red_v: array<f32, WG>;
var<workgroup> prob: array<f32, MAX_E>;
var<workgroup> chosen: array<f32, MAX_E>;  // by rank

@compute @workgroup_size({{WG}})
fn router_topk(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let t = wid.x;
    if (t >= p.T) { return; }
    let base = t * p.E;

    // max
    var m = -3.4e38;
    for (var e = lid; e < p.E; e += WG) { m = max(m, logits[base + e]); }
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

    // Each probability once into workgroup memory (the value every round of a sequential
    // selection would compute), then each expert's rank: how many experts beat it (larger
    // probability, then lower index: a strict order, so ranks are distinct). The experts of rank
    // < k are the top k, rank j in slot j: the order sequential selection gives, in two barriers
    // instead of k reduction trees.
    for (var e = lid; e < p.E; e += WG) { prob[e] = exp(logits[base + e] - m) / total; }
    workgroupBarrier();
    for (var e = lid; e < p.E; e += WG) {
        let v = prob[e];
        var rank = 0u;
        for (var j = 0u; j < p.E && rank < p.k; j++) {
            let u = prob[j];
            if (u > v || (u == v && j < e)) { rank++; }
        }
        if (rank < p.k) {
            ids[t * p.k + rank] = e;
            chosen[rank] = v;
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        var chosen_sum = 0.0;  // in rank order, as sequential selection adds them
        for (var j = 0u; j < p.k; j++) { chosen_sum = chosen_sum + chosen[j]; }
        for (var j = 0u; j < p.k; j++) {
            var w = chosen[j];
            if (p.renormalize != 0u) { w = w / chosen_sum; }
            weights[t * p.k + j] = w;
        }
    }
}
