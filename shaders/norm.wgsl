// RMSNorm over rows of length D: y = x / sqrt(mean(x^2) + eps) * (w + weight_offset), and the
// gated form y = x / sqrt(mean(x^2) + eps) * w * silu(z). One workgroup per row; the sum of
// squares is a per-thread strided sum plus a fixed tree, so a row never depends on the others.
struct Params {
    rows: u32,
    D: u32,
    eps: f32,
    weight_offset: f32,  // 1.0 for Qwen3-Next's (1 + w) norms, 0.0 otherwise
    groups_x: u32,
    d_off: u32,  // norm_quant.wgsl: word of the activation scales in xq
    e_off: u32,  // norm_quant.wgsl: word of the per-32 sums in xq
    heads: u32,  // rmsnorm_gated(_quant): rows of `heads` vectors of D
    z_off: u32,  // rmsnorm_gated(_quant): the gate of head h of row t at z_off + t * z_ld + h * z_hs
    z_ld: u32,
    z_hs: u32,
    x_off: u32,  // rmsnorm: row r = (token r / heads, head r % heads) of x at x_off + t * x_ld + h * x_hs
    x_ld: u32,
    x_hs: u32,
    k: u32,           // moe_norm.wgsl: the combine's ranks per row
    has_shared: u32,  // moe_norm.wgsl: 1 with a shared expert
    rot_half: u32,    // norm_rotary.wgsl: rotated lanes / 2
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> z: array<f32>;

const WG: u32 = {{WG}}u;
var<workgroup> red: array<f32, WG>;

// The strided loops issue four independent loads before using them (the sum still adds in
// increasing d): one workgroup per row makes a norm a chain of memory latencies otherwise
// (~35 us for a 2048 row on the H200, 2026-12-03 profile).
fn inv_rms(lid: u32, base: u32) -> f32 {
    var acc = 0.0;
    var d = lid;
    for (; d + 3u * WG < p.D; d += 4u * WG) {
        let a = x[base + d];
        let b = x[base + d + WG];
        let c = x[base + d + 2u * WG];
        let e = x[base + d + 3u * WG];
        acc = acc + a * a;
        acc = acc + b * b;
        acc = acc + c * c;
        acc = acc + e * e;
    }
    for (; d < p.D; d += WG) {
        let v = x[base + d];
        acc = acc + v * v;
    }
    red[lid] = acc;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    workgroupBarrier();
    return 1.0 / sqrt(red[0] / f32(p.D) + p.eps);
}

// y row `base` = rmsnorm(x from xb) for one row, by the whole workgroup
fn rmsnorm_row_at(lid: u32, xb: u32, base: u32) {
    let inv = inv_rms(lid, xb);
    for (var d = lid; d < p.D; d += WG) {
        y[base + d] = (x[xb + d] * inv) * (w[d] + p.weight_offset);
    }
}

fn rmsnorm_row(lid: u32, row: u32) { rmsnorm_row_at(lid, row * p.D, row * p.D); }

// x read where it lies (a strided view: q heads between their gates, k columns of the projection
// rows), y packed
@compute @workgroup_size({{WG}})
fn rmsnorm(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    rmsnorm_row_at(lid3.x, p.x_off + (row / p.heads) * p.x_ld + (row % p.heads) * p.x_hs, row * p.D);
}

fn rmsnorm_gated_row(lid: u32, row: u32) {
    let base = row * p.D;
    let zb = p.z_off + (row / p.heads) * p.z_ld + (row % p.heads) * p.z_hs;  // where the gate lies
    let inv = inv_rms(lid, base);
    for (var d = lid; d < p.D; d += WG) {
        let g = z[zb + d];
        y[base + d] = ((x[base + d] * inv) * (w[d] + p.weight_offset)) * (g / (1.0 + exp(-g)));
    }
}

@compute @workgroup_size({{WG}})
fn rmsnorm_gated(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    rmsnorm_gated_row(lid3.x, row);
}

// The residual add fused with the next norm (the backend's add_rmsnorm): x += z, then
// y = rmsnorm(x) as rmsnorm computes it. Thread lid adds exactly the elements its strided sum
// reads, so the sum sees the new x without a barrier, and every value equals add then rmsnorm.
fn add_rmsnorm_row(lid: u32, row: u32) {
    let base = row * p.D;
    var d = lid;
    for (; d + 3u * WG < p.D; d += 4u * WG) {
        let a = x[base + d] + z[base + d];
        let b = x[base + d + WG] + z[base + d + WG];
        let c = x[base + d + 2u * WG] + z[base + d + 2u * WG];
        let e = x[base + d + 3u * WG] + z[base + d + 3u * WG];
        x[base + d] = a;
        x[base + d + WG] = b;
        x[base + d + 2u * WG] = c;
        x[base + d + 3u * WG] = e;
    }
    for (; d < p.D; d += WG) {
        x[base + d] = x[base + d] + z[base + d];
    }
    rmsnorm_row(lid, row);
}

@compute @workgroup_size({{WG}})
fn add_rmsnorm(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    add_rmsnorm_row(lid3.x, row);
}
