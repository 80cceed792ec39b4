// SPDX-License-Identifier: BSD-3-Clause
// chorus._C: the torch.distributed backend class, for chorus/torch.py to register.
// torch.distributed must be imported first, so that torch's ProcessGroup (Backend on 2.x) and
// Store classes are known to pybind11 when this module names them as base and argument.
#include <chorus/chorus.hpp>
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group_chorus.hpp"

namespace py = pybind11;
using chorus::torch_bridge::ProcessGroupChorus;
using chorus::torch_bridge::TorchBackendBase;

PYBIND11_MODULE(_C, m) {
  m.doc() = "chorus's torch.distributed backend (use `import chorus.torch`)";
  m.def("version", [] { return std::string(chorus::version()); });
  m.attr("torch_major") = TORCH_VERSION_MAJOR;

  py::class_<ProcessGroupChorus, TorchBackendBase, c10::intrusive_ptr<ProcessGroupChorus>>(
      m, "ProcessGroupChorus")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& name) {
             return c10::make_intrusive<ProcessGroupChorus>(store, rank, size, timeout, name);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("name") = "world", py::call_guard<py::gil_scoped_release>(),
           "Connects a chorus tcp group of `size` ranks through torch's `store`; every rank "
           "calls it. Raises (naming the ranks that never showed up) after `timeout`.")
      .def_property_readonly("group_name", [](const ProcessGroupChorus& pg) {
        return pg.chorus_group()->name();
      });
}
