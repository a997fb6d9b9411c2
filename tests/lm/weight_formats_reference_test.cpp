// Every GGML weight format the host reads, checked against an independent implementation.
//
// The fixtures (tests/fixtures/reference/weights, made by tools/reference/make_weight_fixtures.py)
// are GGUF files written by gguf-py's GGUFWriter, one per type, and the values gguf-py's numpy
// dequantizer (gguf.quants.dequantize) gives for them — cross-checked bit for bit against
// llama.cpp's C dequantize_row_* when generated. Nothing here comes from lm's own code.
//
// What must hold:
//  - the GGUF reader finds the tensors, their types, shapes and data offsets (one file uses a
//    non-default general.alignment of 64);
//  - scalar dequantization equals the reference to the bit (the sign of a zero aside, see
//    same_value): both sides compute the same
//    f16->f32 conversions and one or two float products/sums per element (d*q, d*q+m,
//    d*sc*q - dmin*mn), which IEEE makes exact-to-specification; any layout or nibble-order
//    slip changes whole values, so there is no tolerance;
//  - the fused dot products (vec_dot, matvec, matmul, threaded or not) agree with the
//    float64 product of the reference values within the worst-case f32 summation bound:
//    |err| <= (n + kExtraRoundings) * u * M, u = 2^-24, n = row length, M = sum of the
//    magnitudes of the terms the factored dot adds (|d*q| and |min| separately, times |x|),
//    stored by the tool per row. That bound (Higham, "Accuracy and Stability", §3.1) holds for
//    ANY summation order, so it does not depend on how the kernel blocks its loops; a wrong
//    scale, a dropped block or a swapped nibble is orders of magnitude larger.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/gguf/gguf_file.h"
#include "lm/kernels/matmul.h"
#include "lm/kernels/simd_dequantize.h"
#include "lm/kernels/vec_dot.h"
#include "lm/weights/dequantize.h"
#include "lm/weights/ggml_type.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/weights";

// Roundings beyond the n-1 additions: f16->f32 is exact, then at most d*sc, (d*sc)*q-sum,
// the x-sum for the min term, and the final cast; 8 leaves room for kernels that split the
// sum into partial accumulators (each split adds at most one level).
constexpr double kExtraRoundings = 8.0;
constexpr double kUnitRoundoff = 5.9604644775390625e-08;  // 2^-24
constexpr int kTokens = 5;

// Summation error of n products accumulated in double (2^-53 per addition).
double double_bound(double n, double magnitude) { return (n + kExtraRoundings) * 1.1102230246251565e-16 * magnitude; }

json load_manifest() {
  std::ifstream in(kDir / "manifest.json");
  if (!in) throw std::runtime_error("missing fixture " + (kDir / "manifest.json").string());
  return json::parse(in);
}

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path.string());
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One array of the .ref.bin, located by the manifest's offset/count/dtype.
template <class T>
std::vector<T> ref_array(const std::vector<char>& bytes, const json& arrays, const std::string& name) {
  const json& a = arrays.at(name);
  const std::string expected_dtype = sizeof(T) == 8 ? "f64" : "f32";
  EXPECT_EQ(a.at("dtype").get<std::string>(), expected_dtype) << name;
  const auto offset = a.at("offset").get<std::size_t>();
  const auto count = a.at("count").get<std::size_t>();
  if (offset + count * sizeof(T) > bytes.size()) throw std::runtime_error("ref.bin too short for " + name);
  std::vector<T> out(count);
  std::memcpy(out.data(), bytes.data() + offset, count * sizeof(T));
  return out;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Bit equality, except that +0 and -0 count as equal: llama.cpp forms Q6_K values as
// (d*sc)*(q-32), lm as d*(sc*(q-32)); both are exact here (an f16 d times an integer below
// 2^13 fits in 24 bits), so they differ only in the sign of a zero, which no sum can see.
bool same_value(float a, float b) { return bits(a) == bits(b) || (a == 0.0f && b == 0.0f); }

lm::GgmlType type_from_name(const std::string& name) {
  for (uint32_t t = 0; t < 64; ++t) {
    if (lm::ggml_type_info(t).name == name) return static_cast<lm::GgmlType>(t);
  }
  throw std::runtime_error("unknown GGML type name " + name);
}

class WeightFormatReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    manifest_ = load_manifest();
    entry_ = manifest_.at("types").at(GetParam());
    type_ = type_from_name(GetParam());
    file_ = lm::gguf::GgufFile::open((kDir / entry_.at("gguf").get<std::string>()).string());
    ref_ = read_file(kDir / entry_.at("ref").get<std::string>());
  }

  json manifest_, entry_;
  lm::GgmlType type_{};
  std::shared_ptr<const lm::gguf::GgufFile> file_;
  std::vector<char> ref_;
};

TEST_P(WeightFormatReference, ReaderSeesWhatGgufPyWrote) {
  EXPECT_EQ(file_->version(), 3u);
  EXPECT_EQ(file_->alignment(), entry_.at("alignment").get<uint64_t>());
  EXPECT_EQ(file_->get_string("general.architecture").value_or(""), "vq_weights_fixture");
  EXPECT_EQ(file_->get_string("general.name").value_or(""), "veloxquant weight-format fixture " + GetParam());
  const json& tensors = entry_.at("tensors");
  ASSERT_EQ(file_->tensors().size(), tensors.size());
  for (const json& t : tensors) {
    const auto name = t.at("name").get<std::string>();
    const lm::gguf::TensorInfo& info = file_->tensor(name);
    EXPECT_EQ(info.type, type_) << name;
    ASSERT_EQ(info.ne.size(), 2u) << name;
    EXPECT_EQ(info.ne[0], t.at("cols").get<int64_t>()) << name;
    EXPECT_EQ(info.ne[1], t.at("rows").get<int64_t>()) << name;
    EXPECT_EQ(info.nbytes, t.at("n_bytes").get<std::size_t>()) << name;
    // Tensor data starts on the file's alignment (the GGUF rule the writer followed).
    EXPECT_EQ((file_->data_offset() + info.offset) % file_->alignment(), 0u) << name;
  }
}

// The elements where the weight view's rows (dequantized one at a time), the whole-tensor scalar
// call (all) or the SIMD dequantizer (fast) differ from the reference; the first five reported.
int dequantize_mismatches(const std::string& label, const lm::WeightMatrix& w, const std::vector<float>& expected,
                          const std::vector<float>& all, const std::vector<float>& fast) {
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  int mismatches = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    w.dequantize_row_to(r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * w.cols + c);
      const bool same =
          same_value(row[c], expected[i]) && same_value(all[i], expected[i]) && same_value(fast[i], expected[i]);
      if (!same && ++mismatches <= 5) {
        ADD_FAILURE() << label << " [" << r << ", " << c << "]: reference " << expected[i] << ", row " << row[c]
                      << ", whole " << all[i] << ", fast " << fast[i];
      }
    }
  }
  return mismatches;
}

TEST_P(WeightFormatReference, ScalarDequantizeIsBitExact) {
  const json& arrays = entry_.at("arrays");
  for (const json& t : entry_.at("tensors")) {
    const auto name = t.at("name").get<std::string>();
    const auto expected = ref_array<float>(ref_, arrays, "deq." + name);
    const lm::gguf::TensorInfo& info = file_->tensor(name);
    ASSERT_EQ(static_cast<std::size_t>(info.numel()), expected.size()) << name;

    // Whole tensor in one call, through the scalar reference and the SIMD dequantizer.
    std::vector<float> all(expected.size()), fast(expected.size());
    lm::dequantize_row(type_, file_->tensor_data(info), all.data(), info.numel());
    lm::kernels::dequantize_row_fast(type_, file_->tensor_data(info), fast.data(), info.numel());
    // Row by row through the weight view (what embedding lookups use).
    const lm::WeightMatrix w = file_->weight(name);
    ASSERT_EQ(w.rows, t.at("rows").get<int64_t>());
    ASSERT_EQ(w.cols, t.at("cols").get<int64_t>());
    EXPECT_EQ(dequantize_mismatches(GetParam() + " " + name, w, expected, all, fast), 0) << GetParam() << " " << name;
  }
}

TEST_P(WeightFormatReference, FusedDotsAgreeWithinTheF32SummationBound) {
  const json& arrays = entry_.at("arrays");
  base::ThreadPool pool(2);
  for (const json& t : entry_.at("tensors")) {
    const auto name = t.at("name").get<std::string>();
    const lm::WeightMatrix w = file_->weight(name);
    const auto x = ref_array<float>(ref_, arrays, "x." + name);
    const auto y_ref = ref_array<double>(ref_, arrays, "y." + name);
    const auto magnitude = ref_array<double>(ref_, arrays, "absterms." + name);
    ASSERT_EQ(x.size(), static_cast<std::size_t>(w.cols));
    ASSERT_EQ(y_ref.size(), static_cast<std::size_t>(w.rows));

    // Activation rows scaled by powers of two: exact, so their references are exactly the
    // scaled y and the bound scales the same way. Three rows take the per-token dot path,
    // five the prefill path (rows dequantized once, then f32 dots over 4-row groups).
    const double scales[kTokens] = {1.0, -0.5, 2.0, 0.25, -4.0};
    std::vector<float> xs(kTokens * x.size());
    for (int k = 0; k < kTokens; ++k) {
      for (std::size_t j = 0; j < x.size(); ++j) xs[k * x.size() + j] = static_cast<float>(scales[k] * x[j]);
    }
    std::vector<float> y_vec(static_cast<std::size_t>(w.rows)), y_pool(y_vec.size());
    std::vector<float> y_mat(kTokens * y_vec.size()), y_mat_pool(y_mat.size()), y_mat_ref(y_mat.size());
    std::vector<float> y_three(3 * y_vec.size());
    lm::kernels::matvec(w, x.data(), y_vec.data(), nullptr);
    lm::kernels::matvec(w, x.data(), y_pool.data(), &pool);
    lm::kernels::matmul(w, xs.data(), 3, y_three.data(), nullptr);
    lm::kernels::matmul(w, xs.data(), kTokens, y_mat.data(), nullptr);
    lm::kernels::matmul(w, xs.data(), kTokens, y_mat_pool.data(), &pool);
    lm::kernels::matmul_reference(w, xs.data(), kTokens, y_mat_ref.data());

    const double n = static_cast<double>(w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      const double bound = (n + kExtraRoundings) * kUnitRoundoff * magnitude[r];
      const float fused = lm::kernels::vec_dot(type_, w.row(r), x.data(), w.cols);
      const float reference = lm::kernels::vec_dot_reference(type_, w.row(r), x.data(), w.cols);
      EXPECT_NEAR(fused, y_ref[r], bound) << GetParam() << " " << name << " row " << r << " vec_dot";
      // vec_dot_reference sums exact float products in double, then casts to float.
      EXPECT_NEAR(reference, y_ref[r], kUnitRoundoff * std::abs(y_ref[r]) + double_bound(n, magnitude[r]))
          << GetParam() << " " << name << " row " << r << " vec_dot_reference";
      EXPECT_NEAR(y_vec[r], y_ref[r], bound) << GetParam() << " " << name << " row " << r << " matvec";
      // Threading splits rows, not sums: the same bits as the serial result.
      EXPECT_EQ(bits(y_pool[r]), bits(y_vec[r])) << GetParam() << " " << name << " row " << r;
      for (int k = 0; k < kTokens; ++k) {
        const std::size_t i = static_cast<std::size_t>(k * w.rows + r);
        const double expect = scales[k] * y_ref[r];
        const double scaled_bound = std::abs(scales[k]) * bound;
        if (k < 3) {
          EXPECT_NEAR(y_three[i], expect, scaled_bound) << GetParam() << " " << name << " row " << r << " 3 tokens";
        }
        EXPECT_NEAR(y_mat[i], expect, scaled_bound) << GetParam() << " " << name << " row " << r << " token " << k;
        EXPECT_EQ(bits(y_mat_pool[i]), bits(y_mat[i])) << GetParam() << " " << name << " row " << r;
        EXPECT_NEAR(y_mat_ref[i], expect,
                    kUnitRoundoff * std::abs(expect) + std::abs(scales[k]) * double_bound(n, magnitude[r]))
            << GetParam() << " " << name << " row " << r << " matmul_reference";
      }
    }
  }
}

TEST_P(WeightFormatReference, TruncatedFileIsAFormatErrorNamingTheFile) {
  // Cut the file inside the last tensor's data: the reader must refuse it at open time.
  const fs::path src = kDir / entry_.at("gguf").get<std::string>();
  const fs::path cut =
      fs::temp_directory_path() / ("vq_truncated_" + GetParam() + "_" + std::to_string(::getpid()) + ".gguf");
  std::vector<char> bytes = read_file(src);
  bytes.resize(bytes.size() - 17);
  {
    std::ofstream out(cut, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  try {
    (void)lm::gguf::GgufFile::open(cut.string());
    ADD_FAILURE() << "truncated " << cut << " was accepted";
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(cut.filename().string()), std::string::npos) << e.what();
  }
  fs::remove(cut);
}

std::vector<std::string> fixture_types() {
  std::vector<std::string> names;
  const json manifest = load_manifest();  // keep it alive: items() only views it
  for (const auto& item : manifest.at("types").items()) names.push_back(item.key());
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllGgmlTypes, WeightFormatReference, ::testing::ValuesIn(fixture_types()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The manifest must cover every format the issue names, so a fixture regenerated with a type
// dropped cannot silently shrink the suite.
TEST(WeightFormatReferenceFixtures, CoverEveryRequiredType) {
  const json types = load_manifest().at("types");
  for (const char* required : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q5_0", "Q5_1", "Q5_K",
                               "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"}) {
    EXPECT_TRUE(types.contains(required)) << required;
  }
}

}  // namespace
