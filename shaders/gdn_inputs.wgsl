// GDN step inputs from the conv output c = [q | k | v] of each row and the projected b, a:
// q = l2norm(q) / sqrt(Dk), k = l2norm(k) (eps 1e-6 inside the sqrt), v copied,
// decay = exp(A * softplus(a + dt_bias)), beta = sigmoid(b). One thread per (row, key head)
// for q/k, one per (row, value head) for decay/beta, one per value for v.
struct Params {
    T: u32,
    Hk: u32,
    Hv: u32,
    Dk: u32,
    Dv: u32,
    ld_ba: u32,
    b_off: u32,  // first float of b in b_in, of a in a_in (the projection rows, where they lie)
    a_off: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> conv: array<f32>;
@group(0) @binding(2) var<storage, read_write> b_in: array<f32>;
@group(0) @binding(3) var<storage, read_write> a_in: array<f32>;
@group(0) @binding(4) var<storage, read_write> A: array<f32>;
@group(0) @binding(5) var<storage, read_write> dt_bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> q: array<f32>;
@group(0) @binding(7) var<storage, read_write> k: array<f32>;
@group(0) @binding(8) var<storage, read_write> v: array<f32>;
@group(0) @binding(9) var<storage, read_write> decay: array<f32>;
@group(0) @binding(10) var<storage, read_write> beta: array<f32>;

const WG: u32 = {{WG}}u;

// torch's softplus (threshold 20) with log1p(e) kept accurate for small e
fn softplus(x: f32) -> f32 {
    if (x > 20.0) { return x; }
    let e = exp(x);
    let u = 1.0 + e;
    if (u == 1.0) { return e; }
    return log(u) * (e / (u - 1.0));
}

@compute @workgroup_size({{WG}})
fn gdn_inputs(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    let key_dim = p.Hk * p.Dk;
    let value_dim = p.Hv * p.Dv;
    let conv_dim = 2u * key_dim + value_dim;
    let stride = ng.x * WG;
    let qscale = 1.0 / sqrt(f32(p.Dk));
    for (var i = gid.x; i < p.T * p.Hk; i += stride) {
        let t = i / p.Hk;
        let hk = i % p.Hk;
        let qb = t * conv_dim + hk * p.Dk;
        let kb = qb + key_dim;
        var sq = 0.0;
        var sk = 0.0;
        // four loads of each issued before their sums (same order, same bits): one thread walks
        // a whole head, which was a chain of memory latencies (~40 us a layer on the H200)
        var d = 0u;
        for (; d + 4u <= p.Dk; d += 4u) {
            let q4 = vec4<f32>(conv[qb + d], conv[qb + d + 1u], conv[qb + d + 2u], conv[qb + d + 3u]);
            let k4 = vec4<f32>(conv[kb + d], conv[kb + d + 1u], conv[kb + d + 2u], conv[kb + d + 3u]);
            sq = sq + q4.x * q4.x;
            sk = sk + k4.x * k4.x;
            sq = sq + q4.y * q4.y;
            sk = sk + k4.y * k4.y;
            sq = sq + q4.z * q4.z;
            sk = sk + k4.z * k4.z;
            sq = sq + q4.w * q4.w;
            sk = sk + k4.w * k4.w;
        }
        for (; d < p.Dk; d++) {
            sq = sq + conv[qb + d] * conv[qb + d];
            sk = sk + conv[kb + d] * conv[kb + d];
        }
        let iq = 1.0 / sqrt(sq + 1e-6);
        let ik = 1.0 / sqrt(sk + 1e-6);
        let ob = t * key_dim + hk * p.Dk;
        for (var d = 0u; d < p.Dk; d++) {
            q[ob + d] = (conv[qb + d] * iq) * qscale;
            k[ob + d] = conv[kb + d] * ik;
        }
    }
    for (var i = gid.x; i < p.T * p.Hv; i += stride) {
        let t = i / p.Hv;
        let h = i % p.Hv;
        let g = A[h] * softplus(a_in[p.a_off + t * p.ld_ba + h] + dt_bias[h]);
        decay[i] = exp(g);
        beta[i] = 1.0 / (1.0 + exp(-b_in[p.b_off + t * p.ld_ba + h]));
    }
    for (var i = gid.x; i < p.T * value_dim; i += stride) {
        let t = i / value_dim;
        v[i] = conv[t * conv_dim + 2u * key_dim + i % value_dim];
    }
}
