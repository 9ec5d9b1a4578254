// A DLPack device as the manifests and logs write it: "cpu", "cuda:0", "rocm:1", ...
// (DLPack's own device names; not the names of engine components).
#pragma once

#include <dlpack/dlpack.h>

#include <string>

namespace tycho {

inline std::string device_label(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "cuda_host";
    case kDLROCM: return "rocm:" + std::to_string(d.device_id);
    default: return "device" + std::to_string(int(d.device_type)) + ":" + std::to_string(d.device_id);
  }
}

}  // namespace tycho
