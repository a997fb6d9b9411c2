#pragma once
// A tiny GGUF writer for tests: builds files byte by byte from the specification (header,
// typed metadata, tensor infos, alignment padding, data) so the reader can be fed both valid
// files with every value type and precisely broken ones. Independent of lm's reader.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace gguf_test {

class Writer {
 public:
  explicit Writer(uint32_t version = 3, uint64_t alignment = 32) : version_(version), alignment_(alignment) {}

  // Metadata: raw encoders for each GGUF value type (type ids from the spec).
  void kv_u8(const std::string& k, uint8_t v) { kv(k, 0, pod(v)); }
  void kv_i8(const std::string& k, int8_t v) { kv(k, 1, pod(v)); }
  void kv_u16(const std::string& k, uint16_t v) { kv(k, 2, pod(v)); }
  void kv_i16(const std::string& k, int16_t v) { kv(k, 3, pod(v)); }
  void kv_u32(const std::string& k, uint32_t v) { kv(k, 4, pod(v)); }
  void kv_i32(const std::string& k, int32_t v) { kv(k, 5, pod(v)); }
  void kv_f32(const std::string& k, float v) { kv(k, 6, pod(v)); }
  void kv_bool(const std::string& k, bool v) { kv(k, 7, pod(static_cast<uint8_t>(v))); }
  void kv_str(const std::string& k, const std::string& v) { kv(k, 8, str(v)); }
  void kv_u64(const std::string& k, uint64_t v) { kv(k, 10, pod(v)); }
  void kv_i64(const std::string& k, int64_t v) { kv(k, 11, pod(v)); }
  void kv_f64(const std::string& k, double v) { kv(k, 12, pod(v)); }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    std::string body = pod(uint32_t{8}) + pod(uint64_t{v.size()});
    for (const auto& s : v) body += str(s);
    kv(k, 9, body);
  }
  void kv_f32_array(const std::string& k, const std::vector<float>& v) {
    std::string body = pod(uint32_t{6}) + pod(uint64_t{v.size()});
    for (float f : v) body += pod(f);
    kv(k, 9, body);
  }
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    std::string body = pod(uint32_t{5}) + pod(uint64_t{v.size()});
    for (int32_t x : v) body += pod(x);
    kv(k, 9, body);
  }
  // An array of two u8 arrays: exercises nesting.
  void kv_nested(const std::string& k) {
    std::string inner = pod(uint32_t{0}) + pod(uint64_t{2}) + pod(uint8_t{7}) + pod(uint8_t{9});
    std::string body = pod(uint32_t{9}) + pod(uint64_t{2}) + pod(uint32_t{9}) + inner + pod(uint32_t{9}) + inner;
    kv(k, 9, body);
  }
  void kv_raw(const std::string& k, uint32_t type, const std::string& bytes) { kv(k, type, bytes); }

  // Tensors: data appended in order, each at the next aligned offset, unless an explicit
  // offset is forced (to write broken files).
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, const std::string& data,
              int64_t forced_offset = -1) {
    Tensor t{name, std::move(ne), type, 0, data};
    while (data_.size() % alignment_) data_.push_back('\0');
    t.offset = forced_offset >= 0 ? static_cast<uint64_t>(forced_offset) : data_.size();
    data_ += data;
    tensors_.push_back(std::move(t));
  }
  // A tensor declared at data offset `offset` with no bytes of its own: files whose tensors
  // share (overlap) data ranges.
  void tensor_at(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    tensors_.push_back(Tensor{name, std::move(ne), type, offset, {}});
  }
  void tensor_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& values) {
    std::string bytes(values.size() * 4, '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    tensor(name, std::move(ne), 0, bytes);
  }

  std::string bytes() const {
    std::string out =
        pod(uint32_t{0x46554747}) + pod(version_) + pod(uint64_t{tensors_.size()}) + pod(uint64_t{n_kv_}) + kvs_;
    for (const Tensor& t : tensors_) {
      out += str(t.name) + pod(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) out += pod(d);
      out += pod(t.type) + pod(t.offset);
    }
    while (out.size() % alignment_) out.push_back('\0');
    return out + data_;
  }
  void write(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    const std::string b = bytes();
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
  }

  template <class T>
  static std::string pod(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  static std::string str(const std::string& s) { return pod(uint64_t{s.size()}) + s; }

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
    std::string data;
  };
  void kv(const std::string& k, uint32_t type, const std::string& body) {
    kvs_ += str(k) + pod(type) + body;
    ++n_kv_;
  }
  uint32_t version_;
  uint64_t alignment_;
  std::string kvs_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
  std::string data_;
};

}  // namespace gguf_test
