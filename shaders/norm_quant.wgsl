// Producers that also quantize the rows they write, for the block-format matmul that reads them
// next (shaders/matmul_quant.wgsl): rmsnorm, add_rmsnorm, the gated rmsnorm (a token's heads)
// and swiglu, one workgroup per row.
// The workgroup computes its row exactly as norm.wgsl's kernel (or elementwise.wgsl's swiglu)
// does and writes it, then, after a storage barrier, quantizes that row from what it wrote, all
// its blocks side by side (quant_act.wgsl's quantize_row_wide: quantize_rows' scale function and
// rounding, threads mapped so the whole row goes at once): the codes and scales are those
// quantize_rows would make from the row, bit for bit, one dispatch instead of two.
{{include norm.wgsl}}

@group(0) @binding(5) var<storage, read_write> xq: array<u32>;

fn act(i: u32) -> f32 { return y[i]; }

{{include quant_act.wgsl}}

fn quantize_own_row(lid: u32, row: u32) {
    storageBarrier();  // the row's values, written by every thread of the workgroup
    quantize_row_wide(lid, row, row * p.D, p.D, p.d_off, p.e_off);
}

@compute @workgroup_size({{WG}})
fn rmsnorm_quant(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    rmsnorm_row(lid3.x, row);
    quantize_own_row(lid3.x, row);
}

@compute @workgroup_size({{WG}})
fn add_rmsnorm_quant(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    add_rmsnorm_row(lid3.x, row);
    quantize_own_row(lid3.x, row);
}

// A token's `heads` gated norms (one rmsnorm_gated row each, in turn), then the token's row of
// heads * D values quantized: the GDN output before its out projection.
@compute @workgroup_size({{WG}})
fn rmsnorm_gated_quant(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = wid.y * p.groups_x + wid.x;
    if (t >= p.rows) { return; }
    for (var h = 0u; h < p.heads; h++) {
        workgroupBarrier();  // inv_rms's `red` is reused head after head
        rmsnorm_gated_row(lid3.x, t * p.heads + h);
    }
    storageBarrier();
    quantize_row_wide(lid3.x, t, t * p.heads * p.D, p.heads * p.D, p.d_off, p.e_off);
}

// y = silu(x) * z over rows of D values (x the gate, z the up), as elementwise.wgsl's swiglu
@compute @workgroup_size({{WG}})
fn swiglu_quant(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    let base = row * p.D;
    for (var d = lid3.x; d < p.D; d += WG) {
        let g = x[base + d];
        y[base + d] = (g / (1.0 + exp(-g))) * z[base + d];
    }
    quantize_own_row(lid3.x, row);
}
