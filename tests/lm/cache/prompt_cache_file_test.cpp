// Prompt-cache files: round trips give the identical continuation (full and wrapped rotating
// caches), the byte layout documented in prompt_cache_file.h is what is written, every
// corruption (each byte flipped, each truncation) is a typed error, and the type registry
// rebuilds caches by name.
#include "lm/cache/prompt_cache_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "support/fake_model.h"

namespace {

using test_support::expected_greedy;
using test_support::FakeModel;
using test_support::FakeTokenizer;

class PromptCacheFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vq_prompt_cache_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::vector<int32_t> run(const FakeModel& model, const std::vector<int32_t>& prompt, int max_tokens,
                                  lm::PromptCache* cache) {
    FakeTokenizer tok;
    lm::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.prefill_step_size = 3;
    std::vector<int32_t> out;
    lm::stream_generate(
        model, tok, prompt, o,
        [&](const lm::GenerationChunk& c) {
          out.push_back(c.token);
          return true;
        },
        cache);
    return out;
  }

  static std::string read_all(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  static void write_all(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  std::filesystem::path dir_;
};

TEST_F(PromptCacheFileTest, RoundTripGivesIdenticalContinuation) {
  FakeModel model;
  const std::vector<int32_t> prompt = {1, 3, 4, 5, 6, 7, 8, 9};
  lm::PromptCache original{model.native_make_cache(), {}};
  run(model, prompt, 0, &original);  // prefill only
  lm::save_prompt_cache(path("p.vqpc"), original, {{"model", "fake-toy"}, {"note", "ünïcode"}});

  lm::SavedPromptCache loaded = lm::load_prompt_cache(path("p.vqpc"));
  EXPECT_EQ(loaded.cache.tokens, prompt);
  EXPECT_EQ(loaded.metadata.at("model"), "fake-toy");
  EXPECT_EQ(loaded.metadata.at("note"), "ünïcode");
  ASSERT_EQ(loaded.cache.caches.size(), 2u);
  EXPECT_EQ(loaded.cache.caches[0]->type_name(), "FullKVCache");
  EXPECT_EQ(loaded.cache.caches[0]->offset(), 8);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(loaded.cache.caches[i]->state()[0].to_f32(), original.caches[i]->state()[0].to_f32());
    EXPECT_EQ(loaded.cache.caches[i]->meta_state(), original.caches[i]->meta_state());
  }
  // Continue with new tokens, and with none (the last cached token is re-fed).
  lm::SavedPromptCache again = lm::load_prompt_cache(path("p.vqpc"));
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {10, 11});
  EXPECT_EQ(run(model, {10, 11}, 12, &loaded.cache), expected_greedy(longer, 12));
  EXPECT_EQ(run(model, {}, 12, &again.cache), expected_greedy(prompt, 12));
}

TEST_F(PromptCacheFileTest, WrappedRotatingCacheRoundTrip) {
  FakeModel model(64, /*sliding_window=*/4);
  const std::vector<int32_t> prompt = {1, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  lm::PromptCache original{model.native_make_cache(), {}};
  run(model, prompt, 5, &original);  // prefill + 4 fed-back tokens: the ring has wrapped
  EXPECT_EQ(original.caches[1]->type_name(), "RotatingKVCache");
  EXPECT_FALSE(original.caches[1]->is_trimmable());
  lm::save_prompt_cache(path("r.vqpc"), original);
  lm::SavedPromptCache loaded = lm::load_prompt_cache(path("r.vqpc"));
  EXPECT_EQ(loaded.cache.tokens, original.tokens);
  EXPECT_EQ(loaded.cache.caches[1]->meta_state(), original.caches[1]->meta_state());
  EXPECT_EQ(run(model, {5, 6}, 15, &loaded.cache), run(model, {5, 6}, 15, &original));
  // Nothing new to feed and a wrapped ring cannot roll back: a clear error, not a wrong answer.
  lm::SavedPromptCache wrapped = lm::load_prompt_cache(path("r.vqpc"));
  EXPECT_THROW(run(model, {}, 3, &wrapped.cache), base::InvalidArgument);
}

TEST_F(PromptCacheFileTest, WritesTheDocumentedLayout) {
  // One f16 FullKVCache holding 3 tokens of [1, 2, 3, 4] keys/values; two tokens recorded.
  auto cache = std::make_shared<lm::FullKVCache>(lm::DType::F16);
  std::vector<float> k(24), v(24);
  for (int i = 0; i < 24; ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  cache->update_and_fetch(lm::Tensor::from_f32(k, {1, 2, 3, 4}, lm::DType::F32),
                          lm::Tensor::from_f32(v, {1, 2, 3, 4}, lm::DType::F32));
  lm::PromptCache pc{{cache}, {1, 7, 9}};
  lm::save_prompt_cache(path("l.vqpc"), pc, {{"ab", "xyz"}});
  const std::string bytes = read_all(path("l.vqpc"));
  const std::size_t header = 8 + 4 + 4;
  const std::size_t meta = 4 + (4 + 2) + (4 + 3);
  const std::size_t tokens = 8 + 3 * 4;
  const std::size_t tensor = 1 + 1 + 2 + 4 * 8 + 8 + 1 * 2 * 3 * 4 * 2;
  const std::size_t caches = 4 + (4 + 11) + 4 + (4 + 3) + 4 + 2 * tensor;
  EXPECT_EQ(bytes.size(), header + meta + tokens + caches + 8);
  EXPECT_EQ(bytes.substr(0, 8), "VQPCACHE");
  EXPECT_EQ(bytes.substr(header + meta + tokens + 4 + 4, 11), "FullKVCache");
  // The checksum is FNV-1a 64 of everything before it (computed here independently).
  uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i) {
    h ^= static_cast<unsigned char>(bytes[i]);
    h *= 1099511628211ull;
  }
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  EXPECT_EQ(stored, h);

  // A negative token id under a valid checksum (a crafted file) is refused by name.
  std::string crafted = bytes;
  const int32_t negative = -5;
  std::memcpy(crafted.data() + header + meta + 8, &negative, 4);
  uint64_t h2 = 14695981039346656037ull;
  for (std::size_t i = 0; i + 8 < crafted.size(); ++i) {
    h2 ^= static_cast<unsigned char>(crafted[i]);
    h2 *= 1099511628211ull;
  }
  std::memcpy(crafted.data() + crafted.size() - 8, &h2, 8);
  std::ofstream(path("neg.vqpc"), std::ios::binary) << crafted;
  try {
    lm::load_prompt_cache(path("neg.vqpc"));
    FAIL() << "a negative token id loaded";
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("token 0 has a negative id -5"), std::string::npos) << e.what();
  }
}

TEST_F(PromptCacheFileTest, EveryCorruptionIsATypedError) {
  FakeModel model(64, 4);
  lm::PromptCache pc{model.native_make_cache(), {}};
  run(model, {1, 3, 4, 5, 6, 7}, 0, &pc);
  lm::save_prompt_cache(path("c.vqpc"), pc, {{"k", "v"}});
  const std::string good = read_all(path("c.vqpc"));
  ASSERT_NO_THROW(lm::load_prompt_cache(path("c.vqpc")));
  const std::string bad = path("bad.vqpc");
  int format_errors = 0, unsupported = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string flipped = good;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
    write_all(bad, flipped);
    try {
      lm::load_prompt_cache(bad);
      ADD_FAILURE() << "flipping byte " << i << " went unnoticed";
    } catch (const base::FormatError&) {
      ++format_errors;
    } catch (const base::Unsupported&) {
      ++unsupported;  // version field or a cache type name turned into an unknown one
    }
  }
  EXPECT_EQ(format_errors + unsupported, static_cast<int>(good.size()));
  EXPECT_GT(format_errors, unsupported);
  for (std::size_t n = 0; n < good.size(); n += 7) {
    write_all(bad, good.substr(0, n));
    EXPECT_THROW(lm::load_prompt_cache(bad), base::FormatError) << "truncated to " << n << " bytes";
  }
  EXPECT_THROW(lm::load_prompt_cache(path("missing.vqpc")), base::FormatError);
  write_all(bad, "GGUF this is not a prompt cache at all");
  try {
    lm::load_prompt_cache(bad);
    FAIL();
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.vqpc"), std::string::npos) << e.what();
  }
}

// The parser behind the checksum: every byte flipped and the file resealed with
// prompt_cache_checksum (as the fuzz target seals its mutants). Each variant loads or fails with
// a typed error; most fail on what they broke (not the checksum), and a flipped metadata value
// loads as that value.
TEST_F(PromptCacheFileTest, ResealedCorruptionsReachTheParserAndStayTypedErrors) {
  FakeModel model(64, 4);
  lm::PromptCache pc{model.native_make_cache(), {}};
  run(model, {1, 3, 4, 5, 6, 7}, 0, &pc);
  lm::save_prompt_cache(path("s.vqpc"), pc, {{"k", "v"}});
  const std::string good = read_all(path("s.vqpc"));
  const auto seal = [](std::string bytes) {
    const uint64_t sum = lm::prompt_cache_checksum(bytes.data(), bytes.size() - sizeof sum);
    std::memcpy(bytes.data() + bytes.size() - sizeof sum, &sum, sizeof sum);
    return bytes;
  };
  ASSERT_EQ(seal(good), good) << "the exposed checksum is not the one the writer appends";
  const std::string bad = path("resealed.vqpc");
  int loaded = 0, refused = 0, checksum_refusals = 0;
  for (std::size_t i = 0; i + sizeof(uint64_t) < good.size(); ++i) {
    std::string flipped = good;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
    write_all(bad, seal(flipped));
    try {
      lm::load_prompt_cache(bad);
      ++loaded;  // a stored value or the metadata changed: still a well-formed file
    } catch (const base::FormatError& e) {
      ++refused;
      if (std::string(e.what()).find("checksum") != std::string::npos) ++checksum_refusals;
    } catch (const base::Unsupported&) {
      ++refused;
    }
  }
  EXPECT_EQ(checksum_refusals, 0);
  EXPECT_GT(refused, 100);  // the header, names, shapes and counts: caught by what they broke
  EXPECT_GT(loaded, 100);   // the stored rows' bytes
  std::string value_changed = good;
  const std::size_t at = value_changed.rfind('v', value_changed.size() - sizeof(uint64_t) - 1);
  ASSERT_NE(at, std::string::npos);
  value_changed[at] = 'w';
  write_all(bad, seal(value_changed));
  const lm::SavedPromptCache reloaded = lm::load_prompt_cache(bad);
  EXPECT_EQ(reloaded.metadata.at("k"), "w");
}

// A cache type from outside lm: registered by name, rebuilt through the factory.
class TaggedCache : public lm::FullKVCache {
 public:
  std::string type_name() const override { return tag_; }
  explicit TaggedCache(std::string tag = "TaggedCache") : tag_(std::move(tag)) {}
  std::shared_ptr<lm::KVCache> clone() const override { return std::make_shared<TaggedCache>(*this); }

 private:
  std::string tag_;
};

TEST_F(PromptCacheFileTest, SavingFollowsSymlinksAndRefusesWhatIsNotAFile) {
  FakeModel model(64);
  lm::PromptCache pc{model.native_make_cache(), {}};
  run(model, {1, 3, 4}, 1, &pc);
  // A symlink is written through: the link stays a link, its target gets the cache.
  lm::save_prompt_cache(path("real.vqpc"), pc);
  std::filesystem::create_symlink(path("real.vqpc"), path("link.vqpc"));
  lm::save_prompt_cache(path("link.vqpc"), pc);
  EXPECT_TRUE(std::filesystem::is_symlink(path("link.vqpc")));
  EXPECT_EQ(lm::load_prompt_cache(path("link.vqpc")).cache.tokens, pc.tokens);
  // A directory (as a FIFO or a device node would be) is not replaced.
  std::filesystem::create_directory(path("dir.vqpc"));
  try {
    lm::save_prompt_cache(path("dir.vqpc"), pc);
    FAIL() << "saved over a directory";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_directory(path("dir.vqpc")));
}

TEST_F(PromptCacheFileTest, RegistryRebuildsRegisteredTypesAndRefusesUnknownOnes) {
  lm::register_cache_type("TaggedCache", [] { return std::make_shared<TaggedCache>(); });
  const auto names = lm::registered_cache_types();
  EXPECT_NE(std::find(names.begin(), names.end(), "TaggedCache"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "RotatingKVCache"), names.end());
  auto tagged = std::make_shared<TaggedCache>();
  tagged->update_and_fetch(lm::Tensor({1, 1, 2, 4}, lm::DType::F16), lm::Tensor({1, 1, 2, 4}, lm::DType::F16));
  lm::save_prompt_cache(path("t.vqpc"), lm::PromptCache{{tagged}, {1, 2}});
  const auto loaded = lm::load_prompt_cache(path("t.vqpc"));
  EXPECT_EQ(loaded.cache.caches[0]->type_name(), "TaggedCache");
  EXPECT_NE(dynamic_cast<TaggedCache*>(loaded.cache.caches[0].get()), nullptr);

  auto unknown = std::make_shared<TaggedCache>("NoSuchCache");
  unknown->update_and_fetch(lm::Tensor({1, 1, 1, 4}, lm::DType::F16), lm::Tensor({1, 1, 1, 4}, lm::DType::F16));
  lm::save_prompt_cache(path("u.vqpc"), lm::PromptCache{{unknown}, {1}});
  try {
    lm::load_prompt_cache(path("u.vqpc"));
    FAIL();
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("NoSuchCache"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lm::save_prompt_cache(path("x.vqpc"), lm::PromptCache{{tagged}, {1}}), base::InvalidArgument);
  EXPECT_THROW(lm::save_prompt_cache(path("x.vqpc"), lm::PromptCache{{}, {}}), base::InvalidArgument);
}

}  // namespace

// The same round trip on a real model (stories260K, llama2.c checkpoint): the continuation
// from a loaded prompt cache equals the uninterrupted greedy generation token for token.
#include "lm/load.h"

namespace {

TEST_F(PromptCacheFileTest, RealModelContinuationIsIdentical) {
  const std::string dir = std::string(VQ_SHARED_DIR) + "/models/stories260K/";
  lm::LoadOptions options;
  options.tokenizer_path = dir + "tok512.bin";
  const lm::LoadedModel loaded = lm::load(dir + "stories260K.bin", options);
  const lm::Model& model = *loaded.model;
  const lm::Tokenizer& tok = *loaded.tokenizer;

  lm::GenerateOptions o;
  o.max_tokens = 40;
  const std::string whole = lm::generate(model, tok, "Once upon a time, there was a dog", o);

  // Prefill the first part and save it; then continue from the file with the rest.
  lm::PromptCache first{lm::make_prompt_cache(model), {}};
  lm::GenerateOptions prefill_only = o;
  prefill_only.max_tokens = 0;
  const std::vector<int32_t> all_tokens = tok.encode("Once upon a time, there was a dog", true);
  ASSERT_GT(all_tokens.size(), 6u);
  const std::vector<int32_t> head(all_tokens.begin(), all_tokens.end() - 3);
  const std::vector<int32_t> tail(all_tokens.end() - 3, all_tokens.end());
  lm::stream_generate(model, tok, head, prefill_only, nullptr, &first);
  lm::save_prompt_cache(path("story.vqpc"), first);
  lm::SavedPromptCache saved = lm::load_prompt_cache(path("story.vqpc"));
  EXPECT_EQ(saved.cache.tokens, head);
  std::string continued;
  lm::stream_generate(
      model, tok, tail, o,
      [&](const lm::GenerationChunk& c) {
        continued += c.text;
        return true;
      },
      &saved.cache);
  EXPECT_EQ(continued, whole);
  EXPECT_FALSE(whole.empty());
}

}  // namespace

namespace {

TEST_F(PromptCacheFileTest, SmolLM2ContinuationIsIdentical) {
  const std::string model_path = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model_path))
    GTEST_SKIP() << model_path << " absent (scripts/fetch_models.sh fetches it)";
  const lm::LoadedModel loaded = lm::load(model_path);
  const lm::Model& model = *loaded.model;
  const lm::Tokenizer& tok = *loaded.tokenizer;
  const std::vector<int32_t> ids =
      tok.encode(tok.apply_chat_template({{"user", "Name three colours of the rainbow."}}), true);
  lm::GenerateOptions o;
  o.max_tokens = 20;
  o.prefill_step_size = 7;  // several chunks, unaligned with the split below
  std::vector<int32_t> whole;
  lm::stream_generate(model, tok, ids, o, [&](const lm::GenerationChunk& c) {
    if (c.token >= 0) whole.push_back(c.token);
    return true;
  });

  const std::vector<int32_t> head(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(ids.size() / 2));
  const std::vector<int32_t> tail(ids.begin() + static_cast<std::ptrdiff_t>(ids.size() / 2), ids.end());
  lm::PromptCache first{lm::make_prompt_cache(model), {}};
  lm::GenerateOptions prefill_only = o;
  prefill_only.max_tokens = 0;
  lm::stream_generate(model, tok, head, prefill_only, nullptr, &first);
  lm::save_prompt_cache(path("smol.vqpc"), first, {{"model", model.config().name}});
  lm::SavedPromptCache saved = lm::load_prompt_cache(path("smol.vqpc"));
  ASSERT_EQ(saved.cache.caches.size(), model.layers().size());
  std::vector<int32_t> continued;
  lm::stream_generate(
      model, tok, tail, o,
      [&](const lm::GenerationChunk& c) {
        if (c.token >= 0) continued.push_back(c.token);
        return true;
      },
      &saved.cache);
  EXPECT_EQ(continued, whole);
  EXPECT_FALSE(whole.empty());
}

}  // namespace
