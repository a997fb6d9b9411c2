// Without libFuzzer (the regular gcc build): runs a fuzz target over every file given on the
// command line or found in a given directory — the seed and crash-reproducer corpora run as
// ordinary tests — and, with `--mutations N`, over N deterministic mutants of each: bit flips,
// bytes set to 0x00/0xFF/random, "interesting" integers (0, -1, 2^31 - 1, 2^32 + 2, 2^63 - 1)
// written over 4 or 8 bytes, truncations and duplicated chunks. A short fuzz smoke that needs no
// clang; scripts/fuzz.sh runs the real, coverage-guided fuzzer. Exit 0 when every input returned.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size);

namespace {

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<uint8_t> mutant(const std::vector<uint8_t>& seed, uint64_t state) {
  std::vector<uint8_t> m = seed;
  const int edits = 1 + static_cast<int>(splitmix(state) % 4);
  for (int e = 0; e < edits; ++e) {
    const uint64_t kind = splitmix(state) % 6;
    if (m.empty()) {
      m.push_back(static_cast<uint8_t>(splitmix(state)));
      continue;
    }
    const std::size_t at = splitmix(state) % m.size();
    if (kind == 0) {
      m[at] ^= static_cast<uint8_t>(1u << (splitmix(state) % 8));
    } else if (kind == 1) {
      const uint8_t values[] = {0x00, 0xFF, static_cast<uint8_t>(splitmix(state))};
      m[at] = values[splitmix(state) % 3];
    } else if (kind == 2 || kind == 3) {
      const uint64_t interesting[] = {0, ~0ull, 0x7FFFFFFFull, 0x100000002ull, 0x7FFFFFFFFFFFFFFFull, 0x80000000ull};
      const uint64_t v = interesting[splitmix(state) % 6];
      const std::size_t width = kind == 2 ? 4 : 8;
      if (at + width <= m.size()) std::memcpy(m.data() + at, &v, width);
    } else if (kind == 4) {
      m.resize(at);
    } else {
      const std::size_t len = std::min<std::size_t>(m.size() - at, 1 + splitmix(state) % 64);
      const std::vector<uint8_t> chunk(m.begin() + static_cast<std::ptrdiff_t>(at),
                                       m.begin() + static_cast<std::ptrdiff_t>(at + len));
      m.insert(m.begin() + static_cast<std::ptrdiff_t>(splitmix(state) % m.size()), chunk.begin(), chunk.end());
    }
  }
  return m;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 0;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mutations" && i + 1 < argc) {
      mutations = std::strtol(argv[++i], nullptr, 10);
      continue;
    }
    const std::filesystem::path path(arg);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else if (std::filesystem::exists(path)) {
      files.push_back(path);
    } else {
      std::fprintf(stderr, "replay: no such input '%s'\n", arg.c_str());
      return 2;
    }
  }
  long runs = 0;
  // The empty input too: loaders must refuse a 0-byte file cleanly.
  LLVMFuzzerTestOneInput(nullptr, 0);
  ++runs;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::vector<uint8_t> seed = read_bytes(files[f]);
    LLVMFuzzerTestOneInput(seed.data(), seed.size());
    ++runs;
    for (long k = 0; k < mutations; ++k) {
      const std::vector<uint8_t> m = mutant(seed, (static_cast<uint64_t>(f) << 32) ^ static_cast<uint64_t>(k));
      LLVMFuzzerTestOneInput(m.data(), m.size());
      ++runs;
    }
  }
  std::printf("ran %ld inputs (%zu files, %ld mutants each)\n", runs, files.size(), mutations);
  return 0;
}
