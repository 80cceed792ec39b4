// SPDX-License-Identifier: BSD-3-Clause
#include "shared_storage.hpp"

#include <cstring>
#include <memory>

#include <c10/core/StorageImpl.h>
#include <chorus/errors.hpp>
#include <chorus/shared_buffer.hpp>

namespace chorus::torch_bridge {
namespace {

// The DataPtr's context: the SharedBuffer, freed (its memfd closed, its pages unmapped) when
// the storage lets go of the memory.
void free_shared_buffer(void* context) { delete static_cast<SharedBuffer*>(context); }

}  // namespace

bool move_to_shared_buffer(const at::Tensor& t) {
  if (!t.device().is_cpu()) {
    throw InvalidArgument("chorus: share_(): the tensor is on " + t.device().str() +
                          "; SharedBuffers are host memory (a CPU tensor)");
  }
  const c10::Storage& storage = t.storage();
  const std::size_t bytes = storage.nbytes();
  const c10::DataPtr& old = storage.data_ptr();
  if (bytes == 0 || old.get_deleter() == &free_shared_buffer) {
    return false;
  }
  auto buffer = std::make_unique<SharedBuffer>(bytes);
  std::memcpy(buffer->data(), old.get(), bytes);
  void* data = buffer->data();
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(
      c10::DataPtr(data, buffer.release(), &free_shared_buffer, c10::Device(c10::kCPU)));
  return true;
}

}  // namespace chorus::torch_bridge
