// An engine component and its loss, created through the ABI as the host creates them, for tests
// that call the engine's vtable directly (gradients against finite differences, precisions,
// paths against each other). Host engines only: compute_batch adds the loss directly.
#pragma once

#include <gtest/gtest.h>

#include <tycho/core/config.hpp>
#include <tycho/core/last_error.hpp>

#include <dlpack/dlpack.h>

#include <complex>
#include <cstddef>
#include <string>
#include <vector>

#include "built_in_plugins.hpp"

namespace tycho::test {

class engine_under_test {
 public:
  // `reconstruct_toml`: the body of the [reconstruct] table the engine and the loss read.
  // `setup`: the problem's tensors and fields; its struct_size, config and loss are filled here.
  // `loss_far_field` false: the loss as one built before tycho_loss_vtable::evaluate_far_field
  // (the vtable ends before it), so the engine takes its unfused path.
  engine_under_test(const std::string& engine, const std::string& reconstruct_toml, tycho_engine_setup setup,
                    const char* loss = "amplitude", bool loss_far_field = true)
      : doc_(tycho::config_document::parse("[reconstruct]\n" + reconstruct_toml, "<test>", "")),
        cfg_{&doc_.table_at("reconstruct"), "[reconstruct]", ""} {
    evt_ = plugins().find(TYCHO_COMPONENT_ENGINE, engine).as<tycho_engine_vtable>();
    lvt_ = plugins().find(TYCHO_COMPONENT_LOSS, loss).as<tycho_loss_vtable>();
    if (!loss_far_field) {
      older_loss_ = *lvt_;
      older_loss_.struct_size = uint32_t(offsetof(tycho_loss_vtable, evaluate_far_field));
      older_loss_.evaluate_far_field = nullptr;
      lvt_ = &older_loss_;
    }
    EXPECT_EQ(lvt_->create(&cfg_, &loss_), TYCHO_OK);
    setup.struct_size = sizeof(setup);
    setup.config = &cfg_;
    setup.loss = {lvt_, loss_};
    if (setup.device.device_type == 0) setup.device = {kDLCPU, 0};
    status_ = evt_->create(&setup, &eng_);
  }
  ~engine_under_test() {
    if (eng_) evt_->destroy(eng_);
    if (loss_) lvt_->destroy(loss_);
  }
  engine_under_test(const engine_under_test&) = delete;
  engine_under_test& operator=(const engine_under_test&) = delete;

  bool ok() const { return status_ == TYCHO_OK; }
  // Σ L over the batch `idx`; gradients in the engine's tensors.
  double batch(const std::vector<int64_t>& idx) {
    double loss = 0;
    EXPECT_EQ(evt_->compute_batch(eng_, idx.data(), int64_t(idx.size()), &loss), TYCHO_OK) << tycho::last_error();
    return loss;
  }
  // The object gradient read only inside `boxes` (rows of [row0, row1, col0, col1); empty: all).
  tycho_status set_region(const std::vector<int64_t>& boxes) {
    return evt_->set_gradient_region(eng_, boxes.data(), int64_t(boxes.size() / 4));
  }
  // position_information (ABI 1.4) of the patterns `idx`: (J_00, J_01, J_11) per pattern.
  tycho_status information(const std::vector<int64_t>& idx, double counts_per_target_unit, std::vector<double>& out) {
    out.assign(3 * idx.size(), 0.0);
    if (evt_->position_information == nullptr) return TYCHO_ERR_UNSUPPORTED;
    return evt_->position_information(eng_, idx.data(), int64_t(idx.size()), counts_per_target_unit, out.data());
  }
  // compute_batch's status (for refusals; last_error() has the message).
  tycho_status try_batch(const std::vector<int64_t>& idx) {
    double loss = 0;
    return evt_->compute_batch(eng_, idx.data(), int64_t(idx.size()), &loss);
  }
  tycho_status get_status(tycho_tensor_id id) {
    DLTensor t{};
    return evt_->get_tensor(eng_, id, &t);
  }
  DLTensor tensor(tycho_tensor_id id) {
    DLTensor t{};
    EXPECT_EQ(evt_->get_tensor(eng_, id, &t), TYCHO_OK);
    return t;
  }
  // A tensor's bytes, as the engine holds them (for bit-for-bit comparisons).
  std::vector<unsigned char> bytes(tycho_tensor_id id) {
    DLTensor t = tensor(id);
    int64_t n = t.dtype.bits / 8;
    for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
    const auto* b = static_cast<const unsigned char*>(t.data);
    return std::vector<unsigned char>(b, b + n);
  }
  // Deterministic sums (ABI 1.3): the step after the host's sum of the engine's integer sums
  // (TYCHO_TENSOR_FIXED_POINT_SUMS) over the ranks; returns `again` (1: compute the batch again).
  int32_t finish(uint32_t flags, double& loss) {
    int32_t again = -1;
    EXPECT_EQ(evt_->finish_batch(eng_, flags, &again, &loss, nullptr), TYCHO_OK) << tycho::last_error();
    return again;
  }
  // A float64 tensor's values (the positions, their gradient) as complex numbers with no imaginary
  // part, to compare as the complex ones are.
  std::vector<std::complex<double>> real_values(tycho_tensor_id id) {
    DLTensor t = tensor(id);
    int64_t n = 1;
    for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
    EXPECT_EQ(t.dtype.code, kDLFloat);
    EXPECT_EQ(t.dtype.bits, 64);
    const auto* d = static_cast<const double*>(t.data);
    return std::vector<std::complex<double>>(d, d + n);
  }
  // A complex tensor's values in double precision, whatever the engine's.
  std::vector<std::complex<double>> values(tycho_tensor_id id) {
    DLTensor t = tensor(id);
    int64_t n = 1;
    for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
    std::vector<std::complex<double>> v(static_cast<std::size_t>(n));
    for (int64_t k = 0; k < n; ++k)
      v[std::size_t(k)] = t.dtype.bits == 128 ? static_cast<std::complex<double>*>(t.data)[k]
                                              : std::complex<double>(static_cast<std::complex<float>*>(t.data)[k]);
    return v;
  }

 private:
  tycho::config_document doc_;
  tycho_config cfg_;
  const tycho_engine_vtable* evt_ = nullptr;
  const tycho_loss_vtable* lvt_ = nullptr;
  tycho_loss_vtable older_loss_{};
  tycho_loss* loss_ = nullptr;
  tycho_engine* eng_ = nullptr;
  tycho_status status_ = TYCHO_ERR_INTERNAL;
};

}  // namespace tycho::test
