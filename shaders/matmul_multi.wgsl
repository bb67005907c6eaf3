// Up to four matrices of one shape and format (f16, or bf16 with BF16 = 1; rows of whole
// vec4<u32>) against the same x in one dispatch: the webgpu backend groups a batch's jobs (an
// expert's gate and up, the router with the shared expert, q/k/v). Global row g of the dispatch
// is row g - first of matrix m, and each row runs exactly the code of matmul.wgsl's
// matmul_half_v4 (same loads, same per-thread order, same tree), so grouping changes no result.
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;
const TB: u32 = {{TB}}u;
var<workgroup> partial: array<f32, WG * TB>;

fn bf16_pair(word: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

fn pair(word: u32) -> vec2<f32> {
    if ({{BF16}}u == 1u) { return bf16_pair(word); }
    return unpack2x16float(word);
}

struct MultiParams {
    T: u32,
    K: u32,
    row_words: u32,
    x_off: u32,
    x_stride: u32,
    groups_x: u32,
    n_mats: u32,
    total_rows: u32,
    mats: array<vec4<u32>, 4>,  // per matrix: (first global row, rows, y_off, y_stride)
}
@group(0) @binding(0) var<uniform> mp: MultiParams;
@group(0) @binding(5) var<storage, read> wm0: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> wm1: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> wm2: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read> wm3: array<vec4<u32>>;

fn load_multi(m: u32, i: u32) -> vec4<u32> {
    if (m == 0u) { return wm0[i]; }
    if (m == 1u) { return wm1[i]; }
    if (m == 2u) { return wm2[i]; }
    return wm3[i];
}

@compute @workgroup_size({{WG}})
fn matmul_half_v4_multi(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * mp.groups_x + wid.x;
    if (g >= mp.total_rows) { return; }
    var m = 0u;
    for (var j = 1u; j < mp.n_mats; j++) {
        if (g >= mp.mats[j].x) { m = j; }
    }
    let mat = mp.mats[m];
    let n = g - mat.x;
    let quads = mp.row_words / 4u;
    let base = n * quads;
    for (var t0 = 0u; t0 < mp.T; t0 += TB) {
        let nt = min(TB, mp.T - t0);
        var acc: array<f32, TB>;
        for (var j = 0u; j < TB; j++) { acc[j] = 0.0; }
        for (var i = lid; i < quads; i += WG) {
            let q = load_multi(m, base + i);
            let a = pair(q.x);
            let b = pair(q.y);
            let c = pair(q.z);
            let d = pair(q.w);
            let w_lo = vec4<f32>(a.x, a.y, b.x, b.y);
            let w_hi = vec4<f32>(c.x, c.y, d.x, d.y);
            for (var j = 0u; j < nt; j++) {
                let xb = mp.x_off + (t0 + j) * mp.x_stride + 8u * i;
                let x_lo = vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]);
                let x_hi = vec4<f32>(x[xb + 4u], x[xb + 5u], x[xb + 6u], x[xb + 7u]);
                acc[j] = acc[j] + (dot(w_lo, x_lo) + dot(w_hi, x_hi));
            }
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
        if (lid < nt) {
            y[mat.z + (t0 + lid) * mat.w + n] = partial[lid];
        }
        workgroupBarrier();
    }
}
