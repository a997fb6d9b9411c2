#pragma once
// Symmetric tridiagonal test matrices shared by the bisection and inverse-iteration tests: each
// builder makes one hard case of the kind curdkv's eigen-solver must survive; every test composes
// the list it checks (so each keeps its own cases and random draws).
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace veloxquant::eviction::test_cases {

// Diagonal d (n entries) and off-diagonal e (n - 1 entries).
struct Tri {
  std::vector<double> d, e;
};

// Standard normal entries. The caller's distribution is passed in: it caches every second draw,
// so sharing it keeps each test's later cases drawing what they drew before.
inline Tri random_tridiagonal(int n, std::mt19937& rng, std::normal_distribution<double>& normal) {
  Tri t;
  for (int i = 0; i < n; ++i) t.d.push_back(normal(rng));
  for (int i = 0; i + 1 < n; ++i) t.e.push_back(normal(rng));
  return t;
}

// Couplings 10 and 40 set exactly to zero: three independent blocks (t must have n >= 42).
inline Tri split_in_three(Tri t) {
  t.e[10] = t.e[40] = 0.0;
  return t;
}

// Diagonal with entries i % 8: eigenvalues of multiplicity 8, exact zero pivots.
inline Tri repeated_diagonal() {
  Tri t;
  for (int i = 0; i < 64; ++i) t.d.push_back(static_cast<double>(i % 8));
  t.e.assign(63, 0.0);
  return t;
}

// Wilkinson's W_65^+: pairs of eigenvalues agreeing to 1e-14 and closer.
inline Tri wilkinson_65() {
  Tri t;
  for (int i = 0; i < 65; ++i) t.d.push_back(std::fabs(32.0 - i));
  t.e.assign(64, 1.0);
  return t;
}

inline Tri scaled(Tri t, double scale) {
  for (double& x : t.d) x *= scale;
  for (double& x : t.e) x *= scale;
  return t;
}

// Row-major n x n form, for the full solvers the tests compare with.
inline std::vector<double> dense(const Tri& t) {
  const std::size_t n = t.d.size();
  std::vector<double> a(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    a[i * n + i] = t.d[i];
    if (i + 1 < n) a[i * n + i + 1] = a[(i + 1) * n + i] = t.e[i];
  }
  return a;
}

}  // namespace veloxquant::eviction::test_cases
