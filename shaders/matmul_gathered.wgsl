// Many products of one width and format (f16, or bf16 with BF16 = 1; rows of whole vec4<u32>)
// in one dispatch, weights reached in up to four arena buffers (the backend keeps weights side
// by side in a few large buffers). Every row runs rows_dot of matmul_rows.wgsl, the loop of
// matmul.wgsl's matmul_half_v4 (same loads, same per-thread order, same tree), so neither
// gathering nor routing changes a result.
//
// matmul_half_v4_gathered: jobs chosen by the host (a MoE layer's grouped experts when the host
// groups rows, q/k/v, the router with the shared expert). Job j's matrix is a chunk at vec4
// index w_quad of weight buffer `buffer`, its rows of x start at x_off with stride x_stride and
// its outputs at y_off with stride y_stride. Workgroup g of the dispatch computes rows
// ((g - first) / slices) * RB .. + RB of the last job whose first workgroup `first` is <= g,
// for x rows ((g - first) % slices) * t_per .. + t_per (the job's window-row split).
//
// matmul_half_v4_routed: matrices chosen on the device by the router's ids, with no readback:
// pair p (token p / k, rank p % k) takes expert e = ids[ids_off + p] and matrix table[e * 3 +
// mat0 + m] ((buffer, vec4 index) of the layer's gate, up, down of expert e), RB rows per
// workgroup (rows_per_pair and half_rows are multiples of RB). Its rows_per_pair output rows are rows of matrix mat0 (r < half_rows), written to y[y_off + p * y_stride + r],
// then rows of matrix mat0 + 1, written to y[y_off2 + p * y_stride + r - half_rows] (gate and up
// into two packed arrays); its x row is token p / k (x_per_pair = 0) or p itself.
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> wb0: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> wb1: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> wb2: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read> wb3: array<vec4<u32>>;

const WG: u32 = {{WG}}u;
const TB: u32 = {{TB}}u;
const RB: u32 = {{RB}}u;

fn load_w(b: u32, i: u32) -> vec4<u32> {
    if (b == 0u) { return wb0[i]; }
    if (b == 1u) { return wb1[i]; }
    if (b == 2u) { return wb2[i]; }
    return wb3[i];
}

{{include ROWS}}

struct Job {
    w: vec4<u32>,  // (first workgroup, rows, weight buffer, vec4 index of the matrix)
    x: vec4<u32>,  // (T, x_off, x_stride, t_per)
    y: vec4<u32>,  // (y_off, y_stride, slices, -)
}
struct GatherParams {
    K: u32,
    row_words: u32,
    groups_x: u32,
    total_rows: u32,
    n_jobs: u32,
    x_vec4: u32,  // 1: every job's x_off and x_stride are multiples of 4
    pad1: u32,
    pad2: u32,
    jobs: array<Job, {{MAX_JOBS}}>,
}
@group(0) @binding(0) var<uniform> gp: GatherParams;

@compute @workgroup_size({{WG}})
fn matmul_half_v4_gathered(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * gp.groups_x + wid.x;  // workgroup: RB rows of one job
    if (g >= gp.total_rows) { return; }
    var lo = 0u;
    var hi = gp.n_jobs;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (gp.jobs[mid].w.x <= g) { lo = mid; } else { hi = mid; }
    }
    let job = gp.jobs[lo];
    // window-row split as in matmul_half_v4: `slices` workgroups per RB rows, t_per x rows each
    let slices = job.y.z;
    let n0 = ((g - job.w.x) / slices) * RB;
    let nr = min(RB, job.w.y - n0);
    let t_lo = ((g - job.w.x) % slices) * job.x.w;
    let t_hi = min(job.x.x, t_lo + job.x.w);
    let quads = gp.row_words / 4u;
    for (var t0 = t_lo; t0 < t_hi; t0 += TB) {
        let nt = min(TB, t_hi - t0);
        rows_dot(lid, job.w.z, job.w.w + n0 * quads, quads, nr, job.x.y + t0 * job.x.z, job.x.z, nt, gp.x_vec4);
        for (var e = lid; e < nr * nt; e += WG) {  // RB * TB may exceed WG
            let r = e / nt;
            let j = e % nt;
            y[job.y.x + (t0 + j) * job.y.y + n0 + r] = row_result(r, j);
        }
        workgroupBarrier();
    }
}

struct RoutedParams {
    K: u32,
    row_words: u32,
    groups_x: u32,
    total_rows: u32,     // workgroups: pairs * rows_per_pair / RB
    rows_per_pair: u32,
    half_rows: u32,      // rows of matrix mat0; the rest are rows of matrix mat0 + 1
    mat0: u32,           // 0: gate (and up), 2: down
    k: u32,              // pairs per token
    x_off: u32,
    x_stride: u32,
    x_per_pair: u32,     // 1: x row p, 0: x row p / k
    y_off: u32,
    y_stride: u32,
    ids_off: u32,
    n_experts: u32,
    log_ids: u32,        // 1: write each pair's expert to ids_log (read back with the logits)
    y_off2: u32,
    x_vec4: u32,         // 1: x_off and x_stride are multiples of 4 (and glu_off, with GLU)
    glu_off: u32,        // GLU = 1: x is silu(gate) * up, up glu_off floats after gate (the down projection)
    pad2: u32,
}
@group(0) @binding(0) var<uniform> rp: RoutedParams;
@group(0) @binding(9) var<storage, read_write> ids: array<u32>;
@group(0) @binding(10) var<storage, read> table: array<vec2<u32>>;
@group(0) @binding(11) var<storage, read_write> ids_log: array<u32>;

@compute @workgroup_size({{WG}})
fn matmul_half_v4_routed(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y * rp.groups_x + wid.x;  // workgroup: RB rows of one pair's matrix
    if (g >= rp.total_rows) { return; }
    let q = routed_rows(g, RB);
    let quads = rp.row_words / 4u;
    glu_off = rp.glu_off;
    rows_dot(lid, q.at.x, q.at.y + q.n0 * quads, quads, RB, rp.x_off + q.t * rp.x_stride, 0u, 1u, rp.x_vec4);
    for (var r = lid; r < RB; r += WG) {
        y[q.y0 + q.p * rp.y_stride + q.n0 + r] = row_result(r, 0u);
    }
    if (lid == 0u && rp.log_ids == 1u && q.r0 == 0u) { ids_log[q.p] = q.e; }
}

{{include matmul_routed_pair.wgsl}}
