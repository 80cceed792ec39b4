// SPDX-License-Identifier: BSD-3-Clause
// A rank's buffers and the exact checks run on them: before a checked op the rank writes its
// input pattern (and a sentinel over the whole output buffer, so an element the op forgot to
// write never matches); after it, every output element is compared with the value the
// descriptor expects, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common.hpp"
#include "memory.hpp"

namespace bench {

// The send and receive buffers of one rank (max -e bytes each, on the backend's device) and a
// host staging copy of the same size.
class RankBuffers {
 public:
  RankBuffers(std::unique_ptr<Memory> mem, std::size_t bytes);
  ~RankBuffers();
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;

  Memory& memory() { return *mem_; }
  // The input and output views of rank `rank` for one issue (in place: views into recvbuf).
  std::pair<chorus::Tensor, chorus::Tensor> views(const Counts& c, chorus::DataType dtype, int rank,
                                                  bool in_place) const;
  // dst = src through the host (one rank sending to itself).
  void copy(void* dst, const void* src, std::size_t bytes);

 private:
  friend class Checker;
  std::unique_ptr<Memory> mem_;
  std::size_t bytes_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  std::vector<std::uint8_t> stage_;
};

class Checker {
 public:
  Checker(const Options& opt, const CollBench& bench, RankBuffers& buffers, int rank, int nranks)
      : opt_(opt), bench_(bench), buf_(buffers), rank_(rank), nranks_(nranks) {}

  // Writes this rank's input pattern `seed` and the sentinel over the output buffer.
  void init_data(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                 bool in_place, int seed);
  // Checks the output of the op just completed on pattern `seed`; returns the wrong element
  // count and prints the first three on stderr.
  long long check_data(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                       bool in_place, int seed);

 private:
  Pattern pattern(chorus::DataType dtype, chorus::ReduceOp op, int seed) const;

  const Options& opt_;
  const CollBench& bench_;
  RankBuffers& buf_;
  int rank_;
  int nranks_;
};

}  // namespace bench
