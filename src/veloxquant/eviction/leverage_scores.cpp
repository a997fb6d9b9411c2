#include "veloxquant/eviction/leverage_scores.h"
#include "veloxquant/eviction/leverage_kernels.h"
#include "veloxquant/eviction/tridiagonal_bisection.h"
#include "veloxquant/eviction/tridiagonal_inverse_iteration.h"
#include "veloxquant/eviction/upper_gram.h"

#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace veloxquant::eviction {

namespace {

// A symmetric matrix reduced to tridiagonal form T = Q^T A Q by Householder reflectors
// H_k = I - 2 v_k v_k^T (v_k a unit vector on indices k+1..n-1, row k of `reflectors`),
// Q = H_0 H_1 ... H_{n-3}.
struct Tridiagonal {
  int n = 0;
  std::vector<double> d, e;  // diagonal; e[i] couples i and i + 1
  std::vector<double> reflectors;
  std::vector<char> has_reflector;
  // The matrix being reduced, its rows on cache-line boundaries where n allows (the update's
  // vectors then never straddle two lines), and two vectors: reused between calls.
  hwy::AlignedFreeUniquePtr<double[]> work;
  std::size_t work_size = 0;
  std::vector<double> p, w;
};

// sum_i a[i] b[i] over i in [0, n) in 8 interleaved chains (term i on chain i % 8), combined in a
// fixed tree: the Householder steps' dots were single add chains (4 cycles a term, 60 terms, three
// a step: a twentieth of a leverage problem). Independent chains are what the compiler may
// vectorise without changing a sum, so the result is the same on every target.
double chained_dot(const double* a, const double* b, int n) {
  double c[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) c[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i + j < n; ++j) c[j] += a[i + j] * b[i + j];
  return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
}

// Reflector k from row k of the reduced matrix (entries k+1..n-1; equal to column k, the matrix
// being exactly symmetric): v_k, and T's coupling alpha at (k + 1, k). Nothing reads row and
// column k past that (the later steps work on the trailing block; d and e are read off the
// diagonals), so they are left as they are. When those entries are all zero there is no
// reflector: column k is made equal to row k (the update below leaves the columns left of its
// block stale; T's coupling e[k] is read there).
void make_reflector(double* a, int n, int k, Tridiagonal& t) {
  const std::size_t nn = static_cast<std::size_t>(n);
  auto at = [&](int r, int c) -> double& { return a[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(c)]; };
  const double* x = &at(k, k + 1);
  const double norm2 = chained_dot(x, x, n - k - 1);
  if (norm2 == 0.0) {
    for (int i = k + 1; i < n; ++i) at(i, k) = at(k, i);
    return;
  }
  const double norm = std::sqrt(norm2);
  const double x1 = at(k, k + 1);
  const double alpha = x1 > 0 ? -norm : norm;  // no cancellation in v[k + 1]
  double* v = t.reflectors.data() + static_cast<std::size_t>(k) * nn;
  for (int i = k + 1; i < n; ++i) v[i] = at(k, i);
  v[k + 1] -= alpha;
  // |x - alpha e_1|^2 = |x|^2 - 2 alpha x_1 + alpha^2 = 2 (|x|^2 - alpha x_1): a sum of two
  // nonnegative terms (alpha has x_1's opposite sign), no second pass over v.
  const double v2 = 2.0 * (norm2 - alpha * x1);
  const double inv = 1.0 / std::sqrt(v2);
  for (int i = k + 1; i < n; ++i) v[i] *= inv;
  t.has_reflector[static_cast<std::size_t>(k)] = 1;
  at(k + 1, k) = at(k, k + 1) = alpha;
}

// The reflector that zeroes column k below the subdiagonal turns the trailing block B into
// H B H = B - v w^T - w v^T with p = B v, w = 2 p - 2 (v.p) v. The input must be exactly
// symmetric (curdkv's Gram is mirrored from its upper triangle), and B stays so: each update is.
// The update runs in two parts so that the next step's p needs no pass of its own: B's first row
// (which gives the next reflector), then the rest of B with p = B' v' summed as its rows are
// updated (rank2_update_rows). Every sum keeps the one-step-at-a-time loop's terms and order.
void tridiagonalize(const std::vector<double>& input, int n, Tridiagonal& t) {
  const std::size_t nn = static_cast<std::size_t>(n);
  if (t.work_size < nn * nn) {
    t.work = hwy::AllocateAligned<double>(nn * nn);
    t.work_size = nn * nn;
  }
  double* a = t.work.get();
  std::copy(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(nn * nn), a);
  t.n = n;
  t.reflectors.assign(nn * nn, 0.0);
  t.has_reflector.assign(nn, 0);
  std::vector<double>& p = t.p;
  std::vector<double>& w = t.w;
  p.assign(nn, 0.0);
  w.assign(nn, 0.0);
  if (n > 2) make_reflector(a, n, 0, t);
  bool p_ready = false;  // p = B v for this step's B and v, summed by the previous step's update
  for (int k = 0; k + 2 < n; ++k) {
    const int s = k + 1;  // B's first row and column
    const bool next_step = k + 3 < n;
    if (!t.has_reflector[static_cast<std::size_t>(k)]) {  // column k was zero already: B as it is
      if (next_step) {
        make_reflector(a, n, s, t);
      } else {
        for (int i = s + 1; i < n; ++i)
          a[static_cast<std::size_t>(i) * nn + s] = a[static_cast<std::size_t>(s) * nn + i];
      }
      p_ready = false;
      continue;
    }
    const double* v = t.reflectors.data() + static_cast<std::size_t>(k) * nn;
    if (!p_ready) symmetric_times_vector(a, n, s, v, p.data());  // SIMD
    const double vp = chained_dot(v + s, p.data() + s, n - s);
    for (int i = s; i < n; ++i) w[static_cast<std::size_t>(i)] = 2.0 * p[static_cast<std::size_t>(i)] - 2.0 * vp * v[i];
    rank2_update_rows(a, n, s, s + 1, s, v, w.data(), nullptr, nullptr);  // row s: the next reflector's entries
    if (next_step) {
      make_reflector(a, n, s, t);
    } else {  // the last step: column s holds T's last coupling
      for (int i = s + 1; i < n; ++i) a[static_cast<std::size_t>(i) * nn + s] = a[static_cast<std::size_t>(s) * nn + i];
    }
    const double* next_v = next_step && t.has_reflector[static_cast<std::size_t>(s)]
                               ? t.reflectors.data() + static_cast<std::size_t>(s) * nn
                               : nullptr;
    rank2_update_rows(a, n, s + 1, n, s + 1, v, w.data(), next_v, p.data());  // SIMD
    p_ready = next_v != nullptr;
  }
  t.d.resize(nn);
  t.e.assign(nn, 0.0);
  for (std::size_t i = 0; i < nn; ++i) t.d[i] = a[i * nn + i];
  for (std::size_t i = 0; i + 1 < nn; ++i) t.e[i] = a[(i + 1) * nn + i];
}

// x <- Q x (a vector of T's basis into A's), Q = H_0 ... H_{n-3}: the last reflector first.
void to_original_basis(const Tridiagonal& t, double* x) {
  const std::size_t nn = static_cast<std::size_t>(t.n);
  for (int k = t.n - 3; k >= 0; --k) {
    if (!t.has_reflector[static_cast<std::size_t>(k)]) continue;
    const double* v = t.reflectors.data() + static_cast<std::size_t>(k) * nn;
    double dot = 0.0;
    for (int i = k + 1; i < t.n; ++i) dot += v[i] * x[i];
    for (int i = k + 1; i < t.n; ++i) x[i] -= 2.0 * dot * v[i];
  }
}

// sqrt(a^2 + b^2): one sqrt where the squares neither overflow nor underflow, std::hypot's careful
// path (several times slower: it was a fifth of curdkv's step as the QR's rotations) elsewhere.
inline double rotation_norm(double a, double b) {
  const double s = a * a + b * b;
  if (s > 1e-290 && s < 1e290) return std::sqrt(s);
  return std::hypot(a, b);
}

// One implicit symmetric QR step with Wilkinson shift on the unreduced tridiagonal block [l, m],
// the rotations accumulated into the columns of q (n x n, row-major): T <- G T G^T, q <- q G^T
// (Golub & Van Loan, Alg. 8.3.2). Only the full solver (symmetric_eigen_descending) runs QR now;
// curdkv's top eigenvalues come from bisection, so there is no eigenvalues-only path.
void qr_step(std::vector<double>& d, std::vector<double>& e, double* q, int n, int l, int m) {
  const double delta = (d[static_cast<std::size_t>(m - 1)] - d[static_cast<std::size_t>(m)]) / 2.0;
  const double b = e[static_cast<std::size_t>(m - 1)];
  const double root = rotation_norm(delta, b);
  const double mu = d[static_cast<std::size_t>(m)] - b * b / (delta + (delta >= 0 ? root : -root));
  double x = d[static_cast<std::size_t>(l)] - mu, z = e[static_cast<std::size_t>(l)];
  for (int k = l; k < m; ++k) {
    const double r = rotation_norm(x, z);
    const double inv = r == 0 ? 0.0 : 1.0 / r;
    const double c = r == 0 ? 1.0 : x * inv, s = z * inv;
    if (k > l) e[static_cast<std::size_t>(k - 1)] = r;  // the rotation folds the bulge into it
    const std::size_t k0 = static_cast<std::size_t>(k), k1 = k0 + 1;
    const double a = d[k0], off = e[k0], dd = d[k1];
    d[k0] = c * c * a + 2.0 * c * s * off + s * s * dd;
    d[k1] = s * s * a - 2.0 * c * s * off + c * c * dd;
    e[k0] = c * s * (dd - a) + (c * c - s * s) * off;
    if (k + 1 < m) {  // the bulge below the subdiagonal, chased by the next rotation
      z = s * e[k1];
      e[k1] *= c;
      x = e[k0];
    }
    for (int i = 0; i < n; ++i) {
      double& qa = q[static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + k0];
      double& qb = q[static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + k1];
      const double u = qa, v = qb;
      qa = c * u + s * v;
      qb = -s * u + c * v;
    }
  }
}

// QR steps on the bottom unreduced block until every off-diagonal is negligible: d becomes the
// eigenvalues (unsorted), q collects T's eigenvectors as columns.
void tridiagonal_qr(const std::vector<double>& d_in, const std::vector<double>& e_in, double* q, int n,
                    std::vector<double>& d, std::vector<double>& e) {
  d.assign(d_in.begin(), d_in.end());
  e.assign(e_in.begin(), e_in.end());
  const double eps = std::numeric_limits<double>::epsilon();
  int m = n - 1, steps = 0;
  while (m > 0 && steps < 60 * n) {
    const auto negligible = [&](int i) {
      return std::fabs(e[static_cast<std::size_t>(i)]) <=
             eps * (std::fabs(d[static_cast<std::size_t>(i)]) + std::fabs(d[static_cast<std::size_t>(i) + 1]));
    };
    if (negligible(m - 1)) {
      e[static_cast<std::size_t>(m - 1)] = 0.0;
      --m;
      continue;
    }
    int l = m - 1;
    while (l > 0 && !negligible(l - 1)) --l;
    qr_step(d, e, q, n, l, m);
    ++steps;
  }
}

// x <- Q^T x (a vector of A's basis into T's): the first reflector first.
void to_tridiagonal_basis(const Tridiagonal& t, double* x) {
  const std::size_t nn = static_cast<std::size_t>(t.n);
  for (int k = 0; k + 2 < t.n; ++k) {
    if (!t.has_reflector[static_cast<std::size_t>(k)]) continue;
    const double* v = t.reflectors.data() + static_cast<std::size_t>(k) * nn;
    const double dot = chained_dot(v + k + 1, x + k + 1, t.n - k - 1);
    for (int i = k + 1; i < t.n; ++i) x[i] -= 2.0 * dot * v[i];
  }
}

// Which basis top_eigenvectors returns its vectors in: A's (carried back through the reflectors),
// or T's (Q^T u: for a caller that projects few vectors, which it carries into T's basis instead).
enum class Basis { kOriginal, kTridiagonal };

// The top k eigenvectors (rows of `vectors`, k x n) and their eigenvalues of the symmetric n x n
// matrix `a`: the k largest eigenvalues of the tridiagonal form by bisection, the k eigenvectors by
// inverse iteration, carried back through the reflectors (Basis::kOriginal). `t` keeps the
// reduction (its reflectors).
// Which eigenpairs top_eigenvectors returns: all k, or (for a positive semidefinite `a`, the
// leverage scores' Gram) only those whose eigenvalue is above the rounding of lambda_1.
enum class Keep { kAll, kNonzero };

// Eigenvalues at or below this share of lambda_1 (n eps-sized: 64 n eps) are zero to the solver's
// rounding; inverse iteration cannot resolve their cluster (its vectors there are not orthogonal
// to the top ones: residuals up to 0.1 lambda_1 seen on rank-deficient Grams, before and after
// this check), and their directions carry no energy (sum_j <m_j, u_t>^2 = lambda_t ~ 0).
constexpr double kZeroEigenvalue = 64.0 * std::numeric_limits<double>::epsilon();

void top_eigenvectors(const std::vector<double>& a, int n, int k, std::vector<double>& values,
                      std::vector<double>& vectors, Tridiagonal& t, Basis basis = Basis::kOriginal,
                      Keep keep = Keep::kAll) {
  // This thread's buffers, reused: curdkv scores every decode step with this (no allocation
  // per step once the shapes have been seen).
  thread_local std::vector<double> columns;
  tridiagonalize(a, n, t);
  // Only the k largest eigenvalues, by Sturm counts in SIMD lanes (QR found all n: k = 16 of 64 here).
  values.resize(static_cast<std::size_t>(k));
  top_tridiagonal_eigenvalues(t.d.data(), t.e.data(), n, k, values.data());
  if (keep == Keep::kNonzero && k > 1) {
    const double floor = values[0] * kZeroEigenvalue * n;
    int nonzero = 1;  // lambda_1 > 0: callers pass nonzero matrices
    while (nonzero < k && values[static_cast<std::size_t>(nonzero)] > floor) ++nonzero;
    k = nonzero;
    values.resize(static_cast<std::size_t>(k));
  }
  const std::size_t nn = static_cast<std::size_t>(n);
  vectors.resize(static_cast<std::size_t>(k) * nn);  // row r: the r-th eigenvector
  // Inverse iteration as a block, the k eigenvalues in SIMD lanes.
  tridiagonal_inverse_iteration(t.d.data(), t.e.data(), n, values.data(), k, vectors.data());
  if (basis == Basis::kTridiagonal) return;
  // Back through the reflectors all k at once (SIMD across the vectors, each vector's sums as
  // to_original_basis does them).
  const int64_t lanes = vector_lanes();
  const int64_t stride = std::max<int64_t>(lanes, (k + lanes - 1) / lanes * lanes);
  columns.assign(nn * static_cast<std::size_t>(stride), 0.0);
  for (int r = 0; r < k; ++r) {
    for (int i = 0; i < n; ++i)
      columns[static_cast<std::size_t>(i * stride + r)] =
          vectors[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(i)];
  }
  reflect_columns(t.reflectors.data(), t.has_reflector.data(), n, columns.data(), stride, k);
  for (int r = 0; r < k; ++r) {
    for (int i = 0; i < n; ++i)
      vectors[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(i)] =
          columns[static_cast<std::size_t>(i * stride + r)];
  }
}

}  // namespace

void symmetric_eigen_descending(const std::vector<double>& a, int n, std::vector<double>& eigenvalues,
                                std::vector<double>& eigenvectors) {
  const std::size_t nn = static_cast<std::size_t>(n);
  Tridiagonal t;
  tridiagonalize(a, n, t);
  // q = Q, then the QR rotations: its columns become A's eigenvectors.
  std::vector<double> q(nn * nn, 0.0), column(nn);
  for (int c = 0; c < n; ++c) {
    std::fill(column.begin(), column.end(), 0.0);
    column[static_cast<std::size_t>(c)] = 1.0;
    to_original_basis(t, column.data());
    for (int r = 0; r < n; ++r)
      q[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(c)] = column[static_cast<std::size_t>(r)];
  }
  std::vector<double> d, e;
  tridiagonal_qr(t.d, t.e, q.data(), n, d, e);
  std::vector<int> order(nn);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int i, int j) { return d[static_cast<std::size_t>(i)] > d[static_cast<std::size_t>(j)]; });
  eigenvalues.resize(nn);
  eigenvectors.resize(nn * nn);
  for (int r = 0; r < n; ++r) {
    const int col = order[static_cast<std::size_t>(r)];
    eigenvalues[static_cast<std::size_t>(r)] = d[static_cast<std::size_t>(col)];
    for (int i = 0; i < n; ++i) {
      eigenvectors[static_cast<std::size_t>(r) * nn + static_cast<std::size_t>(i)] =
          q[static_cast<std::size_t>(i) * nn + static_cast<std::size_t>(col)];
    }
  }
}

void top_symmetric_eigenvectors(const std::vector<double>& a, int n, int k, std::vector<double>& eigenvalues,
                                std::vector<double>& eigenvectors) {
  thread_local Tridiagonal t;
  top_eigenvectors(a, n, std::max(0, std::min(k, n)), eigenvalues, eigenvectors, t);
}

namespace {

// The inputs of one problem: `count` rows `rows[j]` (nullptr: 0..count-1) of `values`, weighted.
struct WeightedBlock {
  const float* values;
  const int32_t* rows;
  const float* weights;
  int64_t count, dim;
};

// Rows [j0, j0 + n) of M = diag(w) V into `out` (n x dim); whether any entry's square is nonzero.
bool weighted_slab(const WeightedBlock& b, int64_t j0, int64_t n, double* out) {
  const float* values = b.rows ? b.values : b.values + j0 * b.dim;  // without rows, row j is values[j]
  return weighted_rows(values, b.rows ? b.rows + j0 : nullptr, n, b.dim, b.weights + j0, out);  // SIMD
}

// M never exists whole when k < count and k < dim: its rows go through an L1-sized buffer a slab
// at a time, each slab added to the Gram while in L1 (and formed again for the energies: writing
// the whole 512 x 64 block out was a tenth of a problem, its stores waiting on L2). The Gram still
// sums its terms over the rows in order and a row's energy depends on that row alone, so both are
// the same bit for bit.
constexpr int64_t kSlabRows = 32;

// The top k eigenpairs of M^T M into `values` / `vectors` when the top k directions do not span
// every row (k < count and k < dim), else M whole in `block`. Returns false for an all-zero
// block (every score 0).
struct LeverageProblem {
  std::vector<double> block, gram, values, vectors;
  Tridiagonal tridiagonal;   // the Gram's reduction: its reflectors carry a row into T's basis
  std::vector<double> last;  // M's last row (when M is not kept whole)
  int64_t k = 0;
  bool spans_rows = false;  // k >= count or k >= dim: the projection keeps every row whole
};

bool prepare_leverage(const WeightedBlock& b, int64_t rank_cap, LeverageProblem& p, Basis basis) {
  const int64_t count = b.count, dim = b.dim;
  p.k = std::max<int64_t>(1, std::min({rank_cap, count, dim}));
  p.spans_rows = p.k >= count || p.k >= dim;
  if (p.spans_rows) {
    p.block.resize(static_cast<std::size_t>(count * dim));
    // Whether |M|_F^2 is nonzero: a sum of squares is 0 exactly when every square is, so no
    // sequential sum of count * dim terms is needed (it was a tenth of the call, one add chain).
    return weighted_slab(b, 0, count, p.block.data());
  }
  p.block.resize(static_cast<std::size_t>(kSlabRows * dim));
  p.gram.assign(static_cast<std::size_t>(dim * dim), 0.0);
  bool nonzero = false;
  for (int64_t j0 = 0; j0 < count; j0 += kSlabRows) {
    const int64_t n = std::min(kSlabRows, count - j0);
    nonzero |= weighted_slab(b, j0, n, p.block.data());
    accumulate_upper_gram(p.block.data(), n, dim, p.gram.data());  // SIMD, the scalar loop's sums
    if (j0 + n == count) p.last.assign(p.block.begin() + (n - 1) * dim, p.block.begin() + n * dim);
  }
  if (!nonzero) return false;
  for (int64_t r = 0; r < dim; ++r) {
    for (int64_t c = 0; c < r; ++c)
      p.gram[static_cast<std::size_t>(r * dim + c)] = p.gram[static_cast<std::size_t>(c * dim + r)];
  }
  // The original's weighting gives a zero singular value's direction no weight (s_t^2 U_jt^2):
  // numerically zero eigenpairs are left out, and k is what remains.
  top_eigenvectors(p.gram, static_cast<int>(dim), static_cast<int>(p.k), p.values, p.vectors, p.tridiagonal, basis,
                   Keep::kNonzero);
  p.k = static_cast<int64_t>(p.values.size());
  return true;
}

// Every row's energy in the top k directions (all of it when they span the rows).
void row_energies(const WeightedBlock& b, LeverageProblem& p, double* score) {
  const int64_t count = b.count, dim = b.dim;
  if (p.spans_rows) {
    for (int64_t j = 0; j < count; ++j) {
      const double* m = p.block.data() + j * dim;
      double s = 0.0;
      for (int64_t i = 0; i < dim; ++i) s += m[i] * m[i];
      score[j] = s;
    }
    return;
  }
  for (int64_t j0 = 0; j0 < count; j0 += kSlabRows) {
    const int64_t n = std::min(kSlabRows, count - j0);
    weighted_slab(b, j0, n, p.block.data());
    subspace_energy(p.block.data(), n, dim, p.vectors.data(), p.k, score + j0);  // SIMD, the scalar sums
  }
}

}  // namespace

void value_leverage_scores(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                           int64_t rank_cap, float* out) {
  if (count <= 0) return;
  thread_local LeverageProblem p;
  const WeightedBlock b{values, rows, weights, count, dim};
  if (!prepare_leverage(b, rank_cap, p, Basis::kOriginal)) {
    std::fill_n(out, count, 0.0f);
    return;
  }
  thread_local std::vector<double> score;
  score.resize(static_cast<std::size_t>(count));
  row_energies(b, p, score.data());
  // sum_j <m_j, u_t>^2 = s_t^2: dividing by the total is the original's energy weighting and its
  // final normalisation in one.
  double sum = 0.0;
  for (double s : score) sum += s;
  for (int64_t j = 0; j < count; ++j)
    out[j] = sum > 0 ? static_cast<float>(score[static_cast<std::size_t>(j)] / sum) : 0.0f;
}

float value_self_leverage(const float* values, const int32_t* rows, int64_t count, int64_t dim, const float* weights,
                          int64_t rank_cap) {
  if (count <= 0) return 0.0f;
  thread_local LeverageProblem p;
  // One row to project: it goes into T's basis (Q^T m, one vector through the reflectors) instead
  // of the k eigenvectors coming back (<u_t, m> = <Q^T u_t, Q^T m>).
  const WeightedBlock b{values, rows, weights, count, dim};
  if (!prepare_leverage(b, rank_cap, p, Basis::kTridiagonal)) return 0.0f;
  double last = 0.0, sum = 0.0;
  if (p.spans_rows) {  // few rows: every row's energy, summed as value_leverage_scores does
    thread_local std::vector<double> score;
    score.resize(static_cast<std::size_t>(count));
    row_energies(b, p, score.data());
    for (double s : score) sum += s;
    last = score.back();
  } else {
    // sum_j <m_j, u_t>^2 = u_t^T M^T M u_t = lambda_t: the total is the top k eigenvalues' sum,
    // so only the last row needs projecting.
    to_tridiagonal_basis(p.tridiagonal, p.last.data());
    subspace_energy(p.last.data(), 1, dim, p.vectors.data(), p.k, &last);
    for (int64_t t = 0; t < p.k; ++t) sum += p.values[static_cast<std::size_t>(t)];
  }
  return sum > 0 ? static_cast<float>(last / sum) : 0.0f;
}

}  // namespace veloxquant::eviction
