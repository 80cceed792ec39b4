// SPDX-License-Identifier: BSD-3-Clause
// Data-parallel training of a toy model with the chorus DDP toolkit, in plain C++:
// init from the launcher's environment, broadcast rank 0's initial weights, shard the data with
// DistributedSampler, average gradients bucket by bucket while backward runs, save a checkpoint
// on rank 0 / barrier / load it everywhere, then a second phase on uneven shards under Join.
//
//   chorusrun -n 4 ./ddp_train [--verify] [--checkpoint PATH] [--resume DIR] [--crash-once R:E]
//
// --verify: also train the same model in one process on the full batch and exit 1 unless
// every rank ends with the same weights (max |diff| < 1e-4).
// --resume DIR: after every epoch rank 0 saves the weights and the epoch count to
// DIR/ddp_train.ckpt; a job (re)started by `chorusrun --max-restarts N` resumes from there, so
// a crash costs at most one epoch and the result is the same as an uninterrupted run.
// --crash-once R:E: rank R exits with code 17 at the start of epoch E, in the first attempt only
// (CHORUS_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT = 0): a rehearsal of a restart.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/ddp.hpp>

#include "toy_model.hpp"
#include "toy_reference.hpp"

namespace ddp = chorus::ddp;

int main(int argc, char** argv) try {
  bool verify = false;
  std::string checkpoint;
  std::string resume_dir;
  int crash_rank = -1, crash_epoch = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--verify") == 0) {
      verify = true;
    } else if (std::strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc) {
      checkpoint = argv[++i];
    } else if (std::strcmp(argv[i], "--resume") == 0 && i + 1 < argc) {
      resume_dir = argv[++i];
    } else if (std::strcmp(argv[i], "--crash-once") == 0 && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d:%d", &crash_rank, &crash_epoch) == 2) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--verify] [--checkpoint PATH] [--resume DIR] [--crash-once R:E]\n",
                   argv[0]);
      return 2;
    }
  }

  chorus::World world = chorus::init_world_from_env();
  auto pg = world.group;
  const int rank = pg->rank(), size = pg->size();
  const toy::Config cfg;
  if (cfg.global_batch % static_cast<std::size_t>(size) != 0) {
    std::fprintf(stderr, "ddp_train: world size %d must divide the global batch %zu\n", size,
                 cfg.global_batch);
    return 2;
  }
  const std::size_t batch = cfg.global_batch / static_cast<std::size_t>(size);
  const toy::Dataset data = toy::make_dataset(cfg.dataset_size);

  // Every rank initializes differently; the broadcast makes rank 0's weights everyone's.
  std::vector<float> params = toy::init_params(cfg.init_seed + static_cast<std::uint64_t>(rank));
  ddp::broadcast_tensors(*pg, {chorus::Tensor::of(params.data(), params.size())});

  // One gradient tensor per layer slice. Tiny buckets (256 B) so that this toy model shows
  // several buckets; a real model keeps the default 25 MiB.
  std::vector<float> grads(toy::kNumParams);
  std::vector<chorus::Tensor> grad_views;
  for (int i = 0; i < 4; ++i) {
    grad_views.push_back(
        chorus::Tensor::of(grads.data() + toy::kSliceOffset[i], toy::kSliceCount[i]));
  }
  ddp::GradientReducer reducer(pg, grad_views, {.bucket_bytes = 256});
  // Backward marks each layer's gradient ready as soon as it is computed (layer 2 first).
  auto backward_hook = [&](std::size_t i) { reducer.mark_ready(i); };

  ddp::DistributedSampler sampler(data.size(), *pg, {.shuffle = true, .seed = cfg.sampler_seed});
  if (rank == 0) {
    std::printf(
        "ddp_train: %d ranks, %zu samples, global batch %zu (%zu per rank), %zu gradient buckets\n",
        size, data.size(), cfg.global_batch, batch, reducer.num_buckets());
  }
  // Resume: the weights and the number of epochs done, saved by rank 0 after each epoch.
  const std::string resume_file = resume_dir.empty() ? "" : resume_dir + "/ddp_train.ckpt";
  std::vector<float> saved(params.size() + 1);
  int first_epoch = 0;
  if (!resume_file.empty() && std::filesystem::exists(resume_file)) {
    ddp::load_checkpoint(resume_file, chorus::Tensor::of(saved.data(), saved.size()));
    std::copy(saved.begin(), saved.end() - 1, params.begin());
    first_epoch = static_cast<int>(saved.back());
    if (rank == 0) {
      std::printf("resuming from %s: %d epoch(s) done (restart %d)\n", resume_file.c_str(),
                  first_epoch, world.launch.restart_count);
    }
  }
  const bool first_attempt = world.launch.restart_count == 0;
  for (int epoch = first_epoch; epoch < cfg.epochs; ++epoch) {
    if (first_attempt && rank == crash_rank && epoch == crash_epoch) {
      std::printf("rank %d: crashing on purpose at the start of epoch %d\n", rank, epoch);
      std::fflush(stdout);
      ::_exit(17);
    }
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const auto indices = sampler.indices();
    double loss_sum = 0.0;
    int steps = 0;
    for (std::size_t s = 0; s + batch <= indices.size(); s += batch, ++steps) {
      loss_sum += toy::loss_and_grad(params, data, &indices[s], batch, grads, backward_hook);
      reducer.finish();  // grads now hold the average over every rank
      toy::sgd_step(params, grads, cfg.lr);
    }
    float epoch_loss = static_cast<float>(loss_sum / steps);
    pg->allreduce(chorus::Tensor::of(&epoch_loss, 1), {.op = chorus::ReduceOp::avg})->wait();
    if (rank == 0) {
      std::printf("epoch %d  loss %.6f\n", epoch, static_cast<double>(epoch_loss));
    }
    if (!resume_file.empty()) {
      if (rank == 0) {
        std::copy(params.begin(), params.end(), saved.begin());
        saved.back() = static_cast<float>(epoch + 1);
        ddp::save_checkpoint(resume_file, chorus::Tensor::of(saved.data(), saved.size()));
      }
      pg->barrier()->wait();  // nobody starts the next epoch before the checkpoint is on disk
    }
  }

  // Checkpoint: rank 0 writes, every rank waits for it and resumes from the file.
  if (checkpoint.empty()) {
    checkpoint = (std::filesystem::temp_directory_path() /
                  ("chorus_ddp_train_" + std::to_string(world.launch.store_port) + ".ckpt"))
                     .string();
  }
  ddp::checkpoint_and_reload(*pg, checkpoint, chorus::Tensor::of(params.data(), params.size()));
  pg->barrier()->wait();  // everyone has read it: rank 0 may remove it
  if (rank == 0) {
    std::remove(checkpoint.c_str());
    std::printf("checkpoint saved by rank 0 and loaded by %d ranks\n", size);
    std::printf("final weights checksum %.6f\n", toy::checksum(params));
  }
  bool ok = true;
  std::vector<float> reference;
  if (verify) {
    reference = toy::reference_full_batch(cfg, data);
    const float diff = toy::max_abs_diff(params, reference);
    ok = diff < 1e-4f;
    std::printf("rank %d: max |weights - single-process full-batch weights| = %.3g %s\n", rank,
                static_cast<double>(diff), ok ? "OK" : "MISMATCH");
  }

  // Uneven inputs: rank r has max(1, 4 - r) batches. Join keeps the ranks that ran out
  // answering the others' allreduces (with zero gradients) and applying the same update.
  ddp::Join join(reducer, {.divide_by_initial_world_size = true});
  sampler.set_epoch(cfg.uneven_epoch);
  const auto indices = sampler.indices();
  const int my_steps = toy::uneven_steps(cfg, rank);
  for (int s = 0; s < my_steps; ++s) {
    join.begin_step();
    toy::loss_and_grad(params, data, &indices[static_cast<std::size_t>(s) * batch], batch, grads,
                       backward_hook);
    reducer.finish();
    toy::sgd_step(params, grads, cfg.lr);
  }
  join.join([&] { toy::sgd_step(params, grads, cfg.lr); });
  std::printf(
      "rank %d: uneven phase: %d own steps, %llu shadowed under Join, weights checksum %.6f\n",
      rank, my_steps, static_cast<unsigned long long>(join.shadow_steps()), toy::checksum(params));
  if (verify) {
    const auto expected = toy::reference_uneven(cfg, data, size, reference, true);
    const float diff = toy::max_abs_diff(params, expected);
    const bool uneven_ok = diff < 1e-4f;
    ok = ok && uneven_ok;
    std::printf("rank %d: uneven phase max |diff| vs reference = %.3g %s\n", rank,
                static_cast<double>(diff), uneven_ok ? "OK" : "MISMATCH");
  }
  return ok ? 0 : 1;
} catch (const std::exception& e) {  // chorus::Error included
  std::fprintf(stderr, "ddp_train: %s\n", e.what());
  return 1;
}
