#pragma once
// lm::gguf::GgufFile — a memory-mapped GGUF v2/v3 file: header, metadata, tensor infos.
//
// Layout (little-endian): "GGUF" magic, u32 version, u64 tensor_count, u64 kv_count, then
// kv_count (string key, u32 value type, value) entries, then tensor_count (string name,
// u32 n_dims, n_dims × u64 ne, u32 ggml type, u64 offset) infos, then padding to
// `general.alignment` (default 32), then the tensor data; each offset is relative to the start
// of the data and itself aligned. Everything is validated against the file size when the
// file is opened, so later accesses cannot read past the mapping.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/gguf/gguf_value.h"
#include "lm/weights/ggml_type.h"
#include "lm/weights/mapped_file.h"
#include "lm/weights/weight_matrix.h"

namespace lm::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint64_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the contiguous dimension
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section
  std::size_t nbytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  // Opens and validates `path`. Throws base::FormatError (bad magic, truncated, offsets past
  // the end, bad dims, …) or base::Unsupported (version, unknown tensor type), each naming the
  // file and the problem.
  static std::shared_ptr<const GgufFile> open(const std::string& path);
  // True when the first four bytes of `path` are the GGUF magic (false if unreadable).
  static bool has_magic(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  std::size_t data_offset() const { return data_offset_; }
  std::size_t file_size() const { return file_->size(); }

  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  // Required integer: throws base::FormatError naming the file and key when absent.
  int64_t require_int(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Lookup by name: nullptr when absent.
  const TensorInfo* find_tensor(const std::string& name) const;
  // Throws base::FormatError naming the file and the missing tensor.
  const TensorInfo& tensor(const std::string& name) const;
  // Pointer to the tensor's first byte inside the mapping.
  const std::byte* tensor_data(const TensorInfo& info) const;
  // A 2-D weight view (1-D tensors become one row). Throws base::Unsupported for a type the
  // host cannot compute with, base::FormatError for more than two non-trivial dims.
  WeightMatrix weight(const std::string& name) const;
  // The mapping, to keep alive alongside raw pointers.
  std::shared_ptr<const MappedFile> mapping() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  std::size_t data_offset_ = 0;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;

  friend class GgufParser;
};

}  // namespace lm::gguf
