// Row gathers. Embedding: y[t] = table[ids[t]] as f32, for the table rows [row0, row0 + rows)
// held by one chunk (the host checks every id against the vocabulary before the dispatch).
// gather_f32: y row t (stride ld_out) = the first D floats of table row ids[t] (stride row_words).
struct Params {
    T: u32,
    D: u32,
    row_words: u32,
    row0: u32,
    rows: u32,
    ld_out: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> table: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = {{WG}}u;

fn half_at(word: u32, d: u32) -> u32 {
    return select(word & 0xffffu, word >> 16u, (d & 1u) == 1u);
}

@compute @workgroup_size({{WG}})
fn embedding_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.D; i += ng.x * WG) {
        let id = ids[i / p.D];
        if (id >= p.row0 && id < p.row0 + p.rows) {
            y[i] = bitcast<f32>(table[(id - p.row0) * p.row_words + i % p.D]);
        }
    }
}

@compute @workgroup_size({{WG}})
fn embedding_f16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.D; i += ng.x * WG) {
        let id = ids[i / p.D];
        if (id >= p.row0 && id < p.row0 + p.rows) {
            let d = i % p.D;
            y[i] = unpack2x16float(half_at(table[(id - p.row0) * p.row_words + d / 2u], d)).x;
        }
    }
}

@compute @workgroup_size({{WG}})
fn embedding_bf16(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.D; i += ng.x * WG) {
        let id = ids[i / p.D];
        if (id >= p.row0 && id < p.row0 + p.rows) {
            let d = i % p.D;
            y[i] = bitcast<f32>(half_at(table[(id - p.row0) * p.row_words + d / 2u], d) << 16u);
        }
    }
}

@compute @workgroup_size({{WG}})
fn gather_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
    for (var i = gid.x; i < p.T * p.D; i += ng.x * WG) {
        let t = i / p.D;
        y[t * p.ld_out + i % p.D] = bitcast<f32>(table[ids[t] * p.row_words + i % p.D]);
    }
}
