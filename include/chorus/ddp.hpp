// SPDX-License-Identifier: BSD-3-Clause
// The DDP toolkit: what torch.nn.parallel.DistributedDataParallel gives a trainer, for trainers
// without a framework: a distributed sampler, bucketed gradient averaging that overlaps the
// backward pass, uneven inputs (Join) and rank-0 checkpoints.
//
// The recipe (examples/ddp_train.cpp is the full program):
//   auto pg = chorus::init_from_env();
//   chorus::ddp::broadcast_tensors(*pg, params);                 // everyone starts from rank 0
//   chorus::ddp::GradientReducer reducer(pg, grads);             // buckets of 25 MiB
//   chorus::ddp::DistributedSampler sampler(dataset_size, *pg, {.seed = 42});
//   for (epoch ...) { sampler.set_epoch(epoch);
//     for (batch of sampler.indices()) { backward(..., [&](size_t i) { reducer.mark_ready(i); });
//                                        reducer.finish();  sgd_step(); } }
//   chorus::ddp::checkpoint_and_reload(*pg, "model.ckpt", params_tensor);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/deadline.hpp>
#include <chorus/errors.hpp>
#include <chorus/export.hpp>
#include <chorus/process_group.hpp>
#include <chorus/tensor.hpp>

namespace chorus::ddp {

// ---- DistributedSampler ------------------------------------------------------------------

struct SamplerOptions {
  bool shuffle = true;     // permute the indices every epoch, seeded by (seed, epoch)
  std::uint64_t seed = 0;  // must be the same on every rank
  // true: drop the tail so every rank gets floor(n / replicas) samples (when n is not a
  // multiple). false: pad by wrapping around to the first indices so every rank gets
  // ceil(n / replicas). Both as torch.utils.data.DistributedSampler.
  bool drop_last = false;
};

// Splits the indices [0, dataset_size) into num_replicas disjoint shards of equal length (up to
// the padding above): rank r takes positions r, r + num_replicas, ... of the epoch's order.
// The shuffle uses chorus's own generator (SplitMix64 + Fisher-Yates, no std:: distribution),
// so every rank, compiler and platform computes the same permutation. Cheap, no communication.
// Not thread-safe (one sampler per data loader).
class CHORUS_API DistributedSampler {
 public:
  // Throws InvalidArgument if num_replicas < 1 or rank is not in [0, num_replicas).
  DistributedSampler(std::size_t dataset_size, int num_replicas, int rank,
                     SamplerOptions options = {});
  // num_replicas and rank taken from the group.
  DistributedSampler(std::size_t dataset_size, const ProcessGroup& group,
                     SamplerOptions options = {});

  // Selects the epoch's permutation; call it before each epoch (as with torch's set_epoch).
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  // This rank's indices for the current epoch, num_samples() of them.
  std::vector<std::size_t> indices() const;
  // Samples per rank (the same on every rank).
  std::size_t num_samples() const noexcept { return num_samples_; }
  // num_samples() * num_replicas: the epoch's length after padding or dropping.
  std::size_t total_size() const noexcept {
    return num_samples_ * static_cast<std::size_t>(num_replicas_);
  }

 private:
  std::size_t dataset_size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  std::size_t num_samples_;
  std::uint64_t epoch_ = 0;
};

// The deterministic permutation DistributedSampler uses: [0, n) shuffled by a generator seeded
// from (seed, epoch). Same result everywhere.
CHORUS_API std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed,
                                                       std::uint64_t epoch);

// ---- GradientReducer ---------------------------------------------------------------------

inline constexpr std::size_t kDefaultBucketBytes = 25u * 1024u * 1024u;

struct ReducerOptions {
  // Gradients are packed into buckets of at most this many bytes (a gradient larger than
  // this gets a bucket of its own). Smaller buckets start communicating earlier; larger ones
  // have less per-op overhead. torch's default, 25 MiB.
  std::size_t bucket_bytes = kDefaultBucketBytes;
  // Deadline of each bucket's allreduce. Unset: the group's timeout.
  std::optional<Duration> timeout;
};

// Averages registered gradients over the group, bucket by bucket, as DistributedDataParallel
// does. Gradients (CPU float32 or float64 tensors, borrowed for the reducer's lifetime) are
// packed into buckets in REVERSE registration order, since backward produces the last layer's
// gradients first. During backward, call mark_ready(i) when gradient i is final: once every
// gradient of a bucket is ready (and every earlier bucket was launched, so all ranks issue the
// allreduces in the same order) the bucket's allreduce(avg) starts, overlapping the rest of
// backward. finish() launches what is left, waits, and writes the averages back into the
// gradients. A gradient never marked ready this step contributes zeros (an unused parameter
// cannot hang the job) and still receives the average.
//
// Every rank must register the same gradient shapes in the same order. Not thread-safe: one
// thread drives a reducer. The group is shared with the caller (pass it by value).
class CHORUS_API GradientReducer {
 public:
  // Throws InvalidArgument for a non-CPU or non-float32/float64 gradient, overlapping
  // gradients, or bucket_bytes == 0.
  GradientReducer(std::shared_ptr<ProcessGroup> group, std::vector<Tensor> grads,
                  ReducerOptions options = {});
  // Waits for buckets still in flight (their buffers are in use), within their deadlines.
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Gradient `index` (registration order) holds its final value for this step: its bytes are
  // copied into the bucket now, so the caller may reuse the gradient's memory at once.
  // Throws InvalidArgument if index is out of range or was already marked this step.
  void mark_ready(std::size_t index);
  // Launches every bucket not launched yet (unmarked gradients as zeros), waits for all of
  // them, and writes the averaged values into every registered gradient. Then the next step
  // may begin. Throws the first bucket's error (the group is then aborted).
  void finish();

  // Divides the summed gradients by `divisor` instead of the group size (for Join, when
  // divide_by_initial_world_size is false). nullopt restores the default average.
  void set_divisor(std::optional<double> divisor);

  std::size_t num_grads() const noexcept;
  std::size_t num_buckets() const noexcept;
  // Gradient indices in bucket b, in packing order (bucket 0 holds the last registered ones).
  const std::vector<std::size_t>& bucket_grads(std::size_t bucket) const;
  std::size_t bucket_bytes(std::size_t bucket) const;
  // Buckets whose allreduce was started this step (observes the overlap with backward).
  std::size_t buckets_launched() const noexcept;
  ProcessGroup& group() const noexcept;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- Join (uneven inputs) ----------------------------------------------------------------

struct JoinOptions {
  // true: every step averages over the initial world size (a joined rank counts as a zero
  // gradient), as torch's default. false: over the ranks still active in that step.
  bool divide_by_initial_world_size = true;
  // true: as soon as one rank runs out of data, every rank throws EarlyTermination at its
  // next step (the collectives stay matched, the group stays usable).
  bool throw_on_early_termination = false;
  // Deadline of the per-step "still active" allreduce. Unset: the group's timeout.
  std::optional<Duration> timeout;
};

// Thrown on every rank in throw_on_early_termination mode (code: aborted).
class CHORUS_API EarlyTermination : public Error {
 public:
  explicit EarlyTermination(const std::string& message, ErrorContext context = {});
  ~EarlyTermination() override;
};

// Lets ranks with different amounts of data train together. Each step starts with begin_step()
// on every rank that still has data: a one-integer allreduce of "I am active", so all ranks
// agree on how many are active. A rank that ran out calls join(): it keeps answering the
// others' steps (that allreduce with 0, then the reducer's buckets with zero gradients) until
// every rank has joined. Between begin_step() and the reducer's finish(), a step must issue
// only the reducer's allreduces (other collectives would have no partner on joined ranks;
// chorus reports the mismatch instead of hanging). Not thread-safe.
class CHORUS_API Join {
 public:
  // The reducer (and its group) must outlive the Join.
  explicit Join(GradientReducer& reducer, JoinOptions options = {});

  // Called by an active rank at the start of each step. Returns the number of active ranks
  // (this one included). Throws EarlyTermination in throw mode when a rank ran out.
  int begin_step();
  // Called once, when this rank has no more data. Returns when every rank has joined.
  // after_shadow_step runs after each step this rank shadowed, with the averaged gradients in
  // the reducer's tensors: apply the same optimizer update there to keep the replicas equal.
  // Throws EarlyTermination in throw mode if any rank is still active.
  void join(const std::function<void()>& after_shadow_step = {});

  // Active ranks in the last step (begin_step or shadowed).
  int active_ranks() const noexcept { return active_ranks_; }
  // Steps this rank shadowed inside join().
  std::uint64_t shadow_steps() const noexcept { return shadow_steps_; }

 private:
  int exchange_active_flag(int flag);

  GradientReducer& reducer_;
  JoinOptions options_;
  int active_ranks_ = 0;
  std::uint64_t steps_ = 0;
  std::uint64_t shadow_steps_ = 0;
};

// ---- Parameters and checkpoints ----------------------------------------------------------

// Broadcasts each tensor from root and waits (initial weights: every replica starts equal).
CHORUS_API void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors,
                                  int root = 0);

// Writes a CPU tensor's elements to path (header with dtype, count and a checksum); written to
// "<path>.tmp" then renamed, so a reader never sees half a file. Throws InvalidArgument if
// the file cannot be written (naming path and the OS error).
CHORUS_API void save_checkpoint(const std::string& path, Tensor data);
// Reads path into data; throws InvalidArgument if it is missing, corrupt, or holds another
// dtype or element count than data.
CHORUS_API void load_checkpoint(const std::string& path, Tensor data);
// Rank 0 saves data to path, barrier, every rank loads it back into data: afterwards every
// replica holds the bytes on disk. path must be on a filesystem every rank can read.
CHORUS_API void checkpoint_and_reload(ProcessGroup& group, const std::string& path, Tensor data);

}  // namespace chorus::ddp
