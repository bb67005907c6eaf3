// Two weights from one 32-bit word, bf16 or f16 as the BF16 define says: the decode both row
// files (matmul_rows.wgsl, matmul_rows_direct.wgsl) include, so they read weights alike.
fn bf16_pair(word: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));
}

fn pair(word: u32) -> vec2<f32> {
    if ({{BF16}}u == 1u) { return bf16_pair(word); }
    return unpack2x16float(word);
}
