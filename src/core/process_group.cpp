// SPDX-License-Identifier: BSD-3-Clause
// ProcessGroup, the public handle: run(), the one entry every op goes through (the named ops
// are inline sugar in the header), is Backend::issue(); the rest forwards to the backend.
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

std::shared_ptr<ProcessGroup> ProcessGroup::shrink(ShrinkOptions options) {
  return detail::GroupAccess::wrap(backend_->shrink(std::move(options)));
}

std::shared_ptr<ProcessGroup> ProcessGroup::grow(GrowOptions options) {
  return detail::GroupAccess::wrap(backend_->grow(std::move(options)));
}

void ProcessGroup::stop_admitting(const std::string& reason) { backend_->stop_admitting(reason); }

std::shared_ptr<Work> ProcessGroup::run(const OpDescriptor& op) { return backend_->issue(op); }

}  // namespace chorus
