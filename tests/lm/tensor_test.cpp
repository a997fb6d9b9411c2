// lm::Tensor at the edge a cache meets on an empty prefill: tensors of zero elements. Their
// storage is empty (null data), so every copy of them must be a no-op that never hands the null
// pointer to memcpy: under the ASan+UBSan build (preset asan) a memcpy(nullptr, ..., 0) aborts the
// test with "null pointer passed as argument", as TurboQuantRvqCache's zero-prefill test did
// through Tensor::from_f32 on 2026-12-05.
#include <gtest/gtest.h>

#include <vector>

#include "lm/tensor.h"

namespace {

TEST(TensorZeroElements, ConvertCopyAndCastWithoutTouchingMemory) {
  for (const lm::DType dtype : {lm::DType::F32, lm::DType::F16, lm::DType::BF16}) {
    const std::vector<float> none;
    const lm::Tensor t = lm::Tensor::from_f32(none, {1, 2, 0, 8}, dtype);
    EXPECT_EQ(t.numel(), 0);
    EXPECT_EQ(t.nbytes(), 0u);
    EXPECT_TRUE(t.to_f32().empty());
    EXPECT_EQ(t.clone().numel(), 0);
    EXPECT_EQ(t.contiguous().numel(), 0);
    const lm::Tensor other = t.astype(dtype == lm::DType::F32 ? lm::DType::F16 : lm::DType::F32);
    EXPECT_EQ(other.numel(), 0);
    EXPECT_EQ(other.dim(2), 0);
  }
}

TEST(TensorZeroElements, ConvertElementsOfNoneLeavesTheDestination) {
  // Null pointers and a zero count: what an empty tensor's raw_data() gives.
  lm::convert_elements(nullptr, lm::DType::F32, nullptr, lm::DType::F32, 0);
  lm::convert_elements(nullptr, lm::DType::F16, nullptr, lm::DType::F32, 0);
  float dst = 7.0f;
  lm::convert_elements(nullptr, lm::DType::F32, reinterpret_cast<std::byte*>(&dst), lm::DType::F32, 0);
  EXPECT_EQ(dst, 7.0f);
}

}  // namespace
