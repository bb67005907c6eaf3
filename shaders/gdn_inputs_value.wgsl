// The GDN step inputs' arithmetic, one text for gdn_inputs.wgsl and gdn_fused.wgsl (the same
// bits either way). Reads `conv` (the conv output rows) of the including shader.

// sum of squares of conv[base .. base + n), in order; four loads issued before their sums
// (same order, same bits): one thread walks a whole head, which was a chain of memory latencies
fn gdn_sum_sq(base: u32, n: u32) -> f32 {
    var s = 0.0;
    var d = 0u;
    for (; d + 4u <= n; d += 4u) {
        let x4 = vec4<f32>(conv[base + d], conv[base + d + 1u], conv[base + d + 2u], conv[base + d + 3u]);
        s = s + x4.x * x4.x;
        s = s + x4.y * x4.y;
        s = s + x4.z * x4.z;
        s = s + x4.w * x4.w;
    }
    for (; d < n; d++) { s = s + conv[base + d] * conv[base + d]; }
    return s;
}

// 1 / the L2 norm (eps 1e-6 inside the sqrt) from a sum of squares
fn gdn_inv_norm(ss: f32) -> f32 { return 1.0 / sqrt(ss + 1e-6); }

// torch's softplus (threshold 20) with log1p(e) kept accurate for small e
fn softplus(x: f32) -> f32 {
    if (x > 20.0) { return x; }
    let e = exp(x);
    let u = 1.0 + e;
    if (u == 1.0) { return e; }
    return log(u) * (e / (u - 1.0));
}

// decay = exp(A * softplus(a + dt_bias)), beta = sigmoid(b)
fn gdn_decay(A_h: f32, a: f32, dt_bias_h: f32) -> f32 { return exp(A_h * softplus(a + dt_bias_h)); }
fn gdn_beta(b: f32) -> f32 { return 1.0 / (1.0 + exp(-b)); }
