// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup, the public handle: every named op builds its OpDescriptor and goes through
// run(), the one entry (Backend::issue()); the rest forwards to the backend.
#include <chorus/process_group.hpp>

#include <utility>

#include "core/backend.hpp"

namespace chorus {

ProcessGroup::ProcessGroup(std::unique_ptr<detail::Backend> backend) noexcept
    : backend_(std::move(backend)) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> detail::GroupAccess::wrap(std::unique_ptr<Backend> backend) {
  if (!backend) {
    return nullptr;
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(backend)));
}

int ProcessGroup::rank() const noexcept { return backend_->rank(); }
int ProcessGroup::size() const noexcept { return backend_->size(); }
const std::string& ProcessGroup::name() const noexcept { return backend_->name(); }
Duration ProcessGroup::timeout() const noexcept { return backend_->timeout(); }
const char* ProcessGroup::backend_name() const noexcept { return backend_->backend_name(); }
Device ProcessGroup::device() const noexcept { return backend_->device(); }
void ProcessGroup::abort(const std::string& reason) { backend_->abort(reason); }
bool ProcessGroup::is_aborted() const noexcept { return backend_->is_aborted(); }
std::exception_ptr ProcessGroup::failure() const { return backend_->failure(); }

std::shared_ptr<ProcessGroup> ProcessGroup::split(const std::vector<int>& ranks,
                                                  GroupOptions options) {
  return detail::GroupAccess::wrap(backend_->split(ranks, std::move(options)));
}

std::shared_ptr<Work> ProcessGroup::run(const OpDescriptor& op) { return backend_->issue(op); }

namespace {
OpDescriptor describe_op(OpType type, Tensor in, Tensor out,
                         const std::optional<Duration>& timeout) {
  OpDescriptor op;
  op.type = type;
  op.in = in;
  op.out = out;
  op.timeout = timeout;
  return op;
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::allreduce(Tensor in, Tensor out,
                                              const AllreduceOptions& options) {
  OpDescriptor op = describe_op(OpType::allreduce, in, out, options.timeout);
  op.op = options.op;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::allgather(Tensor in, Tensor out,
                                              const CollectiveOptions& options) {
  return run(describe_op(OpType::allgather, in, out, options.timeout));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor in, Tensor out,
                                                   const ReduceScatterOptions& options) {
  OpDescriptor op = describe_op(OpType::reduce_scatter, in, out, options.timeout);
  op.op = options.op;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor inout, const RootOptions& options) {
  OpDescriptor op = describe_op(OpType::broadcast, inout, inout, options.timeout);
  op.root = options.root;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::reduce(Tensor in, Tensor out, const ReduceOptions& options) {
  OpDescriptor op = describe_op(OpType::reduce, in, out, options.timeout);
  op.op = options.op;
  op.root = options.root;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::gather(Tensor in, Tensor out, const RootOptions& options) {
  OpDescriptor op = describe_op(OpType::gather, in, out, options.timeout);
  op.root = options.root;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::scatter(Tensor in, Tensor out, const RootOptions& options) {
  OpDescriptor op = describe_op(OpType::scatter, in, out, options.timeout);
  op.root = options.root;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor in, Tensor out,
                                               const CollectiveOptions& options) {
  return run(describe_op(OpType::all_to_all, in, out, options.timeout));
}

std::shared_ptr<Work> ProcessGroup::barrier(const CollectiveOptions& options) {
  return run(describe_op(OpType::barrier, Tensor(), Tensor(), options.timeout));
}

std::shared_ptr<Work> ProcessGroup::send(Tensor tensor, int dst, std::uint32_t tag,
                                         const CollectiveOptions& options) {
  OpDescriptor op = describe_op(OpType::send, tensor, Tensor(), options.timeout);
  op.peer = dst;
  op.tag = tag;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor tensor, int src, std::uint32_t tag,
                                         const CollectiveOptions& options) {
  OpDescriptor op = describe_op(OpType::recv, tensor, Tensor(), options.timeout);
  op.peer = src;
  op.tag = tag;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::allgatherv(Tensor in, Tensor out,
                                               std::vector<std::size_t> counts,
                                               const CollectiveOptions& options) {
  OpDescriptor op = describe_op(OpType::allgatherv, in, out, options.timeout);
  op.out_counts = std::move(counts);
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatterv(Tensor in, Tensor out,
                                                    std::vector<std::size_t> counts,
                                                    const ReduceScatterOptions& options) {
  OpDescriptor op = describe_op(OpType::reduce_scatterv, in, out, options.timeout);
  op.in_counts = std::move(counts);
  op.op = options.op;
  return run(op);
}

std::shared_ptr<Work> ProcessGroup::all_to_allv(Tensor in, Tensor out,
                                                std::vector<std::size_t> in_counts,
                                                std::vector<std::size_t> out_counts,
                                                const CollectiveOptions& options) {
  OpDescriptor op = describe_op(OpType::all_to_allv, in, out, options.timeout);
  op.in_counts = std::move(in_counts);
  op.out_counts = std::move(out_counts);
  return run(op);
}

}  // namespace chorus
