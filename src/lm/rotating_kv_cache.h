#pragma once
// lm::RotatingKVCache — for sliding-window layers: keeps the first `keep` tokens and the most
// recent max_size - keep tokens, as mlx_lm's RotatingKVCache does.
#include "lm/cache.h"

namespace lm {

class RotatingKVCache : public KVCache {
 public:
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
  int64_t max_size_;
  int64_t keep_;
  DType kv_dtype_;
  Tensor keys_, values_;
  int64_t offset_ = 0;
  int64_t write_index_ = 0;
};

}  // namespace lm
