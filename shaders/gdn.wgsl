// Gated DeltaNet recurrence for a window, per value head h (key head h / (Hv / Hk)):
//   q, k L2-normalised (q also scaled), S <- exp(g) S, delta = beta (v - S^T k),
//   S <- S + k delta^T, o = S^T q.
// The committed state S is read, never written, except that the state after `commit_rows`
// rows is stored back (0 = leave it, the T > 1 verification run; T = the decode step).
// A thread owns one column of S and walks the rows in order, so row t depends only on the
// committed state and rows 0..t. Workgroups: (value head, block of CWG columns): many small
// workgroups, so a layer's heads spread over the whole GPU (one workgroup per head used 32 of
// the H200's 132 SMs on the 80B-A3B shape); a column's arithmetic is the same either way.
struct Params {
    T: u32,
    Hk: u32,
    Hv: u32,
    Dk: u32,
    Dv: u32,
    commit_rows: u32,
    scale: f32,
    eps: f32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> beta: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

const CWG: u32 = {{CWG}}u;  // columns (threads) per workgroup
const DK: u32 = {{DK}}u;

@compute @workgroup_size({{CWG}})
fn gdn_window(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let h = wid.x;
    let kh = h / (p.Hv / p.Hk);
    let sbase = h * DK * p.Dv;
    let col = wid.y * CWG + lid3.x;  // one column per thread
    if (col < p.Dv) {
        var s: array<f32, DK>;
        for (var i = 0u; i < DK; i++) { s[i] = state[sbase + i * p.Dv + col]; }
        for (var t = 0u; t < p.T; t++) {
            let kb = (t * p.Hk + kh) * DK;
            var qq = 0.0;
            var kk = 0.0;
            for (var i = 0u; i < DK; i++) {
                qq = qq + q[kb + i] * q[kb + i];
                kk = kk + k[kb + i] * k[kb + i];
            }
            let qn = p.scale / sqrt(qq + p.eps);
            let kn = 1.0 / sqrt(kk + p.eps);
            let decay = exp(g[t * p.Hv + h]);
            var kv = 0.0;
            for (var i = 0u; i < DK; i++) {
                s[i] = s[i] * decay;
                kv = kv + s[i] * (k[kb + i] * kn);
            }
            let delta = (v[(t * p.Hv + h) * p.Dv + col] - kv) * beta[t * p.Hv + h];
            var o = 0.0;
            for (var i = 0u; i < DK; i++) {
                s[i] = s[i] + (k[kb + i] * kn) * delta;
                o = o + s[i] * (q[kb + i] * qn);
            }
            out[(t * p.Hv + h) * p.Dv + col] = o;
            if (t + 1u == p.commit_rows) {
                for (var i = 0u; i < DK; i++) { state[sbase + i * p.Dv + col] = s[i]; }
            }
        }
    }
}

// The engine's step: q (already L2-normalised and scaled) and k (normalised) come from
// gdn_inputs, `decay` is exp(g). Row 0 reads S0, every row updates S (state after all rows).
// PARTS threads share a column: each holds DK / PARTS consecutive rows of it in registers and
// sums its rows' terms in order, then a fixed tree over the PARTS sums gives S^T k and S^T q
// (the kernel had one thread walk all DK rows of a column: a chain of dependent loads, ~90 us
// per layer on the H200). Workgroups: (value head, block of CWG / PARTS columns). Row t depends
// only on S0 and rows 0..t, whatever T is.
@group(0) @binding(8) var<storage, read_write> s0: array<f32>;

const PARTS: u32 = {{PARTS}}u;
const CB: u32 = CWG / PARTS;  // columns per workgroup
const DP: u32 = DK / PARTS;   // rows of S per thread
var<workgroup> red: array<f32, CWG>;

{{include gdn_step_row.wgsl}}

// the row's k and q as gdn_inputs wrote them (base: the thread's first row of S in them)
fn key_at(base: u32, i: u32) -> f32 { return k[base + i]; }
fn query_at(base: u32, i: u32) -> f32 { return q[base + i]; }

@compute @workgroup_size({{CWG}})
fn gdn_step(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let kh = h / (p.Hv / p.Hk);
    let sbase = h * DK * p.Dv;
    let part = lid / CB;
    let cc = lid % CB;
    let col = wid.y * CB + cc;
    let live = col < p.Dv;
    let i0 = part * DP;
    var s: array<f32, DP>;
    load_rows(&s, sbase, i0, col, live);
    for (var t = 0u; t < p.T; t++) {
        var vv = 0.0;
        if (live) { vv = v[(t * p.Hv + h) * p.Dv + col]; }
        let o = step_rows(&s, g[t * p.Hv + h], beta[t * p.Hv + h], vv, live, (t * p.Hk + kh) * DK + i0,
                          lid, part, cc);
        if (live && part == 0u) { out[(t * p.Hv + h) * p.Dv + col] = o; }
    }
    store_rows(&s, sbase, i0, col, live);
}
