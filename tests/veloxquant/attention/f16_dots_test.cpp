// A few f16-row dot products at once (attention/f16_dots.h): the SIMD kernel equals the scalar
// reference bit for bit (1-5 factor rows, 1-7 vectors, lengths with and without a partial chunk,
// strided inputs), and both equal the products computed in double within float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/random_values.h"

#include "base/half.h"
#include "veloxquant/attention/f16_dots.h"

namespace veloxquant::attention::kernels {
namespace {

TEST(F16Dots, SimdEqualsScalarBitForBitAndTheDoubleProducts) {
  for (const int64_t n : {int64_t{64}, int64_t{32}, int64_t{37}, int64_t{5}}) {
    for (const int64_t rank : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}}) {
      for (const int64_t n_x : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}}) {
        const int64_t a_stride = n + 3, x_stride = n + 5;
        const std::vector<float> af = test_support::normal_values(static_cast<std::size_t>(rank * a_stride), 17);
        std::vector<uint16_t> a(af.size());
        for (std::size_t k = 0; k < af.size(); ++k) a[k] = base::f32_to_f16(af[k]);
        const std::vector<float> x = test_support::normal_values(static_cast<std::size_t>(n_x * x_stride), 19);
        std::vector<float> got(static_cast<std::size_t>(n_x * rank), -1.0f), ref(got);
        f16_dots(a.data(), a_stride, rank, x.data(), x_stride, n_x, n, got.data());
        scalar::f16_dots(a.data(), a_stride, rank, x.data(), x_stride, n_x, n, ref.data());
        ASSERT_EQ(got, ref) << "n " << n << ", rank " << rank << ", vectors " << n_x;
        for (int64_t r = 0; r < n_x; ++r) {
          for (int64_t i = 0; i < rank; ++i) {
            double exact = 0.0, magnitude = 0.0;
            for (int64_t c = 0; c < n; ++c) {
              const double term = double(base::f16_to_f32(a[static_cast<std::size_t>(i * a_stride + c)])) *
                                  x[static_cast<std::size_t>(r * x_stride + c)];
              exact += term;
              magnitude += std::fabs(term);
            }
            EXPECT_NEAR(got[static_cast<std::size_t>(r * rank + i)], exact, 1e-5 * (magnitude + 1.0));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace veloxquant::attention::kernels
