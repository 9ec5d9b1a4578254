#include "tycho/core/launch.hpp"

#include <cstdlib>

#include "tycho/core/error.hpp"

namespace tycho {

environment_lookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {
int32_t integer_variable(const environment_lookup& env, const char* name, int32_t fallback) {
  auto v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || x < 0 || x > INT32_MAX)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "environment variable ", name, "=\"", *v,
         "\" is not a non-negative integer");
  return int32_t(x);
}

bool fill(launch_environment& l, const environment_lookup& env, const char* launcher, const char* rank,
          const char* size, const char* local) {
  if (!env(rank) || !env(size)) return false;
  l.launcher = launcher;
  l.rank = integer_variable(env, rank, 0);
  l.world_size = integer_variable(env, size, 1);
  l.local_rank = integer_variable(env, local, -1);
  l.variables = cat(rank, ", ", size, env(local) ? cat(", ", local) : std::string());
  if (l.world_size < 1 || l.rank >= l.world_size)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "launcher environment: ", rank, "=", l.rank, " is not below ", size, "=",
         l.world_size);
  return true;
}
}  // namespace

launch_environment detect_launch(const environment_lookup& env) {
  launch_environment l;
  bool found = fill(l, env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK") ||
               fill(l, env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK") ||
               (env("SLURM_STEP_ID") &&
                fill(l, env, "srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID")) ||
               fill(l, env, "mpiexec", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID");
  if (!found) l = launch_environment{};
  if (l.local_rank < 0) l.local_rank = l.world_size == 1 ? 0 : -1;
  if (auto a = env("MASTER_ADDR")) l.master_addr = *a;
  if (auto p = env("MASTER_PORT")) l.master_port = *p;
  return l;
}

}  // namespace tycho
