// lm::ConvStateCache (the recurrent state of LFM2's short-convolution layers) and the causal
// depthwise convolution it drives: the convolution fed step by step or in uneven chunks
// through the cache equals a plain reference over the whole sequence written from torch's
// definition (conv1d, groups = channels, left padding L-1, weights [channels][L]); exact bytes;
// state / from_state / clone / prompt-cache round trips; clear errors.
#include "lm/cache/conv_state_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/cache/prompt_cache_file.h"

namespace {

using lm::ConvStateCache;

std::vector<float> random_values(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// torch's F.conv1d(x[1, C, T], w[C, 1, L], padding=L-1, groups=C)[..., :T], in double, with
// the weights in torch's channel-major layout and zeros before the first input.
std::vector<double> reference_conv(const std::vector<float>& input, int64_t n, int64_t channels,
                                   const std::vector<float>& weight_channel_major, int64_t kernel) {
  std::vector<double> out(static_cast<std::size_t>(n * channels), 0.0);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0.0;
      for (int64_t j = 0; j < kernel; ++j) {
        const int64_t src = t + j - (kernel - 1);  // padded index t + j minus the padding
        if (src >= 0) acc += double{weight_channel_major[c * kernel + j]} * input[src * channels + c];
      }
      out[t * channels + c] = acc;
    }
  }
  return out;
}

std::vector<float> tap_major(const std::vector<float>& channel_major, int64_t channels, int64_t kernel) {
  std::vector<float> taps(channel_major.size());
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < kernel; ++j) taps[j * channels + c] = channel_major[c * kernel + j];
  }
  return taps;
}

// Feeds `input` through a fresh cache in chunks of the given sizes; returns all outputs.
std::vector<float> run_chunked(ConvStateCache& cache, const std::vector<float>& input, int64_t channels,
                               const std::vector<float>& taps, const std::vector<int64_t>& chunks) {
  std::vector<float> out(input.size());
  int64_t t = 0;
  for (int64_t n : chunks) {
    cache.convolve(input.data() + t * channels, n, taps.data(), out.data() + t * channels);
    t += n;
  }
  EXPECT_EQ(t * channels, static_cast<int64_t>(input.size()));
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << what << " at " << i;
  }
}

TEST(ConvStateCache, StepByStepAndChunkedEqualTheWholeSequenceReference) {
  for (const int64_t kernel : {2, 3, 4}) {
    for (const int64_t channels : {1, 7, 64}) {
      const int64_t n = 23;
      const auto input = random_values(static_cast<std::size_t>(n * channels), 11 + kernel + channels);
      const auto weights = random_values(static_cast<std::size_t>(channels * kernel), 5 * kernel + channels);
      const auto taps = tap_major(weights, channels, kernel);
      const auto want = reference_conv(input, n, channels, weights, kernel);
      const std::string tag = "L=" + std::to_string(kernel) + " C=" + std::to_string(channels);

      ConvStateCache whole(channels, kernel);
      expect_close(run_chunked(whole, input, channels, taps, {n}), want, tag + " one call");
      EXPECT_EQ(whole.offset(), n);

      ConvStateCache steps(channels, kernel);
      expect_close(run_chunked(steps, input, channels, taps, std::vector<int64_t>(n, 1)), want,
                   tag + " one token a call");

      // Chunks shorter and longer than the window, as a chunked prefill then decode gives.
      ConvStateCache mixed(channels, kernel);
      expect_close(run_chunked(mixed, input, channels, taps, {1, 2, 5, 1, 1, 9, 3, 1}), want, tag + " uneven chunks");
      // Whatever the chunking, the state is the last L-1 inputs, oldest first.
      for (const ConvStateCache* c : {&whole, &steps, &mixed}) {
        const std::vector<float> last(input.end() - (kernel - 1) * channels, input.end());
        EXPECT_EQ(c->history(), last) << tag;
      }
    }
  }
}

TEST(ConvStateCache, FreshStateIsZerosAndBytesAreTheWindow) {
  ConvStateCache cache(1024, 3);
  EXPECT_TRUE(cache.empty());
  EXPECT_EQ(cache.offset(), 0);
  EXPECT_EQ(cache.nbytes(), 2u * 1024u * 4u);  // L-1 rows of f32, whatever the token count
  EXPECT_EQ(cache.history(), std::vector<float>(2048, 0.0f));
  const auto input = random_values(std::size_t{1024} * 300, 3);
  const auto taps = random_values(std::size_t{3} * 1024, 4);
  std::vector<float> out(input.size());
  cache.convolve(input.data(), 300, taps.data(), out.data());
  EXPECT_FALSE(cache.empty());
  EXPECT_EQ(cache.offset(), 300);
  EXPECT_EQ(cache.nbytes(), 2u * 1024u * 4u);
  EXPECT_FALSE(cache.is_trimmable());
  EXPECT_EQ(cache.trim(1), 0);
  EXPECT_EQ(cache.offset(), 300);
}

TEST(ConvStateCache, StateRoundTripCloneAndPromptCacheFileContinueIdentically) {
  const int64_t channels = 5, kernel = 3;
  const auto input = random_values(static_cast<std::size_t>(12 * channels), 21);
  const auto taps = random_values(static_cast<std::size_t>(kernel * channels), 22);
  ConvStateCache cache(channels, kernel);
  std::vector<float> out(input.size());
  cache.convolve(input.data(), 7, taps.data(), out.data());

  ConvStateCache restored(1, 2);
  restored.from_state(cache.state(), cache.meta_state());
  EXPECT_EQ(restored.channels(), channels);
  EXPECT_EQ(restored.kernel_size(), kernel);
  EXPECT_EQ(restored.offset(), 7);
  const auto cloned = std::dynamic_pointer_cast<ConvStateCache>(cache.clone());
  ASSERT_TRUE(cloned);

  const auto path = std::filesystem::temp_directory_path() / "conv_state_cache_test.vqpc";
  lm::PromptCache saved;
  saved.caches = {cache.clone()};
  saved.tokens = {1, 2, 3, 4, 5, 6, 7};
  lm::save_prompt_cache(path.string(), saved);
  const lm::SavedPromptCache loaded = lm::load_prompt_cache(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(loaded.cache.caches.size(), 1u);
  auto* from_file = dynamic_cast<ConvStateCache*>(loaded.cache.caches[0].get());
  ASSERT_NE(from_file, nullptr) << loaded.cache.caches[0]->type_name();

  // The rest of the sequence gives bit-identical outputs through every copy, and the
  // original's later updates do not leak into the clone.
  std::vector<float> want(5 * channels), got(5 * channels);
  cache.convolve(input.data() + 7 * channels, 5, taps.data(), want.data());
  for (ConvStateCache* c : {&restored, cloned.get(), from_file}) {
    c->convolve(input.data() + 7 * channels, 5, taps.data(), got.data());
    EXPECT_EQ(got, want);
    EXPECT_EQ(c->offset(), 12);
  }
}

TEST(ConvStateCache, ClearErrors) {
  EXPECT_THROW(ConvStateCache(0, 3), base::InvalidArgument);
  EXPECT_THROW(ConvStateCache(8, 1), base::InvalidArgument);
  ConvStateCache cache(4, 3);
  const lm::Tensor kv({1, 1, 1, 4}, lm::DType::F32);
  try {
    cache.update_and_fetch(kv, kv);
    FAIL() << "update_and_fetch ran";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ConvStateCache"), std::string::npos) << e.what();
  }
  ConvStateCache other(4, 3);
  EXPECT_THROW(other.from_state(cache.state(), {"4", "3"}), base::FormatError);
  EXPECT_THROW(other.from_state(cache.state(), {"4", "x", "0"}), base::FormatError);
  EXPECT_THROW(other.from_state(cache.state(), {"5", "3", "0"}), base::FormatError);  // shape mismatch
  EXPECT_THROW(other.from_state(cache.state(), {"4", "3", "-1"}), base::FormatError);
  EXPECT_THROW(other.from_state({}, {"4", "3", "0"}), base::FormatError);
}

}  // namespace
