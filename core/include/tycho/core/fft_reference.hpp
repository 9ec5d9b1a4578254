// A plain O(N·(n0+n1)) 2-D DFT in double precision for set-up work (the initial probe), so core
// needs no FFT library; engines use FFTW or cuFFT for the hot loop. Defined in the SDK
// (tycho/sdk/optics.hpp, beside make_probe, which uses it); re-exported here.
// Unitary scaling: forward exp(−2πi k·r) / sqrt(n0 n1), inverse exp(+2πi k·r) / sqrt(n0 n1).
#pragma once

#include <tycho/sdk/optics.hpp>

namespace tycho {
using sdk::dft2_reference;
}
