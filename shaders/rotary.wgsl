// Rotary embedding (rotate-half / NeoX pairing) on the first rot_dim dims of each head, in
// place. cos/sin come from the host per window row (table [T][2][rot_dim/2]): GPU sin/cos of
// large angles are not accurate enough, and the host table is what every backend shares.
struct Params {
    rows: u32,    // T * heads
    heads: u32,
    D: u32,       // head dim
    half: u32,    // rot_dim / 2
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> cs: array<f32>;

const WG: u32 = {{WG}}u;

{{include rotary_pair.wgsl}}

@compute @workgroup_size({{WG}})
fn rotary(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    let total = p.rows * p.half;
    for (var idx = gid.x; idx < total; idx += ng.x * WG) {
        let row = idx / p.half;
        let i = idx % p.half;
        let t = row / p.heads;
        let c = cs[t * 2u * p.half + i];
        let s = cs[t * 2u * p.half + p.half + i];
        let base = row * p.D;
        let r = rotate_pair(x[base + i], x[base + i + p.half], c, s);
        x[base + i] = r.x;
        x[base + i + p.half] = r.y;
    }
}
