// Causal depthwise conv (kernel Kc) with SiLU over a window, per channel, reading the last
// Kc-1 committed inputs from `hist` ([Kc-1][C], oldest first). hist advances over the first `commit_rows` rows only
// (0 = leave it), so rejected rows leave no trace. One thread per channel, taps in order. Row t
// of x starts at x_off + t * ldx (the projection rows where they lie, no packing copy). With
// keep_x = 1 the input rows are also written to xr, packed (the GDN layer keeps them for its fold).
struct Params {
    T: u32,
    C: u32,
    Kc: u32,
    commit_rows: u32,
    x_off: u32,
    ldx: u32,
    keep_x: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> hist: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> xr: array<f32>;

const WG: u32 = {{WG}}u;
const MAX_H: u32 = 8u;  // Kc - 1 at most (checked on the host)

{{include conv_value.wgsl}}

@compute @workgroup_size({{WG}})
fn causal_conv(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    let hl = p.Kc - 1u;
    for (var c = gid.x; c < p.C; c += ng.x * WG) {
        for (var t = 0u; t < p.T; t++) {
            y[t * p.C + c] = conv_silu_at(c, t);
            if (p.keep_x == 1u) { xr[t * p.C + c] = x[p.x_off + t * p.ldx + c]; }
        }
        if (p.commit_rows > 0u) {
            var next: array<f32, MAX_H>;
            for (var j = 0u; j < hl; j++) { next[j] = input_at(c, p.commit_rows + j); }
            for (var j = 0u; j < hl; j++) { hist[j * p.C + c] = next[j]; }
        }
    }
}
