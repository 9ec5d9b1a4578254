// Electron optics: wavelength and the initial probe (CONVENTIONS.md, "Optics"). The one
// implementation lives in the SDK (tycho/sdk/optics.hpp), so that plugins built against the SDK
// (the `simulate` source) and the runtime build the same probe; core re-exports it here.
#pragma once

#include <tycho/sdk/optics.hpp>

namespace tycho {

using sdk::make_probe;
using sdk::probe_edge_fraction;
using sdk::probe_optics;
using sdk::wavelength_A;
using sdk::window_sampling;

}  // namespace tycho
