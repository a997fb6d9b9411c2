#pragma once
// lm::MappedFile — a read-only memory map of a whole model file. Weight views point into it
// and hold a shared_ptr to it, so the pages stay mapped exactly as long as a model uses them
// (the OS pages weights in on demand; nothing is copied).
#include <cstddef>
#include <memory>
#include <string>

namespace lm {

class MappedFile {
 public:
  // Maps `path` read-only. Throws base::FormatError naming the path when it cannot be opened,
  // is not a regular file, or is empty.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace lm
