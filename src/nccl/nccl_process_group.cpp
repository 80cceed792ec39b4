// SPDX-License-Identifier: BSD-3-Clause
// NcclProcessGroup's lifecycle: device and communicator setup, the streams and events around
// each NCCL call (launch()), split, abort, and the make_nccl_group factory. The ops themselves
// are in nccl_collectives.cpp.
#include "nccl/nccl_process_group.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/format.hpp"
#include "core/logging.hpp"
#include "nccl/device_guard.hpp"
#include "nccl/nccl_bootstrap.hpp"
#include "nccl/nccl_check.hpp"
#include "nccl/nccl_features.hpp"
#include "nccl/nccl_types.hpp"

namespace chorus::nccl {

NcclProcessGroup::NcclProcessGroup(int rank, int size, const GroupOptions& options, int device,
                                   cudaStream_t caller_stream)
    : Backend(rank, size, options), device_(device), caller_stream_(caller_stream) {}

NcclProcessGroup::~NcclProcessGroup() {
  if (watchdog_) {
    watchdog_->drain();
    watchdog_.reset();
  }
  callbacks_->close(CallbackThread::kCloseBound);
  if (comm_) {
    if (is_aborted()) {
      comm_->abort();
    } else {
      comm_->shutdown(Deadline::after(timeout()));
    }
  }
  int previous = -1;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  if (barrier_buffer_ != nullptr) {
    (void)cudaFree(barrier_buffer_);
  }
  if (stream_ != nullptr) {
    (void)cudaStreamDestroy(stream_);
  }
  if (switched) {
    (void)cudaSetDevice(previous);
  }
}

ErrorContext NcclProcessGroup::group_context() const {
  return ErrorContext{.rank = rank(), .size = size(), .group = name()};
}

ErrorContext NcclProcessGroup::op_context(const OpCall& call) const {
  ErrorContext ctx = group_context();
  ctx.op = call.name;
  ctx.seq = call.seq;
  ctx.timeout = call.timeout;
  return ctx;
}

void NcclProcessGroup::setup_device() {
  ErrorContext ctx = group_context();
  ctx.op = "make_nccl_group";
  DeviceGuard guard(device_, ctx);
  CHORUS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), ctx);
  CHORUS_CUDA_CHECK(cudaMalloc(&barrier_buffer_, sizeof(std::int32_t)), ctx);
  CHORUS_CUDA_CHECK(cudaMemsetAsync(barrier_buffer_, 0, sizeof(std::int32_t), stream_), ctx);
  events_ = std::make_shared<EventPool>(device_);
}

void NcclProcessGroup::start(std::shared_ptr<NcclComm> comm) {
  comm_ = std::move(comm);
  watchdog_ = std::make_unique<Watchdog>(
      comm_, device_, group_context(),
      [this](std::exception_ptr error) { record_failure(std::move(error)); },
      [this] {
        std::lock_guard lock(issue_mu_);
        comm_->abort();
      });
  CHORUS_INFO(nccl, "{}: NCCL communicator ready on cuda:{} (NCCL {}.{}.{})",
              on_rank(group_context()), device_, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}

bool NcclProcessGroup::wait_comm_aborted(Duration bound) {
  return watchdog_ && watchdog_->wait_comm_aborted(bound);
}

void NcclProcessGroup::check_device(const Tensor& t, const char* what, const char* op_name) const {
  if (t.count() == 0) {
    return;
  }
  ErrorContext ctx = group_context();
  ctx.op = op_name;
  const std::string site = fmt::format("{} {}", op_name, on_rank(ctx));
  if (t.is_cpu()) {
    throw InvalidArgument(
        fmt::format("{}: {} is a CPU tensor, but the nccl backend needs CUDA tensors on cuda:{}; "
                    "copy it to the GPU first, or use the tcp backend for CPU tensors",
                    site, what, device_),
        ctx);
  }
  Backend::check_device(t, what, op_name);  // device index and null data
  if (!to_nccl(t.dtype())) {
    require_nccl_type(t.dtype(), site);
  }
  // The label says cuda:N; make sure the memory agrees, since NCCL would fault on host memory
  // and silently cross devices on another GPU's memory.
  cudaPointerAttributes attributes{};
  const cudaError_t result = cudaPointerGetAttributes(&attributes, t.data());
  if (result != cudaSuccess) {
    (void)cudaGetLastError();
    throw InvalidArgument(
        fmt::format("{}: {} ({} at {}) is not memory CUDA knows ({}); pass "
                    "device memory from cudaMalloc or your framework",
                    site, what, describe_cuda_failure("cudaPointerGetAttributes", result), t.data(),
                    cudaGetErrorName(result)),
        ctx);
  }
  if (attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost) {
    throw InvalidArgument(fmt::format("{}: {} is labeled cuda:{} but {} is host memory; the nccl "
                                      "backend needs device memory (cudaMalloc)",
                                      site, what, t.device().index, t.data()),
                          ctx);
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_) {
    throw InvalidArgument(fmt::format("{}: {} is labeled cuda:{} but its memory is on cuda:{}; "
                                      "this group uses cuda:{}: copy it there first",
                                      site, what, t.device().index, attributes.device, device_),
                          ctx);
  }
}

ncclDataType_t NcclProcessGroup::nccl_type(DataType dtype, const OpCall& call) const {
  if (auto type = to_nccl(dtype)) {
    return *type;
  }
  return require_nccl_type(dtype, where(op_context(call)));
}

ncclRedOp_t NcclProcessGroup::nccl_op(ReduceOp op, DataType dtype, const OpCall& call) const {
  if (auto red = to_nccl(op, dtype)) {
    return *red;
  }
  return require_nccl_op(op, dtype, where(op_context(call)));
}

void NcclProcessGroup::copy_async(void* dst, const void* src, std::size_t bytes,
                                  cudaStream_t stream, const OpCall& call) const {
  if (dst == src || bytes == 0) {
    return;
  }
  CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                    op_context(call));
}

void NcclProcessGroup::abort(const std::string& reason) {
  ErrorContext ctx = group_context();
  ctx.op = "abort";
  auto error = std::make_exception_ptr(
      Error(ErrorCode::aborted,
            fmt::format("{}: the group was aborted by the application ({}); create a new group to "
                        "continue",
                        on_rank(ctx), reason),
            ctx));
  if (watchdog_) {
    watchdog_->poison(error);  // fails pending Works; the watchdog then aborts the communicator
  } else {
    record_failure(error);
  }
}

std::unique_ptr<detail::Backend> NcclProcessGroup::split(const std::vector<int>& ranks,
                                                         GroupOptions options) {
  if (auto error = failure()) {
    std::rethrow_exception(error);
  }
  ErrorContext ctx = group_context();
  ctx.op = "split";
  bool valid = !ranks.empty();
  for (std::size_t i = 0; i < ranks.size() && valid; ++i) {
    valid = ranks[i] >= 0 && ranks[i] < size() && (i == 0 || ranks[i - 1] < ranks[i]);
  }
  if (!valid) {
    throw InvalidArgument(fmt::format("split {}: ranks [{}] must be non-empty, sorted, distinct "
                                      "and in [0, {})",
                                      on_rank(ctx), format_ranks(ranks), size()),
                          ctx);
  }
  const auto it = std::find(ranks.begin(), ranks.end(), rank());
  const bool member = it != ranks.end();
  const int key = member ? static_cast<int>(it - ranks.begin()) : 0;
  const Deadline deadline = Deadline::after(timeout());
  std::shared_ptr<NcclComm> child_comm;
  std::exception_ptr failed;
  {
    std::lock_guard lock(issue_mu_);
    if (auto error = failure()) {
      std::rethrow_exception(error);
    }
    try {
      child_comm = comm_->split(member ? 0 : NCCL_SPLIT_NOCOLOR, key, deadline, ctx);
    } catch (const TimeoutError& e) {
      ErrorContext tctx = e.context();
      failed = std::make_exception_ptr(TimeoutError(
          fmt::format("{}; every rank of the parent group must call split with the same ranks "
                      "(a rank that never calls it stalls the others). The parent group was "
                      "aborted",
                      e.what()),
          tctx));
    } catch (const Error& e) {
      failed = as_exception_ptr(e);
    }
  }
  if (failed) {
    watchdog_->poison(failed);  // the parent's bootstrap is now out of step on this rank
    std::rethrow_exception(failed);
  }
  if (!member) {
    return nullptr;
  }
  if (options.name == GroupOptions{}.name) {
    options.name = name() + "/split";
  }
  auto child = std::make_unique<NcclProcessGroup>(key, static_cast<int>(ranks.size()), options,
                                                  device_, caller_stream_);
  child->setup_device();
  child->start(std::move(child_comm));
  return child;
}

}  // namespace chorus::nccl

namespace chorus {

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              NcclGroupOptions options) {
  ErrorContext ctx{
      .rank = rank, .size = size, .group = options.group.name, .op = "make_nccl_group"};
  if (!store) {
    throw InvalidArgument(
        fmt::format("{}: store is null; pass the store every rank shares", nccl::where(ctx)), ctx);
  }
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw BackendError(
        fmt::format("{}: no CUDA device was found ({}); the nccl backend needs one GPU per rank. "
                    "Run on a GPU machine, check the driver (nvidia-smi) and "
                    "CUDA_VISIBLE_DEVICES, or use the tcp backend",
                    nccl::where(ctx),
                    counted != cudaSuccess
                        ? nccl::describe_cuda_failure("cudaGetDeviceCount", counted)
                        : std::string("cudaGetDeviceCount returned 0")),
        ctx);
  }
  int device = options.device;
  if (device == -1) {
    CHORUS_CUDA_CHECK(cudaGetDevice(&device), ctx);
  } else if (device < 0 || device >= count) {
    throw InvalidArgument(fmt::format("{}: device {} is not a CUDA device index in [0, {}) (or -1 "
                                      "for the current device); check NcclGroupOptions.device and "
                                      "CUDA_VISIBLE_DEVICES",
                                      nccl::where(ctx), options.device, count),
                          ctx);
  }
  auto group = std::make_unique<nccl::NcclProcessGroup>(rank, size, options.group, device,
                                                        static_cast<cudaStream_t>(options.stream));
  ctx.group = group->name();
  group->setup_device();
  const Deadline deadline = Deadline::after(group->timeout());
  nccl::NcclBootstrap bootstrap(store, rank, size, group->name());
  const ncclUniqueId id = bootstrap.exchange_unique_id(deadline, ctx);
  bootstrap.mark_joined();
  auto comm = nccl::NcclComm::init(id, rank, size, device, deadline, ctx,
                                   [&] { bootstrap.throw_init_timeout(group->timeout(), ctx); });
  group->start(std::move(comm));
  return detail::GroupAccess::wrap(std::move(group));
}

bool nccl_available() noexcept { return true; }

}  // namespace chorus
