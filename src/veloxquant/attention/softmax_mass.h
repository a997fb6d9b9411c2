#pragma once
// One query's softmax over many approximate scores, added into a per-row mass (a2ats's retrieval,
// caches/a2ats_cache.cpp: the attention mass every far row would get, summed over the kv head's
// query heads and the call's queries, ranks the rows to retrieve). Highway, dispatched at run time.
//
//   e_j = exp(logits[j] - top)  (written back to logits),  sum = sum_j e_j (in double, in order
//   per lane, lanes added at the end),  mass[j] += e_j * (1 / sum)  (in double)
//
// exp is Highway's vector exp (hwy/contrib/math: max error ~1 ulp for the arguments here, all
// <= 0), eight rows per instruction instead of one libm call per row: the masses differ from a
// std::exp loop in their last bits only, which can reorder rows whose masses tie to those bits
// (tested against a double-precision std::exp reference). A non-finite top (an infinite score)
// takes the plain std::exp loop, so its masses are what they were; a NaN score that is not the
// top gets exp = 0 here (std::exp would spread the NaN to every mass).
#include <cstdint>

namespace veloxquant::attention::kernels {

void add_softmax_mass(float* logits, int64_t n, float top, double* mass);

}  // namespace veloxquant::attention::kernels
