#include "lm/weights/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace lm {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw base::FormatError("cannot open model file '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw base::FormatError("model file '" + path + "' is not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw base::FormatError("model file '" + path + "' is empty");
  }
  void* addr = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (addr == MAP_FAILED) {
    throw base::FormatError("cannot memory-map model file '" + path + "': " + std::strerror(map_errno));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->data_ = static_cast<const std::byte*>(addr);
  file->size_ = static_cast<std::size_t>(st.st_size);
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace lm
