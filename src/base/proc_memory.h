#pragma once
// The kernel's memory files (Linux /proc): one reader and one parser of their "Key:   1234 kB"
// lines for every measurement the project reports (the host's peak RSS, the evaluations' RSS,
// the planners' machine memory), so they cannot disagree on a malformed or missing line.
#include <cstddef>
#include <string>

namespace base {

// The whole file as text; empty where it cannot be read (non-Linux, no /proc).
std::string read_proc_file(const char* path);

// Bytes of one "Field:   1234 kB" line of /proc/self/status or /proc/meminfo text; 0 when the
// field is absent, does not start a line, or is malformed.
std::size_t proc_kib_field_bytes(const std::string& text, const std::string& field);

// proc_kib_field_bytes of /proc/self/status ("VmHWM", "VmRSS"); 0 where unavailable.
std::size_t process_status_bytes(const std::string& field);

}  // namespace base
