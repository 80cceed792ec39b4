// SPDX-License-Identifier: BSD-3-Clause
// Placeholder until the tcp backend lands.
#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>

namespace chorus {
std::shared_ptr<ProcessGroup> make_tcp_group(std::shared_ptr<Store>, int, int, TcpGroupOptions) {
  throw BackendError("the tcp backend is not implemented yet");
}
}  // namespace chorus
