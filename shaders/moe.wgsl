// MoE combine: out[t] = sum_j w[t][j] * D[slot[t][j]] in the row's rank order, then, with a
// shared expert, + sigmoid(shared_gate[t]) * shared[t]. One thread per output value.
struct Params {
    T: u32,
    k: u32,
    H: u32,
    has_shared: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> D: array<f32>;
@group(0) @binding(2) var<storage, read_write> slot: array<u32>;
@group(0) @binding(3) var<storage, read_write> w: array<f32>;
@group(0) @binding(4) var<storage, read_write> shared_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> shared_gate: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

const WG: u32 = {{WG}}u;

@compute @workgroup_size({{WG}})
fn moe_combine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.H; i += ng.x * WG) {
        let t = i / p.H;
        let c = i % p.H;
        var acc = 0.0;
        for (var j = 0u; j < p.k; j++) {
            acc = acc + w[t * p.k + j] * D[slot[t * p.k + j] * p.H + c];
        }
        if (p.has_shared != 0u) {
            acc = acc + (1.0 / (1.0 + exp(-shared_gate[t]))) * shared_out[i];
        }
        out[i] = acc;
    }
}
