// SPDX-License-Identifier: BSD-3-Clause
#include "elastic_bindings.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <chorus/chorus.hpp>

#include "chorus_c10d_store.hpp"
#include "process_group_chorus.hpp"

namespace py = pybind11;

namespace chorus::torch_bridge {
namespace {

// A chorus group, held from Python between torch groups.
struct GroupHandle {
  std::shared_ptr<ProcessGroup> group;
};

Duration seconds(double s, const char* what) {
  if (!(s >= 0)) {
    throw InvalidArgument(std::string("chorus: ") + what + " must be >= 0 seconds");
  }
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

}  // namespace

void bind_elastic(py::module_& m) {
  py::class_<GroupHandle, std::shared_ptr<GroupHandle>>(
      m, "Group", "A chorus tcp group (chorus.torch.ElasticGroup holds one under torch's group).")
      .def_property_readonly("rank", [](const GroupHandle& h) { return h.group->rank(); })
      .def_property_readonly("size", [](const GroupHandle& h) { return h.group->size(); })
      .def_property_readonly("name", [](const GroupHandle& h) { return h.group->name(); })
      .def(
          "shrink",
          [](const GroupHandle& h, double grace_s, double join_timeout_s) {
            ShrinkOptions options;
            options.grace = seconds(grace_s, "grace");
            options.join_timeout = seconds(join_timeout_s, "join_timeout");
            return GroupHandle{h.group->shrink(options)};
          },
          py::arg("grace"), py::arg("join_timeout"), py::call_guard<py::gil_scoped_release>(),
          "ProcessGroup::shrink: the survivors' group.")
      .def(
          "grow",
          [](const GroupHandle& h, double wait_s, double join_timeout_s) {
            GrowOptions options;
            options.wait = seconds(wait_s, "wait");
            options.join_timeout = seconds(join_timeout_s, "join_timeout");
            auto larger = h.group->grow(options);
            return larger ? std::optional<GroupHandle>(GroupHandle{std::move(larger)})
                          : std::nullopt;
          },
          py::arg("wait"), py::arg("join_timeout"), py::call_guard<py::gil_scoped_release>(),
          "ProcessGroup::grow: the larger group, or None when nobody waits to join.")
      .def(
          "stop_admitting",
          [](const GroupHandle& h, const std::string& reason) { h.group->stop_admitting(reason); },
          py::arg("reason"), py::call_guard<py::gil_scoped_release>());

  m.def(
      "init_world",
      [](std::chrono::milliseconds timeout) {
        InitOptions options;
        options.tcp.group.timeout = timeout;
        options.store_timeout = timeout;
        World world;
        {
          py::gil_scoped_release no_gil;
          world = init_world_from_env(Backend::tcp, options);
        }
        return py::make_tuple(GroupHandle{std::move(world.group)},
                              make_c10d_store(std::move(world.store), timeout), world.launch.rank,
                              world.launch.elastic_join);
      },
      py::arg("timeout"),
      "chorus::init_world_from_env (a process started with CHORUS_ELASTIC_JOIN=1 joins the "
      "running job): (Group, the job's store as a torch Store, launch rank, joined).");

  m.def(
      "adopt",
      [](const GroupHandle& h) { return c10::make_intrusive<ProcessGroupChorus>(h.group); },
      py::arg("group"), "torch's backend object for an existing chorus group (connects nothing).");
}

}  // namespace chorus::torch_bridge
