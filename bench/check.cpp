// SPDX-License-Identifier: BSD-3-Clause
// Input patterns in, exact comparison out (the patterns themselves are in data.cpp).
#include "check.hpp"

#include <cstdio>
#include <cstring>

namespace bench {

RankBuffers::RankBuffers(std::unique_ptr<Memory> mem, std::size_t bytes)
    : mem_(std::move(mem)), bytes_(bytes), stage_(bytes) {
  send_ = mem_->alloc(bytes_);
  try {
    recv_ = mem_->alloc(bytes_);
  } catch (...) {
    mem_->release(send_);
    throw;
  }
}

RankBuffers::~RankBuffers() {
  mem_->release(send_);
  mem_->release(recv_);
}

std::pair<chorus::Tensor, chorus::Tensor> RankBuffers::views(const Counts& c,
                                                             chorus::DataType dtype, int rank,
                                                             bool in_place) const {
  const std::size_t esize = chorus::element_size(dtype);
  auto* recv = static_cast<std::uint8_t*>(recv_);
  const auto r = static_cast<std::size_t>(rank);
  void* in = in_place ? recv + c.send_inplace_offset * r * esize : send_;
  void* out = in_place ? recv + c.recv_inplace_offset * r * esize : recv_;
  return {chorus::Tensor(in, c.send, dtype, mem_->device()),
          chorus::Tensor(out, c.recv, dtype, mem_->device())};
}

void RankBuffers::copy(void* dst, const void* src, std::size_t bytes) {
  mem_->to_host(stage_.data(), src, bytes);
  mem_->to_device(dst, stage_.data(), bytes);
}

Pattern Checker::pattern(chorus::DataType dtype, chorus::ReduceOp op, int seed) const {
  Pattern p;
  p.dtype = dtype;
  if (bench_.uses_op) {
    p.op = op;
  }
  p.nranks = nranks_;
  p.seed = seed;
  if (bench_.uses_op) {
    p.wire = wire_of(opt_.wire, dtype, op);
  }
  return p;
}

void Checker::init_data(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op, int root,
                        bool in_place, int seed) {
  const std::size_t esize = chorus::element_size(dtype);
  const Pattern p = pattern(dtype, op, seed);
  auto [in, out] = buf_.views(c, dtype, rank_, in_place);
  // Sentinel: an output the op forgot to write never matches an expected value.
  std::memset(buf_.stage_.data(), 0xA5, buf_.bytes_);
  buf_.mem_->to_device(buf_.recv_, buf_.stage_.data(), buf_.bytes_);
  for (std::size_t i = 0; i < c.send; ++i) {
    store_value(dtype, bench_.input(p, rank_, root, i, c), buf_.stage_.data() + i * esize);
  }
  if (c.send > 0) {
    buf_.mem_->to_device(in.data(), buf_.stage_.data(), c.send * esize);
  }
}

long long Checker::check_data(const Counts& c, chorus::DataType dtype, chorus::ReduceOp op,
                              int root, bool in_place, int seed) {
  Memory& mem = *buf_.mem_;
  const std::size_t esize = chorus::element_size(dtype);
  const Pattern p = pattern(dtype, op, seed);
  auto [in, out] = buf_.views(c, dtype, rank_, in_place);
  // Broadcast out of place: the root's data stays in its input buffer.
  const chorus::Tensor result =
      (bench_.coll == Coll::broadcast && !in_place && rank_ == root) ? in : out;
  if (rank_ == opt_.corrupt_rank && result.count() > 0 &&
      bench_.expected(p, rank_, root, in_place, result.count() / 2, c)) {
    // Test hook: flip the lowest bit of one output element, as a faulty backend would.
    auto* elem = static_cast<std::uint8_t*>(result.data()) + (result.count() / 2) * esize;
    std::uint8_t byte = 0;
    mem.to_host(&byte, elem, 1);
    byte ^= 1u;
    mem.to_device(elem, &byte, 1);
  }
  if (result.count() == 0) {
    return 0;
  }
  std::uint8_t* stage = buf_.stage_.data();
  mem.to_host(stage, result.data(), result.count() * esize);
  long long wrong = 0;
  std::uint8_t expected[8];
  for (std::size_t i = 0; i < result.count(); ++i) {
    const auto want = bench_.expected(p, rank_, root, in_place, i, c);
    if (!want) {
      continue;
    }
    store_value(dtype, *want, expected);
    const std::uint8_t* got = stage + i * esize;
    if (std::memcmp(got, expected, esize) != 0) {
      if (wrong < 3) {
        std::fprintf(stderr, "%s: rank %d: %s %s %s element %zu is %.9g, expected %.9g\n",
                     bench_.program, rank_, in_place ? "in-place" : "out-of-place",
                     type_name(dtype), bench_.uses_op ? op_name(op) : "", i, load_value(dtype, got),
                     static_cast<double>(*want));
      }
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace bench
