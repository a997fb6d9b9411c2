#include "lm/gguf/gguf_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "base/error.h"

namespace lm::gguf {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// Reads the header with a bounds-checked cursor: every read names what it was reading and
// where, so a truncated or corrupt file gives an error a user can act on.
class GgufParser {
 public:
  GgufParser(const MappedFile& file, GgufFile& out) : file_(file), out_(out) {}

  void parse() {
    const uint32_t magic = read_u32("magic");
    if (magic != kMagic) {
      char text[5] = {};
      std::memcpy(text, &magic, 4);
      for (char& c : text)
        if (c && (c < 32 || c > 126)) c = '?';
      fail("bad magic '" + std::string(text, 4) + "' (expected 'GGUF'): not a GGUF file");
    }
    out_.version_ = read_u32("version");
    if (out_.version_ == 1) {
      unsupported("GGUF version 1 is not supported (only versions 2 and 3)");
    }
    if (out_.version_ != 2 && out_.version_ != 3) {
      unsupported("unsupported GGUF version " + std::to_string(out_.version_) + " (only 2 and 3)");
    }
    const uint64_t tensor_count = read_u64("tensor count");
    const uint64_t kv_count = read_u64("metadata count");
    // Each kv needs at least 12 bytes and each tensor info at least 24: cheap sanity bounds
    // that stop absurd counts before any allocation.
    if (kv_count > file_.size() / 12) {
      fail("truncated or corrupt: metadata count " + std::to_string(kv_count) + " needs more than the file's " +
           std::to_string(file_.size()) + " bytes");
    }
    if (tensor_count > file_.size() / 24) {
      fail("truncated or corrupt: tensor count " + std::to_string(tensor_count) + " needs more than the file's " +
           std::to_string(file_.size()) + " bytes");
    }

    for (uint64_t i = 0; i < kv_count; ++i) {
      std::string key = read_string("metadata key #" + std::to_string(i));
      const auto type = read_value_type("type of metadata '" + key + "'");
      Value value = read_value(type, key, 0);
      if (!out_.metadata_.emplace(key, std::move(value)).second) fail("duplicate metadata key '" + key + "'");
    }
    if (const Value* align = out_.find("general.alignment")) {
      const int64_t a = align->as_int("general.alignment");
      if (a <= 0 || (a & (a - 1)) != 0)
        fail("general.alignment " + std::to_string(a) + " is not a positive power of two");
      out_.alignment_ = static_cast<uint64_t>(a);
    }

    out_.tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) out_.tensors_.push_back(read_tensor_info(i));

    const uint64_t a = out_.alignment_;
    const uint64_t data_offset = (pos_ + a - 1) / a * a;
    if (data_offset > file_.size() && tensor_count > 0) {
      fail("truncated: tensor data would start at byte " + std::to_string(data_offset) + " but the file has " +
           std::to_string(file_.size()) + " bytes");
    }
    out_.data_offset_ = static_cast<std::size_t>(data_offset);
    const uint64_t data_bytes = file_.size() > data_offset ? file_.size() - data_offset : 0;
    for (std::size_t i = 0; i < out_.tensors_.size(); ++i) {
      const TensorInfo& t = out_.tensors_[i];
      if (t.offset % a != 0) {
        fail("tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not aligned to " + std::to_string(a));
      }
      if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset) {
        fail("tensor '" + t.name + "' (" + std::to_string(t.nbytes) + " bytes at data offset " +
             std::to_string(t.offset) + ") extends past the end of the file (" + std::to_string(data_bytes) +
             " data bytes): truncated or corrupt");
      }
      if (!out_.tensor_index_.emplace(t.name, i).second) fail("duplicate tensor name '" + t.name + "'");
    }
    // No two tensors share bytes: a tensor whose range overlaps another's reads someone else's
    // weights (a file writer never produces that; a crafted or corrupted file does).
    std::vector<std::size_t> by_offset(out_.tensors_.size());
    for (std::size_t i = 0; i < by_offset.size(); ++i) by_offset[i] = i;
    std::sort(by_offset.begin(), by_offset.end(),
              [&](std::size_t x, std::size_t y) { return out_.tensors_[x].offset < out_.tensors_[y].offset; });
    for (std::size_t k = 1; k < by_offset.size(); ++k) {
      const TensorInfo& prev = out_.tensors_[by_offset[k - 1]];
      const TensorInfo& next = out_.tensors_[by_offset[k]];
      if (prev.nbytes > 0 && next.nbytes > 0 && prev.offset + prev.nbytes > next.offset) {
        fail("tensors '" + prev.name + "' (data offset " + std::to_string(prev.offset) + ", " +
             std::to_string(prev.nbytes) + " bytes) and '" + next.name + "' (data offset " +
             std::to_string(next.offset) + ") overlap");
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw base::FormatError("GGUF file '" + file_.path() + "': " + what);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw base::Unsupported("GGUF file '" + file_.path() + "': " + what);
  }

  // `prefix + what` names the field; it is only assembled on failure (string arrays of 50k
  // tokens go through here, so the happy path must not build messages).
  const std::byte* take(uint64_t n, const std::string& what, const char* prefix = "") {
    if (n > file_.size() || pos_ > file_.size() - n) {
      fail("truncated: needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) + " for " + prefix +
           what + ", file has " + std::to_string(file_.size()) + " bytes");
    }
    const std::byte* p = file_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T read_pod(const std::string& what, const char* prefix = "") {
    T v;
    std::memcpy(&v, take(sizeof(T), what, prefix), sizeof(T));
    return v;
  }
  uint32_t read_u32(const std::string& what) { return read_pod<uint32_t>(what); }
  uint64_t read_u64(const std::string& what) { return read_pod<uint64_t>(what); }

  std::string read_string(const std::string& what) {
    const uint64_t len = read_pod<uint64_t>(what, "length of ");
    const std::byte* p = take(len, what);
    return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(len));
  }

  ValueType read_value_type(const std::string& what) {
    const uint32_t t = read_u32(what);
    if (t > static_cast<uint32_t>(ValueType::F64))
      fail("unknown metadata value type " + std::to_string(t) + " for " + what);
    return static_cast<ValueType>(t);
  }

  Value read_value(ValueType type, const std::string& key, int depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::U8:
        v.integer = read_pod<uint8_t>(key);
        break;
      case ValueType::I8:
        // NOLINTNEXTLINE(bugprone-signed-char-misuse): GGUF's I8 is a signed integer; it sign-extends on purpose.
        v.integer = read_pod<int8_t>(key);
        break;
      case ValueType::U16:
        v.integer = read_pod<uint16_t>(key);
        break;
      case ValueType::I16:
        v.integer = read_pod<int16_t>(key);
        break;
      case ValueType::U32:
        v.integer = read_pod<uint32_t>(key);
        break;
      case ValueType::I32:
        v.integer = read_pod<int32_t>(key);
        break;
      case ValueType::U64:
        v.integer = static_cast<int64_t>(read_pod<uint64_t>(key));
        break;
      case ValueType::I64:
        v.integer = read_pod<int64_t>(key);
        break;
      case ValueType::F32:
        v.number = read_pod<float>(key);
        break;
      case ValueType::F64:
        v.number = read_pod<double>(key);
        break;
      case ValueType::BOOL: {
        const uint8_t b = read_pod<uint8_t>(key);
        if (b > 1) fail("metadata '" + key + "' has bool value " + std::to_string(b));
        v.integer = b;
        break;
      }
      case ValueType::STRING:
        v.text = read_string("metadata '" + key + "'");
        break;
      case ValueType::ARRAY: {
        if (depth > 8) fail("metadata '" + key + "' nests arrays too deeply");
        v.array_type = read_value_type("element type of metadata '" + key + "'");
        const uint64_t count = read_u64("length of metadata array '" + key + "'");
        // Every element takes at least one byte: bounds the reservation below.
        if (count > file_.size() - pos_) {
          fail("truncated: metadata array '" + key + "' claims " + std::to_string(count) + " elements at offset " +
               std::to_string(pos_) + ", file has " + std::to_string(file_.size()) + " bytes");
        }
        const auto n = static_cast<std::size_t>(count);
        if (v.array_type == ValueType::STRING) {
          v.strings.reserve(n);
          const std::string label = "an element of metadata array '" + key + "'";
          for (std::size_t i = 0; i < n; ++i) v.strings.push_back(read_string(label));
        } else if (v.array_type == ValueType::ARRAY) {
          v.arrays.reserve(n);
          for (std::size_t i = 0; i < n; ++i) {
            const auto inner = read_value_type("element type in '" + key + "'");
            if (inner != ValueType::ARRAY) fail("nested array '" + key + "' has a non-array element");
            v.arrays.push_back(read_value(ValueType::ARRAY, key, depth + 1));
          }
        } else if (is_float_type(v.array_type)) {
          v.numbers.resize(n);
          for (std::size_t i = 0; i < n; ++i) v.numbers[i] = read_value(v.array_type, key, depth + 1).number;
        } else {
          v.integers.resize(n);
          for (std::size_t i = 0; i < n; ++i) v.integers[i] = read_value(v.array_type, key, depth + 1).integer;
        }
        break;
      }
    }
    return v;
  }

  TensorInfo read_tensor_info(uint64_t index) {
    TensorInfo t;
    t.name = read_string("name of tensor #" + std::to_string(index));
    const uint32_t n_dims = read_u32("dims of tensor '" + t.name + "'");
    if (n_dims == 0 || n_dims > 4)
      fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1..4 allowed)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = read_u64("shape of tensor '" + t.name + "'");
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / numel)) {
        fail("tensor '" + t.name + "' has invalid dimension " + std::to_string(ne) + " at axis " + std::to_string(d));
      }
      numel *= static_cast<int64_t>(ne);
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type = read_u32("type of tensor '" + t.name + "'");
    const GgmlTypeInfo info = ggml_type_info(type);
    if (info.type_size == 0) {
      unsupported("tensor '" + t.name + "' has unknown tensor type " + std::to_string(type));
    }
    t.type = static_cast<GgmlType>(type);
    if (t.ne[0] % info.block_size != 0) {
      fail("tensor '" + t.name + "' row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
           std::string(info.name) + " block size " + std::to_string(info.block_size));
    }
    const uint64_t blocks = static_cast<uint64_t>(numel / info.block_size);
    if (blocks > file_.size() / info.type_size + 1) {
      fail("tensor '" + t.name + "' with " + std::to_string(numel) + " elements cannot fit in the file");
    }
    t.nbytes = static_cast<std::size_t>(blocks * info.type_size);
    t.offset = read_u64("offset of tensor '" + t.name + "'");
    return t;
  }

  const MappedFile& file_;
  GgufFile& out_;
  uint64_t pos_ = 0;
};

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  auto file = std::make_shared<GgufFile>();
  file->file_ = MappedFile::open(path);
  GgufParser(*file->file_, *file).parse();
  return file;
}

bool GgufFile::has_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  uint32_t magic = 0;
  const bool ok = std::fread(&magic, 4, 1, f) == 1;
  std::fclose(f);
  return ok && magic == kMagic;
}

const Value* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_int(key);
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_float(key);
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_string(key);
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_bool(key);
}

int64_t GgufFile::require_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw base::FormatError("GGUF file '" + path() + "' lacks required metadata '" + key + "'");
  return v->as_int(key);
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw base::FormatError("GGUF file '" + path() + "' has no tensor '" + name + "'");
  return *t;
}

const std::byte* GgufFile::tensor_data(const TensorInfo& info) const {
  return file_->data() + data_offset_ + info.offset;
}

WeightMatrix GgufFile::weight(const std::string& name) const {
  const TensorInfo& t = tensor(name);
  for (std::size_t d = 2; d < t.ne.size(); ++d) {
    if (t.ne[d] != 1) {
      throw base::FormatError("GGUF file '" + path() + "': tensor '" + name + "' has " + std::to_string(t.ne.size()) +
                              " non-trivial dimensions, expected a matrix");
    }
  }
  const int64_t cols = t.ne[0];
  const int64_t rows = t.ne.size() > 1 ? t.ne[1] : 1;
  return WeightMatrix::view(t.type, rows, cols, tensor_data(t), file_, name);
}

}  // namespace lm::gguf
