#pragma once
// turboquant_block (docs/methods/turboquant_block.md): keys and values each rotated by a seeded
// randomized Hadamard transform (per head vector; core/rotation.h, QuaRot arXiv 2404.00456 /
// TurboQuant arXiv 2504.19874), then cut into blocks of 32 rotated coordinates, each block one
// f16 scale and b-bit codes on the Gaussian Lloyd-Max levels (quant/block_lloyd_quant.h).
// Keys and values have their own bit widths (key_bits / value_bits, 0 = bit_width_inlier) and
// block sizes (key_block / value_block, 32 by default), so a byte budget can be split unevenly.
//
// Bytes per token and kv head: ceil(D*kb/8) + 2*ceil(D/key_block) + ceil(Dv*vb/8) +
// 2*ceil(Dv/value_block), i.e. (b + 0.5) bits per element with blocks of 32 — llama.cpp's
// q8_0 / q5_0 / q4_0 size at b = 8 / 5 / 4.
//
// Storage (all counted by nbytes(); grown in 256-token steps, mlx_lm's KVCache rule):
//   key_codes_   U8  [B, H, cap, ceil(D*kb/8)]   dense-packed codes of the rotated keys
//   key_scales_  F16 [B, H, cap, ceil(D/32)]
//   value_codes_ U8  [B, H, cap, ceil(Dv*vb/8)]
//   value_scales_ F16 [B, H, cap, ceil(Dv/32)]
//   key_mean_ / value_mean_  F16 [B, H, S, D] / [B, H, 1, Dv]   only with mean_rows > 0: the
//                            rotated means Pi mu (codes and means live in the rotated basis);
//                            S = 1, or one key mean per segment with key_mean_segment > 0
//   sink_keys_ / sink_values_ F16 [B, H, sink_rows, D / Dv]     only with sink_rows > 0
//
// Sink rows (sink_rows > 0). The first positions (BOS above all) draw a large share of every
// query's attention in small models ("attention sinks", StreamingLLM arXiv 2309.17453), so their
// keys and values are kept exactly, in f16; their code rows are still written (simpler
// addressing, a few rows) and ignored on decode.
//
// Mean smoothing (mean_rows > 0). Keys carry a large per-channel offset that is the same for
// every token (after RoPE it survives in the slowly rotating channels); a block scale must
// cover it, so the informative part gets a coarse step. Subtracting a per-channel mean mu
// before the rotation removes it: for keys q.(k - mu) differs from q.k by the same q.mu for every
// key of a query, and softmax does not see a shift; for values sum_j w_j (v_j - mu) + mu is the
// output since the weights sum to 1. The cache still returns k and v (decoded + mu). mu is
// calibrated once, on rows [1, 1 + mean_rows) of the first call (row 0, the BOS / attention
// sink, is atypical), and stored in f16 (what encoding and decoding both use). A first call of
// a single row leaves mu = 0.
//
// Segment key means (key_mean_segment = L > 0, needs mean_rows > 0). After RoPE the keys' offset
// turns with position, so a mean calibrated on the first rows fits later rows less and less (on
// SmolLM2 a PCA basis calibrated on rows 1..256 keeps ~1 dB of its 4 dB coding gain on rows
// 1536..2047, bench/kv_coding_gain.cpp). Rows are cut into segments: segment 0 = rows [0, 1 + L)
// keeps the calibrated mean; segment j >= 1 = rows [1 + jL, 1 + (j+1)L) is coded around the mean
// of segment j-1's *decoded* keys (rows from 1 on), computed when its first row is stored — so
// it depends only on what the cache holds (trim and from_state stay exact), and decode steps
// can compute it (the previous segment is complete). One f16 row per L rows of capacity.
//
// Every row is encoded on its own, so trim(n) is exact (the kept rows are a fresh cache's) as
// long as the kept rows include the calibration rows; trimming into them keeps mu.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/core/rotation.h"
#include "veloxquant/quant/block_lloyd_quant.h"
#include "veloxquant/registry/method_descriptor.h"
#include "veloxquant/caches/turboquant_block_split_keys.h"

namespace veloxquant {

class TurboQuantBlockCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // The values' rotation is drawn from seed ^ kValueSeedSalt: independent of the keys' one.
  static constexpr uint64_t kValueSeedSalt = 0x9e3779b97f4a7c15ULL;

  struct Settings {
    int head_dim = 128;
    int key_bits = 4, value_bits = 4;  // 1..8
    int64_t seed = 42;
    int mean_rows = 0;                     // 0 = no mean smoothing
    int key_block = 32, value_block = 32;  // 32, 64, 128 or 256
    int sink_rows = 0;                     // first positions kept in f16
    int key_mean_segment = 0;              // rows per key-mean segment (0 = one mean); needs mean_rows
    // Level sets below 7 bits: Lloyd-Max (default) or evenly spaced (quant/block_lloyd_quant.h).
    quant::BlockLloydQuantizer::Levels levels = quant::BlockLloydQuantizer::Levels::kLloyd;
    // Query-aware key split (caches/turboquant_block_split_keys.h): "" = off, else groups
    // "channels:bits,..." replacing key_bits / key_block; needs scale_format "log8".
    std::string key_split{};
    // Block scales of keys and values: "f16" or "log8" (one byte, quant/log8_scale.h; only with
    // key_split: the split path reads them).
    std::string scale_format = "f16";
    // How key_split assigns channels to groups: "product" (sorted by E[q^2] E[(k - mu)^2]) or
    // "objective" (the split's expected score error minimised by swaps, SplitKeyCoder).
    std::string key_split_rank = "product";
    // With mean_rows > 0: whether values are smoothed too (one f16 row per head) or only keys.
    bool value_mean = true;
    // Sink rows: values kept too (else the sink's values are read from their code rows), and
    // the format they are kept in: "f16", or "q8" (rotated, 8-bit codes and an f16 scale per 32:
    // D + D/16 bytes instead of 2D).
    bool sink_values = true;
    std::string sink_format = "f16";
  };
  // Throws QuantizerConfigError naming a bad value. The values' rotation is built for the first
  // values' width when it differs from head_dim.
  explicit TurboQuantBlockCache(const Settings& settings);
  TurboQuantBlockCache(int head_dim, int key_bits, int value_bits, int64_t seed)
      : TurboQuantBlockCache(plain_settings(head_dim, key_bits, value_bits, seed)) {}

  static Settings plain_settings(int head_dim, int key_bits, int value_bits, int64_t seed) {
    Settings s;
    s.head_dim = head_dim;
    s.key_bits = key_bits;
    s.value_bits = value_bits;
    s.seed = seed;
    return s;
  }

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "TurboQuantBlockCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  // Attends over the codes through the shared driver (turboquant_block_rows.h): query rotated
  // once, tiles decoded in the rotated basis once for a whole GQA group, values rotated back
  // once per output row.
  bool supports_fused_attention() const override { return true; }
  // The key split calibrates on the first call's queries (E[q_c^2] per channel of each GQA group).
  bool wants_queries() const override { return split_ != nullptr && !key_labels_.defined(); }
  void observe_queries(const lm::Tensor& queries) override;
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int key_bits() const { return key_bits_; }
  int value_bits() const { return value_bits_; }
  const Settings& settings() const { return settings_; }
  // Resident bytes of one token of one kv head (codes + scales, keys and values).
  int64_t bytes_per_row() const;

  // Read access for the attention row source (turboquant_block_rows.h): rows in the rotated
  // domain, decoded one at a time.
  int64_t batch() const { return batch_; }
  int64_t heads() const { return heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t value_dim() const { return dv_; }
  const quant::BlockLloydQuantizer& key_quantizer() const { return key_quant_; }
  const quant::BlockLloydQuantizer& value_quantizer() const { return value_quant_; }
  const core::Rotation& key_rotation() const { return *key_rotation_; }
  const core::Rotation& value_rotation() const { return *value_rotation_; }
  const uint8_t* key_codes(int64_t b, int64_t h, int64_t row) const;
  const uint16_t* key_scales(int64_t b, int64_t h, int64_t row) const;
  const uint8_t* value_codes(int64_t b, int64_t h, int64_t row) const;
  const uint16_t* value_scales(int64_t b, int64_t h, int64_t row) const;
  // Decoded rows in the rotated domain (keys: D floats, values: Dv floats).
  void decode_rotated_key(int64_t b, int64_t h, int64_t row, float* out) const;
  void decode_rotated_value(int64_t b, int64_t h, int64_t row, float* out) const;
  // Decoded rows in the model's basis (means added back, sink rows exact).
  void decode_key(int64_t b, int64_t h, int64_t row, float* out, float* scratch) const;
  void decode_value(int64_t b, int64_t h, int64_t row, float* out, float* scratch) const;
  // The f16 rotated means (Pi_k mu_k of row `row`'s segment, Pi_v mu_v) of head (b, h); nullptr
  // when not smoothing (or not calibrated).
  const uint16_t* key_mean(int64_t b, int64_t h, int64_t row) const;
  const uint16_t* value_mean(int64_t b, int64_t h) const;
  int64_t sink_rows_held() const { return std::min<int64_t>(offset_, settings_.sink_rows); }
  // The key-mean segment of `row` (0 without segments) and the first row after that segment
  // (INT64_MAX without segments): rows [row, key_segment_end(row)) share one key mean.
  int64_t key_segment_of(int64_t row) const;
  int64_t key_segment_end(int64_t row) const;

  // Key split (nullptr when off) and the permutation of head (b, h) (D channels; see
  // turboquant_block_split_keys.h); valid once calibrated.
  const SplitKeyCoder* split() const { return split_.get(); }
  const int32_t* key_permutation(int64_t b, int64_t h) const { return perms_.data() + (b * heads_ + h) * head_dim_; }
  bool log8_scales() const { return log8_; }
  // One-byte scales (log8): key scales one per group (split), value scales one per block.
  const uint8_t* key_scale_codes(int64_t b, int64_t h, int64_t row) const;
  const uint8_t* value_scale_codes(int64_t b, int64_t h, int64_t row) const;

 private:
  void ensure_capacity(const lm::Tensor& keys, const lm::Tensor& values);
  void allocate_rows(int64_t capacity, int64_t keep);
  void build_value_rotation(int64_t value_dim);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  // mu from rows [1, 1 + mean_rows_) of the first call's f32 rows [B, H, S, D].
  void calibrate_means(const std::vector<float>& k, const std::vector<float>& v, int64_t s);
  // The key split's labels from the first call's keys and the observed queries.
  void calibrate_split(const std::vector<float>& k, int64_t s);
  void rebuild_permutations();
  // Keys into the coded basis: the split's T_h, else Pi_k.
  void key_forward(int64_t b, int64_t h, const float* x, float* y) const;
  void encode_value_row(const float* rotated, int64_t b, int64_t h, int64_t row);
  // Sink rows in their format (sink_format): bytes of one row, store and load (model basis).
  int64_t sink_row_bytes(int64_t dim) const;
  void store_sink(bool key, int64_t b, int64_t h, int64_t row, const float* x);
  void load_sink(bool key, int64_t b, int64_t h, int64_t row, float* out, float* scratch) const;
  // Key-mean rows for `rows` rows (1 without segments).
  int64_t key_segments_for(int64_t rows) const;
  // The mean of segment `segment` >= 1 from the decoded keys of the segment before it.
  void compute_segment_mean(int64_t segment);
  // Encodes rows [t0, t1) of the call (f32 [B, H, s, D]) at cache rows offset_ + t.
  void encode_rows(const std::vector<float>& k, const std::vector<float>& v, int64_t s, int64_t t0, int64_t t1);

  lm::KeysValues fetch(lm::DType dtype) const;

  Settings settings_;
  int head_dim_;
  int key_bits_;
  int value_bits_;
  int64_t seed_;
  quant::BlockLloydQuantizer key_quant_;
  quant::BlockLloydQuantizer value_quant_;
  // Immutable after construction / first store: clones share them.
  std::shared_ptr<const core::Rotation> key_rotation_;
  std::shared_ptr<const core::Rotation> value_rotation_;
  int64_t batch_ = 0, heads_ = 0, dv_ = 0;
  int64_t offset_ = 0;
  int64_t capacity_ = 0;
  lm::Tensor key_codes_, key_scales_, value_codes_, value_scales_;
  lm::Tensor key_mean_, value_mean_;  // F16 [B, H, S, D] / [B, H, 1, Dv]; undefined until calibrated
  // F16 [B, H, sink_rows, D] (sink_format q8: U8 [B, H, sink_rows, sink_row_bytes(D)]);
  // undefined without sinks (sink_values_ also without sink_values).
  lm::Tensor sink_keys_, sink_values_;
  quant::BlockLloydQuantizer sink_quant_{8, 32};  // sink_format q8
  std::shared_ptr<const SplitKeyCoder> split_;
  bool log8_ = false;
  lm::Tensor key_labels_;            // U8 [B, H, 1, D / 4] (split only; undefined until calibrated)
  std::vector<int32_t> perms_;       // [B, H, D], derived from the labels (not state)
  std::vector<double> query_power_;  // sum of q_c^2 per (b, query head, c) of the first observed call
  int64_t query_batch_ = 0, query_heads_ = 0, query_rows_ = 0;
};

std::shared_ptr<lm::KVCache> make_turboquant_block_cache(const KVCacheConfig& config);
// The registry row of "turboquant_block" (caches/turboquant_block_method.cpp).
MethodDescriptor turboquant_block_method();

}  // namespace veloxquant
