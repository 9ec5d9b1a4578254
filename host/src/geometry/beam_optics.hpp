// The beam of a run, from [optics], [data] and the source's info(): what it is made of
// (electrons or X-ray photons, hence its wavelength), the model of its initial probe (a condenser
// aperture or a zone plate's annular pupil, or a pinhole) and the reciprocal pixel of a far-field
// detector known by its distance and pixel size in metres. One resolution shared by the session,
// `tycho plan`, `tycho preprocess` and the preprocessing's binning check (docs/xray.md).
#pragma once

#include <tycho/sdk/optics.hpp>
#include <tycho/tycho_components.h>

#include <toml++/toml.h>

#include <array>
#include <string>

namespace tycho::host {

// The source's radiation, when its info() reaches that field and says (TYCHO_RADIATION_*);
// TYCHO_RADIATION_UNKNOWN otherwise.
int32_t source_radiation(const tycho_dataset_info& info);

// The source's far-field geometry in metres (distance, pixel along Qx, Qy): each NaN where its
// info() does not reach the fields or leaves them NaN or 0 (not recorded).
std::array<double, 3> source_far_field_m(const tycho_dataset_info& info);

// [optics] radiation ("electron" or "xray"), else what the source says, else electrons.
// `desc` names the data in messages.
sdk::radiation resolve_radiation(const toml::table& optics_t, const tycho_dataset_info& info, const std::string& desc);

// Fills o.kind (resolve_radiation), o.model, o.central_stop, o.pinhole_diameter_A and
// o.semiangle_mrad from [optics] (o.energy_eV set before): the semiangle is [optics]
// semiangle_mrad, else a zone plate's numerical aperture D / 2f (zone_plate_diameter_m,
// focal_length_m), else for a pinhole the first zero of its diffraction, 1.22 λ / d, else the
// file's; none of them: an error naming the keys. Refuses values out of range naming the key.
void resolve_probe_model(const toml::table& optics_t, const tycho_dataset_info& info, const std::string& desc,
                         sdk::probe_optics& o);

// The reciprocal pixel along Qx and Qy, Å⁻¹, of the detector as the source delivers it (before
// binning): [data] detector_pixel_invA; else the far field p / (λ z), p and z from [data]
// detector_pixel_size_m and detector_distance_m where given, else the source's metres; else the
// source's detector_pixel_invA. Neither: an error naming the keys. `wavelength_A`: the run's.
std::array<double, 2> resolve_detector_pixel_invA(const toml::table& data_t, const tycho_dataset_info& info,
                                                  const std::string& desc, double wavelength_A);

// The beam as a refusal that depends on it should state it, with where each value came from:
// "λ = 0.0417572 Å: electrons (the default: neither [optics] radiation nor '<desc>' says) of
// 80000 eV ([optics] energy_eV in <origin>); semiangle 25 mrad ([optics] semiangle_mrad in
// <origin>); detector pixel 0.06 Å⁻¹ (recorded in '<desc>')". `o` and `wavelength_A` as resolved
// (resolve_probe_model, the energy); `dk_invA` the detector pixel before binning (NaN: left out).
// `origin` names the config file.
std::string beam_provenance(const toml::table& optics_t, const toml::table& data_t, const tycho_dataset_info& info,
                            const std::string& desc, const std::string& origin, const sdk::probe_optics& o,
                            double wavelength_A, double dk_invA);

// What [optics] and [data] decide about the beam alone, checked before any data is read (a
// typo must not cost a scan's read): the keys resolve_probe_model and
// resolve_detector_pixel_invA would refuse whatever the source records.
void check_beam_settings(const toml::table& optics_t, const toml::table& data_t);

}  // namespace tycho::host
