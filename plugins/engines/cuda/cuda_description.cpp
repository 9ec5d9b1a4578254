#include "cuda_description.hpp"

#include <tycho/core/memory_plan.hpp>

namespace tycho::cuda {

void plan_memory(const sdk::config_view& cfg, const tycho_memory_problem& problem, tycho_memory_report* out) {
  memory_problem p = from_abi(problem, memory_model::cuda);
  p.deterministic = cfg.get_bool("deterministic").value_or(false);
  // cuda_engine.cu: one cuFFT work area shared by the plans, 8 partial sums of the probe
  // gradient, and an allowance for the CUDA context and the stream-ordered allocator.
  p.fft_plans = 1;
  p.probe_gradient_slices = 8;
  p.reserve_bytes = uint64_t(512) << 20;
  std::vector<memory_term> terms = memory_terms(p);
  terms.pop_back();  // the total: the host sums
  to_abi(terms, memory_flags(p), out);
}

}  // namespace tycho::cuda
