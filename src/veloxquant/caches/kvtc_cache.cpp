#include "veloxquant/caches/kvtc_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "veloxquant/allocators/bit_allocation.h"
#include "veloxquant/attention/bit_field_rows.h"
#include "veloxquant/caches/latent_cache.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/rans_coder.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "KvtcCache";

void check_options(const KvtcOptions& o) {
  if (o.kvtc_bit_budget < 1 || o.kvtc_bit_budget > 65536) {
    throw QuantizerConfigError("kvtc_bit_budget must lie in [1, 65536], got " + std::to_string(o.kvtc_bit_budget));
  }
  if (!(o.kvtc_beta > 1.0) || !std::isfinite(o.kvtc_beta)) {
    throw QuantizerConfigError("kvtc_beta must be a finite number > 1, got " + std::to_string(o.kvtc_beta));
  }
  parse_kvtc_bit_choices(o.kvtc_bit_choices);
}

// Fixed-width codes of one row, component after component, LSB first.
class KvtcCodec final : public LatentCodec {
 public:
  explicit KvtcCodec(const KvtcOptions& o) : o_(o), choices_(parse_kvtc_bit_choices(o.kvtc_bit_choices)) {}
  std::unique_ptr<LatentCodec> clone() const override {
    auto c = std::make_unique<KvtcCodec>(*this);
    c->bits_ = bits_.defined() ? bits_.clone() : lm::Tensor();
    c->range_ = range_.defined() ? range_.clone() : lm::Tensor();
    return c;
  }
  void allocate(int64_t batch, int64_t groups, int64_t width) override {
    groups_ = groups;
    bits_ = lm::Tensor({batch, groups, 1, width}, lm::DType::I32);
    range_ = lm::Tensor({batch, groups, 2, width}, lm::DType::F32);
    ranks_.assign(static_cast<std::size_t>(batch * groups), 0);
    layouts_.assign(static_cast<std::size_t>(batch * groups), {});
  }
  int64_t choose_rank(int64_t b, int64_t g, const std::vector<double>& variance) override {
    const std::vector<int> bits = kvtc_allocate_bits(variance, choices_, o_.kvtc_bit_budget, o_.kvtc_beta);
    int32_t* dst = row_ptr<int32_t>(bits_, b, g, 0);
    int64_t rank = 1;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      dst[i] = bits[i];
      if (bits[i] > 0) rank = static_cast<int64_t>(i) + 1;
    }
    ranks_[at(b, g)] = rank;
    layouts_[at(b, g)] = attention::kernels::BitFieldLayout::from_widths(dst, rank);
    return rank;
  }
  void fit(int64_t b, int64_t g, const float* latents, int64_t n, int64_t rank) override {
    const int32_t* bits = row_ptr<int32_t>(bits_, b, g, 0);
    float* step = row_ptr<float>(range_, b, g, 0);
    float* lo = row_ptr<float>(range_, b, g, 1);
    for (int64_t i = 0; i < rank; ++i) {
      float mn = 0.0f, mx = 0.0f;
      for (int64_t t = 0; t < n; ++t) {
        const float z = latents[t * rank + i];
        mn = t == 0 ? z : std::min(mn, z);
        mx = t == 0 ? z : std::max(mx, z);
      }
      // The fitting rows' range widened by an eighth of it on each side: later tokens (the
      // prompt's range is all the fit sees) land outside it often enough to cost more clipped
      // than the coarser step does.
      const int levels = (1 << bits[i]) - 1;
      const float margin = 0.125f * (mx - mn);
      const float low = mn - margin, high = mx + margin;
      lo[i] = bits[i] > 0 ? low : 0.0f;
      step[i] = bits[i] > 0 ? std::max((high - low) / static_cast<float>(levels), 1e-8f) : 0.0f;
    }
  }
  int64_t row_bytes(int64_t b, int64_t g) const override {
    const int32_t* bits = row_ptr<int32_t>(bits_, b, g, 0);
    int64_t total = 0;
    for (int64_t i = 0; i < ranks_[at(b, g)]; ++i) total += bits[i];
    return std::max<int64_t>(1, (total + 7) / 8);
  }
  void encode(int64_t b, int64_t g, const float* latent, uint8_t* row) const override {
    const int32_t* bits = row_ptr<int32_t>(bits_, b, g, 0);
    const float* step = row_ptr<float>(range_, b, g, 0);
    const float* lo = row_ptr<float>(range_, b, g, 1);
    const int64_t bytes = row_bytes(b, g);
    // Codes appended LSB first to a 64-bit window, whole bytes written as they fill (one
    // store per byte instead of a read-modify-write per bit: 3% of a kvtc prefill).
    uint64_t window = 0;
    int filled = 0;
    int64_t out = 0;
    for (int64_t i = 0; i < ranks_[at(b, g)]; ++i) {
      if (bits[i] == 0) continue;
      const float levels = static_cast<float>((1 << bits[i]) - 1);
      const float q = std::nearbyint(std::clamp((latent[i] - lo[i]) / step[i], 0.0f, levels));
      window |= static_cast<uint64_t>(static_cast<uint32_t>(q)) << filled;
      filled += bits[i];
      for (; filled >= 8; filled -= 8, window >>= 8) row[out++] = static_cast<uint8_t>(window);
    }
    if (filled > 0) row[out++] = static_cast<uint8_t>(window);
    if (out < bytes) std::memset(row + out, 0, static_cast<std::size_t>(bytes - out));
  }
  // Codes of a row (one byte each, components < rank; 0 for 0-bit components).
  void unpack(int64_t b, int64_t g, const uint8_t* row, uint8_t* codes) const {
    const int32_t* bits = row_ptr<int32_t>(bits_, b, g, 0);
    int64_t bit = 0;
    for (int64_t i = 0; i < ranks_[at(b, g)]; ++i) {
      // A code spans at most two bytes (b <= 8): read 16 bits where they exist.
      uint32_t word = row[bit >> 3];
      const int shift = static_cast<int>(bit & 7);
      if (shift + bits[i] > 8) word |= static_cast<uint32_t>(row[(bit >> 3) + 1]) << 8;
      codes[i] = static_cast<uint8_t>((word >> shift) & ((1u << bits[i]) - 1u));
      bit += bits[i];
    }
  }
  void decode_rows(int64_t b, int64_t g, const uint8_t* first, int64_t stride, int64_t n, float* out) const override {
    // A 0-bit component has step 0 and lo 0: its latent is the mean (0), already in mu. The
    // layout (each component's first byte, shift and mask) was built with the widths.
    attention::kernels::decode_bit_field_rows(first, stride, n, layouts_[at(b, g)], row_ptr<float>(range_, b, g, 0),
                                              row_ptr<float>(range_, b, g, 1), out);
  }
  bool decode_pair_tile(int64_t b, int64_t g, const uint8_t* first, int64_t stride, int64_t n,
                        float* tile) const override {
    attention::kernels::decode_bit_field_pair_tile(
        first, stride, n, layouts_[at(b, g)], row_ptr<float>(range_, b, g, 0), row_ptr<float>(range_, b, g, 1), tile);
    return true;
  }
  bool integer_keys(int64_t b, int64_t g, IntegerKeys* out) const override {
    out->layout = &layouts_[at(b, g)];
    out->step = row_ptr<float>(range_, b, g, 0);
    out->lo = row_ptr<float>(range_, b, g, 1);
    return o_.kvtc_integer_keys;
  }
  bool code_values(int64_t b, int64_t g, IntegerKeys* out) const override {
    out->layout = &layouts_[at(b, g)];
    out->step = row_ptr<float>(range_, b, g, 0);
    out->lo = row_ptr<float>(range_, b, g, 1);
    return true;
  }
  std::vector<lm::Tensor> state() const override { return {bits_, range_}; }
  void restore(const std::vector<lm::Tensor>& t) override {
    if (t.size() != 2 || t[0].shape() != bits_.shape() || t[1].shape() != range_.shape() ||
        t[0].dtype() != lm::DType::I32 || t[1].dtype() != lm::DType::F32) {
      throw base::FormatError("KvtcCache::from_state: bad codec tensors");
    }
    bits_ = t[0].clone();
    range_ = t[1].clone();
    for (int64_t b = 0; b < bits_.dim(0); ++b) {
      for (int64_t g = 0; g < groups_; ++g) {
        const int32_t* bits = row_ptr<int32_t>(bits_, b, g, 0);
        int64_t rank = 1;
        for (int64_t i = 0; i < bits_.dim(3); ++i) {
          if (bits[i] < 0 || bits[i] > 8)
            throw base::FormatError("KvtcCache::from_state: bad width " + std::to_string(bits[i]));
          if (bits[i] > 0) rank = i + 1;
        }
        ranks_[at(b, g)] = rank;
        layouts_[at(b, g)] = attention::kernels::BitFieldLayout::from_widths(bits, rank);
      }
    }
  }
  std::size_t nbytes() const override { return bits_.storage_bytes() + range_.storage_bytes(); }
  std::vector<std::string> meta() const override {
    return {std::to_string(o_.kvtc_bit_budget), o_.kvtc_bit_choices, blocks_tail::exact_double(o_.kvtc_beta),
            o_.kvtc_integer_keys ? "1" : "0"};
  }
  std::size_t meta_size() const override { return 4; }
  // A prefill chunk over the rebuilt rows: at SmolLM2's r up to 192 every query head reading the
  // whole latent costs up to 3x the plain rows' arithmetic (LatentCache::rebuild_rows_for).
  bool prefill_over_rebuilt_rows() const override { return true; }
  // Four rows per dimension: with fewer, the last principal directions of the fitting rows are
  // noise and their ranges far too narrow for the tokens that follow (the ranges are frozen).
  int64_t min_fit_rows(int64_t width) const override { return std::max<int64_t>(64, 4 * width); }
  void set_meta(const std::vector<std::string>& m) override {
    const char* who = "KvtcCache::from_state";
    KvtcOptions o;
    o.kvtc_bit_budget = static_cast<int>(cache_rows::parse_meta_int(m[0], who, "bit budget"));
    o.kvtc_bit_choices = m[1];
    o.kvtc_beta = blocks_tail::parse_meta_double(m[2], who, "beta");
    o.kvtc_integer_keys = cache_rows::parse_meta_int(m[3], who, "integer keys") != 0;
    try {
      check_options(o);
    } catch (const QuantizerConfigError& e) {
      throw base::FormatError(std::string(who) + ": " + e.what());
    }
    o_ = o;
    choices_ = parse_kvtc_bit_choices(o.kvtc_bit_choices);
  }
  int64_t rank(int64_t b, int64_t g) const { return ranks_[at(b, g)]; }
  const int32_t* bits(int64_t b, int64_t g) const { return row_ptr<int32_t>(bits_, b, g, 0); }

 private:
  std::size_t at(int64_t b, int64_t g) const { return static_cast<std::size_t>(b * groups_ + g); }

  KvtcOptions o_;
  std::vector<int> choices_;
  int64_t groups_ = 0;
  lm::Tensor bits_, range_;
  std::vector<int64_t> ranks_;
  // Derived from bits_ and ranks_ (like them, not counted by nbytes: rebuilt on restore).
  std::vector<attention::kernels::BitFieldLayout> layouts_;
};

const KvtcOptions& checked(const KvtcOptions& o) {
  check_options(o);
  return o;
}

std::size_t coded_side_bytes(const LatentSide& side, int64_t batch, int64_t groups, int64_t rows) {
  const auto* codec = dynamic_cast<const KvtcCodec*>(side.codec.get());
  if (!codec || rows == 0) return 0;
  std::size_t total = 0;
  std::vector<uint8_t> codes(4096), column(static_cast<std::size_t>(rows)), out;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r = codec->rank(b, g);
      const int32_t* bits = codec->bits(b, g);
      std::vector<std::vector<uint8_t>> columns(static_cast<std::size_t>(r),
                                                std::vector<uint8_t>(static_cast<std::size_t>(rows)));
      for (int64_t t = 0; t < rows; ++t) {
        codec->unpack(b, g, side.code_row(b, g, t), codes.data());
        for (int64_t i = 0; i < r; ++i)
          columns[static_cast<std::size_t>(i)][static_cast<std::size_t>(t)] = codes[static_cast<std::size_t>(i)];
      }
      for (int64_t i = 0; i < r; ++i) {
        if (bits[i] == 0) continue;
        const int alphabet = 1 << bits[i];
        std::vector<uint32_t> counts(static_cast<std::size_t>(alphabet), 0);
        for (uint8_t c : columns[static_cast<std::size_t>(i)]) ++counts[c];
        const std::vector<uint16_t> freqs = core::normalized_frequencies(counts.data(), alphabet);
        out.clear();
        total += core::rans_encode(columns[static_cast<std::size_t>(i)].data(), static_cast<std::size_t>(rows),
                                   freqs.data(), alphabet, out);
        // The table: a 16-bit frequency per symbol of the alphabet, or (symbol, frequency) pairs of
        // the used symbols when fewer bytes.
        std::size_t used = 0;
        for (uint16_t f : freqs) used += f > 0 ? 1 : 0;
        total += std::min<std::size_t>(3 * used, 2 * static_cast<std::size_t>(alphabet));
      }
    }
  }
  return total;
}

[[noreturn]] void throw_bad_bit_choices(const std::string& text, const std::string& item) {
  throw QuantizerConfigError("kvtc_bit_choices must be ascending distinct comma-separated widths in [0, 8], got '" +
                             text + "' (bad entry '" + item + "')");
}
}  // namespace

std::vector<int> parse_kvtc_bit_choices(const std::string& text) {
  std::vector<int> widths;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    std::size_t used = 0;
    int bits = -1;
    try {
      bits = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || bits < 0 || bits > 8 || (!widths.empty() && bits <= widths.back())) {
      throw_bad_bit_choices(text, item);
    }
    widths.push_back(bits);
  }
  if (widths.empty()) throw QuantizerConfigError("kvtc_bit_choices must name at least one width, got '" + text + "'");
  return widths;
}

std::vector<int> kvtc_allocate_bits(const std::vector<double>& variance, const std::vector<int>& choices, int budget,
                                    double beta) {
  std::vector<allocators::AllocationItem> items(variance.size());
  for (std::size_t i = 0; i < variance.size(); ++i) {
    items[i].name = "component " + std::to_string(i);
    for (int b : choices) {
      // D(v, b) = v beta^(-b): each bit divides the component's error by beta (3.5 rather than the
      // ideal 4 of a uniform quantizer at high rate).
      items[i].choices.push_back({b, b, std::max(variance[i], 0.0) * std::pow(beta, -static_cast<double>(b))});
    }
  }
  const allocators::Allocation a = allocators::solve_bit_allocation(items, budget);
  std::vector<int> bits(variance.size());
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = choices[a.choice[i]];
  return bits;
}

std::unique_ptr<LatentCodec> make_kvtc_codec(const KvtcOptions& options) {
  return std::make_unique<KvtcCodec>(checked(options));
}

std::size_t kvtc_entropy_coded_bytes(const lm::KVCache& cache) {
  const auto* latent = dynamic_cast<const LatentCache*>(&cache);
  if (!latent || cache.type_name() != kTypeName) {
    throw base::InvalidArgument("kvtc_entropy_coded_bytes: not a kvtc cache (" + cache.type_name() + ")");
  }
  if (!latent->fitted()) return 0;
  const LatentSide& k = latent->keys_side();
  const int64_t batch = k.basis.dim(0), groups = k.basis.dim(1);
  return coded_side_bytes(k, batch, groups, cache.offset()) +
         coded_side_bytes(latent->values_side(), batch, groups, cache.offset());
}

void validate_kvtc_options(const KVCacheConfig& config) { check_options(config.options<KvtcOptions>()); }

std::shared_ptr<lm::KVCache> make_kvtc_cache(const KvtcOptions& o) {
  check_options(o);
  // One head group: the PCA decorrelates across the layer's kv heads too (the paper
  // concatenates heads), and the bit budget is per token of the layer.
  return std::make_shared<LatentCache>(kTypeName, 1, make_kvtc_codec(o), make_kvtc_codec(o));
}

std::shared_ptr<lm::KVCache> make_kvtc_cache(const KVCacheConfig& config) {
  validate_kvtc_options(config);
  return make_kvtc_cache(config.options<KvtcOptions>());
}

MethodDescriptor kvtc_method() {
  MethodDescriptor m;
  m.name = "kvtc";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Transform coding: a PCA over the layer's kv heads fitted on the prompt, DP-optimal widths per component "
      "(0 drops it) within kvtc_bit_budget bits per token, uniform codes; attention in the PCA domain";
  m.paper = "KV Cache Transform Coding for Compact Storage in LLM Inference (NVIDIA, ICLR 2026, arXiv 2511.01815)";
  m.deviations =
      "The PCA is fitted on the cache's first 64+ rows (the prompt), per batch, instead of on calibration "
      "data; keys keep their RoPE; no exact sink / window tokens; per-component ranges from the fitting "
      "rows. Resident codes are fixed width; the order-0 rANS coder (not Huffman) is applied to measure "
      "the coded size (kvtc_entropy_coded_bytes), not kept resident.";
  m.docs = "docs/methods/kvtc.md";
  m.fields = {
      option_field("kvtc_bit_budget", &KvtcOptions::kvtc_bit_budget,
                   "Bits per token of a layer, K and V each (all kv heads together)", 1, 65536),
      option_field("kvtc_bit_choices", &KvtcOptions::kvtc_bit_choices,
                   "Widths a principal component may get, ascending, e.g. 0,1,2,3,4,6,8 (0 drops it)"),
      option_field("kvtc_beta", &KvtcOptions::kvtc_beta,
                   "Distortion model D(v, b) = v * beta^(-b) of the bit allocation, > 1"),
      option_field("kvtc_integer_keys", &KvtcOptions::kvtc_integer_keys,
                   "Score decode-step keys from their codes in 16-bit integers: faster decode, not the exact "
                   "f32 latents' numbers (KL 1.044 -> 1.101 on one tinyshakespeare chunk)"),
  };
  m.validate = validate_kvtc_options;
  m.make_serving = [](const KVCacheConfig& c) { return make_kvtc_cache(c); };
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return make_kvtc_cache(KvtcOptions{}); };
  return m;
}

}  // namespace veloxquant
