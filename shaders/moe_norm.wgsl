// The MoE combine fused with the residual add and the next norm (the backend's
// moe_combine_add_rmsnorm): one workgroup per row t, x[t] += combine(t) (each value as
// moe.wgsl's moe_combine computes it, through the same moe_combine_value.wgsl), then
// y[t] = rmsnorm(x[t]) through norm.wgsl's row function, as add_rmsnorm does it. Thread lid adds
// exactly the elements its strided sum of squares reads (as add_rmsnorm), so the sum sees the new
// x without a barrier: every value equals moe_combine, then add_rmsnorm. One dispatch where those
// are two.
{{include norm.wgsl}}

@group(0) @binding(5) var<storage, read_write> D: array<f32>;
@group(0) @binding(6) var<storage, read_write> slot: array<u32>;
@group(0) @binding(7) var<storage, read_write> cw: array<f32>;
@group(0) @binding(8) var<storage, read_write> shared_out: array<f32>;
@group(0) @binding(9) var<storage, read_write> shared_gate: array<f32>;

fn cv_weight(i: u32) -> f32 { return cw[i]; }
fn cv_slot(i: u32) -> u32 { return slot[i]; }
fn cv_expert(s: u32, c: u32) -> f32 { return D[s * p.D + c]; }
fn cv_shared_gate(t: u32) -> f32 { return shared_gate[t]; }
fn cv_shared(t: u32, c: u32) -> f32 { return shared_out[t * p.D + c]; }

{{include moe_combine_value.wgsl}}

@compute @workgroup_size({{WG}})
fn moe_combine_add_rmsnorm(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    let lid = lid3.x;
    let base = row * p.D;
    for (var d = lid; d < p.D; d += WG) {
        x[base + d] = x[base + d] + combine_value(row, d, p.k, p.has_shared);
    }
    rmsnorm_row(lid, row);
}
