// The session's step 2b (session.cpp's constructor): the scan's geometry by trial
// reconstructions ([preprocess] scan_geometry_search, runtime/geometry_search.hpp) where the
// preprocessing could not measure it, and a resumed run's adoption of the geometry they found.

#include "runtime/session_state.hpp"

#include <chrono>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/geometry_search.hpp"
#include "tycho/host/log.hpp"
#include "tycho/host/preprocess.hpp"

namespace tycho::host {

using namespace session_detail;

// 2b. The scan's geometry by trial reconstructions ([preprocess] scan_geometry_search), where the
// preprocessing could not measure it (or always, where asked): the data are then read again with
// the search's rotation and transpose stated, and the scan map holds the rotation.
void session::state::search_geometry(state& s, start& st) {
  using mode = preprocess_settings::search_mode;
  const preprocess_settings pre = read_preprocess_settings(s.config.table_at("preprocess"), s.config.origin());
  if (!pre.rotation_auto || pre.geometry_search == mode::never) return;
  // Where the search cannot run, a stated `true` hears why ("auto" asked for nothing).
  const auto not_run = [&](const std::string& why) {
    if (pre.geometry_search == mode::always)
      log_warning("session", cat("[preprocess] scan_geometry_search = true: not run: ", why));
  };
  if (st.prepared) return not_run("the prepared file's geometry was decided when it was made");
  nlohmann::json report = nlohmann::json::parse(s.preprocess_json, nullptr, false);
  // The data read again with the config as it now stands, saying only what the first read did
  // not; the search's record joins the new report (`taken`: its geometry is the map's source).
  const auto read_again = [&](nlohmann::json record, bool taken) {
    s.data = dataset{};
    {
      log_repeats_dropped said(s.first_read_log);
      read_data(s, st);
    }
    nlohmann::json again = nlohmann::json::parse(s.preprocess_json, nullptr, false);
    if (!again.is_object()) return;
    if (taken && again.contains("scan_map") && again["scan_map"].is_object())
      again["scan_map"]["source"] = "trial reconstructions";
    again["scan_geometry_search"] = std::move(record);
    s.preprocess_json = again.dump();
  };
  // The search's geometry, stated: the data are read again with it (a transpose reorders the
  // patterns' pixels), and the run's record says what it ran with; the first read's measurements
  // stay in the search's record. The scan map holds the placed rotation (its other parameters are
  // refined as ever): the placement is the minimum of the whole scan's loss over the angle, where
  // the map's steps, on slopes from mini-batches at the doses the search runs at, move it by their
  // noise (hBN at 5,000 e/Å²: placed 0.47° from the truth, the map took it to 2.05° off; graphene
  // 1.84° -> 1.96°). The run's Pearson there scatters by ±0.04 with the map's other steps either
  // way (bench/RESULTS.md, "Session 23").
  const auto adopt = [&](double deg, bool transpose, nlohmann::json record) {
    if (report.is_object() && report.contains("scan_map")) record["preprocessing_scan_map"] = report["scan_map"];
    s.config.set_from_text(cat("preprocess.scan_rotation_deg=", deg));
    s.config.set_from_text(cat("preprocess.scan_transpose=", transpose ? "true" : "false"));
    s.config.set_from_text("preprocess.scan_geometry_search=false");  // done: the record states its result
    read_again(std::move(record), true);
    st.settings.scan.free[0] = false;  // the placed rotation, held as a stated one
  };
  if (st.resume) {
    // A run whose geometry the search found resumes with it, from the config it ran from too
    // (whose "auto" would otherwise read the data with the preprocessing's geometry).
    const nlohmann::json* found = st.resume->file.manifest.find("preprocess.scan_geometry_search");
    if (found != nullptr && found->is_object() && found->value("conclusive", false) &&
        found->contains("rotation_deg") && (*found)["rotation_deg"].is_number() && found->contains("transpose") &&
        (*found)["transpose"].is_boolean()) {
      const double deg = (*found)["rotation_deg"].get<double>();
      const bool transpose = (*found)["transpose"].get<bool>();
      if (!std::isfinite(deg) || std::abs(deg) > 360)
        fail(TYCHO_ERR_BAD_DATA, "'", st.resume->path, "': preprocess.scan_geometry_search.rotation_deg = ", deg,
             ": expected a number of degrees from -360 to 360");
      log_info("session", cat("resuming with the geometry the trial reconstructions of '", st.resume->path,
                              "' found: scan_rotation_deg = ", deg, ", scan_transpose = ", transpose ? "true" : "false"));
      adopt(deg, transpose, *found);
      return;
    }
    return not_run("a resumed run continues from its own positions");
  }
  if (!report.is_object() || !report.contains("scan_map") || !report["scan_map"].is_object())
    return not_run("the scan's geometry is not estimated (the source lists the positions, or the scan has fewer "
                   "than 3 positions along an axis)");
  const bool measured = report["scan_map"].value("source", std::string("nominal")) != "nominal";
  if (pre.geometry_search == mode::fallback && measured) return;
  if (s.par->world_size() > 1) {
    log_warning("session", cat("[preprocess] scan_geometry_search: not run on ", s.par->world_size(),
                               " ranks (its trials are single-rank runs): the preprocessing's geometry is used"));
    return;
  }
  // How far the data place positions pattern by pattern: the neighbouring patterns' information
  // (summed over both axes) against its standard error. Where it is not beyond twice that the
  // search still runs (the trials pool the whole scan: on a held-out graphene scan at 1,600
  // electrons a pattern it measured 1.3 ± 3.1 and the trials found the truth's rotation, t = 4.9
  // and 10.1), but its two tests need the one-sided 99 % point instead of 95 %: the seeds share
  // the one realisation of the noise that chose the winner, which a structureless scan of pure
  // noise can favour (on 12 x 12 noise scans one search of four at 50 iterations and 45° steps
  // passed both tests at 95 %, and one at 200 iterations and 90° steps, t = 11.4 and 2.48; at the
  // default 200 iterations and 20° steps none of ten).
  const pair_information_sums info = neighbour_information(s);
  const double information = info.measured ? info.mean[0] + info.mean[1] : std::nan("");
  const double information_se =
      info.measured ? std::hypot(info.standard_error[0], info.standard_error[1]) : std::nan("");
  const bool places = info.measured && information > 2 * information_se;
  geometry_search_options o = geometry_search_options_of(pre, s.data.all_patterns, st.settings.driver.batch_size);
  o.detector_pixels = s.data.n0 * s.data.n1;
  o.strict = !places;
  if (!places)
    log_info("session", cat("[preprocess] scan_geometry_search: neighbouring patterns differ by ",
                            info.measured ? cat(information, " ± ", information_se) : std::string("(not measured)"),
                            " counts² per count beyond their counting noise, not beyond twice its standard error: the "
                            "search's checks need the one-sided 99 % point"));
  // "auto" bounds the trials' whole work (geometry_search_auto_max_work: about a quarter of an
  // hour on two cores). A larger scan's parallax is the more precise for it (its error falls as
  // 1/√patterns), so one that it cannot measure holds little to find.
  const double work = geometry_search_work(o, s.data.n0 * s.data.n1);
  if (pre.geometry_search == mode::fallback && work > geometry_search_auto_max_work) {
    log_warning("session", cat("[preprocess] scan_geometry_search = \"auto\": the trial reconstructions are not run: ",
                               geometry_search_trials(o), " trials of ", o.iterations, " iterations over ",
                               s.data.all_patterns, " patterns of ", s.data.n0, " x ", s.data.n1, " pixels are ",
                               std::round(work / geometry_search_auto_max_work * 10) / 10,
                               " times the work \"auto\" allows them (about a quarter of an hour); ",
                               "scan_geometry_search = true runs them, or give scan_rotation_deg and scan_transpose"));
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  log_info("session", cat("the scan's geometry ", measured ? "(scan_geometry_search = true)" : "was not measured",
                          ": ranking candidate rotations", pre.transpose_auto ? " and transposes" : "",
                          " by ", geometry_search_trials(o), " trial reconstructions ([preprocess] scan_geometry_search)"));
  // The trials read the data themselves: this read's patterns go first, so that the search's peak
  // memory is one run's (tycho plan's figure; the placement's batch of the whole scan adds at most
  // geometry_search_placement_pixels pattern pixels per batch buffer), and whichever geometry
  // follows reads them again.
  s.data = dataset{};
  s.measured_mean = {};
  const geometry_search_result r = search_scan_geometry(s.config, *s.reg, o);
  nlohmann::json trials = nlohmann::json::array();
  for (const geometry_trial& t : r.trials) trials.push_back({t.rotation_deg, t.transpose, t.seed, t.fold, t.loss});
  nlohmann::json search = {{"conclusive", r.conclusive},
                           {"rotation_deg", r.rotation_deg},
                           {"transpose", r.transpose},
                           {"runner_up", {r.runner_up_deg, r.runner_up_transpose}},
                           {"step_deg", r.step_deg},
                           {"iterations", o.iterations},
                           {"fine_offsets_deg", r.fine_offsets_deg},
                           {"fine_losses", r.fine_losses},
                           {"fine_batch", r.fine_batch},
                           {"gaps", r.gaps},
                           {"neighbour_information", information},
                           {"neighbour_information_standard_error", information_se},
                           {"t_statistic", r.t_statistic},
                           {"t_critical", r.t_critical},
                           {"trials_rotation_transpose_seed_fold_loss", trials},
                           {"seconds", seconds_since(t0)}};
  if (!r.conclusive) {
    log_warning("session", cat(r.summary, " (", seconds_since(t0), " s): the ", measured ? "preprocessing's geometry" : "nominal raster",
                               " is used (give scan_rotation_deg and scan_transpose if the scan is turned against the detector)"));
    read_again(std::move(search), false);  // as before the trials: the same geometry, the same report
    return;
  }
  log_info("session", cat(r.summary, " (", seconds_since(t0), " s); the data are read again with it"));
  adopt(r.rotation_deg, r.transpose, std::move(search));
}

}  // namespace tycho::host
