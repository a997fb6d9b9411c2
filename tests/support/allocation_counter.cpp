// Replaces the global allocation functions for the test executables (see
// allocation_counter.h). Each block carries a small header in front of the pointer handed
// out, holding the requested size, so frees subtract exactly what was added even when the
// unsized operator delete is called.
#include "support/allocation_counter.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_aligned_live_bytes{0};
std::atomic<int64_t> g_allocations{0};

// Plain blocks: [size_t size | pad to 16][user bytes]; malloc already aligns to 16, the
// default new alignment on x86-64 and aarch64.
constexpr std::size_t kPlainHeader = 16;

void* plain_allocate(std::size_t size) noexcept {
  auto* raw = static_cast<unsigned char*>(std::malloc(size + kPlainHeader));
  if (raw == nullptr) return nullptr;
  *reinterpret_cast<std::size_t*>(raw) = size;
  g_live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return raw + kPlainHeader;
}

void plain_free(void* p) noexcept {
  if (p == nullptr) return;
  auto* raw = static_cast<unsigned char*>(p) - kPlainHeader;
  g_live_bytes.fetch_sub(static_cast<int64_t>(*reinterpret_cast<std::size_t*>(raw)), std::memory_order_relaxed);
  std::free(raw);
}

// Aligned blocks: [padding | size_t size][user bytes], the user pointer `align` bytes after
// the start of an `align`-aligned block, so the size sits in the 8 bytes just before it.
std::size_t header_for(std::align_val_t align) {
  const auto a = static_cast<std::size_t>(align);
  return a < 16 ? 16 : a;
}

void* aligned_allocate(std::size_t size, std::align_val_t align) noexcept {
  const std::size_t header = header_for(align);
  std::size_t total = size + header;
  total = (total + header - 1) / header * header;  // aligned_alloc wants a multiple
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(header, total));
  if (raw == nullptr) return nullptr;
  unsigned char* user = raw + header;
  *reinterpret_cast<std::size_t*>(user - sizeof(std::size_t)) = size;
  g_live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  g_aligned_live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return user;
}

void aligned_free(void* p, std::align_val_t align) noexcept {
  if (p == nullptr) return;
  auto* user = static_cast<unsigned char*>(p);
  const auto size = static_cast<int64_t>(*reinterpret_cast<std::size_t*>(user - sizeof(std::size_t)));
  g_live_bytes.fetch_sub(size, std::memory_order_relaxed);
  g_aligned_live_bytes.fetch_sub(size, std::memory_order_relaxed);
  std::free(user - header_for(align));
}

void* plain_or_throw(std::size_t size) {
  void* p = plain_allocate(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* aligned_or_throw(std::size_t size, std::align_val_t align) {
  void* p = aligned_allocate(size == 0 ? 1 : size, align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

namespace test_support {
AllocationSnapshot allocation_snapshot() {
  return {g_live_bytes.load(), g_aligned_live_bytes.load(), g_allocations.load()};
}
}  // namespace test_support

void* operator new(std::size_t size) { return plain_or_throw(size); }
void* operator new[](std::size_t size) { return plain_or_throw(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return plain_allocate(size == 0 ? 1 : size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return plain_allocate(size == 0 ? 1 : size); }
void* operator new(std::size_t size, std::align_val_t align) { return aligned_or_throw(size, align); }
void* operator new[](std::size_t size, std::align_val_t align) { return aligned_or_throw(size, align); }
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return aligned_allocate(size == 0 ? 1 : size, align);
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return aligned_allocate(size == 0 ? 1 : size, align);
}

void operator delete(void* p) noexcept { plain_free(p); }
void operator delete[](void* p) noexcept { plain_free(p); }
void operator delete(void* p, std::size_t) noexcept { plain_free(p); }
void operator delete[](void* p, std::size_t) noexcept { plain_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { plain_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { plain_free(p); }
void operator delete(void* p, std::align_val_t align) noexcept { aligned_free(p, align); }
void operator delete[](void* p, std::align_val_t align) noexcept { aligned_free(p, align); }
void operator delete(void* p, std::size_t, std::align_val_t align) noexcept { aligned_free(p, align); }
void operator delete[](void* p, std::size_t, std::align_val_t align) noexcept { aligned_free(p, align); }
void operator delete(void* p, std::align_val_t align, const std::nothrow_t&) noexcept { aligned_free(p, align); }
void operator delete[](void* p, std::align_val_t align, const std::nothrow_t&) noexcept { aligned_free(p, align); }
