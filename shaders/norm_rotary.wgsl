// An attention q or k norm and its rotary in one dispatch (the backend's rmsnorm_rotary): one
// workgroup per (row, head) writes y = rmsnorm(x) through norm.wgsl's row function (x where it
// lies, as `rmsnorm`), then, after a barrier, rotates the head's first 2 * rot_half lanes of y
// with rotary.wgsl's pair function and the host's cos/sin table ([T][2][rot_half]). Every value
// equals rmsnorm then rotary; one dispatch where those are two.
{{include norm.wgsl}}
{{include rotary_pair.wgsl}}

@group(0) @binding(5) var<storage, read_write> cs: array<f32>;

@compute @workgroup_size({{WG}})
fn rmsnorm_rotary(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y * p.groups_x + wid.x;
    if (row >= p.rows) { return; }
    let lid = lid3.x;
    rmsnorm_row_at(lid, p.x_off + (row / p.heads) * p.x_ld + (row % p.heads) * p.x_hs, row * p.D);
    storageBarrier();  // the head's values were written by other threads of this workgroup
    workgroupBarrier();
    let half = p.rot_half;
    let t = row / p.heads;
    let base = row * p.D;
    for (var i = lid; i < half; i += WG) {
        let r = rotate_pair(y[base + i], y[base + i + half], cs[t * 2u * half + i], cs[t * 2u * half + half + i]);
        y[base + i] = r.x;
        y[base + i + half] = r.y;
    }
}
