// SPDX-License-Identifier: BSD-3-Clause
// C ABI: tensors, collectives and work handles.
#include "capi/capi.hpp"

#include <cstddef>
#include <vector>

#include <chorus/dlpack.hpp>
#include <chorus/process_group.hpp>

#include "capi/dlpack_abi.hpp"
#include "capi/extent.hpp"

namespace chorus::capi {
namespace {

Tensor to_tensor(const chorus_tensor_t* t, const char* function, const char* what) {
  require(t, function, what);
  const auto dtype = c_enum_value(t->dtype);
  if (dtype < 0 || dtype >= kNumDataTypes) {
    throw InvalidArgument(
        fmt::format("{}: {}.dtype is {}, not a chorus_dtype_t (CHORUS_INT8 .. CHORUS_FLOAT64)",
                    function, what, dtype));
  }
  Device device;
  const auto device_type = c_enum_value(t->device_type);
  if (device_type == CHORUS_DEVICE_CUDA) {
    device = Device::cuda(t->device_index);
  } else if (device_type != CHORUS_DEVICE_CPU) {
    throw InvalidArgument(
        fmt::format("{}: {}.device_type is {}; use CHORUS_DEVICE_CPU or CHORUS_DEVICE_CUDA",
                    function, what, device_type));
  }
  check_extent(t->data, t->count, static_cast<DataType>(dtype),
               fmt::format("{}: {}", function, what));
  return Tensor(t->data, t->count, static_cast<DataType>(dtype), device);
}

struct OpOptions {
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  std::optional<Duration> timeout;
  std::optional<DataType> wire_dtype;
};

OpOptions op_options(const chorus_op_options_t* options, const char* function) {
  const chorus_op_options_t defaults = CHORUS_OP_OPTIONS_INITIALIZER;
  // A struct from a build before wire_dtype is whole without it.
  const auto c = read_config(options, defaults, offsetof(chorus_op_options_t, wire_dtype), function,
                             "CHORUS_OP_OPTIONS_INITIALIZER");
  const auto op = c_enum_value(c.op);
  if (op < 0 || op >= kNumReduceOps) {
    throw InvalidArgument(fmt::format(
        "{}: options.op is {}, not a chorus_reduce_op_t (CHORUS_SUM .. CHORUS_AVG)", function, op));
  }
  std::optional<DataType> wire;
  if (c.wire_dtype != CHORUS_WIRE_DEFAULT) {
    if (c.wire_dtype < 0 || c.wire_dtype >= kNumDataTypes) {
      throw InvalidArgument(
          fmt::format("{}: wire_dtype is {}, neither a chorus_dtype_t nor CHORUS_WIRE_DEFAULT ({})",
                      function, c.wire_dtype, CHORUS_WIRE_DEFAULT));
    }
    wire = static_cast<DataType>(c.wire_dtype);
  }
  return OpOptions{static_cast<ReduceOp>(op), c.root, timeout_from_ms(c.timeout_ms, function),
                   wire};
}

// Runs `launch` (which returns the Work) and hands out the handle.
template <class Launch>
chorus_result_t launch_op(const char* function, chorus_group_t* group, chorus_work_t** work,
                          Launch&& launch) {
  return guarded(function, [&] {
    require(work, function, "work (output)");
    *work = nullptr;
    require(group, function, "group");
    auto handle = std::make_unique<chorus_work>();
    handle->work = launch(*group->group);
    *work = handle.release();
  });
}

// Launches the op that `describe` fills in, with the options every op shares (reduce
// operator, root, timeout; an op ignores those it has no use for), through the one entry.
template <class Describe>
chorus_result_t run_op(const char* function, chorus_group_t* group,
                       const chorus_op_options_t* options, chorus_work_t** work,
                       Describe&& describe) {
  return launch_op(function, group, work, [&](ProcessGroup& pg) {
    const auto o = op_options(options, function);
    OpDescriptor op;
    op.op = o.op;
    op.root = o.root;
    op.timeout = o.timeout;
    op.wire_dtype = o.wire_dtype;
    describe(op, pg);
    return pg.run(op);
  });
}

// `counts` of a variable-size collective: one entry per rank of the group.
std::vector<std::size_t> per_rank_counts(const size_t* counts, const ProcessGroup& pg,
                                         const char* function, const char* what) {
  require(counts, function, what);
  return std::vector<std::size_t>(counts, counts + pg.size());
}

// chorus_op_t's coalesced fields into the descriptor's ins/outs; the shapes are the rule
// table's to check.
void coalesced_tensors(const chorus_op_t& c, OpDescriptor& d, const char* function) {
  if (c.num_tensors == 0 || c.ins == nullptr || c.outs == nullptr) {
    throw InvalidArgument(fmt::format(
        "{}: op->num_tensors is {} with op->ins {} and op->outs {}; a coalesced op needs both "
        "arrays and at least one tensor (leave all three at CHORUS_OP_INITIALIZER's defaults "
        "for an op on in/out)",
        function, c.num_tensors, c.ins == nullptr ? "NULL" : "set",
        c.outs == nullptr ? "NULL" : "set"));
  }
  d.ins.reserve(c.num_tensors);
  d.outs.reserve(c.num_tensors);
  for (std::size_t i = 0; i < c.num_tensors; ++i) {
    try {
      d.ins.push_back(to_tensor(&c.ins[i], function, "op->ins[i]"));
      d.outs.push_back(to_tensor(&c.outs[i], function, "op->outs[i]"));
    } catch (const InvalidArgument& e) {  // the index, formatted only when one is bad
      throw InvalidArgument(fmt::format("{} (i = {})", e.what(), i));
    }
  }
}

}  // namespace
}  // namespace chorus::capi

using chorus::capi::coalesced_tensors;
using chorus::capi::guarded;
using chorus::capi::op_options;
using chorus::capi::per_rank_counts;
using chorus::capi::require;
using chorus::capi::run_op;
using chorus::capi::to_tensor;

extern "C" {

chorus_result_t chorus_tensor_from_dlpack(const void* dl_tensor, chorus_tensor_t* out) {
  static const char* fn = "chorus_tensor_from_dlpack";
  return guarded(fn, [&] {
    require(out, fn, "out");
    const auto* dl = static_cast<const chorus::dl::Tensor*>(dl_tensor);
    const chorus::Tensor t = chorus::from_dlpack(dl);
    out->data = t.data();
    out->count = t.count();
    out->dtype = static_cast<chorus_dtype_t>(t.dtype());
    out->device_type = t.is_cuda() ? CHORUS_DEVICE_CUDA : CHORUS_DEVICE_CPU;
    out->device_index = t.is_cuda() ? t.device().index : 0;
  });
}

size_t chorus_dtype_size(chorus_dtype_t dtype) {
  const auto d = chorus::capi::c_enum_value(dtype);  // any int may come from C
  return d < 0 || d >= chorus::kNumDataTypes
             ? 0
             : chorus::element_size(static_cast<chorus::DataType>(d));
}

// Each op below describes itself and goes through ProcessGroup::run(), where the shape
// rules are checked.
chorus_result_t chorus_allreduce(chorus_group_t* group, const chorus_tensor_t* in,
                                 const chorus_tensor_t* out, const chorus_op_options_t* options,
                                 chorus_work_t** work) {
  static const char* fn = "chorus_allreduce";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::allreduce;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_allgather(chorus_group_t* group, const chorus_tensor_t* in,
                                 const chorus_tensor_t* out, const chorus_op_options_t* options,
                                 chorus_work_t** work) {
  static const char* fn = "chorus_allgather";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::allgather;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_reduce_scatter(chorus_group_t* group, const chorus_tensor_t* in,
                                      const chorus_tensor_t* out,
                                      const chorus_op_options_t* options, chorus_work_t** work) {
  static const char* fn = "chorus_reduce_scatter";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::reduce_scatter;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_broadcast(chorus_group_t* group, const chorus_tensor_t* inout,
                                 const chorus_op_options_t* options, chorus_work_t** work) {
  static const char* fn = "chorus_broadcast";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::broadcast;
    op.in = op.out = to_tensor(inout, fn, "inout");
  });
}

chorus_result_t chorus_reduce(chorus_group_t* group, const chorus_tensor_t* in,
                              const chorus_tensor_t* out, const chorus_op_options_t* options,
                              chorus_work_t** work) {
  static const char* fn = "chorus_reduce";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::reduce;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_gather(chorus_group_t* group, const chorus_tensor_t* in,
                              const chorus_tensor_t* out, const chorus_op_options_t* options,
                              chorus_work_t** work) {
  static const char* fn = "chorus_gather";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::gather;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_scatter(chorus_group_t* group, const chorus_tensor_t* in,
                               const chorus_tensor_t* out, const chorus_op_options_t* options,
                               chorus_work_t** work) {
  static const char* fn = "chorus_scatter";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::scatter;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_all_to_all(chorus_group_t* group, const chorus_tensor_t* in,
                                  const chorus_tensor_t* out, const chorus_op_options_t* options,
                                  chorus_work_t** work) {
  static const char* fn = "chorus_all_to_all";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::all_to_all;
    op.in = to_tensor(in, fn, "in");
    op.out = to_tensor(out, fn, "out");
  });
}

chorus_result_t chorus_barrier(chorus_group_t* group, const chorus_op_options_t* options,
                               chorus_work_t** work) {
  static const char* fn = "chorus_barrier";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::barrier;
  });
}

chorus_result_t chorus_send(chorus_group_t* group, const chorus_tensor_t* tensor, int dst,
                            uint32_t tag, const chorus_op_options_t* options,
                            chorus_work_t** work) {
  static const char* fn = "chorus_send";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::send;
    op.in = to_tensor(tensor, fn, "tensor");
    op.peer = dst;
    op.tag = tag;
  });
}

static_assert(CHORUS_ANY_SOURCE == chorus::kAnySource);

chorus_result_t chorus_recv(chorus_group_t* group, const chorus_tensor_t* tensor, int src,
                            uint32_t tag, const chorus_op_options_t* options,
                            chorus_work_t** work) {
  static const char* fn = "chorus_recv";
  return run_op(fn, group, options, work, [&](chorus::OpDescriptor& op, chorus::ProcessGroup&) {
    op.type = chorus::OpType::recv;
    op.in = to_tensor(tensor, fn, "tensor");
    op.peer = src;
    op.tag = tag;
  });
}

static_assert(CHORUS_OP_TYPE_COUNT == chorus::kNumOpTypes &&
                  static_cast<int>(chorus::OpType::send) == CHORUS_OP_SEND,
              "chorus_op_type_t and chorus::OpType list the same ops in the same order");

chorus_result_t chorus_run(chorus_group_t* group, const chorus_op_t* op, chorus_work_t** work) {
  static const char* fn = "chorus_run";
  return run_op(fn, group, nullptr, work, [&](chorus::OpDescriptor& d, chorus::ProcessGroup& pg) {
    require(op, fn, "op");
    const chorus_op_t defaults = CHORUS_OP_INITIALIZER;
    // A struct from a build before the coalesced fields (ins, outs, num_tensors) is whole
    // without them: they keep their defaults.
    const auto c = chorus::capi::read_config(op, defaults, offsetof(chorus_op_t, ins), fn,
                                             "CHORUS_OP_INITIALIZER");
    // The shared options, checked and converted as every op's are.
    chorus_op_options_t shared = CHORUS_OP_OPTIONS_INITIALIZER;
    shared.op = c.op;
    shared.root = c.root;
    shared.timeout_ms = c.timeout_ms;
    shared.wire_dtype = c.wire_dtype;
    const auto o = op_options(&shared, fn);
    d.type = static_cast<chorus::OpType>(chorus::capi::c_enum_value(c.type));
    d.in = to_tensor(&c.in, fn, "op->in");
    d.out = to_tensor(&c.out, fn, "op->out");
    if (c.in_counts != nullptr) {
      d.in_counts = per_rank_counts(c.in_counts, pg, fn, "op->in_counts");
    }
    if (c.out_counts != nullptr) {
      d.out_counts = per_rank_counts(c.out_counts, pg, fn, "op->out_counts");
    }
    d.op = o.op;
    d.root = o.root;
    d.timeout = o.timeout;
    d.wire_dtype = o.wire_dtype;
    d.peer = c.peer;
    d.tag = c.tag;
    if (c.num_tensors != 0 || c.ins != nullptr || c.outs != nullptr) {
      coalesced_tensors(c, d, fn);
    }
  });
}

chorus_result_t chorus_work_wait(chorus_work_t* work) {
  static const char* fn = "chorus_work_wait";
  return guarded(fn, [&] { require(work, fn, "work")->work->wait(); });
}

chorus_result_t chorus_work_wait_for(chorus_work_t* work, int64_t timeout_ms, int* done) {
  static const char* fn = "chorus_work_wait_for";
  return guarded(fn, [&] {
    require(work, fn, "work");
    require(done, fn, "done (output)");
    *done = 0;
    if (timeout_ms < 0) {
      throw chorus::InvalidArgument(
          fmt::format("{}: timeout_ms is {}; pass 0 to poll or a positive bound in milliseconds",
                      fn, timeout_ms));
    }
    if (!work->work->wait_for(chorus::Duration(timeout_ms))) {
      return;
    }
    *done = 1;
    if (auto error = work->work->exception()) {
      std::rethrow_exception(error);
    }
  });
}

chorus_result_t chorus_work_test(chorus_work_t* work, int* done) {
  return chorus_work_wait_for(work, 0, done);
}

uint64_t chorus_work_seq(const chorus_work_t* work) {
  return work == nullptr ? 0 : work->work->seq();
}

int chorus_work_source_rank(const chorus_work_t* work) {
  return work == nullptr ? -1 : work->work->source_rank();
}

void chorus_work_free(chorus_work_t* work) { delete work; }

}  // extern "C"
