#pragma once
// Attention-sink rows kept exactly beside a KIVI-layout cache (caches/kivi_cache.h): the rows the
// quantizer must not see. Sinks carry huge key norms (KVSink, arXiv 2508.04257; KVQuant keeps the
// first token in fp16, arXiv 2401.18079); quantized with their key group they would stretch every
// channel's (min, max) of that group. So when a group is flushed, its sink rows are stored here in
// the input dtype and *neutralized* in the data the quantizer sees — replaced by the nearest
// non-sink row of the same key group — so the group's parameters describe the ordinary rows.
// Reading the cache (fetch, fused attention) replaces each sink row by its exact copy.
//
// Which rows are sinks (per batch element, the same for every head):
//   kFirstPositions  positions 0 .. n-1 (KVQuant's kvquant_n_sink);
//   kTopKeyNorm      the rows with the highest mean key L2 norm over the heads (kivi_sink's
//                    n_sink_tokens). Free slots are filled as rows are flushed — each flush
//                    gives its highest-norm rows (ties to the earlier position) — and a sink is
//                    never displaced, because its group's codes were computed without it.
//
// Storage (counted in nbytes): positions i32 [B, n], key rows [B, H, n, Dk] and value rows
// [B, H, n, Dv] in the input dtype, allocated for all n slots at the first call.
#include <cstdint>
#include <string>
#include <vector>

#include "lm/tensor.h"

namespace veloxquant {

enum class SinkRule { kNone, kFirstPositions, kTopKeyNorm };

const char* sink_rule_name(SinkRule rule);
// Throws base::FormatError naming `who` for an unknown name (meta_state).
SinkRule parse_sink_rule(const std::string& name, const char* who);

class SinkRows {
 public:
  SinkRows() = default;
  SinkRows(SinkRule rule, int slots) : rule_(rule), slots_(slots) {}

  bool enabled() const { return rule_ != SinkRule::kNone && slots_ > 0; }
  SinkRule rule() const { return rule_; }
  int slots() const { return slots_; }
  // Sinks held for batch element b (slots fill per batch element).
  int64_t count(int64_t b) const { return counts_.empty() ? 0 : counts_[static_cast<std::size_t>(b)]; }
  void allocate(int64_t batch, int64_t heads, int64_t key_dim, int64_t value_dim, lm::DType dtype);

  // Picks the sinks among pending rows [first, first + rows) (true positions first_position ..),
  // stores them exactly and neutralizes them in pk / pv ([B, H, pending_rows, D] f32) within
  // their key groups of `group` rows (rows is a multiple of group; first_position too).
  void take(std::vector<float>& pk, std::vector<float>& pv, int64_t pending_rows, int64_t first, int64_t rows,
            int64_t first_position, int64_t group);

  // Ascending sink positions of batch element b (count(b) of them).
  const int32_t* positions(int64_t b) const;
  // Whether `position` is a sink of batch element b.
  bool is_sink(int64_t b, int64_t position) const;
  // Exact rows of slot i, in the stored dtype.
  const std::byte* key_row(int64_t b, int64_t h, int64_t slot) const;
  const std::byte* value_row(int64_t b, int64_t h, int64_t slot) const;
  lm::DType dtype() const { return keys_.dtype(); }

  // Rows [begin, end) of (b, h), decoded into out[(row - begin) * D]: sink rows overwritten.
  void overlay_keys(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  void overlay_values(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;

  // Trim: sinks at positions >= `position` leave the set (their rows go back to the
  // full-precision tail, exactly), freeing their slots.
  void drop_from(int64_t position);

  std::size_t nbytes() const;
  // (positions [B, slots] i32, -1 marks a free slot; keys; values), every slot; from_state takes
  // them back (rule and slots already set by the owner).
  std::vector<lm::Tensor> state() const;
  void from_state(const lm::Tensor& positions, const lm::Tensor& keys, const lm::Tensor& values, const char* who);
  SinkRows deep_copy() const;

 private:
  void overlay(const lm::Tensor& rows, int64_t b, int64_t h, int64_t begin, int64_t end, int64_t dim, float* out) const;

  SinkRule rule_ = SinkRule::kNone;
  int slots_ = 0;
  std::vector<int64_t> counts_;  // per batch element
  lm::Tensor positions_, keys_, values_;
};

}  // namespace veloxquant
