// The `detectors` plugin: sources for the files detectors write, as their acquisition software
// writes them (docs/detector-formats.md):
//   mib    Quantum Detectors Merlin .mib (+ .hdr)                      mib_source.cpp
//   arina  Dectris ARINA / EIGER NeXus master + data files             arina_source.cpp
//   dm     Gatan DigitalMicrograph .dm4 / .dm3 (4-D data, 3-D stacks)  dm_source.cpp
//   empad  EMPAD .xml + .raw (128 x 130 float32 frames)                empad_source.cpp
// Each reads frames in chunks as the host asks, reports the calibrations it found and which it
// did not, and refuses a malformed file naming the file, the offset or path, and what was expected.
#include <tycho/sdk.hpp>
#include <tycho/sdk/source.hpp>

#include "arina_source.hpp"
#include "dm_source.hpp"
#include "empad_source.hpp"
#include "mib_source.hpp"

namespace {

namespace det = tycho::detectors;

const tycho_component k_components[] = {
    tycho::sdk::with_settings(
        tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "mib", "1.0.0",
                              "Quantum Detectors Merlin .mib frames (1/6/12/24-bit counts or RAW, single chip or 2x2 "
                              "quad); scan shape from the .hdr or [data] scan_shape; no calibrations in the file",
                              TYCHO_DEVICE_BIT(kDLCPU), det::k_mib_keys, tycho::sdk::source_vtable<det::mib_source>("mib")),
        det::k_mib_settings),
    tycho::sdk::with_settings(
        tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "arina", "1.0.0",
                              "Dectris ARINA / EIGER NeXus master + data files (bitshuffle/LZ4 decoded, pixel mask "
                              "and flat field applied); scan and calibrations from the scan's metadata file",
                              TYCHO_DEVICE_BIT(kDLCPU), det::k_arina_keys,
                              tycho::sdk::source_vtable<det::arina_source>("arina")),
        det::k_arina_settings),
    tycho::sdk::with_settings(
        tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "dm", "1.0.0",
                              "Gatan DigitalMicrograph .dm4 / .dm3: a 4-D data set or a 3-D stack of frames (one of "
                              "several images), calibrations and voltage from its tags",
                              TYCHO_DEVICE_BIT(kDLCPU), det::k_dm_keys, tycho::sdk::source_vtable<det::dm_source>("dm")),
        det::k_dm_settings),
    tycho::sdk::with_settings(
        tycho::sdk::component(TYCHO_COMPONENT_SOURCE, "empad", "1.0.0",
                              "EMPAD acquisitions: the .xml and the .raw it names (128 x 128 float32 patterns, the "
                              "frames' two footer rows left out); scan shape, step and energy from the .xml",
                              TYCHO_DEVICE_BIT(kDLCPU), det::k_empad_keys,
                              tycho::sdk::source_vtable<det::empad_source>("empad")),
        det::k_empad_settings),
};

}  // namespace

TYCHO_PLUGIN("detectors", "1.0.0", k_components)
