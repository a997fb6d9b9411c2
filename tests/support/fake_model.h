#pragma once
// A deterministic toy lm::Model and lm::Tokenizer for contract tests of the generation loop
// and prompt caches. Header-only: tests/support/*.cpp are linked into every test executable,
// also those that do not link lm.
//
// The toy model stores, per layer and per token, key = value = (token id, position, 1, 0)
// through the real cache contract (make_mask, update_and_fetch), and reads its next-token
// prediction back out of what the caches returned:
//     s_l    = sum of token ids over the rows of layer l visible to the last query
//     target = 3 + (3 * s_0 + 5 * s_1 + p + 1) mod 11          (p = the last query's position)
//     logits[j] = -ring_distance(j, target) over the 16 ids
// so a stale cache (not fresh per call), a wrong trim, a wrong offset or a lost token all
// change the text. expected_greedy() computes the same rule from the token list alone, as an
// independent reference for full (unbounded) caches.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/model.h"
#include "lm/cache/rotating_kv_cache.h"
#include "lm/tokenizer/tokenizer.h"

namespace test_support {

inline constexpr int32_t kFakeVocab = 16;
inline constexpr int32_t kFakeBos = 1;
inline constexpr int32_t kFakeEos = 2;

inline int32_t fake_target(int64_t s0, int64_t s1, int64_t position) {
  return static_cast<int32_t>(3 + (3 * s0 + 5 * s1 + position + 1) % 11);
}

inline std::vector<float> fake_logits(int32_t target) {
  std::vector<float> logits(kFakeVocab);
  for (int32_t j = 0; j < kFakeVocab; ++j) {
    const int32_t d = j > target ? j - target : target - j;
    logits[j] = -static_cast<float>(d < kFakeVocab - d ? d : kFakeVocab - d);
  }
  return logits;
}

class FakeModel : public lm::Model {
 public:
  // sliding_window: layer 1 becomes a sliding-window layer with a RotatingKVCache.
  explicit FakeModel(int64_t context_length = 64, std::optional<int64_t> sliding_window = std::nullopt)
      : window_(sliding_window) {
    config_.architecture = "fake";
    config_.name = "fake-toy";
    config_.n_layers = 2;
    config_.dim = 4;
    config_.n_heads = 1;
    config_.n_kv_heads = 1;
    config_.head_dim = 4;
    config_.vocab_size = kFakeVocab;
    config_.context_length = context_length;
    layers_.resize(2);
    for (auto& layer : layers_) {
      layer.head_dim = 4;
      layer.n_heads = 1;
      layer.n_kv_heads = 1;
    }
    layers_[1].sliding_window = sliding_window;
  }

  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }

  lm::CacheList native_make_cache() const override {
    ++native_calls;
    lm::CacheList caches;
    caches.push_back(std::make_shared<lm::FullKVCache>(lm::DType::F32));
    if (window_) {
      caches.push_back(std::make_shared<lm::RotatingKVCache>(*window_, 0, lm::DType::F32));
    } else {
      caches.push_back(std::make_shared<lm::FullKVCache>(lm::DType::F32));
    }
    return caches;
  }

  void forward(const std::vector<int32_t>& tokens, lm::CacheList& caches, std::vector<float>& last_logits,
               std::vector<float>* all_logits) const override {
    if (tokens.empty()) throw base::InvalidArgument("fake forward: no tokens");
    if (caches.size() != 2) throw base::InvalidArgument("fake forward: expected 2 caches");
    forward_chunks.push_back(tokens);
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t first = caches[0]->offset();
    int64_t sums[2] = {0, 0};
    for (int l = 0; l < 2; ++l) {
      if (caches[l]->offset() != first) throw base::InvalidArgument("fake forward: caches disagree on offset");
      const lm::AttentionMask mask = caches[l]->make_mask(n, layers_[l].sliding_window);
      lm::Tensor kv({1, 1, n, 4}, lm::DType::F32);
      for (int64_t t = 0; t < n; ++t) {
        kv.set({0, 0, t, 0}, static_cast<float>(tokens[t]));
        kv.set({0, 0, t, 1}, static_cast<float>(first + t));
        kv.set({0, 0, t, 2}, 1.0f);
      }
      const lm::KeysValues got = caches[l]->update_and_fetch(kv, kv);
      const int64_t rows = got.keys.dim(2);
      // Rows visible to the last query (index n - 1).
      for (int64_t r = 0; r < rows; ++r) {
        bool visible = true;
        if (mask.kind == lm::AttentionMask::Kind::kCausal) visible = r <= rows - 1;
        if (mask.kind == lm::AttentionMask::Kind::kExplicit) visible = mask.explicit_mask.get({0, 0, n - 1, r}) != 0;
        if (visible) sums[l] += static_cast<int64_t>(got.keys.get({0, 0, r, 0}));
      }
    }
    last_logits = fake_logits(fake_target(sums[0], sums[1], first + n - 1));
    if (all_logits) {
      // Only the last row is meaningful for this toy; earlier rows repeat it.
      all_logits->clear();
      for (int64_t t = 0; t < n; ++t) all_logits->insert(all_logits->end(), last_logits.begin(), last_logits.end());
    }
  }

  mutable int native_calls = 0;
  mutable std::vector<std::vector<int32_t>> forward_chunks;

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
  std::optional<int64_t> window_;
};

// Greedy continuation of `tokens` under the toy rule with full caches, computed from the token
// list alone (no caches, no generate loop): the independent reference.
inline std::vector<int32_t> expected_greedy(std::vector<int32_t> tokens, int count) {
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) {
    int64_t s = 0;
    for (int32_t t : tokens) s += t;
    const int32_t next = fake_target(s, s, static_cast<int64_t>(tokens.size()) - 1);
    out.push_back(next);
    tokens.push_back(next);
  }
  return out;
}

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..13 = 'a'..'k', 14 = byte 0xC3, 15 = byte 0xA9 (together
// "é" in UTF-8, to exercise held-back partial characters).
class FakeTokenizer : public lm::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(kFakeBos);
    for (char c : text) {
      if (c >= 'a' && c <= 'k') {
        ids.push_back(3 + (c - 'a'));
      } else if (static_cast<unsigned char>(c) == 0xC3) {
        ids.push_back(14);
      } else if (static_cast<unsigned char>(c) == 0xA9) {
        ids.push_back(15);
      } else {
        ids.push_back(0);
      }
    }
    return ids;
  }
  std::string decode_token(int32_t, int32_t token) const override { return token_text(token); }
  int32_t vocab_size() const override { return kFakeVocab; }
  std::optional<int32_t> bos_id() const override { return kFakeBos; }
  std::optional<int32_t> eos_id() const override { return kFakeEos; }
  std::string token_text(int32_t token) const override {
    if (token >= 3 && token <= 13) return std::string(1, static_cast<char>('a' + (token - 3)));
    if (token == 14) return "\xC3";
    if (token == 15) return "\xA9";
    return "";
  }
};

inline std::string fake_text(const std::vector<int32_t>& tokens) {
  FakeTokenizer tokenizer;
  std::string out;
  for (int32_t t : tokens) out += tokenizer.token_text(t);
  return out;
}

}  // namespace test_support
