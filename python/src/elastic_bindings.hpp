// SPDX-License-Identifier: BSD-3-Clause
// chorus._C's elastic part: a chorus group handle that shrinks and grows (ProcessGroup::shrink,
// grow), the chorus world from the launcher's environment, and ProcessGroupChorus.adopt, from
// which chorus.torch.ElasticGroup remakes torch's default group after each change.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace chorus::torch_bridge {

void bind_elastic(pybind11::module_& m);

}  // namespace chorus::torch_bridge
