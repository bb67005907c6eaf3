// The fixed reduction tree that ends rows_dot in both row files (matmul_rows.wgsl and
// matmul_rows_direct.wgsl include it as text, inside rows_dot): each thread's per-(weight row,
// x row) sums go to workgroup memory, then pairs are added in halving strides, so the tree (and
// a row's bits) is the same for every T and for either row loop.
    for (var a = 0u; a < TB * RB; a++) { partial[lid * TB * RB + a] = acc[a]; }
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            for (var a = 0u; a < TB * RB; a++) {
                if (a / TB < nr && a % TB < nt) {
                    partial[lid * TB * RB + a] = partial[lid * TB * RB + a] + partial[(lid + s) * TB * RB + a];
                }
            }
        }
    }
    workgroupBarrier();
