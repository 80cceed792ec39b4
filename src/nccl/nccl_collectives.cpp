// SPDX-License-Identifier: BSD-3-Clause
// The nccl backend's ops: start() (the descriptor to the NCCL calls), each collective, the
// rooted ones and all_to_all as grouped send/recv, the variable-size ones, and what the backend
// refuses (check_supported()). The group's lifecycle (streams, events, launch(), split, abort)
// is in nccl_process_group.cpp.
#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "nccl/device_guard.hpp"
#include "nccl/nccl_check.hpp"
#include "nccl/nccl_features.hpp"
#include "nccl/nccl_process_group.hpp"
#include "nccl/nccl_types.hpp"

namespace chorus::nccl {
namespace {
// ncclGroupStart/End around grouped send/recv; ends the group on every path (the group state
// is per thread in NCCL and must not leak into the next op).
class NcclGroup {
 public:
  NcclGroup(ncclComm_t comm, const ErrorContext& context) : comm_(comm) {
    CHORUS_NCCL_CHECK(ncclGroupStart(), comm_, context);
    open_ = true;
  }
  void end(const ErrorContext& context) {
    open_ = false;
    CHORUS_NCCL_CHECK(ncclGroupEnd(), comm_, context);
  }
  ~NcclGroup() {
    if (open_) {
      (void)ncclGroupEnd();
    }
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  ncclComm_t comm_;
  bool open_ = false;
};

char* at(void* base, std::size_t index, std::size_t block_bytes) {
  return static_cast<char*>(base) + index * block_bytes;
}
const char* at(const void* base, std::size_t index, std::size_t block_bytes) {
  return static_cast<const char*>(base) + index * block_bytes;
}
}  // namespace

template <class Enqueue>
std::shared_ptr<Work> NcclProcessGroup::launch(const OpCall& call, OpInfo info, Enqueue&& enqueue) {
  info.name = call.name;
  info.seq = call.seq;
  info.timeout = call.timeout;
  info.deadline = call.deadline;
  std::shared_ptr<NcclWork> work;
  std::exception_ptr failed;
  {
    std::lock_guard lock(issue_mu_);
    if (auto error = failure()) {
      std::rethrow_exception(error);  // failed while this call waited for the lock
    }
    try {
      DeviceGuard guard(device_, op_context(call));
      // Order after the caller's stream: everything it queued before this call (the kernels
      // producing the input) runs first. The wait captures the event's state at this point,
      // so the event can go back to the pool at once.
      cudaEvent_t ready = events_->acquire(op_context(call));
      const cudaError_t recorded = cudaEventRecord(ready, caller_stream_);
      const cudaError_t waited =
          recorded == cudaSuccess ? cudaStreamWaitEvent(stream_, ready, 0) : recorded;
      events_->release(ready);
      CHORUS_CUDA_CHECK(waited, op_context(call));

      cudaEvent_t done = events_->acquire(op_context(call));
      // The op's age counts from the call (when its deadline was set), so that an op past
      // its deadline is always at least `timeout` old in messages and contexts.
      info.issued = call.deadline.is_never() ? Clock::now() : call.deadline.when() - call.timeout;
      work = std::make_shared<NcclWork>(info, done, events_, caller_stream_, comm_);
      work->run_callbacks_on(callbacks_);  // never on the watchdog, which enforces deadlines
      enqueue(stream_);
      // A non-blocking communicator may still be enqueueing; the event must come after it.
      comm_->wait_ready(call.deadline, op_context(call), "enqueueing the op");
      CHORUS_CUDA_CHECK(cudaEventRecord(done, stream_), op_context(call));
    } catch (const Error& e) {
      failed = as_exception_ptr(e);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  if (failed) {
    // The other ranks issued this op and this one could not: the group is out of step.
    // Poisoned outside issue_mu_, since failing Works runs then() callbacks.
    watchdog_->poison(failed);
    std::rethrow_exception(failed);
  }
  work->set_context(group_context());
  watchdog_->track(work);
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::do_allreduce(Tensor in, Tensor out, ReduceOp op,
                                                     const OpCall& call) {
  const ncclDataType_t type = nccl_type(in.dtype(), call);
  const ncclRedOp_t red = nccl_op(op, in.dtype(), call);
  return launch(
      call, OpInfo{.bytes = in.nbytes(), .dtype = in.dtype(), .op = op}, [&](cudaStream_t stream) {
        if (in.count() == 0) {
          return;
        }
        CHORUS_NCCL_CHECK(
            ncclAllReduce(in.data(), out.data(), in.count(), type, red, comm_->get(), stream),
            comm_->get(), op_context(call));
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_allgather(Tensor in, Tensor out, const OpCall& call) {
  const ncclDataType_t type = nccl_type(in.dtype(), call);
  return launch(call, OpInfo{.bytes = out.nbytes(), .dtype = in.dtype()}, [&](cudaStream_t stream) {
    if (in.count() == 0) {
      return;
    }
    CHORUS_NCCL_CHECK(ncclAllGather(in.data(), out.data(), in.count(), type, comm_->get(), stream),
                      comm_->get(), op_context(call));
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce_scatter(Tensor in, Tensor out, ReduceOp op,
                                                          const OpCall& call) {
  const ncclDataType_t type = nccl_type(in.dtype(), call);
  const ncclRedOp_t red = nccl_op(op, in.dtype(), call);
  return launch(
      call, OpInfo{.bytes = in.nbytes(), .dtype = in.dtype(), .op = op}, [&](cudaStream_t stream) {
        if (out.count() == 0) {
          return;
        }
        CHORUS_NCCL_CHECK(
            ncclReduceScatter(in.data(), out.data(), out.count(), type, red, comm_->get(), stream),
            comm_->get(), op_context(call));
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_broadcast(Tensor inout, int root, const OpCall& call) {
  const ncclDataType_t type = nccl_type(inout.dtype(), call);
  return launch(call, OpInfo{.bytes = inout.nbytes(), .dtype = inout.dtype(), .peer = root},
                [&](cudaStream_t stream) {
                  if (inout.count() == 0) {
                    return;
                  }
                  CHORUS_NCCL_CHECK(ncclBroadcast(inout.data(), inout.data(), inout.count(), type,
                                                  root, comm_->get(), stream),
                                    comm_->get(), op_context(call));
                });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce(Tensor in, Tensor out, ReduceOp op, int root,
                                                  const OpCall& call) {
  const ncclDataType_t type = nccl_type(in.dtype(), call);
  const ncclRedOp_t red = nccl_op(op, in.dtype(), call);
  // NCCL ignores recvbuff off the root; pass the input rather than a possibly empty output.
  void* recv = rank() == root ? out.data() : in.data();
  return launch(call, OpInfo{.bytes = in.nbytes(), .dtype = in.dtype(), .op = op, .peer = root},
                [&](cudaStream_t stream) {
                  if (in.count() == 0) {
                    return;
                  }
                  CHORUS_NCCL_CHECK(ncclReduce(in.data(), recv, in.count(), type, red, root,
                                               comm_->get(), stream),
                                    comm_->get(), op_context(call));
                });
}

std::shared_ptr<Work> NcclProcessGroup::do_gather(Tensor in, Tensor out, int root,
                                                  const OpCall& call) {
  const ncclDataType_t type = nccl_type(in.dtype(), call);
  const std::size_t n = in.count();
  const std::size_t block = in.nbytes();
  return launch(
      call, OpInfo{.bytes = block, .dtype = in.dtype(), .peer = root}, [&](cudaStream_t stream) {
        if (n == 0) {
          return;
        }
        ncclComm_t comm = comm_->get();
        if (rank() != root) {
          CHORUS_NCCL_CHECK(ncclSend(in.data(), n, type, root, comm, stream), comm,
                            op_context(call));
          return;
        }
        copy_async(at(out.data(), root, block), in.data(), block, stream, call);
        NcclGroup group(comm, op_context(call));
        for (int r = 0; r < size(); ++r) {
          if (r != root) {
            CHORUS_NCCL_CHECK(ncclRecv(at(out.data(), r, block), n, type, r, comm, stream), comm,
                              op_context(call));
          }
        }
        group.end(op_context(call));
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_scatter(Tensor in, Tensor out, int root,
                                                   const OpCall& call) {
  const ncclDataType_t type = nccl_type(out.dtype(), call);
  const std::size_t n = out.count();
  const std::size_t block = out.nbytes();
  return launch(call, OpInfo{.bytes = block, .dtype = out.dtype(), .peer = root},
                [&](cudaStream_t stream) {
                  if (n == 0) {
                    return;
                  }
                  ncclComm_t comm = comm_->get();
                  if (rank() != root) {
                    CHORUS_NCCL_CHECK(ncclRecv(out.data(), n, type, root, comm, stream), comm,
                                      op_context(call));
                    return;
                  }
                  copy_async(out.data(), at(in.data(), root, block), block, stream, call);
                  NcclGroup group(comm, op_context(call));
                  for (int r = 0; r < size(); ++r) {
                    if (r != root) {
                      CHORUS_NCCL_CHECK(ncclSend(at(in.data(), r, block), n, type, r, comm, stream),
                                        comm, op_context(call));
                    }
                  }
                  group.end(op_context(call));
                });
}

std::shared_ptr<Work> NcclProcessGroup::do_all_to_all(Tensor in, Tensor out, const OpCall& call) {
  const ncclDataType_t type = nccl_type(in.dtype(), call);
  const std::size_t n = in.count() / static_cast<std::size_t>(size());
  const std::size_t block = n * in.element_size();
  return launch(call, OpInfo{.bytes = in.nbytes(), .dtype = in.dtype()}, [&](cudaStream_t stream) {
    if (n == 0) {
      return;
    }
    const bool in_place = in.same_view(out);
    if (in_place && size() == 1) {
      return;
    }
    ncclComm_t comm = comm_->get();
    // In place, block r of the buffer is sent and overwritten by the same grouped step, so
    // the input is first copied to a stream-ordered scratch buffer.
    const void* src = in.data();
    void* scratch = nullptr;
    if (in_place) {
      CHORUS_CUDA_CHECK(cudaMallocAsync(&scratch, in.nbytes(), stream), op_context(call));
      copy_async(scratch, in.data(), in.nbytes(), stream, call);
      src = scratch;
    } else {
      copy_async(at(out.data(), rank(), block), at(src, rank(), block), block, stream, call);
    }
    std::exception_ptr failed;
    try {
      NcclGroup group(comm, op_context(call));
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) {
          continue;
        }
        CHORUS_NCCL_CHECK(ncclSend(at(src, r, block), n, type, r, comm, stream), comm,
                          op_context(call));
        CHORUS_NCCL_CHECK(ncclRecv(at(out.data(), r, block), n, type, r, comm, stream), comm,
                          op_context(call));
      }
      group.end(op_context(call));
    } catch (...) {
      failed = std::current_exception();
    }
    if (scratch != nullptr) {
      (void)cudaFreeAsync(scratch, stream);
    }
    if (failed) {
      std::rethrow_exception(failed);
    }
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_barrier(const OpCall& call) {
  return launch(call, OpInfo{}, [&](cudaStream_t stream) {
    CHORUS_NCCL_CHECK(ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum,
                                    comm_->get(), stream),
                      comm_->get(), op_context(call));
  });
}

// NCCL matches point-to-point ops by issue order per peer pair; it has no tags
// (check_supported() rejects any but 0).
std::shared_ptr<Work> NcclProcessGroup::do_send(Tensor tensor, int dst, const OpCall& call) {
  const ncclDataType_t type = nccl_type(tensor.dtype(), call);
  return launch(call, OpInfo{.bytes = tensor.nbytes(), .dtype = tensor.dtype(), .peer = dst},
                [&](cudaStream_t stream) {
                  if (tensor.count() == 0) {
                    return;
                  }
                  CHORUS_NCCL_CHECK(
                      ncclSend(tensor.data(), tensor.count(), type, dst, comm_->get(), stream),
                      comm_->get(), op_context(call));
                });
}

std::shared_ptr<Work> NcclProcessGroup::do_recv(Tensor tensor, int src, const OpCall& call) {
  const ncclDataType_t type = nccl_type(tensor.dtype(), call);
  return launch(call, OpInfo{.bytes = tensor.nbytes(), .dtype = tensor.dtype(), .peer = src},
                [&](cudaStream_t stream) {
                  if (tensor.count() == 0) {
                    return;
                  }
                  CHORUS_NCCL_CHECK(
                      ncclRecv(tensor.data(), tensor.count(), type, src, comm_->get(), stream),
                      comm_->get(), op_context(call));
                });
}

void NcclProcessGroup::check_supported(const OpDescriptor& op, const char* op_name) const {
  const DataType dtype = op.ins.empty() ? op.in.dtype() : op.ins[0].dtype();
  if (op.wire_dtype && *op.wire_dtype != dtype) {
    ErrorContext ctx = group_context();
    ctx.op = op_name;
    throw InvalidArgument(
        fmt::format("{} {}: wire_dtype {} given, but the nccl backend reduces in the data's own "
                    "type on the wire (NCCL has no narrower wire); leave it unset",
                    op_name, on_rank(ctx), to_string(*op.wire_dtype)),
        ctx);
  }
  if (op.type != OpType::send && op.type != OpType::recv) {
    return;
  }
  ErrorContext ctx = group_context();
  ctx.op = op_name;
  if (op.tag != 0) {
    throw InvalidArgument(
        fmt::format("{} {}: tag {} given, but the nccl backend has no message tags (NCCL matches "
                    "messages by issue order per peer pair); pass tag 0 and issue sends and "
                    "recvs in the same order on both ranks",
                    op_name, on_rank(ctx), op.tag),
        ctx);
  }
  if (op.type == OpType::recv && op.peer == kAnySource) {
    throw InvalidArgument(fmt::format("{} {}: the nccl backend cannot receive from any source "
                                      "(NCCL has no such receive); pass the sender's rank",
                                      op_name, on_rank(ctx)),
                          ctx);
  }
}

std::shared_ptr<Work> NcclProcessGroup::start(const OpDescriptor& op, const OpCall& call) {
  if (!op.ins.empty()) {
    return do_coalesced(op, call);
  }
  switch (op.type) {
    case OpType::allreduce:
      return do_allreduce(op.in, op.out, op.op, call);
    case OpType::allgather:
      return do_allgather(op.in, op.out, call);
    case OpType::reduce_scatter:
      return do_reduce_scatter(op.in, op.out, op.op, call);
    case OpType::broadcast:
      return do_broadcast(op.in, op.root, call);
    case OpType::reduce:
      return do_reduce(op.in, op.out, op.op, op.root, call);
    case OpType::gather:
      return do_gather(op.in, op.out, op.root, call);
    case OpType::scatter:
      return do_scatter(op.in, op.out, op.root, call);
    case OpType::all_to_all:
      return do_all_to_all(op.in, op.out, call);
    case OpType::barrier:
      return do_barrier(call);
    case OpType::send:
      return do_send(op.in, op.peer, call);
    case OpType::recv:
      return do_recv(op.in, op.peer, call);
    case OpType::allgatherv:
    case OpType::reduce_scatterv:
    case OpType::all_to_allv:
      return do_variable(op, call);
    default:  // an op this backend does not implement (yet): refused, never miscompiled
      break;
  }
  throw InvalidArgument(fmt::format("{} {}: the nccl backend does not run {}", call.name,
                                    format_on_rank(rank(), size(), name()), to_string(op.type)));
}

std::shared_ptr<Work> NcclProcessGroup::do_coalesced(const OpDescriptor& op, const OpCall& call) {
  // The rule table admits allreduce, allgather and reduce_scatter, of one dtype.
  const DataType dtype = op.ins[0].dtype();
  const ncclDataType_t type = nccl_type(dtype, call);
  const bool reduces = op.type != OpType::allgather;
  const ncclRedOp_t red = reduces ? nccl_op(op.op, dtype, call) : ncclSum;
  OpInfo info{.dtype = dtype};
  for (const Tensor& t : op.type == OpType::allgather ? op.outs : op.ins) {
    info.bytes += t.nbytes();  // as the single op counts: allgather its output
  }
  if (reduces) {
    info.op = op.op;
  }
  return launch(call, info, [&](cudaStream_t stream) {
    ncclComm_t comm = comm_->get();
    NcclGroup group(comm, op_context(call));
    for (std::size_t i = 0; i < op.ins.size(); ++i) {
      const Tensor& in = op.ins[i];
      const Tensor& out = op.outs[i];
      if (in.count() == 0 || out.count() == 0) {
        continue;  // NCCL is not asked for empty calls, as in the single ops
      }
      if (op.type == OpType::allgather) {
        CHORUS_NCCL_CHECK(ncclAllGather(in.data(), out.data(), in.count(), type, comm, stream),
                          comm, op_context(call));
      } else if (op.type == OpType::reduce_scatter) {
        CHORUS_NCCL_CHECK(
            ncclReduceScatter(in.data(), out.data(), out.count(), type, red, comm, stream), comm,
            op_context(call));
      } else {
        CHORUS_NCCL_CHECK(ncclAllReduce(in.data(), out.data(), in.count(), type, red, comm, stream),
                          comm, op_context(call));
      }
    }
    group.end(op_context(call));
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_variable(const OpDescriptor& op, const OpCall& call) {
  const Tensor& in = op.in;
  const Tensor& out = op.out;
  const DataType dtype = in.count() != 0 ? in.dtype() : out.dtype();
  const ncclDataType_t type = nccl_type(dtype, call);
  const ncclRedOp_t red =
      op.type == OpType::reduce_scatterv ? nccl_op(op.op, dtype, call) : ncclSum;
  const std::size_t es = element_size(dtype);
  const auto n = static_cast<std::size_t>(size());
  const auto me = static_cast<std::size_t>(rank());
  // Per rank: elements sent to / received from it, and their offsets (elements).
  std::vector<std::size_t> sent(n, 0), got(n, 0), sent_at(n, 0), got_at(n, 0);
  for (std::size_t j = 0; j < n; ++j) {
    switch (op.type) {
      case OpType::allgatherv:  // this rank's input to all; block j from rank j
        sent[j] = op.out_counts[me];
        got[j] = op.out_counts[j];
        break;
      case OpType::reduce_scatterv:  // block j of the input is reduced onto rank j
        sent[j] = op.in_counts[j];
        break;
      default:  // all_to_allv
        sent[j] = op.in_counts[j];
        got[j] = op.out_counts[j];
        break;
    }
    if (j > 0) {
      sent_at[j] = sent_at[j - 1] + sent[j - 1];
      got_at[j] = got_at[j - 1] + got[j - 1];
    }
  }
  if (op.type == OpType::allgatherv) {
    std::fill(sent_at.begin(), sent_at.end(), 0);  // every peer gets the whole input
  }
  return launch(
      call, OpInfo{.bytes = std::max(in.nbytes(), out.nbytes()), .dtype = dtype, .op = op.op},
      [&](cudaStream_t stream) {
        ncclComm_t comm = comm_->get();
        NcclGroup group(comm, op_context(call));
        for (std::size_t j = 0; j < n; ++j) {
          const int peer = static_cast<int>(j);
          if (op.type == OpType::reduce_scatterv) {
            // ncclReduce of block j onto rank j; only rank j's output is written.
            if (sent[j] != 0) {
              CHORUS_NCCL_CHECK(
                  ncclReduce(at(in.data(), sent_at[j], es), j == me ? out.data() : nullptr, sent[j],
                             type, red, peer, comm, stream),
                  comm, op_context(call));
            }
            continue;
          }
          if (j == me) {
            copy_async(at(out.data(), got_at[j], es), at(in.data(), sent_at[j], es), got[j] * es,
                       stream, call);
            continue;
          }
          if (sent[j] != 0) {
            CHORUS_NCCL_CHECK(
                ncclSend(at(in.data(), sent_at[j], es), sent[j], type, peer, comm, stream), comm,
                op_context(call));
          }
          if (got[j] != 0) {
            CHORUS_NCCL_CHECK(
                ncclRecv(at(out.data(), got_at[j], es), got[j], type, peer, comm, stream), comm,
                op_context(call));
          }
        }
        group.end(op_context(call));
      });
}

}  // namespace chorus::nccl
