#pragma once
// Hadamard matrices and the fast Walsh-Hadamard transform.
//
// The randomized Hadamard rotation supports head dims d = m * 2^k with m in {1, 12, 20, 28}
// (the set the original allows; the bare d = 12, 20, 28 are excluded). H_d = H_m (x) H_{2^k}:
// H_{2^k} is Sylvester's (applied in O(d log d) by the FWHT), H_m a Paley matrix:
//   m = 12, 20: Paley construction I over GF(11), GF(19) (q = 3 mod 4);
//   m = 28:     Paley construction II over GF(13) (q = 1 mod 4), order 2(q + 1).
#include <cstddef>
#include <vector>

namespace veloxquant::core {

// The +-1 entries of the m x m Hadamard matrix used for the factor m (row-major), for
// m in {1, 12, 20, 28}; H * H^T = m * I. Throws base::InvalidArgument for any other m.
const std::vector<int>& hadamard_factor(int m);

// Splits d into m * 2^k with m in {1, 12, 20, 28}; returns m, or 0 when d has no such form
// (or is one of the bare 12, 20, 28).
int hadamard_factor_of(int d);

// In-place unnormalized Walsh-Hadamard transform of length n (a power of two).
void fwht(float* x, std::size_t n);
// The scalar reference of the same transform (tests compare the two).
void fwht_reference(float* x, std::size_t n);

// y = (H_m (x) H_n) x for d = m * n, unnormalized; `transpose` applies H_m^T instead of H_m
// (Sylvester's H_n is symmetric). `scratch` must hold d floats.
void hadamard_transform(float* x, int m, std::size_t n, bool transpose, float* scratch);

}  // namespace veloxquant::core
