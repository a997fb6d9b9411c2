// lm's lfm2 GGUF loader on broken variants of the transformers-verified fixture
// (tests/fixtures/reference/hf/lfm2.gguf, rewritten here with one key or tensor changed): each
// inconsistency between the per-layer head_count_kv, shortconv.l_cache and the tensors is a
// clear error naming the key, layer or tensor — never a crash or a model that computes garbage.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "gguf_test_writer.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"
#include "lm/tokenizer/tokenizer_pretokenizer.h"

namespace {

namespace fs = std::filesystem;
using lm::gguf::ValueType;

const fs::path kFixture = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/hf/lfm2.gguf";

struct Edits {
  // Return false to drop the key; may write a replacement through the writer instead.
  std::function<bool(const std::string& key, gguf_test::Writer& w)> key = [](const std::string&, gguf_test::Writer&) {
    return true;
  };
  std::function<bool(const std::string& name)> keep_tensor = [](const std::string&) { return true; };
};

// The fixture with `edits` applied, written to a temporary file; returns its path.
std::string rewrite(const std::string& tag, const Edits& edits) {
  const auto src = lm::gguf::GgufFile::open(kFixture.string());
  gguf_test::Writer w;
  for (const auto& [key, v] : src->metadata()) {
    if (!edits.key(key, w)) continue;
    if (v.is_array()) {
      if (v.array_type == ValueType::STRING)
        w.kv_str_array(key, v.strings);
      else if (v.array_type == ValueType::F32)
        w.kv_f32_array(key, std::vector<float>(v.numbers.begin(), v.numbers.end()));
      else
        w.kv_i32_array(key, std::vector<int32_t>(v.integers.begin(), v.integers.end()));
    } else if (v.type == ValueType::STRING) {
      w.kv_str(key, v.text);
    } else if (v.type == ValueType::F32 || v.type == ValueType::F64) {
      w.kv_f32(key, static_cast<float>(v.number));
    } else if (v.type == ValueType::BOOL) {
      w.kv_bool(key, v.integer != 0);
    } else {
      w.kv_u32(key, static_cast<uint32_t>(v.integer));
    }
  }
  for (const auto& t : src->tensors()) {
    if (!edits.keep_tensor(t.name)) continue;
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.end());
    w.tensor(t.name, ne, static_cast<uint32_t>(t.type),
             std::string(reinterpret_cast<const char*>(src->tensor_data(t)), t.nbytes));
  }
  const fs::path path = fs::temp_directory_path() / ("lfm2_load_test_" + tag + ".gguf");
  w.write(path.string());
  return path.string();
}

template <class Error>
void expect_error(const std::string& tag, const Edits& edits, const std::vector<std::string>& mentions) {
  const std::string path = rewrite(tag, edits);
  try {
    lm::load(path);
    ADD_FAILURE() << tag << ": loaded";
  } catch (const Error& e) {
    for (const std::string& m : mentions)
      EXPECT_NE(std::string(e.what()).find(m), std::string::npos) << tag << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << tag << ": wrong error type: " << e.what();
  }
  fs::remove(path);
}

Edits replace_kv_heads(const std::vector<int32_t>& heads) {
  Edits e;
  e.key = [heads](const std::string& key, gguf_test::Writer& w) {
    if (key != "lfm2.attention.head_count_kv") return true;
    w.kv_i32_array(key, heads);
    return false;
  };
  return e;
}

Edits replace_u32(const std::string& name, uint32_t value) {
  Edits e;
  e.key = [name, value](const std::string& key, gguf_test::Writer& w) {
    if (key != name) return true;
    w.kv_u32(key, value);
    return false;
  };
  return e;
}

TEST(Lfm2Load, TheUnchangedRewriteLoads) {
  const std::string path = rewrite("unchanged", {});
  const lm::LoadedModel m = lm::load(path);
  fs::remove(path);
  ASSERT_EQ(m.model->layers().size(), 4u);
  EXPECT_FALSE(m.model->layers()[0].is_attention);
  EXPECT_TRUE(m.model->layers()[1].is_attention);
}

TEST(Lfm2Load, HeadCountsThatContradictTheTensorsAreRefused) {
  expect_error<base::FormatError>("conv_says_attention", replace_kv_heads({2, 2, 0, 2}),
                                  {"layer 0", "shortconv", "head_count_kv"});
  expect_error<base::FormatError>("attention_says_conv", replace_kv_heads({0, 0, 0, 2}), {"layer 1", "head_count_kv"});
  expect_error<base::FormatError>("short_array", replace_kv_heads({0, 2, 0}), {"head_count_kv", "4 integers"});
  expect_error<base::Unsupported>("mixed_kv_heads", replace_kv_heads({0, 2, 0, 1}), {"different KV head counts"});
  expect_error<base::FormatError>("too_many_kv_heads", replace_kv_heads({0, 8, 0, 8}), {"layer 1", "8 KV heads"});
}

TEST(Lfm2Load, KernelSizeMustBeThereAndFitTheConvTensor) {
  Edits drop;
  drop.key = [](const std::string& key, gguf_test::Writer&) { return key != "lfm2.shortconv.l_cache"; };
  expect_error<base::FormatError>("no_l_cache", drop, {"lfm2.shortconv.l_cache"});
  expect_error<base::FormatError>("l_cache_4", replace_u32("lfm2.shortconv.l_cache", 4),
                                  {"blk.0.shortconv.conv.weight", "[4, 128]"});
  expect_error<base::FormatError>("l_cache_1", replace_u32("lfm2.shortconv.l_cache", 1), {"shortconv.l_cache = 1"});
}

TEST(Lfm2Load, MissingTensorsAreNamed) {
  for (const std::string name :
       {"token_embd_norm.weight", "blk.1.attn_q_norm.weight", "blk.2.shortconv.out_proj.weight",
        "blk.0.shortconv.conv.weight", "blk.3.ffn_up.weight"}) {
    Edits e;
    e.keep_tensor = [name](const std::string& t) { return t != name; };
    expect_error<base::FormatError>("missing_" + name, e, {name});
  }
}

// Real LFM2 GGUFs carry tokenizer.ggml.pre = "lfm2", which llama.cpp (llama-vocab.cpp) splits
// with the Llama 3 regex.
TEST(Lfm2Load, PreTokenizerNameIsLlama3s) {
  const std::string text = "HE'S got 12345 apples,\n\n  (and) more";
  const auto lfm2 = lm::PreTokenizer("lfm2").split(text);
  EXPECT_EQ(lfm2, lm::PreTokenizer("llama-bpe").split(text));
  EXPECT_EQ(lfm2.size(), 13u);  // HE|'S| got| |123|45| apples|,\n\n| | (|and|)| more
}

}  // namespace
