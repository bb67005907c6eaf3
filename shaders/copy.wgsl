// Strided copy of rows x heads vectors of D floats, bit for bit:
// dst[dst_off + r*dst_ld + h*dst_hs + d] = src[src_off + r*src_ld + h*src_hs + d].
// The webgpu backend moves activations between its device arrays with it (the engine's
// strided views, a window's temporaries), so nothing goes through the host.
struct Params {
    rows: u32,
    heads: u32,
    D: u32,
    src_off: u32,
    src_ld: u32,
    src_hs: u32,
    dst_off: u32,
    dst_ld: u32,
    dst_hs: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

const WG: u32 = {{WG}}u;

@compute @workgroup_size({{WG}})
fn copy_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    let n = p.rows * p.heads * p.D;
    for (var i = gid.x; i < n; i += ng.x * WG) {
        let d = i % p.D;
        let rh = i / p.D;
        let h = rh % p.heads;
        let r = rh / p.heads;
        dst[p.dst_off + r * p.dst_ld + h * p.dst_hs + d] = src[p.src_off + r * p.src_ld + h * p.src_hs + d];
    }
}

// Up to MAX_COPIES such copies in one dispatch (the backend's copy_many: the GDN layer's six
// reorderings of its fused projections; its conv history advance, the kept rows of the old
// history and the window's last rows), each from the src binding or the src2 binding (the job's
// src.w: 0 or 1; the same buffer where there is one source) to the one dst binding. Element i of
// the dispatch belongs to the last copy whose first element is <= i.
struct CopyJob {
    shape: vec4<u32>,  // (rows, heads, D, first element of this copy in the dispatch)
    src: vec4<u32>,    // (off, ld, hs, 1: read src2)
    dst: vec4<u32>,    // (off, ld, hs, -)
}
struct ManyParams {
    n_jobs: u32,
    total: u32,
    pad0: u32,
    pad1: u32,
    jobs: array<CopyJob, {{MAX_COPIES}}>,
}
@group(0) @binding(0) var<uniform> mp: ManyParams;
@group(0) @binding(3) var<storage, read_write> src2: array<f32>;

@compute @workgroup_size({{WG}})
fn copy_many(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < mp.total; i += ng.x * WG) {
        var j = 0u;
        for (var c = 1u; c < mp.n_jobs; c++) {
            if (mp.jobs[c].shape.w <= i) { j = c; }
        }
        let job = mp.jobs[j];
        let e = i - job.shape.w;
        let d = e % job.shape.z;
        let rh = e / job.shape.z;
        let h = rh % job.shape.y;
        let r = rh / job.shape.y;
        let at = job.src.x + r * job.src.y + h * job.src.z + d;
        var v: f32;
        if (job.src.w == 1u) { v = src2[at]; } else { v = src[at]; }
        dst[job.dst.x + r * job.dst.y + h * job.dst.z + d] = v;
    }
}
