// Electron optics for the runtime: wavelength, window sampling, the initial probe and the set-up
// DFT (CONVENTIONS.md, "Optics"). The one implementation lives in the SDK
// (tycho/sdk/optics.hpp), so that plugins built against the SDK (the `simulate` source) and the
// runtime build the same probe bit for bit; the host re-exports it here (core depends on the ABI
// only and does no optics).
#pragma once

#include <tycho/sdk/optics.hpp>

namespace tycho {

using sdk::dft2;            // the same transform on FFTW (double precision): what the runtime uses
using sdk::dft2_reference;  // a plain O(N·(n0+n1)) 2-D DFT in double precision, unitary scaling
using sdk::make_probe;
using sdk::probe_edge_fraction;
using sdk::probe_optics;
using sdk::wavelength_A;
using sdk::window_sampling;

}  // namespace tycho
