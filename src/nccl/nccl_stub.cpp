// SPDX-License-Identifier: BSD-3-Clause
// Built when CUDA or NCCL was not found: the nccl backend says so instead of failing obscurely.
#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

namespace chorus {

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store>, int, int, NcclGroupOptions) {
  throw BackendError(
      "chorus was built without NCCL: the nccl backend is not available. Install CUDA and NCCL "
      "(meson looks under -Dcudatoolkit_dir=/usr/local/cuda) and rebuild with -Dnccl=enabled, or use "
      "the tcp backend");
}

bool nccl_available() noexcept { return false; }

}  // namespace chorus
