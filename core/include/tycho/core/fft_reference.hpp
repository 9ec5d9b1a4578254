// A plain O(N·(n0+n1)) 2-D DFT in double precision for set-up work in core (the initial probe),
// so core needs no FFT library; engines use FFTW or cuFFT for the hot loop.
// Unitary scaling: forward exp(−2πi k·r) / sqrt(n0 n1), inverse exp(+2πi k·r) / sqrt(n0 n1).
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace tycho {
std::vector<std::complex<double>> dft2_reference(const std::vector<std::complex<double>>& in,
                                                 int64_t n0, int64_t n1, bool inverse);
}
