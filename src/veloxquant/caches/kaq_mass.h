#pragma once
// Key-as-query attention mass (spec §2.3 "KaQ"): a cache never sees the model's queries when it
// writes rows, so the newest keys stand in for them. Shared by the write-time decisions of
// a2ats (which far rows stay retrievable, and the weights of its query-aware codebook) and
// anchorkv (its attention anchors and the utility of its residuals).
#include <cstdint>

namespace veloxquant {

// mass[i] = sum over proxies p of softmax_i(<proxy_p, row_i> / sqrt(d)), the softmax taken over
// the n candidate rows (f32 [n, d] and [n_proxies, d], row-major). Each proxy hands out a total
// mass of 1; with no proxies every row gets 0. Scores in double, one pass per proxy.
void kaq_mass(const float* rows, int64_t n, const float* proxies, int64_t n_proxies, int64_t d, float* mass);

}  // namespace veloxquant
