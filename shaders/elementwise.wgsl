// Element-wise ops over n floats: add, add_scaled (a + s*b), scale, silu, swiglu
// (silu(a) * b), sigmoid_mul (a * sigmoid(b)), bias_add (a + b[i % m], a bias per column). Each element is computed alone, so results
// never depend on the row count.
struct Params {
    n: u32,
    s: f32,
    m: u32,  // bias_add: length of b, broadcast over rows of a
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;

fn silu(v: f32) -> f32 { return v / (1.0 + exp(-v)); }

@compute @workgroup_size({{WG}})
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = a[i] + b[i]; }
}

@compute @workgroup_size({{WG}})
fn add_scaled(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = a[i] + p.s * b[i]; }
}

@compute @workgroup_size({{WG}})
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = a[i] * p.s; }
}

@compute @workgroup_size({{WG}})
fn silu_op(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = silu(a[i]); }
}

@compute @workgroup_size({{WG}})
fn swiglu(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = silu(a[i]) * b[i]; }
}

@compute @workgroup_size({{WG}})
fn sigmoid_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = a[i] / (1.0 + exp(-b[i])); }
}

@compute @workgroup_size({{WG}})
fn bias_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.n; i += ng.x * WG) { y[i] = a[i] + b[i % p.m]; }
}
