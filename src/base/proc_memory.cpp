#include "base/proc_memory.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace base {

std::string read_proc_file(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t proc_kib_field_bytes(const std::string& text, const std::string& field) {
  // Lines look like "VmHWM:\t   12345 kB"; the field name must start a line (so "XVmHWM" or a
  // value that happens to contain the name does not match).
  const std::string key = field + ":";
  std::size_t pos = 0;
  while ((pos = text.find(key, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') break;
    pos += key.size();
  }
  if (pos == std::string::npos) return 0;
  std::size_t i = pos + key.size();
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  std::size_t kib = 0;
  bool any = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    kib = kib * 10 + static_cast<std::size_t>(text[i] - '0');
    any = true;
    ++i;
  }
  if (!any) return 0;
  while (i < text.size() && text[i] == ' ') ++i;
  if (text.compare(i, 2, "kB") != 0) return 0;
  return kib * 1024;
}

std::size_t process_status_bytes(const std::string& field) {
  return proc_kib_field_bytes(read_proc_file("/proc/self/status"), field);
}

}  // namespace base
