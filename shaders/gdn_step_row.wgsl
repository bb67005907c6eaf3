// One row of the engine's GDN step on the DP rows of S a thread holds, and the load and store of
// those rows: one text for gdn.wgsl's gdn_step and the fused steps (gdn_fused_row.wgsl), so the
// three compute S, S^T k and S^T q with the same expressions in the same order. The includer
// declares PARTS, CB, DP, `red` (gdn_sum_parts.wgsl), s0, state, Params with Dv, and
// `key_at(base, i)` / `query_at(base, i)`: element i of the row's normalised k / scaled q, the
// thread's first row of S at `base`.
{{include gdn_sum_parts.wgsl}}

// S <- decay S, delta = beta (v - S^T k) (0 where the column is not live), S <- S + k delta^T;
// returns S^T q summed over the column's parts.
fn step_rows(s: ptr<function, array<f32, DP>>, decay: f32, bt: f32, vv: f32, live: bool, base: u32,
             lid: u32, part: u32, cc: u32) -> f32 {
    var kv = 0.0;
    for (var c = 0u; c < DP; c++) {
        (*s)[c] = (*s)[c] * decay;
        kv = kv + (*s)[c] * key_at(base, c);
    }
    kv = sum_parts(lid, part, cc, kv);
    var delta = 0.0;
    if (live) { delta = (vv - kv) * bt; }
    var o = 0.0;
    for (var c = 0u; c < DP; c++) {
        (*s)[c] = (*s)[c] + key_at(base, c) * delta;
        o = o + (*s)[c] * query_at(base, c);
    }
    return sum_parts(lid, part, cc, o);
}

// The DP rows of S from i0 of column col of the head at sbase: from s0 (zeros where not live),
// and back into `state` after the window's last row.
fn load_rows(s: ptr<function, array<f32, DP>>, sbase: u32, i0: u32, col: u32, live: bool) {
    for (var c = 0u; c < DP; c++) { (*s)[c] = 0.0; }
    if (live) {
        for (var c = 0u; c < DP; c++) { (*s)[c] = s0[sbase + (i0 + c) * p.Dv + col]; }
    }
}

fn store_rows(s: ptr<function, array<f32, DP>>, sbase: u32, i0: u32, col: u32, live: bool) {
    if (live) {
        for (var c = 0u; c < DP; c++) { state[sbase + (i0 + c) * p.Dv + col] = (*s)[c]; }
    }
}
