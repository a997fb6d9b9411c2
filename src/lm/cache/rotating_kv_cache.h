#pragma once
// lm::RotatingKVCache — for sliding-window layers: keeps the first `keep` tokens and the most
// recent max_size - keep tokens, as mlx_lm's RotatingKVCache does.
#include "lm/cache/cache.h"

namespace lm {

class RotatingKVCache : public KVCache {
 public:
  // Rows added per growth before the ring is full (mlx_lm's step).
  static constexpr int64_t kGrowthStep = 256;
  RotatingKVCache(int64_t max_size, int64_t keep = 0, DType kv_dtype = DType::F16);

  KeysValues update_and_fetch(const Tensor& keys, const Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override;
  std::size_t nbytes() const override;
  bool is_trimmable() const override;  // only while nothing has been overwritten
  int64_t trim(int64_t n) override;
  AttentionMask make_mask(int64_t n_queries, std::optional<int64_t> window) const override;
  std::vector<Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "RotatingKVCache"; }
  std::shared_ptr<KVCache> clone() const override;

  int64_t max_size() const { return max_size_; }
  int64_t keep() const { return keep_; }

 private:
  KeysValues update_in_place(const Tensor& keys, const Tensor& values);  // S == 1
  KeysValues update_concat(const Tensor& keys, const Tensor& values);    // S > 1
  // Rows [0, rows) of the buffers in `dtype` (views when it is the storage dtype).
  KeysValues fetch(int64_t rows, DType dtype) const;
  // The buffer in temporal order (kept rows, then oldest to newest), unused rows cut off.
  Tensor temporal_order(const Tensor& v) const;
  // Drops the trim_size oldest rows after the kept ones, appending `append` when given.
  Tensor drop_oldest(int64_t trim_size, const Tensor& v, const Tensor* append) const;

  int64_t max_size_;
  int64_t keep_;
  DType kv_dtype_;
  Tensor keys_, values_;
  int64_t offset_ = 0;
  int64_t write_index_ = 0;
};

}  // namespace lm
