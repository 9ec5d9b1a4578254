// Detector padding ([preprocess] pad_detector, pad_detector_to; host/src/data/detector_padding.cpp):
// the arithmetic on small synthetic patterns (the zero frequency lands at ⌊N'/2⌋, the mask marks
// exactly the padding), the exact invariant that masked pixels contribute nothing to the CPU
// engine's loss and gradients, and runs of the `tycho` command on the MoS2 counts.
#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/driver.hpp>
#include <tycho/core/error.hpp>
#include <tycho/host/preprocess.hpp>
#include <tycho/host/registry.hpp>
#include <tycho/host/result_record.hpp>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <cmath>
#include <complex>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "../host/src/data/detector_padding.hpp"
#include "run_command.hpp"
#include "built_in_plugins.hpp"
#include "test_paths.hpp"

namespace fs = std::filesystem;
using tycho::host::centred_padding;
using tycho::host::pad_centred_pattern;
using tycho::host::pad_fft_order_pattern;
using tycho::host::padding_mask_fft_order;
using tycho::test::command_result;
using tycho::test::run_command;

namespace {

// numpy's fftshift / ifftshift of an (n0, n1) array: centred index c ↔ FFT index (c − ⌊n/2⌋) mod n.
template <class T>
std::vector<T> fftshift(const std::vector<T>& a, int64_t n0, int64_t n1) {  // FFT order → centred
  std::vector<T> out(a.size());
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      out[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)] = a[std::size_t(i * n1 + j)];
  return out;
}
template <class T>
std::vector<T> ifftshift(const std::vector<T>& a, int64_t n0, int64_t n1) {  // centred → FFT order
  std::vector<T> out(a.size());
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      out[std::size_t(i * n1 + j)] = a[std::size_t(((i + n0 / 2) % n0) * n1 + (j + n1 / 2) % n1)];
  return out;
}

}  // namespace

// The host's shifts (two copies per row, host/src/data/preprocess.cpp) are numpy's element-wise
// permutations, for odd and even sizes, float32 and uint16 counts.
TEST(DetectorPadding, PatternShiftsAreNumpysPermutations) {
  for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{4, 6}, {5, 7}, {96, 96}, {3, 8}, {1, 1}}) {
    std::vector<float> a(std::size_t(n0 * n1)), out(a.size());
    std::vector<uint16_t> c(a.size()), cout(a.size());
    for (std::size_t k = 0; k < a.size(); ++k) a[k] = float(k) + 0.5f, c[k] = uint16_t(k);
    tycho::host::fftshift_pattern(a.data(), out.data(), n0, n1);
    EXPECT_EQ(out, fftshift(a, n0, n1)) << n0 << " x " << n1;
    tycho::host::ifftshift_pattern(a.data(), out.data(), n0, n1);
    EXPECT_EQ(out, ifftshift(a, n0, n1)) << n0 << " x " << n1;
    tycho::host::fftshift_pattern(c.data(), cout.data(), n0, n1);
    EXPECT_EQ(cout, fftshift(c, n0, n1)) << n0 << " x " << n1;
    tycho::host::ifftshift_pattern(c.data(), cout.data(), n0, n1);
    EXPECT_EQ(cout, ifftshift(c, n0, n1)) << n0 << " x " << n1;
  }
}

namespace {

// A centred (n0, n1) pattern whose pixel (i, j) holds 1 + 1000 (i − ⌊n0/2⌋ + 500) + (j − ⌊n1/2⌋ + 500),
// i.e. its own frequency, recognisable after any move; the zero frequency holds 500501.
std::vector<float> frequency_pattern(int64_t n0, int64_t n1) {
  std::vector<float> p(std::size_t(n0 * n1));
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      p[std::size_t(i * n1 + j)] = float(1 + 1000 * (i - n0 / 2 + 500) + (j - n1 / 2 + 500));
  return p;
}

TEST(DetectorPadding, CentredPaddingRule) {
  EXPECT_EQ(centred_padding(97, 98), (std::array<int64_t, 2>{1, 0}));  // centre 48 → 49
  EXPECT_EQ(centred_padding(96, 97), (std::array<int64_t, 2>{0, 1}));  // centre 48 → 48
  EXPECT_EQ(centred_padding(96, 100), (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(centred_padding(97, 100), (std::array<int64_t, 2>{2, 1}));
  EXPECT_EQ(centred_padding(97, 99), (std::array<int64_t, 2>{1, 1}));
  EXPECT_EQ(centred_padding(127, 128), (std::array<int64_t, 2>{1, 0}));
  EXPECT_EQ(centred_padding(96, 96), (std::array<int64_t, 2>{0, 0}));
  for (int64_t n = 1; n <= 40; ++n)
    for (int64_t m = n; m <= 60; ++m) {
      auto [before, after] = centred_padding(n, m);
      ASSERT_GE(before, 0);
      ASSERT_GE(after, 0);
      ASSERT_EQ(before + n + after, m);
      ASSERT_EQ(before + n / 2, m / 2) << n << " → " << m;  // the zero frequency moves to ⌊m/2⌋
    }
  EXPECT_THROW(centred_padding(96, 95), tycho::error);
}

// Odd → even, even → even, even → odd, non-square: every measured pixel keeps its frequency
// (so the zero frequency lands at ⌊N'/2⌋), the rest is zero, and the FFT-order padding and
// mask are exactly the centred ones shifted.
TEST(DetectorPadding, SmallPatterns) {
  struct shape { int64_t n0, n1, m0, m1; };
  for (const shape s : {shape{5, 5, 6, 6}, shape{4, 4, 6, 6}, shape{4, 4, 5, 5}, shape{3, 4, 4, 7},
                        shape{7, 2, 8, 5}, shape{1, 1, 2, 3}, shape{6, 5, 6, 5}}) {
    SCOPED_TRACE(testing::Message() << s.n0 << " x " << s.n1 << " → " << s.m0 << " x " << s.m1);
    const auto in = frequency_pattern(s.n0, s.n1);
    std::vector<float> out(std::size_t(s.m0 * s.m1), -1.f);
    pad_centred_pattern(in.data(), s.n0, s.n1, out.data(), s.m0, s.m1);

    // The zero frequency of the input (500501) sits at (⌊m0/2⌋, ⌊m1/2⌋).
    EXPECT_EQ(in[std::size_t((s.n0 / 2) * s.n1 + s.n1 / 2)], 500501.f);
    EXPECT_EQ(out[std::size_t((s.m0 / 2) * s.m1 + s.m1 / 2)], 500501.f);
    // Every pixel of the padded pattern: its own frequency where measured, 0 elsewhere.
    int64_t zeros = 0;
    std::vector<uint8_t> centred_mask(out.size());
    for (int64_t i = 0; i < s.m0; ++i)
      for (int64_t j = 0; j < s.m1; ++j) {
        const int64_t f0 = i - s.m0 / 2, f1 = j - s.m1 / 2;
        const bool measured = f0 >= -(s.n0 / 2) && f0 <= (s.n0 - 1) / 2 && f1 >= -(s.n1 / 2) && f1 <= (s.n1 - 1) / 2;
        const float expected = measured ? float(1 + 1000 * (f0 + 500) + (f1 + 500)) : 0.f;
        EXPECT_EQ(out[std::size_t(i * s.m1 + j)], expected) << "(" << i << ", " << j << ")";
        zeros += !measured;
        centred_mask[std::size_t(i * s.m1 + j)] = measured;
      }
    EXPECT_EQ(zeros, s.m0 * s.m1 - s.n0 * s.n1);

    // FFT order: pad_fft_order(ifftshift(x)) == ifftshift(pad_centred(x)), bit for bit.
    const auto in_fft = ifftshift(in, s.n0, s.n1);
    std::vector<float> out_fft(out.size(), -1.f);
    pad_fft_order_pattern(in_fft.data(), s.n0, s.n1, out_fft.data(), s.m0, s.m1);
    EXPECT_EQ(out_fft, ifftshift(out, s.m0, s.m1));
    EXPECT_EQ(out_fft[0], 500501.f);  // zero frequency at FFT index (0, 0)
    EXPECT_EQ(fftshift(out_fft, s.m0, s.m1), out);

    // The mask: FFT order, 1 exactly on the measured pixels, and its zeros count the padding.
    const auto mask = padding_mask_fft_order(s.n0, s.n1, s.m0, s.m1);
    EXPECT_EQ(mask, ifftshift(centred_mask, s.m0, s.m1));
    int64_t ones = 0;
    for (std::size_t k = 0; k < mask.size(); ++k) {
      ones += mask[k];
      EXPECT_EQ(mask[k] == 0, out_fft[k] == 0.f) << k;  // the inputs are all > 0
    }
    EXPECT_EQ(int64_t(mask.size()) - ones, s.m0 * s.m1 - s.n0 * s.n1);
  }
}

TEST(DetectorPadding, Dataset) {
  tycho::host::dataset d;
  d.patterns = 3;
  d.n0 = 5;
  d.n1 = 4;
  d.info.detector_shape[0] = 5;
  d.info.detector_shape[1] = 4;
  std::vector<float> centred;
  for (int j = 0; j < 3; ++j) {
    auto p = frequency_pattern(5, 4);
    for (auto& v : p) v += float(j) * 1e6f;
    auto f = ifftshift(p, 5, 4);
    d.targets.insert(d.targets.end(), f.begin(), f.end());
    centred.insert(centred.end(), p.begin(), p.end());
  }
  d.mean_total_intensity = 123;
  auto p = tycho::host::pad_detector(d, {6, 9});
  EXPECT_TRUE(p.padded());
  EXPECT_EQ(d.n0, 6);
  EXPECT_EQ(d.n1, 9);
  EXPECT_EQ(d.info.detector_shape[0], 5);  // the measured shape stays
  EXPECT_EQ(d.info.detector_shape[1], 4);
  EXPECT_EQ(d.mean_total_intensity, 123);
  EXPECT_EQ(p.detector, (std::array<int64_t, 2>{5, 4}));
  EXPECT_EQ(p.window, (std::array<int64_t, 2>{6, 9}));
  EXPECT_EQ(p.before_after[0], (std::array<int64_t, 2>{1, 0}));  // 5 (centre 2) → 6 (centre 3)
  EXPECT_EQ(p.before_after[1], (std::array<int64_t, 2>{2, 3}));  // 4 (centre 2) → 9 (centre 4)
  ASSERT_EQ(d.targets.size(), 3u * 54u);
  for (int j = 0; j < 3; ++j) {
    std::vector<float> padded(54);
    pad_centred_pattern(centred.data() + j * 20, 5, 4, padded.data(), 6, 9);
    std::vector<float> got(d.targets.begin() + j * 54, d.targets.begin() + (j + 1) * 54);
    EXPECT_EQ(got, ifftshift(padded, 6, 9)) << "pattern " << j;
  }
  EXPECT_EQ(p.mask, padding_mask_fft_order(5, 4, 6, 9));

  // Padding to the same size changes nothing and gives no mask (the engine sees none).
  auto before = d.targets;
  auto same = tycho::host::pad_detector(d, {6, 9});
  EXPECT_FALSE(same.padded());
  EXPECT_TRUE(same.mask.empty());
  EXPECT_EQ(d.targets, before);
  EXPECT_THROW(tycho::host::pad_detector(d, {5, 9}), tycho::error);
}

TEST(DetectorPadding, ConfigKeys) {
  auto request = [](const std::string& text) {
    toml::table t = toml::parse(text);
    return tycho::host::read_detector_padding(t, "test.toml");
  };
  using tycho::host::padded_window;
  auto none = request("");
  EXPECT_FALSE(none.pad);
  EXPECT_EQ(padded_window(none, 97, 127), (std::array<int64_t, 2>{97, 127}));
  auto fast = request("pad_detector = true");
  EXPECT_EQ(padded_window(fast, 97, 127), (std::array<int64_t, 2>{98, 128}));
  EXPECT_EQ(padded_window(fast, 96, 121), (std::array<int64_t, 2>{96, 125}));
  auto to = request("pad_detector_to = [100, 110]");
  EXPECT_EQ(padded_window(to, 96, 96), (std::array<int64_t, 2>{100, 110}));
  EXPECT_EQ(padded_window(request("pad_detector = true\npad_detector_to = [100, 110]"), 96, 96),
            (std::array<int64_t, 2>{100, 110}));
  EXPECT_THROW(padded_window(to, 101, 96), tycho::error);
  for (const char* bad : {"pad_detector = 1", "pad_detector_to = [100]", "pad_detector_to = [100, 0]",
                          "pad_detector_to = [100.0, 100]", "pad_detector_to = 100",
                          "pad_detector = false\npad_detector_to = [100, 100]"})
    EXPECT_THROW(request(bad), tycho::error) << bad;
}

TEST(DetectorPadding, SlowSizeWarnings) {
  EXPECT_TRUE(tycho::host::slow_fft_size_warnings(96, 100).empty());
  auto w = tycho::host::slow_fft_size_warnings(96, 127);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("axis 1"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("127 pixels"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("next fast size is 128"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("pad_detector = true"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("pad_detector_to = [96, 128]"), std::string::npos) << w[0];
  auto both = tycho::host::slow_fft_size_warnings(97, 121, true);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_NE(both[0].find("axis 0"), std::string::npos) << both[0];
  EXPECT_NE(both[1].find("next fast size is 125"), std::string::npos) << both[1];
  EXPECT_EQ(both[0].find("pad_detector = true"), std::string::npos) << both[0];
}

// ---- masked pixels contribute nothing, through the real CPU engine and amplitude loss

struct engine_run {
  double loss = 0;
  std::vector<std::complex<float>> object_grad, probe_grad;
};

using tycho::test::plugins;

// One batch of every pattern on the CPU engine (one thread) with the amplitude loss.
engine_run run_engine(std::vector<float>& targets, const std::vector<uint8_t>* mask, int64_t patterns,
                      int64_t n0, int64_t n1) {
  using cfloat = std::complex<float>;
  const auto& reg = plugins();
  const auto* engine_vt = reg.find(TYCHO_COMPONENT_ENGINE, "cpu").as<tycho_engine_vtable>();
  const auto* loss_vt = reg.find(TYCHO_COMPONENT_LOSS, "amplitude").as<tycho_loss_vtable>();
  auto doc = tycho::config_document::parse("threads = 1\n", "<test>", ".");
  tycho_config cfg{&doc.root(), "[reconstruct]", "."};
  tycho_loss* loss = nullptr;
  tycho::check_status(loss_vt->create(&cfg, &loss), "loss create");

  const int64_t h = n0 + 6, w = n1 + 6;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<cfloat> object(std::size_t(h * w)), probe(std::size_t(n0 * n1));
  for (auto& v : object) v = cfloat(1.f + 0.2f * u(gen), 0.3f * u(gen));
  for (auto& v : probe) v = cfloat(u(gen), u(gen));
  std::vector<double> positions;
  for (int64_t j = 0; j < patterns; ++j) {
    positions.push_back(double(n0 / 2) + 1.25 + double(j % 3));
    positions.push_back(double(n1 / 2) + 0.5 + double(j / 3));
  }
  int64_t tshape[3] = {patterns, n0, n1}, mshape[2] = {n0, n1}, pshape[2] = {patterns, 2};
  int64_t oshape[3] = {1, h, w}, prshape[3] = {1, n0, n1};
  DLTensor t_targets{targets.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, tshape, nullptr, 0};
  DLTensor t_mask{mask ? const_cast<uint8_t*>(mask->data()) : nullptr, {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, mshape, nullptr, 0};
  DLTensor t_pos{positions.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, pshape, nullptr, 0};
  DLTensor t_obj{object.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, oshape, nullptr, 0};
  DLTensor t_probe{probe.data(), {kDLCPU, 0}, 3, {kDLComplex, 64, 1}, prshape, nullptr, 0};
  tycho_engine_setup setup{};
  setup.struct_size = sizeof(setup);
  setup.config = &cfg;
  setup.targets = &t_targets;
  setup.mask = mask ? &t_mask : nullptr;
  setup.target_scale = 1e-3;
  setup.positions_px = &t_pos;
  setup.object_init = &t_obj;
  setup.probe_init = &t_probe;
  setup.loss = tycho_loss_binding{loss_vt, loss};
  setup.num_threads = 1;
  setup.device = {kDLCPU, 0};
  tycho_engine* engine = nullptr;
  tycho::check_status(engine_vt->create(&setup, &engine), "engine create");
  std::vector<int64_t> indices(static_cast<std::size_t>(patterns));
  for (int64_t j = 0; j < patterns; ++j) indices[std::size_t(j)] = j;
  engine_run r;
  tycho::check_status(engine_vt->compute_batch(engine, indices.data(), patterns, &r.loss), "compute_batch");
  if (engine_vt->collect_loss) tycho::check_status(engine_vt->collect_loss(engine, &r.loss), "collect_loss");
  r.object_grad.resize(object.size());
  r.probe_grad.resize(probe.size());
  tycho::check_status(engine_vt->read_tensor(engine, TYCHO_TENSOR_OBJECT_GRAD, r.object_grad.data(),
                                             r.object_grad.size() * sizeof(cfloat)), "read object grad");
  tycho::check_status(engine_vt->read_tensor(engine, TYCHO_TENSOR_PROBE_GRAD, r.probe_grad.data(),
                                             r.probe_grad.size() * sizeof(cfloat)), "read probe grad");
  engine_vt->destroy(engine);
  loss_vt->destroy(loss);
  return r;
}

// Padded 7 x 9 → 8 x 10 patterns: whatever the padded pixels hold, the loss and both gradients
// are the same bit for bit when the mask marks them; without the mask they are not.
TEST(DetectorPadding, MaskedPixelsContributeNothing) {
  const int64_t patterns = 6, n0 = 7, n1 = 9, m0 = 8, m1 = 10;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(0.f, 50.f);
  std::vector<float> padded;
  for (int64_t j = 0; j < patterns; ++j) {
    std::vector<float> fft(std::size_t(n0 * n1)), out(std::size_t(m0 * m1));
    for (auto& v : fft) v = u(gen);
    pad_fft_order_pattern(fft.data(), n0, n1, out.data(), m0, m1);
    padded.insert(padded.end(), out.begin(), out.end());
  }
  const auto mask = padding_mask_fft_order(n0, n1, m0, m1);
  std::vector<float> garbage = padded;
  for (std::size_t k = 0; k < garbage.size(); ++k)
    if (mask[k % mask.size()] == 0) garbage[k] = 1e4f + float(k);

  const engine_run a = run_engine(padded, &mask, patterns, m0, m1);
  const engine_run b = run_engine(garbage, &mask, patterns, m0, m1);
  ASSERT_TRUE(std::isfinite(a.loss) && a.loss > 0) << a.loss;
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_TRUE(a.object_grad == b.object_grad);
  EXPECT_TRUE(a.probe_grad == b.probe_grad);

  // The control: without the mask the padded pixels do count.
  const engine_run c = run_engine(padded, nullptr, patterns, m0, m1);
  const engine_run d = run_engine(garbage, nullptr, patterns, m0, m1);
  EXPECT_NE(c.loss, d.loss);
  EXPECT_GT(c.loss, a.loss);  // the model's intensity in the padding is > 0 and now counts
}

// ---- the `tycho` command on the MoS2 counts (96 x 96 detector)

std::string example_config() { return tycho::test::source_dir() + "/examples/mos2.toml"; }

using tycho::test::load_result;

// Lines of stderr containing `text`.
int count_lines(const command_result& r, const std::string& text) {
  int n = 0;
  for (const auto& line : r.err_lines()) n += line.find(text) != std::string::npos;
  return n;
}

class DetectorPaddingCli : public ::testing::Test {
 protected:
  command_result reconstruct(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {tycho::test::tycho_exe(), "reconstruct", example_config(),
                                     "--set", "output.previews=false", "-o", tmp_ / "result.zip"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  }
  tycho::test::temp_folder tmp_;
};

// 96 → 100 (2 + 2 masked rows and columns): 20 iterations, a finite and decreasing loss, and
// the manifest records the padding and the smaller real-space pixel 1 / (100 dk).
TEST_F(DetectorPaddingCli, PaddedRunConverges) {
  auto r = reconstruct({"--iterations", "20", "--set", "preprocess.pad_detector_to=[100, 100]"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(count_lines(r, "not a fast FFT size"), 0) << r.err;
  EXPECT_EQ(count_lines(r, "detector 96 x 96 padded to 100 x 100"), 1) << r.err;

  auto rec = load_result(tmp_ / "result.zip");
  const auto& history = rec.array("loss_history", "result.zip");
  ASSERT_EQ(history.shape, std::vector<int64_t>{20});
  const double* h = history.as<double>();
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(std::isfinite(h[i]) && h[i] > 0) << i << ": " << h[i];
  EXPECT_LT(h[19], 0.8 * h[0]) << "first " << h[0] << ", last " << h[19];
  int rises = 0;
  for (int i = 1; i < 20; ++i) rises += h[i] > h[i - 1];
  EXPECT_LE(rises, 3) << "the loss rose in " << rises << " of 19 iterations";

  EXPECT_EQ(rec.array("probe", "result.zip").shape, (std::vector<int64_t>{1, 100, 100}));
  auto m = nlohmann::json::parse(rec.manifest_json);
  EXPECT_EQ(m.at("data").at("detector_shape"), nlohmann::json::parse("[96, 96]"));
  const auto& cal = m.at("calibration");
  EXPECT_EQ(cal.at("window_shape"), nlohmann::json::parse("[100, 100]"));
  EXPECT_EQ(cal.at("detector_padding"), nlohmann::json::parse("[[2, 2], [2, 2]]"));
  // The detector pixel is unchanged; the object pixel is 96/100 of the unpadded 0.1736111 Å.
  const double dk = cal.at("detector_pixel_invA")[0].get<double>();
  EXPECT_NEAR(cal.at("object_pixel_A")[0].get<double>(), 1.0 / (100 * dk), 1e-12);
  EXPECT_NEAR(cal.at("object_pixel_A")[0].get<double>(), 0.1736111 * 96 / 100, 1e-6);
}

// A window of 97 (prime) is allowed but warned about once per axis, naming 97 and 98.
TEST_F(DetectorPaddingCli, SlowSizeWarnsOnce) {
  auto r = reconstruct({"--iterations", "1", "--set", "preprocess.pad_detector_to=[97, 97]"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(count_lines(r, "not a fast FFT size"), 2) << r.err;
  for (const char* axis : {"axis 0", "axis 1"}) {
    int n = 0;
    for (const auto& line : r.err_lines())
      if (line.find("not a fast FFT size") != std::string::npos && line.find(axis) != std::string::npos) {
        ++n;
        EXPECT_EQ(line.rfind("[tycho warning] preprocess: ", 0), 0u) << line;
        EXPECT_NE(line.find("97 pixels"), std::string::npos) << line;
        EXPECT_NE(line.find("next fast size is 98"), std::string::npos) << line;
        EXPECT_NE(line.find("pad_detector_to = [98, 98]"), std::string::npos) << line;
      }
    EXPECT_EQ(n, 1) << axis << "\n" << r.err;
  }
  auto m = nlohmann::json::parse(load_result(tmp_ / "result.zip").manifest_json);
  EXPECT_EQ(m.at("calibration").at("detector_padding"), nlohmann::json::parse("[[0, 1], [0, 1]]"));
}

// pad_detector = true on a fast detector (96) pads nothing and warns about nothing; a window
// smaller than the detector is an error naming the key.
TEST_F(DetectorPaddingCli, FastDetectorAndTooSmall) {
  auto r = reconstruct({"--iterations", "1", "--set", "preprocess.pad_detector=true"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(count_lines(r, "not a fast FFT size"), 0) << r.err;
  EXPECT_EQ(count_lines(r, "padded to"), 0) << r.err;
  auto m = nlohmann::json::parse(load_result(tmp_ / "result.zip").manifest_json);
  EXPECT_EQ(m.at("calibration").at("window_shape"), nlohmann::json::parse("[96, 96]"));
  EXPECT_EQ(m.at("calibration").at("detector_padding"), nlohmann::json::parse("[[0, 0], [0, 0]]"));
  fs::remove(tmp_ / "result.zip");

  auto bad = reconstruct({"--iterations", "1", "--set", "preprocess.pad_detector_to=[90, 100]"});
  EXPECT_TRUE(bad.exited_with(2)) << bad.describe();
  EXPECT_EQ(count_lines(bad, "tycho: error: "), 1) << bad.err;
  EXPECT_EQ(count_lines(bad, "pad_detector_to = [90, 100]"), 1) << bad.err;
  EXPECT_FALSE(fs::exists(tmp_ / "result.zip"));
}

}  // namespace
