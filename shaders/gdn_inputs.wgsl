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
{{include gdn_inputs_value.wgsl}}

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
        let iq = gdn_inv_norm(gdn_sum_sq(qb, p.Dk));
        let ik = gdn_inv_norm(gdn_sum_sq(kb, p.Dk));
        let ob = t * key_dim + hk * p.Dk;
        for (var d = 0u; d < p.Dk; d++) {
            q[ob + d] = (conv[qb + d] * iq) * qscale;
            k[ob + d] = conv[kb + d] * ik;
        }
    }
    for (var i = gid.x; i < p.T * p.Hv; i += stride) {
        let t = i / p.Hv;
        let h = i % p.Hv;
        decay[i] = gdn_decay(A[h], a_in[p.a_off + t * p.ld_ba + h], dt_bias[h]);
        beta[i] = gdn_beta(b_in[p.b_off + t * p.ld_ba + h]);
    }
    for (var i = gid.x; i < p.T * value_dim; i += stride) {
        let t = i / value_dim;
        v[i] = conv[t * conv_dim + 2u * key_dim + i % value_dim];
    }
}
