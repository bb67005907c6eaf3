// One value of the MoE combine (included by moe.wgsl's moe_combine and moe_norm.wgsl's fused
// combine + add + norm, so both compute it with this one text): row t's output c is
// sum_j weight(t k + j) * expert value (slot(t k + j), c) in the row's rank order, then, with a
// shared expert, + sigmoid(shared gate(t)) * shared(t, c). The includer defines the accessors
// cv_weight(i), cv_slot(i), cv_expert(slot, c), cv_shared_gate(t), cv_shared(t, c).
fn combine_value(t: u32, c: u32, k: u32, has_shared: u32) -> f32 {
    var acc = 0.0;
    for (var j = 0u; j < k; j++) {
        acc = acc + cv_weight(t * k + j) * cv_expert(cv_slot(t * k + j), c);
    }
    if (has_shared != 0u) {
        acc = acc + (1.0 / (1.0 + exp(-cv_shared_gate(t)))) * cv_shared(t, c);
    }
    return acc;
}
