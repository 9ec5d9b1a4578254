// The embedding C API (abi/tycho/tycho.h) over the C++ session: every entry point catches
// every exception and turns it into a status plus the thread's last-error message.
#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>
#include <tycho/tycho.h>

#include <tycho/core/launch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "runtime/status_barrier.hpp"
#include "tycho/host/evaluate.hpp"
#include "tycho/host/parallel.hpp"
#include "tycho/host/registry.hpp"
#include "tycho/host/session.hpp"

struct tycho_session {
  std::unique_ptr<tycho::host::parallel_context> parallel;  // outlives impl (declared first)
  std::unique_ptr<tycho::host::session> impl;
};

namespace {

template <class F>
tycho_status guarded(F&& f) noexcept {
  tycho::set_last_error(TYCHO_OK, "");
  return tycho::host::status_barrier("", std::forward<F>(f));
}

// After tycho_shutdown() no session may be made (MPI cannot start twice).
std::atomic<bool> g_shut_down{false};

// An error on one rank of a multi-rank run: unless [parallel] on_error = "return", say which
// rank failed and stop every rank (MPI_Abort), so no peer waits for this one until its timeout.
tycho_status stop_ranks_on_error(tycho_status st, tycho::host::parallel_context* par) {
  if (st != TYCHO_OK && st != TYCHO_ERR_CANCELLED && par != nullptr && par->world_size() > 1 && par->abort_on_error()) {
    std::fprintf(stderr, "tycho: error: rank %d/%d: %s\n", par->rank(), par->world_size(), tycho::last_error());
    std::fflush(stderr);
    par->abort(2);
  }
  return st;
}

tycho_status null_argument(const char* fn, const char* arg) {
  return tycho::set_last_error(TYCHO_ERR_INVALID_ARGUMENT,
                               tycho::cat(fn, ": argument '", arg, "' is NULL"));
}

// A DLManagedTensor that owns its array; the deleter frees both.
struct managed_array {
  DLManagedTensor managed{};
  tycho::owned_array array;
};

void delete_managed(DLManagedTensor* t) {
  if (t) delete static_cast<managed_array*>(t->manager_ctx);
}

}  // namespace

extern "C" {

TYCHO_API uint32_t tycho_abi_version(void) { return TYCHO_ABI_VERSION; }
TYCHO_API const char* tycho_version(void) { return TYCHO_VERSION_STRING; }
TYCHO_API const char* tycho_last_error(void) { return tycho::last_error(); }

TYCHO_API const char* tycho_status_string(tycho_status status) {
  switch (status) {
    case TYCHO_OK: return "TYCHO_OK";
    case TYCHO_ERR_INVALID_ARGUMENT: return "TYCHO_ERR_INVALID_ARGUMENT";
    case TYCHO_ERR_NOT_FOUND: return "TYCHO_ERR_NOT_FOUND";
    case TYCHO_ERR_IO: return "TYCHO_ERR_IO";
    case TYCHO_ERR_BAD_DATA: return "TYCHO_ERR_BAD_DATA";
    case TYCHO_ERR_ABI_MISMATCH: return "TYCHO_ERR_ABI_MISMATCH";
    case TYCHO_ERR_OUT_OF_MEMORY: return "TYCHO_ERR_OUT_OF_MEMORY";
    case TYCHO_ERR_UNSUPPORTED: return "TYCHO_ERR_UNSUPPORTED";
    case TYCHO_ERR_CANCELLED: return "TYCHO_ERR_CANCELLED";
    case TYCHO_ERR_INTERNAL: return "TYCHO_ERR_INTERNAL";
  }
  return "TYCHO_ERR_UNKNOWN";
}

TYCHO_API tycho_status tycho_session_create_ex(const char* toml_text, const tycho_session_options* options,
                                               tycho_session** out) {
  if (toml_text == nullptr) return null_argument("tycho_session_create_ex", "toml_text");
  if (out == nullptr) return null_argument("tycho_session_create_ex", "out");
  *out = nullptr;
  tycho_session_options o{};
  if (options != nullptr) {
    if (options->struct_size < offsetof(tycho_session_options, communicator) + sizeof(void*))
      return tycho::set_last_error(TYCHO_ERR_ABI_MISMATCH,
                                   "tycho_session_create_ex: options->struct_size is smaller than this ABI's "
                                   "tycho_session_options; set it to sizeof(tycho_session_options)");
    o = *options;
  }
  if (g_shut_down)
    return tycho::set_last_error(TYCHO_ERR_INVALID_ARGUMENT,
                                 "tycho_session_create_ex: tycho_shutdown() was called; no session can be made after it");
  std::unique_ptr<tycho::host::parallel_context> parallel;
  tycho_status st = guarded([&] {
    auto doc = tycho::config_document::parse(toml_text, "<config text>", o.base_dir ? o.base_dir : "");
    for (int64_t i = 0; i < o.n_overrides; ++i) {
      if (o.overrides == nullptr || o.overrides[i] == nullptr)
        return tycho::set_last_error(TYCHO_ERR_INVALID_ARGUMENT,
                                     tycho::cat("tycho_session_create_ex: overrides[", i, "] is NULL"));
      doc.set_from_text(o.overrides[i]);
    }
    auto& reg = tycho::host::registry::global();
    auto s = std::make_unique<tycho_session>();
    parallel = tycho::host::parallel_context::create(doc, reg, tycho::detect_launch(tycho::process_environment()),
                                                     o.communicator);
    s->impl = std::make_unique<tycho::host::session>(std::move(doc), reg, "", parallel.get());
    s->parallel = std::move(parallel);
    *out = s.release();
    return TYCHO_OK;
  });
  return stop_ranks_on_error(st, parallel.get());
}

TYCHO_API tycho_status tycho_session_create(const char* toml_text, const char* base_dir,
                                            tycho_session** out) {
  tycho_session_options o{};
  o.struct_size = sizeof o;
  o.base_dir = base_dir;
  return tycho_session_create_ex(toml_text, &o, out);
}

TYCHO_API int32_t tycho_session_rank(const tycho_session* session) {
  return session ? session->parallel->rank() : 0;
}

TYCHO_API int32_t tycho_session_world_size(const tycho_session* session) {
  return session ? session->parallel->world_size() : 1;
}

TYCHO_API tycho_status tycho_session_barrier(tycho_session* session) {
  if (session == nullptr) return null_argument("tycho_session_barrier", "session");
  return stop_ranks_on_error(guarded([&] {
    session->parallel->barrier();
    return TYCHO_OK;
  }), session->parallel.get());
}

TYCHO_API void tycho_shutdown(void) {
  g_shut_down = true;
  try {
    tycho::host::shutdown_reducers(tycho::host::registry::global());
  } catch (...) {
  }
}

TYCHO_API tycho_status tycho_session_run(tycho_session* session, int64_t iterations,
                                         tycho_progress_fn progress, void* user_data) {
  if (session == nullptr) return null_argument("tycho_session_run", "session");
  return stop_ranks_on_error(guarded([&] {
    bool finished = session->impl->run(iterations, [&](const tycho_progress& p) {
      return progress == nullptr || progress(&p, user_data) == 0;
    });
    if (!finished)
      return tycho::set_last_error(TYCHO_ERR_CANCELLED, "the progress callback stopped the run");
    return TYCHO_OK;
  }), session->parallel.get());
}

TYCHO_API tycho_status tycho_session_get(tycho_session* session, const char* name,
                                         DLManagedTensor** out) {
  if (session == nullptr) return null_argument("tycho_session_get", "session");
  if (name == nullptr) return null_argument("tycho_session_get", "name");
  if (out == nullptr) return null_argument("tycho_session_get", "out");
  *out = nullptr;
  return guarded([&] {
    std::string which = std::strcmp(name, "positions") == 0 ? "positions_px" : name;
    auto holder = std::make_unique<managed_array>();
    holder->array = session->impl->get(which);
    holder->managed.dl_tensor = holder->array.view();
    holder->managed.manager_ctx = holder.get();
    holder->managed.deleter = &delete_managed;
    *out = &holder.release()->managed;
    return TYCHO_OK;
  });
}

TYCHO_API tycho_status tycho_session_save(tycho_session* session, const char* path,
                                          tycho_save_mode mode) {
  if (session == nullptr) return null_argument("tycho_session_save", "session");
  if (path == nullptr) return null_argument("tycho_session_save", "path");
  return guarded([&] {
    session->impl->save(path, mode);
    return TYCHO_OK;
  });
}

TYCHO_API void tycho_session_destroy(tycho_session* session) { delete session; }

TYCHO_API tycho_status tycho_evaluate(const char* result_path, const char* truth_path,
                                      const tycho_evaluate_options* options, char** json) {
  if (json == nullptr) return null_argument("tycho_evaluate", "json");
  *json = nullptr;
  if (result_path == nullptr) return null_argument("tycho_evaluate", "result_path");
  if (truth_path == nullptr) return null_argument("tycho_evaluate", "truth_path");
  tycho_evaluate_options o{};
  if (options != nullptr) {
    if (options->struct_size < offsetof(tycho_evaluate_options, slice_thickness_A) + sizeof(double))
      return tycho::set_last_error(TYCHO_ERR_ABI_MISMATCH,
                                   "tycho_evaluate: options->struct_size is smaller than this ABI's "
                                   "tycho_evaluate_options; set it to sizeof(tycho_evaluate_options)");
    o = *options;
  }
  // 0 takes the default (that of `tycho evaluate`); anything else must be finite and in range.
  auto option = [](const char* name, double v, double fallback, double max, double& out) {
    if (v == 0) {
      out = fallback;
      return TYCHO_OK;
    }
    if (!std::isfinite(v) || v < 0 || v > max)
      return tycho::set_last_error(TYCHO_ERR_INVALID_ARGUMENT,
                                   tycho::cat("tycho_evaluate: options->", name, " = ", v, ": expected 0 (the default) or a "
                                              "finite number in (0, ", max, "]"));
    out = v;
    return TYCHO_OK;
  };
  double sigma_A = 0, fov = 0, thickness = 0;
  if (tycho_status st = option("sigma_A", o.sigma_A, 2.0, 1e6, sigma_A); st != TYCHO_OK) return st;
  if (tycho_status st = option("fov_fraction", o.fov_fraction, 0.8, 1.0, fov); st != TYCHO_OK) return st;
  if (tycho_status st = option("slice_thickness_A", o.slice_thickness_A, 0.0, 1e6, thickness); st != TYCHO_OK)
    return st;
  return guarded([&] {
    const std::string text =
        tycho::host::evaluate_result(tycho::host::registry::global(), result_path, truth_path, sigma_A, fov,
                                     thickness > 0 ? std::optional<double>(thickness) : std::nullopt);
    char* copy = static_cast<char*>(std::malloc(text.size() + 1));
    if (copy == nullptr) return tycho::set_last_error(TYCHO_ERR_OUT_OF_MEMORY, "tycho_evaluate: out of memory");
    std::memcpy(copy, text.c_str(), text.size() + 1);
    *json = copy;
    return TYCHO_OK;
  });
}

TYCHO_API void tycho_free_string(char* text) { std::free(text); }

}  // extern "C"
