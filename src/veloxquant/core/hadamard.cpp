#include "veloxquant/core/hadamard.h"

#include <cstring>
#include <string>

#include "base/error.h"
#include "veloxquant/core/simd_kernels.h"

namespace veloxquant::core {
namespace {

// Element (i, j) of a row-major matrix with n columns: the product is formed in size_t, not in
// int and then widened (the orders are small; the index type is the vector's).
std::size_t cell(int i, int j, int n) {
  return static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + static_cast<std::size_t>(j);
}

// Legendre symbol chi(a) over the prime field GF(q): 0, +1 (quadratic residue) or -1.
int legendre(int a, int q) {
  a %= q;
  if (a < 0) a += q;
  if (a == 0) return 0;
  for (int x = 1; x < q; ++x)
    if ((x * x) % q == a) return 1;
  return -1;
}

// Paley I (q = 3 mod 4): H = I + S, S = [[0, 1^T], [-1, Q]], Q_ij = chi(j - i); order q + 1.
std::vector<int> paley_one(int q) {
  const int m = q + 1;
  std::vector<int> h(static_cast<std::size_t>(m) * m, 0);
  auto at = [&](int i, int j) -> int& { return h[cell(i, j, m)]; };
  for (int j = 1; j < m; ++j) {
    at(0, j) = 1;
    at(j, 0) = -1;
  }
  for (int i = 0; i < q; ++i)
    for (int j = 0; j < q; ++j) at(i + 1, j + 1) = legendre(j - i, q);
  for (int i = 0; i < m; ++i) at(i, i) += 1;
  return h;
}

// Paley II (q = 1 mod 4): the symmetric conference matrix C = [[0, 1^T], [1, Q]] of order
// q + 1, with every 0 replaced by [[1, -1], [-1, -1]] and every +-1 by +-[[1, 1], [1, -1]].
std::vector<int> paley_two(int q) {
  const int c = q + 1, m = 2 * c;
  std::vector<int> conference(static_cast<std::size_t>(c) * c, 0);
  for (int j = 1; j < c; ++j) conference[static_cast<std::size_t>(j)] = conference[cell(j, 0, c)] = 1;
  for (int i = 0; i < q; ++i)
    for (int j = 0; j < q; ++j) conference[cell(i + 1, j + 1, c)] = legendre(j - i, q);
  std::vector<int> h(static_cast<std::size_t>(m) * m, 0);
  static const int zero_block[2][2] = {{1, -1}, {-1, -1}};
  static const int one_block[2][2] = {{1, 1}, {1, -1}};
  for (int i = 0; i < c; ++i)
    for (int j = 0; j < c; ++j) {
      const int e = conference[cell(i, j, c)];
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) h[cell(2 * i + a, 2 * j + b, m)] = e == 0 ? zero_block[a][b] : e * one_block[a][b];
    }
  return h;
}

}  // namespace

const std::vector<int>& hadamard_factor(int m) {
  // Built once each; function-local statics are initialised thread-safely.
  static const std::vector<int> h1{1};
  static const std::vector<int> h12 = paley_one(11);
  static const std::vector<int> h20 = paley_one(19);
  static const std::vector<int> h28 = paley_two(13);
  switch (m) {
    case 1:
      return h1;
    case 12:
      return h12;
    case 20:
      return h20;
    case 28:
      return h28;
    default:
      throw base::InvalidArgument("hadamard_factor: no Hadamard factor of order " + std::to_string(m) +
                                  " (supported: 1, 12, 20, 28)");
  }
}

int hadamard_factor_of(int d) {
  if (d <= 0) return 0;
  for (int m : {1, 12, 20, 28}) {
    if (d % m) continue;
    const int n = d / m;
    if ((n & (n - 1)) != 0) continue;
    if (m > 1 && n == 1) continue;  // the original excludes the bare 12, 20 and 28
    return m;
  }
  return 0;
}

void fwht_reference(float* x, std::size_t n) {
  for (std::size_t h = 1; h < n; h *= 2)
    for (std::size_t i = 0; i < n; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

void fwht(float* x, std::size_t n) {
  // Short strides in-register per 8 floats (or scalar for other n); from stride 8 on
  // each block's halves are contiguous spans handed to the SIMD butterfly. The additions are
  // the same as the reference's, in the same order per element, so results are identical.
  std::size_t h = 1;
  if (n % 8 == 0) {
    // Strides 1, 2 and 4 inside each run of 8 floats by lane shuffles (the same additions):
    // scalar, they were most of nsnquant's 95 instructions per kv row of Hadamard transforms.
    simd::fwht_short_strides(x, n);
    h = 8;
  }
  for (; h < n && h < 8; h *= 2)
    for (std::size_t i = 0; i < n; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  for (; h < n; h *= 2)
    for (std::size_t i = 0; i < n; i += 2 * h) simd::butterfly(x + i, x + i + h, h);
}

void hadamard_transform(float* x, int m, std::size_t n, bool transpose, float* scratch) {
  for (int b = 0; b < m; ++b) fwht(x + static_cast<std::size_t>(b) * n, n);
  if (m == 1) return;
  const std::vector<int>& h = hadamard_factor(m);
  // Mix the m blocks: out_i = sum_j H[i][j] * block_j (H^T: H[j][i]).
  std::memset(scratch, 0, sizeof(float) * static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    float* out = scratch + static_cast<std::size_t>(i) * n;
    for (int j = 0; j < m; ++j) {
      const int s = transpose ? h[cell(j, i, m)] : h[cell(i, j, m)];
      const float* in = x + static_cast<std::size_t>(j) * n;
      if (s > 0)
        for (std::size_t k = 0; k < n; ++k) out[k] += in[k];
      else
        for (std::size_t k = 0; k < n; ++k) out[k] -= in[k];
    }
  }
  std::memcpy(x, scratch, sizeof(float) * static_cast<std::size_t>(m) * n);
}

}  // namespace veloxquant::core
