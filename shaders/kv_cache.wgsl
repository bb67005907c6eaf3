// KV cache write: the window's keys and values land in cells pos0 .. pos0+T-1. Cells past the
// committed length are scratch; causal attention never reads a cell before it is rewritten,
// which is what makes rollback of rejected rows free.
struct Params {
    T: u32,
    row: u32,   // floats per cell (kv heads * head dim)
    pos0: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> k_new: array<f32>;
@group(0) @binding(2) var<storage, read_write> v_new: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;

const WG: u32 = {{WG}}u;

@compute @workgroup_size({{WG}})
fn kv_write(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.row; i += ng.x * WG) {
        k_cache[p.pos0 * p.row + i] = k_new[i];
        v_cache[p.pos0 * p.row + i] = v_new[i];
    }
}
