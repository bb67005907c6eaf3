// Causal attention of a window over the KV cache: row t (position pos0 + t) of query head h
// attends to cells 0 ..= pos0 + t of kv head h / (Hq / Hk). One workgroup per (row, head):
// scores by cell in a fixed strided order, max and sum by a fixed tree, and each output dim
// sums the cells in order, so a row depends only on its position and the cache. The sequential
// loops issue four loads before their four sums (the same order): one thread walking a head dim
// or the cells was a chain of memory latencies (~80 us a call on the H200's profile). With
// `gated` each output value is multiplied by the sigmoid of its gate as the sigmoid_mul kernel
// computes it (the same expression on the same f32 value), so the fold changes no bit.
struct Params {
    T: u32,
    Hq: u32,
    Hk: u32,
    D: u32,
    pos0: u32,
    ctx: u32,     // score scratch stride (>= pos0 + T)
    scale: f32,
    gated: u32,   // 1: out = attention * sigmoid(gate) (the output gate folded in; gate laid out as out)
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> gate: array<f32>;  // (out again where not gated)

const WG: u32 = {{WG}}u;
var<workgroup> red: array<f32, WG>;

@compute @workgroup_size({{WG}})
fn attention(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let t = wid.y;
    let kvh = h / (p.Hq / p.Hk);
    let n = p.pos0 + t + 1u;
    let qbase = (t * p.Hq + h) * p.D;
    let sbase = (t * p.Hq + h) * p.ctx;
    let cell = p.Hk * p.D;

    var m = -3.4e38;
    for (var c = lid; c < n; c += WG) {
        let kbase = c * cell + kvh * p.D;
        var qk = 0.0;
        var d = 0u;
        for (; d + 4u <= p.D; d += 4u) {  // four loads of each before their sums (same order)
            let q4 = vec4<f32>(q[qbase + d], q[qbase + d + 1u], q[qbase + d + 2u], q[qbase + d + 3u]);
            let k4 = vec4<f32>(k_cache[kbase + d], k_cache[kbase + d + 1u], k_cache[kbase + d + 2u],
                               k_cache[kbase + d + 3u]);
            qk = qk + q4.x * k4.x;
            qk = qk + q4.y * k4.y;
            qk = qk + q4.z * k4.z;
            qk = qk + q4.w * k4.w;
        }
        for (; d < p.D; d++) { qk = qk + q[qbase + d] * k_cache[kbase + d]; }
        let s = qk * p.scale;
        scores[sbase + c] = s;
        m = max(m, s);
    }
    red[lid] = m;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    }
    workgroupBarrier();
    m = red[0];
    workgroupBarrier();
    var acc = 0.0;
    for (var c = lid; c < n; c += WG) {
        let e = exp(scores[sbase + c] - m);
        scores[sbase + c] = e;
        acc = acc + e;
    }
    red[lid] = acc;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    storageBarrier();
    workgroupBarrier();
    let inv = 1.0 / red[0];
    for (var d = lid; d < p.D; d += WG) {
        var o = 0.0;
        let vb = kvh * p.D + d;
        var c = 0u;
        for (; c + 4u <= n; c += 4u) {  // four cells' loads before their sums (same order)
            let s4 = vec4<f32>(scores[sbase + c], scores[sbase + c + 1u], scores[sbase + c + 2u], scores[sbase + c + 3u]);
            let v4 = vec4<f32>(v_cache[c * cell + vb], v_cache[(c + 1u) * cell + vb], v_cache[(c + 2u) * cell + vb],
                               v_cache[(c + 3u) * cell + vb]);
            o = o + s4.x * v4.x;
            o = o + s4.y * v4.y;
            o = o + s4.z * v4.z;
            o = o + s4.w * v4.w;
        }
        for (; c < n; c++) { o = o + scores[sbase + c] * v_cache[c * cell + vb]; }
        let a = o * inv;
        if (p.gated == 1u) {
            out[qbase + d] = a / (1.0 + exp(-gate[qbase + d]));  // elementwise.wgsl's sigmoid_mul
        } else {
            out[qbase + d] = a;
        }
    }
}
