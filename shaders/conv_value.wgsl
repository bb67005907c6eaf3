// One causal conv output value, one text for conv.wgsl and gdn_conv_fused.wgsl (the same bits
// either way). Reads the including shader's `x`, `w`, `hist` and p.Kc, p.C, p.x_off, p.ldx.

// Input i of the sequence hist ++ x, with i counted from the start of hist.
fn input_at(c: u32, i: u32) -> f32 {
    let hl = p.Kc - 1u;
    if (i < hl) { return hist[i * p.C + c]; }
    return x[p.x_off + (i - hl) * p.ldx + c];
}

// channel c of row t: the taps in order, then SiLU
fn conv_silu_at(c: u32, t: u32) -> f32 {
    var acc = 0.0;
    for (var j = 0u; j < p.Kc; j++) { acc = acc + w[c * p.Kc + j] * input_at(c, t + j); }
    return acc / (1.0 + exp(-acc));
}
