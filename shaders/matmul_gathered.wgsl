// Many products of one width and format (f16, or bf16 with BF16 = 1; rows of whole vec4<u32>)
// in one dispatch: a MoE layer's selected experts (each over its own gathered rows of x), an
// expert's gate and up, the router with the shared expert, q/k/v. Job j's matrix is a chunk at
// vec4 index w_quad of weight buffer `buffer` (one of four bound; the backend keeps weights side
// by side in a few large buffers), its rows of x start at x_off with stride x_stride and its
// outputs at y_off with stride y_stride. Global row g of the dispatch is row g - first_row of
// the last job with first_row <= g, and each row runs exactly the code of matmul.wgsl's
// matmul_half_v4 (same loads, same per-thread order, same tree), so gathering changes no result.
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

struct Job {
    w: vec4<u32>,  // (first global row, rows, weight buffer, vec4 index of the matrix)
    x: vec4<u32>,  // (T, x_off, x_stride, -)
    y: vec4<u32>,  // (y_off, y_stride, -, -)
}
struct GatherParams {
    K: u32,
    row_words: u32,
    groups_x: u32,
    total_rows: u32,
    n_jobs: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    jobs: array<Job, {{MAX_JOBS}}>,
}
@group(0) @binding(0) var<uniform> gp: GatherParams;
@group(0) @binding(5) var<storage, read> wb0: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> wb1: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> wb2: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read> wb3: array<vec4<u32>>;

fn load_w(b: u32, i: u32) -> vec4<u32> {
    if (b == 0u) { return wb0[i]; }
    if (b == 1u) { return wb1[i]; }
    if (b == 2u) { return wb2[i]; }
    return wb3[i];
}

@compute @workgroup_size({{WG}})
fn matmul_half_v4_gathered(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * gp.groups_x + wid.x;
    if (g >= gp.total_rows) { return; }
    var lo = 0u;
    var hi = gp.n_jobs;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (gp.jobs[mid].w.x <= g) { lo = mid; } else { hi = mid; }
    }
    let job = gp.jobs[lo];
    let n = g - job.w.x;
    let buf = job.w.z;
    let T = job.x.x;
    let x_off = job.x.y;
    let x_stride = job.x.z;
    let quads = gp.row_words / 4u;
    let base = job.w.w + n * quads;
    for (var t0 = 0u; t0 < T; t0 += TB) {
        let nt = min(TB, T - t0);
        var acc: array<f32, TB>;
        for (var j = 0u; j < TB; j++) { acc[j] = 0.0; }
        for (var i = lid; i < quads; i += WG) {
            let q = load_w(buf, base + i);
            let a = pair(q.x);
            let b = pair(q.y);
            let c = pair(q.z);
            let d = pair(q.w);
            let w_lo = vec4<f32>(a.x, a.y, b.x, b.y);
            let w_hi = vec4<f32>(c.x, c.y, d.x, d.y);
            for (var j = 0u; j < nt; j++) {
                let xb = x_off + (t0 + j) * x_stride + 8u * i;
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
            y[job.y.x + (t0 + lid) * job.y.y + n] = partial[lid];
        }
        workgroupBarrier();
    }
}
