// Which rows a routed matmul's workgroup computes (included by matmul_gathered.wgsl and
// matmul_quant.wgsl, whose routed kernels share this lookup): workgroup g takes `rows` rows of one
// (token, rank) pair p's matrices; the pair's expert e comes from the router's ids on the GPU and
// its matrix from the per-layer table (gate rows first, then up: rows past half_rows are the next
// matrix, written at y_off2). t is the activation row: the pair's token (p / k), or p itself where
// each pair has its own row (the down projection). The includer declares `rp` (with rows_per_pair,
// ids_off, n_experts, half_rows, y_off, y_off2, mat0, k, x_per_pair), `ids` and `table`.
struct RoutedRows {
    p: u32,
    r0: u32,
    e: u32,
    n0: u32,
    y0: u32,
    t: u32,
    at: vec2<u32>,
}

fn routed_rows(g: u32, rows: u32) -> RoutedRows {
    let per_pair = rp.rows_per_pair / rows;
    let p = g / per_pair;
    let r0 = (g - p * per_pair) * rows;
    let e = min(ids[rp.ids_off + p], rp.n_experts - 1u);
    var m = 0u;
    var n0 = r0;
    var y0 = rp.y_off;
    if (r0 >= rp.half_rows) {
        m = 1u;
        n0 = r0 - rp.half_rows;
        y0 = rp.y_off2;
    }
    var t = p / rp.k;
    if (rp.x_per_pair == 1u) { t = p; }
    return RoutedRows(p, r0, e, n0, y0, t, table[e * 3u + rp.mat0 + m]);
}
