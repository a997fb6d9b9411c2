#include "lm/cache/prompt_cache_file.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "base/error.h"
#include "lm/cache/block_kv_cache.h"
#include "lm/cache/conv_state_cache.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/cache/rotating_kv_cache.h"

namespace lm {

static_assert(std::endian::native == std::endian::little, "prompt-cache files are written little-endian");

namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
constexpr int kMaxDims = 8;

void fnv1a(uint64_t& hash, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= kFnvPrime;
  }
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, CacheFactory> factories;
  Registry() {
    factories["FullKVCache"] = [] { return std::make_shared<FullKVCache>(); };
    // The block type comes from meta_state() in from_state().
    factories["BlockKVCache"] = [] { return std::make_shared<BlockKVCache>(KVCacheType::Q8_0); };
    // Size, keep and dtype come from meta_state() in from_state().
    factories["RotatingKVCache"] = [] { return std::make_shared<RotatingKVCache>(1); };
    // Channels, kernel size and offset come from meta_state() in from_state().
    factories["ConvStateCache"] = [] { return std::make_shared<ConvStateCache>(1, 2); };
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
    if (!out_) throw base::FormatError("cannot open '" + path + "' for writing");
  }
  void bytes(const void* data, std::size_t size) {
    fnv1a(hash_, data, size);
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out_) throw base::FormatError("write to '" + path_ + "' failed (disk full?)");
  }
  template <class T>
  void pod(T value) {
    bytes(&value, sizeof value);
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void finish() {
    const uint64_t checksum = hash_;
    out_.write(reinterpret_cast<const char*>(&checksum), sizeof checksum);
    out_.close();
    if (!out_) throw base::FormatError("closing '" + path_ + "' failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
  uint64_t hash_ = kFnvOffset;
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec) || !in_) {
      throw base::FormatError("prompt cache file '" + path + "' does not exist or cannot be read");
    }
    size_ = std::filesystem::file_size(path, ec);
    if (ec) throw base::FormatError("cannot stat prompt cache file '" + path + "'");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw base::FormatError("prompt cache file '" + path_ + "' is corrupt: " + what + " (at byte " +
                            std::to_string(position_) + " of " + std::to_string(size_) + ")");
  }
  // Bytes left before the trailing checksum.
  uint64_t remaining() const { return size_ - sizeof(uint64_t) > position_ ? size_ - sizeof(uint64_t) - position_ : 0; }
  void bytes(void* data, std::size_t size, const char* what) {
    if (size > remaining()) fail(std::string("truncated while reading ") + what);
    in_.read(static_cast<char*>(data), static_cast<std::streamsize>(size));
    if (!in_) fail(std::string("read error in ") + what);
    fnv1a(hash_, data, size);
    position_ += size;
  }
  template <class T>
  T pod(const char* what) {
    T value;
    bytes(&value, sizeof value, what);
    return value;
  }
  std::string str(const char* what) {
    const auto n = pod<uint32_t>(what);
    if (n > remaining()) fail(std::string(what) + " length " + std::to_string(n) + " exceeds the file");
    std::string s(n, '\0');
    bytes(s.data(), n, what);
    return s;
  }
  // Checks that exactly the checksum is left and that it matches.
  void finish() {
    if (position_ + sizeof(uint64_t) != size_) {
      fail(std::to_string(size_ - position_ - sizeof(uint64_t)) + " unexpected bytes before the checksum");
    }
    const uint64_t computed = hash_;
    uint64_t stored = 0;
    in_.read(reinterpret_cast<char*>(&stored), sizeof stored);
    if (!in_) fail("missing checksum");
    if (stored != computed) fail("checksum mismatch");
  }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  uint64_t position_ = 0;
  uint64_t hash_ = kFnvOffset;
};

void write_tensor(Writer& w, const Tensor& t) {
  const Tensor c = t.contiguous();
  w.pod<uint8_t>(static_cast<uint8_t>(c.dtype()));
  w.pod<uint8_t>(static_cast<uint8_t>(c.ndim()));
  w.pod<uint16_t>(0);
  for (int64_t extent : c.shape()) w.pod<int64_t>(extent);
  w.pod<uint64_t>(c.nbytes());
  w.bytes(c.raw_data(), c.nbytes());
}

Tensor read_tensor(Reader& r) {
  const auto dtype_code = r.pod<uint8_t>("tensor dtype");
  if (dtype_code > static_cast<uint8_t>(DType::U32)) r.fail("unknown tensor dtype code " + std::to_string(dtype_code));
  const auto dtype = static_cast<DType>(dtype_code);
  const auto ndim = r.pod<uint8_t>("tensor rank");
  if (ndim > kMaxDims) r.fail("tensor rank " + std::to_string(ndim) + " above " + std::to_string(kMaxDims));
  r.pod<uint16_t>("tensor reserved field");
  Shape shape(ndim);
  uint64_t elements = 1;
  for (auto& extent : shape) {
    extent = r.pod<int64_t>("tensor shape");
    if (extent < 0 || static_cast<uint64_t>(extent) > r.size()) r.fail("tensor extent " + std::to_string(extent));
    elements *= static_cast<uint64_t>(extent);
    if (elements > r.size()) r.fail("tensor larger than the file");
  }
  const auto byte_count = r.pod<uint64_t>("tensor byte count");
  if (byte_count != elements * dtype_size(dtype)) {
    r.fail("tensor byte count " + std::to_string(byte_count) + " does not match its shape (" +
           std::to_string(elements * dtype_size(dtype)) + ")");
  }
  if (byte_count > r.remaining()) r.fail("truncated tensor data");
  Tensor t(shape, dtype);
  r.bytes(t.raw_data(), byte_count, "tensor data");
  return t;
}

uint32_t read_count(Reader& r, const char* what, uint64_t min_bytes_each) {
  const auto n = r.pod<uint32_t>(what);
  if (min_bytes_each > 0 && static_cast<uint64_t>(n) * min_bytes_each > r.remaining()) {
    r.fail(std::string(what) + " " + std::to_string(n) + " cannot fit in the file");
  }
  return n;
}

}  // namespace

void register_cache_type(const std::string& type_name, CacheFactory factory) {
  if (type_name.empty() || !factory) throw base::InvalidArgument("register_cache_type: empty name or factory");
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[type_name] = std::move(factory);
}

std::vector<std::string> registered_cache_types() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

std::shared_ptr<KVCache> make_cache_of_type(const std::string& type_name) {
  CacheFactory factory;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.factories.find(type_name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& name : registered_cache_types()) known += (known.empty() ? "" : ", ") + name;
    throw base::Unsupported("unknown cache type '" + type_name + "' (registered: " + known + ")");
  }
  return factory();
}

void save_prompt_cache(const std::string& path, const PromptCache& cache,
                       const std::map<std::string, std::string>& metadata) {
  if (cache.caches.empty()) throw base::InvalidArgument("save_prompt_cache: empty cache list");
  for (std::size_t i = 0; i < cache.caches.size(); ++i) {
    if (!cache.caches[i]) throw base::InvalidArgument("save_prompt_cache: cache " + std::to_string(i) + " is null");
  }
  const int64_t offset = cache.caches.front()->offset();
  if (offset != static_cast<int64_t>(cache.tokens.size())) {
    throw base::InvalidArgument("save_prompt_cache: caches hold " + std::to_string(offset) + " tokens but " +
                                std::to_string(cache.tokens.size()) + " token ids were given");
  }
  // The file is written beside its target and renamed over it, which would replace whatever the
  // name is: a symlink is followed (its target is written), and a name that is neither absent nor
  // a regular file (a FIFO, a device, a directory) is refused.
  std::string target = path;
  std::error_code status_error;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, status_error))) {
    target = std::filesystem::weakly_canonical(path, status_error).string();
    if (status_error) throw base::FormatError("cannot resolve the symlink '" + path + "' to save the prompt cache");
  }
  const auto target_status = std::filesystem::status(target, status_error);
  if (std::filesystem::exists(target_status) && !std::filesystem::is_regular_file(target_status)) {
    throw base::InvalidArgument("refusing to save the prompt cache over '" + target +
                                "': it exists and is not a regular file");
  }
  const std::string temporary = target + ".tmp";
  {
    Writer w(temporary);
    w.bytes(kPromptCacheMagic, sizeof kPromptCacheMagic);
    w.pod<uint32_t>(kPromptCacheVersion);
    w.pod<uint32_t>(0);
    w.pod<uint32_t>(static_cast<uint32_t>(metadata.size()));
    for (const auto& [key, value] : metadata) {
      w.str(key);
      w.str(value);
    }
    w.pod<uint64_t>(cache.tokens.size());
    if (!cache.tokens.empty()) w.bytes(cache.tokens.data(), cache.tokens.size() * sizeof(int32_t));
    w.pod<uint32_t>(static_cast<uint32_t>(cache.caches.size()));
    for (const auto& c : cache.caches) {
      w.str(c->type_name());
      const auto meta = c->meta_state();
      w.pod<uint32_t>(static_cast<uint32_t>(meta.size()));
      for (const auto& m : meta) w.str(m);
      const auto tensors = c->state();
      w.pod<uint32_t>(static_cast<uint32_t>(tensors.size()));
      for (const auto& t : tensors) write_tensor(w, t);
    }
    w.finish();
  }
  std::error_code ec;
  std::filesystem::rename(temporary, target, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw base::FormatError("cannot move the prompt cache into place at '" + target + "'");
  }
}

uint64_t prompt_cache_checksum(const void* data, std::size_t size) {
  uint64_t hash = kFnvOffset;
  fnv1a(hash, data, size);
  return hash;
}

SavedPromptCache load_prompt_cache(const std::string& path) {
  Reader r(path);
  if (r.size() < sizeof kPromptCacheMagic + 8 + sizeof(uint64_t)) {
    throw base::FormatError("prompt cache file '" + path + "' is too short (" + std::to_string(r.size()) +
                            " bytes) to be a prompt cache");
  }
  char magic[sizeof kPromptCacheMagic];
  r.bytes(magic, sizeof magic, "magic");
  if (std::memcmp(magic, kPromptCacheMagic, sizeof magic) != 0) {
    throw base::FormatError("'" + path + "' is not a prompt cache file (bad magic)");
  }
  const auto version = r.pod<uint32_t>("version");
  if (version != kPromptCacheVersion) {
    throw base::Unsupported("prompt cache file '" + path + "' has version " + std::to_string(version) +
                            "; this build reads version " + std::to_string(kPromptCacheVersion));
  }
  r.pod<uint32_t>("reserved field");

  SavedPromptCache saved;
  const uint32_t n_meta = read_count(r, "metadata count", 8);
  for (uint32_t i = 0; i < n_meta; ++i) {
    std::string key = r.str("metadata key");
    saved.metadata[key] = r.str("metadata value");
  }
  const auto n_tokens = r.pod<uint64_t>("token count");
  // Divided, not multiplied: n_tokens * 4 wraps for counts near 2^64 and would pass.
  if (n_tokens > r.remaining() / sizeof(int32_t))
    r.fail("token count " + std::to_string(n_tokens) + " exceeds the file");
  saved.cache.tokens.resize(n_tokens);
  if (n_tokens) r.bytes(saved.cache.tokens.data(), n_tokens * sizeof(int32_t), "tokens");
  for (uint64_t i = 0; i < n_tokens; ++i) {
    // Token ids index the vocabulary; a negative one can only be corruption (the vocabulary
    // size is checked where the model is known, apps/generate).
    if (saved.cache.tokens[i] < 0)
      r.fail("token " + std::to_string(i) + " has a negative id " + std::to_string(saved.cache.tokens[i]));
  }

  const uint32_t n_caches = read_count(r, "cache count", 12);
  if (n_caches == 0) r.fail("no caches");
  for (uint32_t i = 0; i < n_caches; ++i) {
    const std::string type = r.str("cache type name");
    std::vector<std::string> meta(read_count(r, "meta_state count", 4));
    for (auto& m : meta) m = r.str("meta_state entry");
    std::vector<Tensor> tensors(read_count(r, "state tensor count", 12));
    for (auto& t : tensors) t = read_tensor(r);
    auto cache = make_cache_of_type(type);
    try {
      cache->from_state(tensors, meta);
    } catch (const base::InvalidArgument& e) {
      r.fail("cache " + std::to_string(i) + " (" + type + ") rejected its state: " + e.what());
    } catch (const base::FormatError& e) {
      r.fail("cache " + std::to_string(i) + " (" + type + "): " + e.what());
    }
    if (cache->offset() != static_cast<int64_t>(n_tokens)) {
      r.fail("cache " + std::to_string(i) + " holds " + std::to_string(cache->offset()) + " tokens, the file records " +
             std::to_string(n_tokens));
    }
    saved.cache.caches.push_back(std::move(cache));
  }
  r.finish();
  return saved;
}

}  // namespace lm
