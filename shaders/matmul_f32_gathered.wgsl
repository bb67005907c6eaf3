// Several f32 matrices of one width in one dispatch (GGUF files keep the router, ffn_gate_inp,
// and the shared expert's one-row gate in f32): entry i of the table is one matrix (one chunk)
// with its own rows of x and place in y. Every row is matmul.wgsl's matmul_f32 row: one
// workgroup per weight row, thread lid sums the values lid, lid + WG, ... for each x row in
// order, then the same fixed tree over the WG partials, so gathering changes no bit.
struct Entry {
    w: vec4<u32>,  // (first workgroup = first row in the dispatch, rows, weight binding, first word)
    x: vec4<u32>,  // (T, x_off, x_stride, -)
    y: vec4<u32>,  // (y_off, y_stride, col0, -)
}
struct GatherParams {
    K: u32,
    row_words: u32,
    groups_x: u32,
    total_rows: u32,
    n_entries: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    entries: array<Entry, {{MAX_JOBS}}>,
}
@group(0) @binding(0) var<uniform> gp: GatherParams;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w0: array<u32>;
@group(0) @binding(4) var<storage, read> w1: array<u32>;
@group(0) @binding(5) var<storage, read> w2: array<u32>;
@group(0) @binding(6) var<storage, read> w3: array<u32>;

const WG: u32 = {{WG}}u;
const TB: u32 = {{TB}}u;
var<workgroup> partial: array<f32, WG * TB>;

fn load(b: u32, i: u32) -> u32 {
    if (b == 1u) { return w1[i]; }
    if (b == 2u) { return w2[i]; }
    if (b == 3u) { return w3[i]; }
    return w0[i];
}

@compute @workgroup_size({{WG}})
fn matmul_f32_gathered(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * gp.groups_x + wid.x;
    if (g >= gp.total_rows) { return; }
    var i = 0u;
    for (var k = 1u; k < gp.n_entries; k++) {
        if (gp.entries[k].w.x <= g) { i = k; }
    }
    let e = gp.entries[i];
    let n = g - e.w.x;
    let base = e.w.w + n * gp.row_words;
    let T = e.x.x;
    for (var t0 = 0u; t0 < T; t0 += TB) {
        let nt = min(TB, T - t0);
        var acc: array<f32, TB>;
        for (var j = 0u; j < TB; j++) { acc[j] = 0.0; }
        for (var k = lid; k < gp.K; k += WG) {
            let wk = bitcast<f32>(load(e.w.z, base + k));
            for (var j = 0u; j < nt; j++) { acc[j] = acc[j] + wk * x[e.x.y + (t0 + j) * e.x.z + k]; }
        }
        for (var j = 0u; j < TB; j++) { partial[lid * TB + j] = acc[j]; }
        for (var s = WG / 2u; s > 0u; s = s / 2u) {
            workgroupBarrier();
            if (lid < s) {
                for (var j = 0u; j < nt; j++) { partial[lid * TB + j] = partial[lid * TB + j] + partial[(lid + s) * TB + j]; }
            }
        }
        workgroupBarrier();
        if (lid < nt) { y[e.y.x + (t0 + lid) * e.y.y + e.y.z + n] = partial[lid]; }
        workgroupBarrier();
    }
}
