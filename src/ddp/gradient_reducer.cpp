// SPDX-License-Identifier: BSD-3-Clause
// GradientReducer: gradients packed into buckets (reverse registration order), one allreduce
// per bucket launched as soon as the bucket is complete, in bucket order on every rank.
//
// Per step: mark_ready(i) copies gradient i into its bucket's flat buffer and counts down the
// bucket's pending gradients; buckets are launched strictly in index order (next_launch_), so
// a rank whose gradients arrive in a different order still issues the same sequence of
// allreduces as its peers. finish() zero-fills what was never marked, launches the rest,
// waits in order, and copies each bucket back (scaled when a Join divisor is set).
#include <chorus/ddp.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include <chorus/shared_buffer.hpp>
#include <chorus/work.hpp>

namespace chorus::ddp {

struct Bucket {
  DataType dtype = DataType::float32;
  std::vector<std::size_t> grads;    // indices into grads_, packing order
  std::vector<std::size_t> offsets;  // element offset of each grad in buffer
  // The flat tensor that is allreduced: a SharedBuffer, so that a group whose ranks share a
  // host maps the peers' buckets and reduces them in one copy (shared_buffer.hpp). Every rank
  // packs the same buckets, so all of them pass SharedBuffers, as the group requires.
  SharedBuffer buffer;
  std::size_t count = 0;       // elements
  std::size_t pending = 0;     // grads not yet marked this step
  std::shared_ptr<Work> work;  // in flight this step, else null
};

std::uint8_t* bytes_of(const Bucket& b) noexcept {
  return static_cast<std::uint8_t*>(b.buffer.data());
}

class GradientReducer::Impl {
 public:
  Impl(std::shared_ptr<ProcessGroup> group, std::vector<Tensor> grads, ReducerOptions options)
      : group_(std::move(group)), grads_(std::move(grads)), options_(options) {
    if (!group_) {
      throw InvalidArgument("GradientReducer: the process group is null");
    }
    if (options_.bucket_bytes == 0) {
      throw InvalidArgument(
          "GradientReducer: bucket_bytes is 0; use a positive size (default 25 MiB)");
    }
    for (std::size_t i = 0; i < grads_.size(); ++i) {
      const Tensor& g = grads_[i];
      if (!g.is_cpu()) {
        throw InvalidArgument(fmt::format(
            "GradientReducer: gradient {} is on cuda:{}; the reducer packs buckets with memcpy and "
            "takes CPU tensors only: allreduce CUDA gradients directly with the nccl group",
            i, g.device().index));
      }
      if (g.dtype() != DataType::float32 && g.dtype() != DataType::float64) {
        throw InvalidArgument(
            fmt::format("GradientReducer: gradient {} is {}; gradients must be float32 or float64",
                        i, to_string(g.dtype())));
      }
      if (g.count() > 0 && g.data() == nullptr) {
        throw InvalidArgument(
            fmt::format("GradientReducer: gradient {} has {} elements but no data", i, g.count()));
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (g.overlaps(grads_[j])) {
          throw InvalidArgument(
              fmt::format("GradientReducer: gradients {} and {} overlap in memory", j, i));
        }
      }
    }
    build_buckets();
    marked_.assign(grads_.size(), false);
  }

  ~Impl() {
    // Bucket buffers must outlive their allreduces; each op ends by its own deadline.
    for (auto& b : buckets_) {
      if (b.work) {
        try {
          b.work->wait();
        } catch (...) {
          // The error was (or will be) reported by finish() or by the group; never throw here.
        }
      }
    }
  }

  void build_buckets() {
    // One open bucket per dtype; gradients visited from the last registered to the first.
    std::map<DataType, std::size_t> open;
    for (std::size_t k = grads_.size(); k-- > 0;) {
      const Tensor& g = grads_[k];
      auto it = open.find(g.dtype());
      if (it != open.end()) {
        Bucket& b = buckets_[it->second];
        if (b.count > 0 &&
            (b.count + g.count()) * element_size(g.dtype()) > options_.bucket_bytes) {
          open.erase(it);
          it = open.end();
        }
      }
      if (it == open.end()) {
        buckets_.emplace_back();
        buckets_.back().dtype = g.dtype();
        it = open.emplace(g.dtype(), buckets_.size() - 1).first;
      }
      Bucket& b = buckets_[it->second];
      b.grads.push_back(k);
      b.offsets.push_back(b.count);
      b.count += g.count();
    }
    bucket_of_.assign(grads_.size(), 0);
    position_.assign(grads_.size(), 0);
    for (std::size_t bi = 0; bi < buckets_.size(); ++bi) {
      Bucket& b = buckets_[bi];
      b.buffer = SharedBuffer(b.count * element_size(b.dtype));  // zero-filled
      b.pending = b.grads.size();
      for (std::size_t p = 0; p < b.grads.size(); ++p) {
        bucket_of_[b.grads[p]] = bi;
        position_[b.grads[p]] = p;
      }
    }
  }

  void mark_ready(std::size_t index) {
    if (index >= grads_.size()) {
      throw InvalidArgument(
          fmt::format("GradientReducer::mark_ready: index {} is out of range (have {} gradients)",
                      index, grads_.size()));
    }
    if (marked_[index]) {
      throw InvalidArgument(fmt::format(
          "GradientReducer::mark_ready: gradient {} was already marked ready this step; call finish() "
          "before the next step",
          index));
    }
    const std::size_t bi = bucket_of_[index];
    Bucket& b = buckets_[bi];
    if (b.work) {
      throw InvalidArgument(fmt::format(
          "GradientReducer::mark_ready: gradient {} arrived after its bucket {} was launched by finish(); "
          "mark every gradient before finish()",
          index, bi));
    }
    marked_[index] = true;
    const Tensor& g = grads_[index];
    if (g.nbytes() > 0) {
      std::memcpy(bytes_of(b) + b.offsets[position_[index]] * element_size(b.dtype), g.data(),
                  g.nbytes());
    }
    --b.pending;
    launch_ready();
  }

  void launch_ready() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      launch(next_launch_);
      ++next_launch_;
    }
  }

  void launch(std::size_t bi) {
    Bucket& b = buckets_[bi];
    const Tensor t(b.buffer.data(), b.count, b.dtype);
    b.work = group_->allreduce(t, AllreduceOptions{.op = divisor_ ? ReduceOp::sum : ReduceOp::avg,
                                                   .timeout = options_.timeout});
  }

  void finish() {
    // Whatever happens below, the next step starts clean.
    struct Reset {
      Impl& self;
      ~Reset() { self.reset_step(); }
    } reset{*this};
    for (std::size_t bi = next_launch_; bi < buckets_.size(); ++bi) {
      Bucket& b = buckets_[bi];
      for (std::size_t p = 0; p < b.grads.size(); ++p) {
        if (!marked_[b.grads[p]]) {  // no gradient this step: contributes zeros
          const std::size_t n = grads_[b.grads[p]].count() * element_size(b.dtype);
          std::memset(bytes_of(b) + b.offsets[p] * element_size(b.dtype), 0, n);
        }
      }
      b.pending = 0;
    }
    launch_ready();
    std::exception_ptr first_error;
    for (auto& b : buckets_) {
      if (!b.work) {
        continue;  // its launch threw; that error already reached the caller
      }
      try {
        b.work->wait();
      } catch (...) {
        if (!first_error) {
          first_error = std::current_exception();
        }
      }
      b.work.reset();
    }
    if (first_error) {
      std::rethrow_exception(first_error);
    }
    for (auto& b : buckets_) {
      unpack(b);
    }
  }

  void unpack(const Bucket& b) {
    const double scale = divisor_ ? 1.0 / *divisor_ : 1.0;
    for (std::size_t p = 0; p < b.grads.size(); ++p) {
      const Tensor& g = grads_[b.grads[p]];
      const std::uint8_t* src = bytes_of(b) + b.offsets[p] * element_size(b.dtype);
      if (g.nbytes() == 0) {
        continue;
      }
      if (!divisor_) {
        std::memcpy(g.data(), src, g.nbytes());
      } else if (b.dtype == DataType::float32) {
        scale_into(static_cast<float*>(g.data()), reinterpret_cast<const float*>(src), g.count(),
                   static_cast<float>(scale));
      } else {
        scale_into(static_cast<double*>(g.data()), reinterpret_cast<const double*>(src), g.count(),
                   scale);
      }
    }
  }

  template <class T>
  static void scale_into(T* dst, const T* src, std::size_t n, T scale) {
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = src[i] * scale;
    }
  }

  void reset_step() noexcept {
    for (auto& b : buckets_) {
      b.pending = b.grads.size();
    }
    std::fill(marked_.begin(), marked_.end(), false);
    next_launch_ = 0;
  }

  std::shared_ptr<ProcessGroup> group_;
  std::vector<Tensor> grads_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // grad index -> bucket
  std::vector<std::size_t> position_;   // grad index -> position within its bucket
  std::vector<bool> marked_;            // this step
  std::size_t next_launch_ = 0;         // buckets [0, next_launch_) are launched this step
  std::optional<double> divisor_;
};

GradientReducer::GradientReducer(std::shared_ptr<ProcessGroup> group, std::vector<Tensor> grads,
                                 ReducerOptions options)
    : impl_(std::make_unique<Impl>(std::move(group), std::move(grads), options)) {}
GradientReducer::~GradientReducer() = default;

void GradientReducer::mark_ready(std::size_t index) { impl_->mark_ready(index); }
void GradientReducer::finish() { impl_->finish(); }

void GradientReducer::set_divisor(std::optional<double> divisor) {
  if (divisor && !(*divisor > 0.0)) {
    throw InvalidArgument(
        fmt::format("GradientReducer::set_divisor: divisor must be positive, got {}", *divisor));
  }
  impl_->divisor_ = divisor;
}

std::size_t GradientReducer::num_grads() const noexcept { return impl_->grads_.size(); }
std::size_t GradientReducer::num_buckets() const noexcept { return impl_->buckets_.size(); }

const std::vector<std::size_t>& GradientReducer::bucket_grads(std::size_t bucket) const {
  if (bucket >= impl_->buckets_.size()) {
    throw InvalidArgument(
        fmt::format("GradientReducer::bucket_grads: bucket {} is out of range (have {})", bucket,
                    impl_->buckets_.size()));
  }
  return impl_->buckets_[bucket].grads;
}

std::size_t GradientReducer::bucket_bytes(std::size_t bucket) const {
  const auto& grads = bucket_grads(bucket);  // range check
  (void)grads;
  return impl_->buckets_[bucket].buffer.size();
}

std::size_t GradientReducer::buckets_launched() const noexcept { return impl_->next_launch_; }
ProcessGroup& GradientReducer::group() const noexcept { return *impl_->group_; }

}  // namespace chorus::ddp
