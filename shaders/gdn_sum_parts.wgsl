// The sum over the PARTS threads of a column (thread lid = part * CB + column), a fixed tree: one
// text for gdn.wgsl's gdn_step and the fused steps (gdn_fused.wgsl, gdn_conv_fused.wgsl), so
// their sums have the same bits. The including shader declares PARTS, CB and
// `var<workgroup> red: array<f32, CWG>`.
fn sum_parts(lid: u32, part: u32, cc: u32, x: f32) -> f32 {
    red[lid] = x;
    for (var s = PARTS / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (part < s) { red[lid] = red[lid] + red[lid + s * CB]; }
    }
    workgroupBarrier();
    let r = red[cc];
    workgroupBarrier();
    return r;
}
