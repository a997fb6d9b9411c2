#pragma once
// Process and cache measurements reported with every generation: peak resident memory (the
// kernel's high-water mark, VmHWM) and the KV bytes the caches really hold.
#include <cstddef>
#include <string>

#include "lm/cache/cache.h"

namespace lm {

// Peak resident set size of this process in bytes, from VmHWM in /proc/self/status; 0 where
// the file or the field is unavailable (non-Linux).
std::size_t peak_rss_bytes();
// Current resident set size (VmRSS), same source and fallback.
std::size_t current_rss_bytes();
// Parses one "Vm...:   1234 kB" field out of /proc/<pid>/status text; 0 when absent or
// malformed (base::proc_kib_field_bytes). Exposed so the parsing is testable against fixed text.
std::size_t parse_status_kib_field(const std::string& status_text, const std::string& field);

// Sum of nbytes() over the caches (null entries count 0): bytes actually allocated.
std::size_t kv_bytes_resident(const CacheList& caches);

// "512 B", "1.50 KiB", "3.25 MiB", "1.02 GiB" (binary units, two decimals).
std::string format_bytes(std::size_t bytes);

}  // namespace lm
