// SPDX-License-Identifier: BSD-3-Clause
// chorus._C: the torch.distributed backend class, for chorus/torch.py to register.
// torch.distributed must be imported first, so that torch's ProcessGroup (Backend on 2.x) and
// Store classes are known to pybind11 when this module names them as base and argument.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <chorus/chorus.hpp>

#include "elastic_bindings.hpp"
#include "process_group_chorus.hpp"
#include "shared_storage.hpp"
#include "torch_work.hpp"

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
      .def_property_readonly(
          "group_name", [](const ProcessGroupChorus& pg) { return pg.chorus_group()->name(); });

  chorus::torch_bridge::bind_elastic(m);

  // chorus.torch.wire_dtype(): dtypes by name, None for the group's default.
  m.def(
      "_set_wire_dtype",
      [](std::optional<std::string> name) -> std::optional<std::string> {
        std::optional<chorus::DataType> wire;
        if (name) {
          wire = chorus::parse_data_type(*name);
          if (!wire) {
            throw py::value_error("chorus: wire_dtype '" + *name + "' is not a dtype name");
          }
        }
        const auto before = chorus::torch_bridge::set_thread_wire_dtype(wire);
        if (!before) {
          return std::nullopt;
        }
        return std::string(chorus::to_string(*before));
      },
      py::arg("name"),
      "Sets this thread's wire dtype for the next allreduce, reduce_scatter and reduce "
      "(chorus.torch.wire_dtype); returns the previous one.");

  m.def("move_to_shared_buffer", &chorus::torch_bridge::move_to_shared_buffer, py::arg("tensor"),
        "Moves the tensor's storage into a SharedBuffer in place (chorus.torch.share_); false "
        "when it is empty or there already.");
  m.def(
      "in_shared_buffer",
      [](const at::Tensor& t) {
        return t.device().is_cpu() && chorus::in_shared_buffer(t.data_ptr(), t.nbytes());
      },
      py::arg("tensor"), "Whether the tensor's bytes lie in one SharedBuffer of this process.");
  m.attr("shared_buffer_min_bytes") = chorus::kSharedBufferMinOpBytes;
  m.def(
      "_quiesce_at_exit",
      [] {
        py::gil_scoped_release release;
        chorus::torch_bridge::quiesce_for_exit(std::chrono::seconds(5));
      },
      "For atexit (chorus.torch registers it): chorus's threads stop touching Python objects, and "
      "completions still running finish first (up to 5 s).");

  // The memory behind chorus.torch.shared_empty(): a Python buffer that torch.frombuffer wraps
  // (the tensor keeps the object, and so the memory, alive).
  py::class_<chorus::SharedBuffer>(m, "SharedBuffer", py::buffer_protocol())
      .def(py::init<std::size_t>(), py::arg("nbytes"),
           "Zero-filled host memory that a one-host chorus group maps (chorus/shared_buffer.hpp); "
           "raises RuntimeError saying why when it cannot be had.")
      .def_property_readonly("nbytes", &chorus::SharedBuffer::size)
      .def_buffer([](chorus::SharedBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.size())}, {py::ssize_t{1}});
      });
}
