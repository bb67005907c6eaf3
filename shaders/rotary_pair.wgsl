// One rotate-half pair (a = lane i, b = lane i + half of a head) by the angle whose cos and sin
// are c and s: included by rotary.wgsl and norm_rotary.wgsl, so both rotate with this one text.
fn rotate_pair(a: f32, b: f32, c: f32, s: f32) -> vec2<f32> {
    return vec2<f32>(a * c - b * s, b * c + a * s);
}
