// MoE combine: out[t] = sum_j w[t][j] * D[slot[t][j]] in the row's rank order, then, with a
// shared expert, + sigmoid(shared_gate[t]) * shared[t] (moe_combine_value.wgsl). One thread per
// output value.
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

fn cv_weight(i: u32) -> f32 { return w[i]; }
fn cv_slot(i: u32) -> u32 { return slot[i]; }
fn cv_expert(s: u32, c: u32) -> f32 { return D[s * p.H + c]; }
fn cv_shared_gate(t: u32) -> f32 { return shared_gate[t]; }
fn cv_shared(t: u32, c: u32) -> f32 { return shared_out[t * p.H + c]; }

{{include moe_combine_value.wgsl}}

@compute @workgroup_size({{WG}})
fn moe_combine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.H; i += ng.x * WG) {
        out[i] = combine_value(i / p.H, i % p.H, p.k, p.has_shared);
    }
}
