#pragma once
// lm::FullKVCache — the host's default cache: stores keys/values in the KV dtype (f16 unless
// chosen otherwise), growing in steps of 256 tokens as mlx_lm's KVCache does.
#include "lm/cache/cache.h"

namespace lm {

class FullKVCache : public KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  explicit FullKVCache(DType kv_dtype = DType::F16);

  KeysValues update_and_fetch(const Tensor& keys, const Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0 && !keys_.defined(); }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "FullKVCache"; }
  std::shared_ptr<KVCache> clone() const override;

  DType kv_dtype() const { return kv_dtype_; }
  // Direct access for the host's attention kernel (reads the stored dtype, no copy):
  // [B, H_kv, capacity, D] buffers; rows [0, offset) are valid.
  const Tensor& key_buffer() const { return keys_; }
  const Tensor& value_buffer() const { return values_; }

 private:
  // Reallocates to offset + ceil(S / 256) * 256 rows (mlx_lm's growth rule).
  void grow_for(const Tensor& keys, const Tensor& values);
  // Views of rows [0, offset) in `dtype` (a converted copy when it is not the storage dtype).
  KeysValues fetch(DType dtype) const;

  DType kv_dtype_;
  Tensor keys_, values_;
  int64_t offset_ = 0;
};

}  // namespace lm
